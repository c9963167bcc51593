"""WebShopEnv: the WebShop benchmark as a gymnasium text env, fully offline.

An episode: the agent sees the search page with its instruction, searches, browses result pages,
opens products, picks options and buys; buying ends the episode with WebShop's reward
(reward.py). Actions are ``search[keywords]`` (only where a search bar is) and ``click[x]`` for
anything clickable on the page, inside ``<answer>...</answer>`` as parsed by roll.envs.parsing.
Anything else is a no-op that earns the format penalty; nothing a model writes can raise.
"""
from __future__ import annotations

import random
import re
import zlib
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

import gymnasium as gym
from gymnasium import spaces

from roll.envs.base import MAX_TEXT_LENGTH, UnicodeText, build_parser_config, check_render_mode
from roll.envs.parsing import ParserConfig, extract_answer
from roll.envs.webshop import pages
from roll.envs.webshop.catalog import Catalog, load_catalog
from roll.envs.webshop import templates
from roll.envs.webshop.goals import SPLIT_NAMES, FreshGoals
from roll.envs.webshop.reward import compute_reward, option_matches

_ACTION_RE = re.compile(r"^\s*(search|click)\s*\[(.*)\]\s*\.?\s*$", re.IGNORECASE | re.DOTALL)
MAX_OBS_CHARS = 200_000
EXPERT_TARGETS = ("goal", "first_match", "visible")
PURCHASE_REWARDS = ("score", "success")
EXPERT_QUERIES = ("keywords", "instruction")
PRICE_CLAUSE = re.compile(r",?\s*and price lower than [\d.]+ dollars\s*$")
"""The shipped instructions' last clause (``expert_query="instruction"`` leaves it out)."""

INSTRUCTION_TEMPLATE = """You are shopping on WebShop, a simulated online store. Your task: {goal}.
Every turn you see the current web page as text (elements separated by [SEP]) followed by the actions available on it. Reply with exactly one action per turn:
- search[keywords]: type keywords into the search bar (only on the search page);
- click[element]: click a button, {product_ref} or option shown on the page (case-insensitive), for example click[next >], click[{example_asin}], click[blue], click[description], click[buy now].
Choose the product's options on its page before buying. click[buy now] buys the product on the current page and ends the episode; the reward (0 to 1) measures how well the product, the chosen options and the price match the task.
Answer format: <answer>search[red running shoes]</answer> or <answer>click[buy now]</answer>; you may think first inside <think>...</think>."""


@dataclass
class _State:
    page: str = "search"  # search | results | item | sub | done
    keywords: str = ""
    results: list[str] = field(default_factory=list)
    result_page: int = 1
    asin: Optional[str] = None
    options: dict[str, str] = field(default_factory=dict)
    sub: str = ""
    score: float = 0.0
    viewed: list[str] = field(default_factory=list)  # products opened from these results

    def key(self) -> tuple:
        return (self.page, self.keywords, self.result_page, self.asin, tuple(sorted(self.options.items())), self.sub)


_FRESH: dict[tuple, FreshGoals] = {}


def _fresh_goals(catalog: Catalog, max_options: Optional[int], max_attributes: Optional[int]) -> FreshGoals:
    """One FreshGoals per catalog and restriction, shared by the process's envs (read-only)."""
    key = (id(catalog), max_options, max_attributes)
    if key not in _FRESH:
        plural_of = {t["name"]: t["plural"] for c in templates.CATEGORIES.values() for t in c["types"]}
        held_out = catalog.goals("validation") + catalog.goals("test")
        _FRESH[key] = FreshGoals(catalog.products, held_out, plural_of, max_options, max_attributes)
    return _FRESH[key]


class WebShopEnv(gym.Env):
    """WebShop with the shipped catalog (or any catalog directory in the same schema).

    Args:
        split: which goals to draw: "train" (weighted by attribute rarity), "validation", "test".
        max_steps: turns before the episode is truncated.
        format_penalty: reward of a turn whose text is not a valid action on this page
            (None: the parser's default).
        require_answer_tag: actions must sit inside <answer>...</answer> (default: the parser's, true).
        parser: further ParserConfig options (a dict or a ParserConfig); only one action per
            turn is read, as in the original.
        catalog_path: a directory holding products.json and goals.json (default: shipped).
        show_instruction_in_page: put the instruction at the top of every page, as the original.
        show_available_actions: append the list of available actions to every observation.
        results_per_page: products per search-results page (the original: 10). Fewer make
            shorter observations for small models; the reward is unchanged.
        max_goal_options, max_goal_attributes: keep only the split's goals with at most this
            many options / attributes (None: all), an easier split with the same reward; the
            training split keeps its rarity weights.
        product_refs: how a results page names its products and how the agent clicks one:
            "asin" (the original: ``click[B0...]``, the id copied from the page) or "index"
            (its position on the page, ``click[1]`` for the first: no id to copy). Pages,
            search and reward are otherwise the same.
        expert_target: what the expert (``expert_plan``, the demonstrations) buys: "goal" (the
            goal's own product, paging to it wherever it ranks) or "first_match" (the first
            product in ranking order, from the search page or the current results page, that
            scores as well as the goal's product with the goal's options: usually the top hit,
            which a policy can recognise from the page, where the goal's product is often a
            page or two further down and looks like its neighbours) or "visible" (decides only
            from what the pages show: opens the results in ranking order, skipping products
            already opened since the search; on a product page whose options include every
            option of the goal and whose price is within the goal's limit it picks them and
            buys, elsewhere it goes back (``< Prev``) to the next product). With the expert's
            query it buys the product "first_match" buys, but opens the products ranked above
            it first, because a results page does not show a product's options.
            The reward is unchanged.
        mark_viewed: a results page marks the products opened since the search ("Viewed" after
            the product's name), as a browser marks visited links: a policy that sees only the
            current page can then tell which products it has tried.
        purchase_reward: the reward of a purchase: "score", WebShop's (the share of the goal's
            attributes, options and price matched, times the product-type match: 0 to 1), or
            "success", 1 for a full match and 0 otherwise (a training reward that pays nothing
            for a partial match; ``info["reward_breakdown"]`` and ``info["success"]`` are the
            same under both).
        expert_query: what the expert searches: "keywords" (the goal's product type and
            attributes, as the original's demonstrations: words the instruction holds, picked
            out of it) or "instruction" (the instruction as the page shows it, up to its price
            clause: one span to copy instead of words to pick; BM25 drops the filler words as
            stop words, and the goal's product ranks where it does for the keywords on every
            easy test goal). Either falls back to the goal product's title when the goal's
            product is not in the top 50.
        fresh_goals: (split "train" only) every reset draws a new goal from the catalog's products
            by the rules the shipped goals were made with (goals.py ``FreshGoals``: 1-3 of the
            product's attributes, one value per option, a price limit, an instruction from the same
            templates), instead of one of the split's goals: a training set a model cannot learn by
            heart (the easier split holds 519 training goals). No drawn goal has the target product
            and options of a validation or test goal. ``max_goal_options`` and
            ``max_goal_attributes`` apply; a seed draws the same goal every time.
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 4}

    def __init__(self, split: str = "train", max_steps: int = 15, format_penalty: Optional[float] = None,
                 require_answer_tag: Optional[bool] = None, parser: ParserConfig | Mapping[str, Any] | None = None,
                 catalog_path: Optional[str] = None,
                 show_instruction_in_page: bool = True, show_available_actions: bool = True,
                 render_mode: Optional[str] = None, results_per_page: int = pages.RESULTS_PER_PAGE,
                 max_goal_options: Optional[int] = None, max_goal_attributes: Optional[int] = None,
                 product_refs: str = "asin", expert_target: str = "goal", mark_viewed: bool = False,
                 purchase_reward: str = "score", expert_query: str = "keywords", fresh_goals: bool = False):
        if split not in SPLIT_NAMES:
            raise ValueError(f"split must be one of {SPLIT_NAMES}, got {split!r}")
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        check_render_mode(self, render_mode)
        self.split, self.max_steps, self.render_mode = split, max_steps, render_mode
        self.catalog: Catalog = load_catalog(catalog_path)
        if results_per_page < 1:
            raise ValueError(f"results_per_page must be >= 1, got {results_per_page}")
        self.results_per_page = results_per_page
        if product_refs not in pages.PRODUCT_REFS:
            raise ValueError(f"product_refs must be one of {pages.PRODUCT_REFS}, got {product_refs!r}")
        self.product_refs = product_refs
        if expert_target not in EXPERT_TARGETS:
            raise ValueError(f"expert_target must be one of {EXPERT_TARGETS}, got {expert_target!r}")
        self.expert_target = expert_target
        self.mark_viewed = bool(mark_viewed)
        if purchase_reward not in PURCHASE_REWARDS:
            raise ValueError(f"purchase_reward must be one of {PURCHASE_REWARDS}, got {purchase_reward!r}")
        self.purchase_reward = purchase_reward
        if expert_query not in EXPERT_QUERIES:
            raise ValueError(f"expert_query must be one of {EXPERT_QUERIES}, got {expert_query!r}")
        self.expert_query_kind = expert_query
        self.goal_list = self.catalog.goals(split)
        self._train_p = self.catalog.weights.get("train")
        if max_goal_options is not None or max_goal_attributes is not None:
            keep = [i for i, g in enumerate(self.goal_list)
                    if (max_goal_options is None or len(g["options"]) <= max_goal_options)
                    and (max_goal_attributes is None or len(g["attributes"]) <= max_goal_attributes)]
            self.goal_list = [self.goal_list[i] for i in keep]
            if split == "train" and keep:
                w = self.catalog.weights["train"][keep]
                self._train_p = w / w.sum()
        if not self.goal_list:
            raise ValueError(f"catalog {self.catalog.source} has no {split} goals"
                             f" (max_goal_options {max_goal_options}, max_goal_attributes {max_goal_attributes})")
        self._fresh: Optional[FreshGoals] = None
        if fresh_goals:
            if split != "train":
                raise ValueError(f"fresh_goals draws training goals; split must be 'train', got {split!r}")
            if max_goal_attributes is not None and max_goal_attributes < 1:
                raise ValueError(f"max_goal_attributes must be >= 1 with fresh_goals, got {max_goal_attributes}")
            self._fresh = _fresh_goals(self.catalog, max_goal_options, max_goal_attributes)
        self.parser_config = build_parser_config(parser, format_penalty=format_penalty)
        if require_answer_tag is not None:
            self.parser_config.require_answer_tag = bool(require_answer_tag)
        if self.parser_config.max_actions_per_turn != 1:
            # A page changes after every action, so a second action would target a page the
            # model has not seen (the original also takes one action per step).
            raise ValueError("WebShop reads one action per turn; max_actions_per_turn must be 1")
        self.show_instruction_in_page = show_instruction_in_page
        self.show_available_actions = show_available_actions
        self.observation_space = spaces.Text(max_length=MAX_OBS_CHARS, min_length=0, charset=self.catalog.charset)
        self.action_space = UnicodeText(MAX_TEXT_LENGTH)
        self.goal: dict[str, Any] = self.goal_list[0]
        self.state = _State()
        self.steps = 0
        self._page: pages.Page = pages.search_page(None)
        self._obs = ""

    # ------------------------------------------------------------------ gym API
    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        super().reset(seed=seed)
        options = options or {}
        if self._fresh is not None and "goal_index" not in options:
            goal = self._fresh.draw(random.Random(int(self.np_random.integers(2**62))))
            self.goal = {**goal, "id": f"fresh-{goal['asin']}-{zlib.crc32(goal['instruction'].encode()):08x}"}
            goal_id = self.goal["id"]
        else:
            if "goal_index" in options:
                index = int(options["goal_index"]) % len(self.goal_list)
            elif seed is not None and self.split != "train":
                index = seed % len(self.goal_list)  # evaluation: seed i is goal i, every goal once
            elif self.split == "train":
                index = int(self.np_random.choice(len(self.goal_list), p=self._train_p))
            else:
                index = int(self.np_random.integers(len(self.goal_list)))
            self.goal = self.goal_list[index]
            goal_id = self.goal.get("id", str(index))
        self.state = _State()
        self.steps = 0
        self._render_state()
        info = {
            "instruction": self.instruction(),
            "goal": self.goal["instruction"],
            "goal_id": goal_id,
            "available_actions": self.available_actions(),
        }
        return self._obs, info

    def step(self, action: Any):
        info: dict[str, Any] = {"success": False, "action_is_valid": False, "action_is_effective": False}
        if self.state.page == "done":
            info["error"] = "episode already ended (bought); call reset()"
            return self._obs, 0.0, True, False, self._finish_info(info)
        self.steps += 1
        reward = 0.0
        terminated = False
        error = self._apply(action, info)
        if error:
            info["error"] = error
            reward = self.parser_config.format_penalty
        elif self.state.page == "done":
            terminated = True
            score = info["reward_breakdown"]["score"]
            info["success"] = score >= 1.0
            reward = score if self.purchase_reward == "score" else float(info["success"])
        truncated = not terminated and self.steps >= self.max_steps
        return self._obs, float(reward), terminated, truncated, self._finish_info(info)

    def render(self):
        return self._obs if self.render_mode == "ansi" else None

    # ------------------------------------------------------------------ helpers
    def instruction(self) -> str:
        if self.product_refs == "index":
            example, ref = "1", "product's number on the results page"
        else:
            example, ref = self.catalog.products[0]["asin"].lower(), "product id"
        return INSTRUCTION_TEMPLATE.format(goal=self.goal["instruction"], example_asin=example, product_ref=ref)

    def available_actions(self) -> dict[str, Any]:
        """As the original's ``get_available_actions``: search bar present, lower-cased clickables."""
        return {"has_search_bar": self._page.has_search_bar, "clickables": list(self._page.clickables)}

    def valid_actions(self) -> list[str]:
        """Answers that make sense on the current page (what a random shopper picks from): on
        the search page, a search for each product type in the catalog; elsewhere, every click."""
        if self._page.has_search_bar:
            return [f"search[{q}]" for q in self.catalog.queries]
        return [f"click[{c}]" for c in self._page.clickables]

    def _finish_info(self, info: dict[str, Any]) -> dict[str, Any]:
        info["page"] = self.state.page
        info["available_actions"] = self.available_actions()
        info["goal_id"] = self.goal.get("id", "")
        return info

    def _apply(self, action: Any, info: dict[str, Any]) -> str:
        """Carry out one action; returns an error message (state unchanged) or ""."""
        parsed = extract_answer(action, self.parser_config)
        if not parsed.valid:
            return parsed.error
        m = _ACTION_RE.match(parsed.answer or "")
        if m is None:
            return "expected search[keywords] or click[element]"
        verb, arg = m.group(1).lower(), m.group(2).strip()
        before = self.state.key()
        if verb == "search":
            if not self._page.has_search_bar:
                return "there is no search bar on this page (click[back to search] first)"
            if not arg:
                return "empty search keywords"
            self.state = _State(page="results", keywords=arg, results=self.catalog.search.search(arg))
        else:
            target = arg.lower()
            if target not in self._page.clickables:
                return f"{arg[:60]!r} is not clickable on this page"
            self._click(target, info)
        info["action_is_valid"] = True
        info["action_is_effective"] = self.state.key() != before or verb == "search"
        self._render_state()
        return ""

    def _click(self, target: str, info: dict[str, Any]) -> None:
        s = self.state
        if target == pages.BACK_TO_SEARCH.lower():
            self.state = _State()
        elif target == pages.NEXT_PAGE.lower():
            s.result_page += 1
        elif target == pages.PREV_PAGE.lower():
            if s.page == "results":
                s.result_page -= 1
            elif s.page == "item":
                s.page, s.asin, s.options = "results", None, {}
            else:
                s.page, s.sub = "item", ""
        elif s.page == "results":
            s.page, s.asin, s.options = "item", self._page.products[target], {}
            if s.asin not in s.viewed:
                s.viewed.append(s.asin)
        elif target == pages.BUY_NOW.lower():
            product = self.catalog.by_asin[s.asin]
            breakdown = compute_reward(product, self.goal, s.options)
            info["reward_breakdown"] = breakdown.as_dict()
            info["purchased"] = {"asin": s.asin, "options": dict(s.options)}
            s.page, s.score = "done", breakdown.score
        elif target in (x.lower() for x in pages.SUB_PAGES):
            s.page, s.sub = "sub", target
        else:
            for name, values in self.catalog.by_asin[s.asin]["options"].items():
                for v in values:
                    if v.lower() == target:
                        s.options[name] = v
                        return

    def _render_state(self) -> None:
        s = self.state
        instr = self.goal["instruction"] if self.show_instruction_in_page else None
        if s.page == "search":
            page = pages.search_page(instr)
        elif s.page == "results":
            lo = (s.result_page - 1) * self.results_per_page
            shown = [self.catalog.by_asin[a] for a in s.results[lo:lo + self.results_per_page]]
            page = pages.results_page(instr, shown, s.result_page, len(s.results), self.results_per_page,
                                      self.product_refs, s.viewed if self.mark_viewed else ())
        elif s.page == "item":
            page = pages.item_page(instr, self.catalog.by_asin[s.asin])
        elif s.page == "sub":
            page = pages.sub_page(instr, self.catalog.by_asin[s.asin], s.sub)
        else:
            page = pages.done_page(self.catalog.by_asin[s.asin], s.options, s.score)
        self._page = page
        text = page.text
        if s.options and s.page in ("item", "sub"):
            text += "\nSelected options: " + ", ".join(f"{k}: {v}" for k, v in s.options.items())
        if self.show_available_actions and s.page != "done":
            acts = (["search[<keywords>]"] if page.has_search_bar else []) + [f"click[{c}]" for c in page.clickables]
            text += "\nAvailable actions: " + ", ".join(acts)
        self._obs = text

    # ------------------------------------------------------------------ expert
    def expert_query(self) -> str:
        """The keywords the expert searches (``expert_query``): the goal's product type and
        attributes, or its instruction up to the price clause; when the target does not make the
        top 50 for those, its title."""
        if self.expert_query_kind == "instruction":
            query = PRICE_CLAUSE.sub("", self.goal["instruction"]).strip()
        else:
            query = " ".join([self.goal["query"], *self.goal["attributes"]])
        if self.goal["asin"] in self.catalog.search.search(query):
            return query
        return self.catalog.by_asin[self.goal["asin"]]["title"]

    def expert_choice(self, asin: str) -> tuple[float, dict[str, str]]:
        """The score of buying ``asin`` with the goal's options as that product offers them, and
        those choices ({option name: value}; a wanted option the product does not offer is left
        to the reward's text look-up)."""
        product = self.catalog.by_asin[asin]
        chosen: dict[str, str] = {}
        for wanted in self.goal["options"].values():
            for name, values in product["options"].items():
                value = next((v for v in values if option_matches(name, v, wanted)), None)
                if value is not None and name not in chosen:
                    chosen[name] = value
                    break
        return compute_reward(product, self.goal, chosen).score, chosen

    def expert_pick(self, results: list[str]) -> str:
        """The product the expert buys among ``results`` (ranked ids; see ``expert_target``)."""
        target = self.goal["asin"]
        if self.expert_target == "goal" or target not in results:
            return target
        best = self.expert_choice(target)[0]
        return next(a for a in results if a == target or self.expert_choice(a)[0] >= best)

    def expert_plan(self) -> list[str]:
        """The remaining actions (answer strings) that buy the goal's target with its options
        (with ``expert_target="first_match"``: the first product that scores as well)."""
        s = self.state
        if s.page == "done":
            return []
        if self.expert_target == "visible":
            return self._visible_plan()
        plan: list[str] = []
        if s.page == "sub":
            plan.append("click[< prev]")
            page = "item"
        else:
            page = s.page
        target = self.expert_pick(s.results) if page != "search" else self.goal["asin"]
        if page == "item" and s.asin != target:
            # an open product that scores as well is bought as it is
            if self.expert_target == "first_match" and self.expert_choice(s.asin)[0] >= self.expert_choice(target)[0]:
                target = s.asin
            else:
                plan.append("click[< prev]")
                page = "results"
        if page == "results" and target not in s.results:
            plan.append("click[back to search]")
            page = "search"
        results, current = s.results, s.result_page
        if page == "search":
            query = self.expert_query()
            plan.append(f"search[{query}]")
            results, current = self.catalog.search.search(query), 1
            target = self.expert_pick(results)
            page = "results"
        chosen = dict(s.options) if page == "item" else {}
        if page == "results":
            wanted, position = divmod(results.index(target), self.results_per_page)
            wanted += 1
            step = "click[next >]" if wanted > current else "click[< prev]"
            plan += [step] * abs(wanted - current)
            plan.append(self._product_click(position, target))
        if target == self.goal["asin"]:
            choices = self.goal["options"]
        else:
            choices = self.expert_choice(target)[1]
        return plan + self._buy(choices, chosen)

    def _product_click(self, position: int, asin: str) -> str:
        # the product as the results page names it: its position, or its id as the page shows it
        # (clicks are case-insensitive, but copying the id is then a token-for-token copy, where
        # the lower-cased id tokenizes differently)
        return f"click[{position + 1 if self.product_refs == 'index' else asin}]"

    @staticmethod
    def _buy(choices: Mapping[str, str], chosen: Mapping[str, str]) -> list[str]:
        return [f"click[{value}]" for name, value in choices.items() if chosen.get(name) != value] + ["click[buy now]"]

    def offers_goal(self, asin: str) -> bool:
        """Whether the product's page shows what the goal asks for: a value matching each of
        the goal's options, and a price within the goal's limit (the attributes a page does
        not list are not checked)."""
        within = self.price_within(asin)
        return within and len(self.expert_choice(asin)[1]) == len(self.goal["options"])

    def price_within(self, asin: str) -> bool:
        """Whether the product's price is within the goal's limit (no limit: True)."""
        limit = float(self.goal.get("price_upper") or 0)
        return not (limit > 0 and float(self.catalog.by_asin[asin]["price"]) > limit)

    def _visible_plan(self) -> list[str]:
        """``expert_target="visible"``: the plan of an expert that decides from the pages alone."""
        s = self.state
        plan: list[str] = []
        page = s.page
        if page == "sub":
            plan.append("click[< prev]")
            page = "item"
        if page == "item":
            if self.offers_goal(s.asin):
                return plan + self._buy(self.expert_choice(s.asin)[1], s.options)
            plan.append("click[< prev]")
            page = "results"
        results, current, viewed = s.results, s.result_page, set(s.viewed)
        if page == "search":
            query = self.expert_query()
            plan.append(f"search[{query}]")
            results, current, viewed = self.catalog.search.search(query), 1, set()
        # from the first product of the current results page on, in ranking order: the first
        # not yet opened that offers the goal (or, if none does, the first not yet opened)
        per = self.results_per_page
        fresh = [r for r in range((current - 1) * per, len(results)) if results[r] not in viewed]
        if not fresh:
            return plan + ["click[back to search]"] if results else plan
        pick = next((r for r in fresh if self.offers_goal(results[r])), fresh[0])
        for r in fresh:
            if r > pick:
                break
            wanted = r // per + 1
            plan += ["click[next >]"] * (wanted - current)
            current = wanted
            plan.append(self._product_click(r % per, results[r]))
            if r < pick:
                plan.append("click[< prev]")
        return plan + self._buy(self.expert_choice(results[pick])[1], {})
