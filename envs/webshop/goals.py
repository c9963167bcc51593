"""Synthetic shopping goals in the style of WebShop's: a product type, attributes, options, price.

A goal is built from one target product: 1-3 of its attributes (rare ones preferred), one value
for each of its option dimensions, and a price limit drawn the original way (two of the first four
multiples of 10 above the price, keep the larger). The instruction reads like
"i need a running shoes that is lightweight and non slip, with color: black, and size: 9, and
price lower than 60.00 dollars". Each goal carries a sampling weight, the mean inverse frequency
of its attributes, so that training does not ignore rare attributes (as in the original).
"""
from __future__ import annotations

import itertools
import random
from collections import Counter
from typing import Any, Sequence

from roll.envs.webshop.reward import compute_reward, type_words
from roll.envs.webshop.templates import INSTRUCTION_OPENERS

PRICE_STEPS = [10.0 * i for i in range(1, 100)]
SPLIT_NAMES = ("train", "validation", "test")


def price_upper_for(price: float, rng: random.Random) -> float:
    above = [p for p in PRICE_STEPS if p > price][:4]
    if len(above) < 2:
        return 0.0  # very expensive product: no price constraint, as the original
    return max(rng.sample(above, 2))


def _join_words(items: Sequence[str]) -> str:
    if len(items) == 1:
        return items[0]
    return ", ".join(items[:-1]) + " and " + items[-1]


def instruction_text(type_name: str, plural: bool, attributes: Sequence[str], options: dict[str, str],
                     price_upper: float, rng: random.Random) -> str:
    opener = rng.choice(INSTRUCTION_OPENERS)
    article = "" if plural else ("an " if type_name[0] in "aeiou" else "a ")
    verb = "are" if plural else "is"
    style = rng.randrange(3)
    if style == 0:
        text = f"{opener} {article}{type_name} that {verb} {_join_words(list(attributes))}"
    elif style == 1:
        text = f"{opener} {article}{type_name} which {verb} {_join_words(list(attributes))}"
    else:
        text = f"{opener} {article}{type_name} with {_join_words(list(attributes))}"
    if options:
        text += " with " + ", and ".join(f"{k}: {v}" for k, v in options.items())
    if price_upper > 0:
        text += f", and price lower than {price_upper:.2f} dollars"
    return text


def goal_for_product(product: dict[str, Any], attributes: Sequence[str], options: dict[str, str],
                     price_upper: float, text: str) -> dict[str, Any]:
    return {
        "asin": product["asin"],
        "query": product["query"],
        "category": product["category"],
        "product_category": product["product_category"],
        "type_words": type_words(product["query"]),
        "attributes": list(attributes),
        "options": dict(options),
        "price_upper": price_upper,
        "instruction": text,
        "weight": 1.0,
    }


def _choose(product: dict[str, Any], rng: random.Random, attr_count: Counter,
            max_attributes: int | None = None) -> tuple[list[str], dict[str, str]]:
    """A goal's attributes (1-3, rare ones preferred: weighted by inverse catalog frequency) and
    one value for each of the product's option dimensions."""
    attrs_pool = list(product["attributes"])
    k = min(len(attrs_pool), rng.choice([1, 2, 2, 3]), max_attributes or len(attrs_pool))
    chosen: list[str] = []
    weights = [1.0 / attr_count[a] for a in attrs_pool]
    while len(chosen) < k:
        a = rng.choices(attrs_pool, weights=weights)[0]
        i = attrs_pool.index(a)
        chosen.append(a)
        attrs_pool.pop(i)
        weights.pop(i)
    chosen.sort(key=product["attributes"].index)
    options = {name: rng.choice(values) for name, values in sorted(product["options"].items()) if values}
    return chosen, options


def _complete(product: dict[str, Any], chosen: list[str], options: dict[str, str], rng: random.Random,
              plural: bool) -> dict[str, Any]:
    """The goal for these attributes and options: a price limit and the instruction's text."""
    price_upper = price_upper_for(product["price"], rng)
    text = instruction_text(product["query"], plural, chosen, options, price_upper, rng)
    return goal_for_product(product, chosen, options, price_upper, text)


def goal_key(goal: dict[str, Any]) -> tuple:
    """What makes two goals the same task: the target product and the options to pick."""
    return goal["asin"], tuple(sorted(goal["options"].items()))


def make_goals(products: Sequence[dict[str, Any]], rng: random.Random, per_product: int = 2,
               plural_of: dict[str, bool] | None = None) -> list[dict[str, Any]]:
    """Goals for every product (``per_product`` distinct ones where the product allows).

    Every goal is checked to score 1.0 on its own target product with its own options, so the
    goal set is solvable by construction.
    """
    plural_of = plural_of or {}
    attr_count = Counter(a for p in products for a in p["attributes"])
    goals: list[dict[str, Any]] = []
    for product in products:
        seen = set()
        for _ in range(per_product * 3):
            if len(seen) >= per_product or not product["attributes"]:
                break
            chosen, options = _choose(product, rng, attr_count)
            key = (tuple(chosen), tuple(options.items()))
            if key in seen:
                continue
            seen.add(key)
            goal = _complete(product, chosen, options, rng, plural_of.get(product["query"], False))
            score = compute_reward(product, goal, options).score
            if score != 1.0:
                raise ValueError(f"goal {goal['instruction']!r} scores {score} on its own product {product['asin']}")
            goals.append(goal)
    set_weights(goals)
    return goals


class FreshGoals:
    """Draws new goals by make_goals' rules from a catalog's products, one per call: a training
    set without end, so that a model cannot learn its goals by heart.

    No drawn goal shares its target product and options with a goal in ``held_out`` (the
    validation and test goals): those stay unseen tasks. ``max_options`` / ``max_attributes``
    restrict the goals as the env's easier splits do. Every goal scores 1.0 on its own product.
    """

    def __init__(self, products: Sequence[dict[str, Any]], held_out: Sequence[dict[str, Any]],
                 plural_of: dict[str, bool] | None = None, max_options: int | None = None,
                 max_attributes: int | None = None):
        self.plural_of = plural_of or {}
        self.max_attributes = max_attributes
        self.attr_count = Counter(a for p in products for a in p["attributes"])
        self.held_out = {goal_key(g) for g in held_out}
        self.products = [p for p in products if p["attributes"]
                         and (max_options is None or sum(1 for v in p["options"].values() if v) <= max_options)
                         and self._free_choices(p)]
        if not self.products:
            raise ValueError("no product of the catalog can make a fresh goal"
                             f" (max_options {max_options}, every option choice held out)")

    def _free_choices(self, product: dict[str, Any]) -> bool:
        dims = sorted((name, values) for name, values in product["options"].items() if values)
        for combo in itertools.product(*(values for _, values in dims)):
            if goal_key({"asin": product["asin"], "options": dict(zip((n for n, _ in dims), combo))}) not in self.held_out:
                return True
        return False

    def draw(self, rng: random.Random, max_tries: int = 1000) -> dict[str, Any]:
        for _ in range(max_tries):
            product = self.products[rng.randrange(len(self.products))]
            chosen, options = _choose(product, rng, self.attr_count, self.max_attributes)
            goal = _complete(product, chosen, options, rng, self.plural_of.get(product["query"], False))
            if goal_key(goal) in self.held_out or compute_reward(product, goal, options).score != 1.0:
                continue
            return goal
        raise RuntimeError(f"no fresh goal in {max_tries} draws")


def set_weights(goals: list[dict[str, Any]]) -> None:
    """weight = mean over the goal's attributes of 1 / (number of goals using that attribute)."""
    count = Counter(a for g in goals for a in g["attributes"])
    for g in goals:
        attrs = g["attributes"]
        g["weight"] = round(sum(1.0 / count[a] for a in attrs) / len(attrs), 6) if attrs else 1.0


def split_goals(goals: list[dict[str, Any]], rng: random.Random, n_test: int = 500,
                n_validation: int = 500) -> dict[str, list[dict[str, Any]]]:
    """Shuffle once, then test, validation, and the rest for training (fixed by the seed)."""
    order = list(range(len(goals)))
    rng.shuffle(order)
    shuffled = [goals[i] for i in order]
    n_test = min(n_test, len(shuffled) // 3)
    n_validation = min(n_validation, (len(shuffled) - n_test) // 2)
    splits = {
        "test": shuffled[:n_test],
        "validation": shuffled[n_test:n_test + n_validation],
        "train": shuffled[n_test + n_validation:],
    }
    for name, items in splits.items():
        for i, g in enumerate(items):
            g["id"] = f"{name}-{i}"
    return splits
