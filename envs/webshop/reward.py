"""WebShop's purchase reward (Yao et al., 2022, section 3 and appendix), on our catalog schema.

    reward = r_type * (matched attributes + matched options + price ok) / (n_attributes + n_options + 1)

* attributes: a goal attribute matches when some product attribute fuzzy-matches it (rapidfuzz
  token-set ratio above 85, as the original), or, failing that, when the phrase appears in the
  product's title, bullet points or description;
* options: a goal option matches when the chosen value of some option fuzzy-matches it (exact
  match for ``size``, as the original), or, failing that, when it appears in the product text;
* price: the product's price is at most the goal's ``price_upper``;
* r_type: 1.0 for the same product type; otherwise the original's ladder over query match,
  category-path overlap and title overlap (0.5, 0.1 or 0.0).

Deviations from the original, and why, are listed in docs/envs/webshop.md: the type score
compares the goal's product-type words with the bought product's title instead of spaCy nouns
of two titles (no spaCy model offline); text look-ups match whole words (the original's raw
substring test lets "red" match "covered"); and options are counted per goal option (the
original counts per chosen option and checks the chosen value in the text, so a wrong colour
mentioned in a title scored as right).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from rapidfuzz import fuzz, utils

FUZZY_THRESHOLD = 85.0
"""The original's cut-off for token-set ratio matches (strictly greater counts)."""
EXACT_MATCH_OPTIONS = ("size",)
"""Option names compared exactly (after normalisation), as in the original."""
CATEGORY_SEP = "›"


def normalize(text: str) -> str:
    """Lower-case, every non-alphanumeric character to a space, single spaces."""
    return " ".join(utils.default_process(text).split())


def fuzzy_match(a: str, b: str) -> bool:
    return fuzz.token_set_ratio(a, b, processor=utils.default_process) > FUZZY_THRESHOLD


def contains_phrase(normalized_text: str, phrase: str) -> bool:
    """Whole-word containment of ``phrase`` in text already passed through :func:`normalize`."""
    p = normalize(phrase)
    return bool(p) and f" {p} " in f" {normalized_text} "


def option_matches(option_name: str, chosen: str, wanted: str) -> bool:
    if option_name.lower() in EXACT_MATCH_OPTIONS:
        return normalize(chosen) == normalize(wanted)
    return fuzzy_match(chosen, wanted)


def product_text(product: Mapping[str, Any]) -> str:
    """Title, bullet points and description, normalised (what the attribute fallback reads)."""
    cached = product.get("_text_norm")
    if cached is None:
        cached = normalize(" ".join([product["title"], " ".join(product["bullet_points"]), product["description"]]))
    return cached


def type_words(name: str) -> list[str]:
    """The words of a product-type phrase, e.g. ``"usb c charger" -> ["usb", "c", "charger"]``."""
    return normalize(name).split()


@dataclass
class RewardBreakdown:
    """The purchase reward and its parts (kept in step info for analysis)."""

    score: float
    r_type: float
    r_att: float
    r_option: float | None
    r_price: bool | None
    query_match: bool
    category_match: bool
    title_score: float
    matched_attributes: list[str] = field(default_factory=list)
    matched_options: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def type_reward(product: Mapping[str, Any], goal: Mapping[str, Any]) -> tuple[float, bool, bool, float]:
    """(r_type, query_match, category_match, title_score) of buying ``product`` for ``goal``."""
    query_match = product["query"] == goal["query"]
    bought_path = {x.strip() for x in product["product_category"].split(CATEGORY_SEP)}
    goal_path = {x.strip() for x in goal["product_category"].split(CATEGORY_SEP)}
    category_match = len(bought_path & goal_path) >= 2
    wanted = set(goal["type_words"])
    title_words = set(normalize(product["title"]).split())
    title_score = len(wanted & title_words) / len(wanted) if wanted else 0.2
    r_type = 1.0
    if not (query_match or category_match or title_score > 0.2):
        r_type = 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return r_type, query_match, category_match, title_score


def compute_reward(
    product: Mapping[str, Any], goal: Mapping[str, Any], chosen_options: Mapping[str, str]
) -> RewardBreakdown:
    """Score buying ``product`` with ``chosen_options`` ({option name: value}) for ``goal``.

    ``goal`` needs ``query``, ``product_category``, ``type_words``, ``attributes`` (list),
    ``options`` ({name: value}) and ``price_upper`` (<= 0 means no price constraint).
    """
    r_type, query_match, category_match, title_score = type_reward(product, goal)
    text = product_text(product)

    matched_attrs = []
    for g_attr in goal["attributes"]:
        if any(fuzzy_match(p_attr, g_attr) for p_attr in product["attributes"]) or contains_phrase(text, g_attr):
            matched_attrs.append(g_attr)

    matched_opts = []
    for name, wanted in goal["options"].items():
        # Like the original, any chosen value may satisfy any goal option (values, not names,
        # are compared); the chosen option's name decides exact or fuzzy comparison.
        hit = any(option_matches(c_name, c_val, wanted) for c_name, c_val in chosen_options.items())
        if hit or contains_phrase(text, wanted):
            matched_opts.append(name)

    price_upper = float(goal.get("price_upper") or 0)
    r_price = (float(product["price"]) <= price_upper) if price_upper > 0 else None
    n_att, n_opt = len(goal["attributes"]), len(goal["options"])
    n_price = 0 if r_price is None else 1  # no price limit: the price term leaves the average
    denominator = n_att + n_opt + n_price
    total = (len(matched_attrs) + len(matched_opts) + (1 if r_price else 0)) / denominator if denominator else 1.0
    return RewardBreakdown(
        score=total * r_type,
        r_type=r_type,
        r_att=len(matched_attrs) / n_att if n_att else 1.0,
        r_option=len(matched_opts) / n_opt if n_opt else None,
        r_price=r_price,
        query_match=query_match,
        category_match=category_match,
        title_score=title_score,
        matched_attributes=matched_attrs,
        matched_options=matched_opts,
    )
