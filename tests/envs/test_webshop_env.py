"""WebShopEnv: pages, actions, bad input, the expert and a random shopper, registration."""
from __future__ import annotations

import io

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import roll.envs  # noqa: F401  (registers roll/WebShop-v0)
from roll.envs.webshop.env import WebShopEnv


def ans(action: str) -> str:
    return f"<think>shopping</think><answer>{action}</answer>"


@pytest.fixture
def env():
    e = WebShopEnv(split="test")
    e.reset(seed=0)
    return e


def test_registered_with_split_kwarg():
    for split in ("train", "validation", "test"):
        e = gym.make("roll/WebShop-v0", split=split)
        obs, info = e.reset(seed=1)
        assert info["goal_id"].startswith(split) and info["goal"] in obs
        e.close()
    with pytest.raises(ValueError, match="split"):
        gym.make("roll/WebShop-v0", split="dev")


def test_gymnasium_check_env():
    for split in ("test", "train"):
        check_env(gym.make("roll/WebShop-v0", split=split).unwrapped)  # made, so render modes are checked too


def test_reset_info_and_search_page(env):
    obs, info = env.reset(seed=5)
    goal = info["goal"]
    assert obs.startswith(f"WebShop [SEP] Instruction: [SEP] {goal} [SEP] Search")
    assert "search[keywords]" in info["instruction"] and "<answer>" in info["instruction"] and goal in info["instruction"]
    assert info["available_actions"] == {"has_search_bar": True, "clickables": []}
    # Evaluation splits map seed i to goal i; the same seed gives the same goal.
    assert env.reset(seed=5)[1]["goal_id"] == "test-5" == env.reset(seed=505)[1]["goal_id"]


def test_results_pages_and_navigation(env):
    obs, r, term, trunc, info = env.step(ans("search[weighted blanket]"))
    assert (r, term, trunc) == (0.0, False, False) and info["action_is_valid"] and info["action_is_effective"]
    assert "[SEP] Back to Search [SEP] Page 1 (Total results: 50) [SEP] Next > [SEP]" in obs
    assert "< Prev" not in obs.split("\n")[0]
    clickables = info["available_actions"]["clickables"]
    assert clickables[:2] == ["back to search", "next >"] and len(clickables) == 12
    obs, *_ = env.step(ans("CLICK[Next >]"))  # case-insensitive
    assert "Page 2 (Total results: 50) [SEP] < Prev [SEP] Next >" in obs
    for _ in range(3):
        obs, *_, info = env.step(ans("click[next >]"))
    assert "Page 5" in obs and "next >" not in info["available_actions"]["clickables"]
    obs, r, *_, info = env.step(ans("click[next >]"))
    assert not info["action_is_valid"] and r == pytest.approx(-0.1)  # no page 6
    obs, *_ = env.step(ans("click[back to search]"))
    assert obs.split("\n")[0].endswith("[SEP] Search")


def test_item_page_options_subpages_and_buy(env):
    goal = env.goal
    env.step(ans(f"search[{goal['query']}]"))
    first = env.state.results[0]
    obs, *_, info = env.step(ans(f"click[{first.lower()}]"))
    product = env.catalog.by_asin[first]
    assert f"[SEP] Back to Search [SEP] < Prev [SEP] {next(iter(product['options']))} [SEP]" in obs
    assert "Price: $" in obs and "[SEP] Description [SEP] Features [SEP] Reviews [SEP] Buy Now" in obs
    value = next(iter(product["options"].values()))[0]
    obs, *_, info = env.step(ans(f"click[{value.upper()}]"))
    assert info["action_is_effective"] and f"Selected options: {next(iter(product['options']))}: {value}" in obs
    _, _, _, _, info = env.step(ans(f"click[{value}]"))
    assert info["action_is_valid"] and not info["action_is_effective"]  # already selected
    obs, *_ = env.step(ans("click[description]"))
    assert product["description"] in obs and "buy now" not in obs.lower().split("available actions")[1]
    obs, r, term, trunc, info = env.step(ans("click[buy now]"))
    assert not info["action_is_valid"]  # no buy button on a sub-page
    env.step(ans("click[< prev]"))
    obs, r, term, trunc, info = env.step(ans("click[buy now]"))
    assert term and not trunc and r == info["reward_breakdown"]["score"]
    assert info["purchased"] == {"asin": first, "options": {next(iter(product["options"])): value}}
    assert obs.startswith("Thank you for shopping with us!")
    # Stepping a finished episode is a harmless no-op.
    _, r2, term2, _, info2 = env.step(ans("click[buy now]"))
    assert r2 == 0.0 and term2 and not info2["action_is_valid"]


@pytest.mark.parametrize("bad", [
    "", "   ", "<answer></answer>", "<answer>jump[now]</answer>", "<answer>click[not a button]</answer>",
    "<answer>click[]</answer>", "<answer>search[]</answer>", "search[shoes]", "x" * 100_000,
    "<answer>" + "search[" + "shoe " * 20_000 + "]</answer>", "<answer>click[buy now</answer>", None, 42,
    b"<answer>click[bytes]</answer>", "<answer>\ud800\u202e</answer>",
])
def test_bad_actions_are_penalised_no_ops(env, bad):
    before = env.render() if env.render_mode else env._obs
    obs, r, term, trunc, info = env.step(bad)
    assert obs == before and r == pytest.approx(-0.1) and not term
    assert info["action_is_valid"] is False and info["action_is_effective"] is False and info["error"]


def test_search_where_no_search_bar_and_configurable_penalty():
    e = WebShopEnv(split="test", format_penalty=-0.5)
    e.reset(seed=0)
    e.step(ans("search[shoes]"))
    obs, r, *_, info = e.step(ans("search[hoodie]"))
    assert r == -0.5 and "no search bar" in info["error"]
    lax = WebShopEnv(split="test", require_answer_tag=False)
    lax.reset(seed=0)
    assert lax.step("search[shoes]")[4]["action_is_valid"]
    with pytest.raises(ValueError, match="one action per turn"):
        WebShopEnv(parser={"max_actions_per_turn": 2})


def test_truncation_at_max_steps():
    e = WebShopEnv(split="test", max_steps=3)
    e.reset(seed=0)
    outs = [e.step(ans("click[nothing]")) for _ in range(3)]
    assert [o[3] for o in outs] == [False, False, True] and not any(o[2] for o in outs)


def test_expert_solves_test_goals_and_random_shopper_does_not():
    """The acceptance figures: expert reward 1.0 on >= 98% of 500 test goals; random near 0."""
    e = WebShopEnv(split="test")
    expert_scores, random_scores = [], []
    rng = np.random.default_rng(0)
    for seed in range(500):
        e.reset(seed=seed)
        term = trunc = False
        while not (term or trunc):
            _, r, term, trunc, info = e.step(ans(e.expert_plan()[0]))
            assert info["action_is_valid"], info
        expert_scores.append(r if term else 0.0)
        e.reset(seed=seed)
        term = trunc = False
        while not (term or trunc):
            choices = e.valid_actions()
            _, r, term, trunc, info = e.step(ans(choices[int(rng.integers(len(choices)))]))
        random_scores.append(r if term else 0.0)
    expert_rate = float(np.mean(np.array(expert_scores) == 1.0))
    random_rate = float(np.mean(np.array(random_scores) == 1.0))
    print(f"\nWebShop test split, 500 goals: expert success {expert_rate:.3f}, "
          f"random success {random_rate:.3f} (mean final reward {np.mean(random_scores):.4f})")
    assert expert_rate >= 0.98
    assert random_rate <= 0.02 and np.mean(random_scores) < 0.05


def test_expert_plan_recovers_from_any_page(env):
    goal = env.goal
    # Wander off: a search for something else, a wrong product, a sub-page, a wrong option.
    env.step(ans("search[garden hose]"))
    env.step(ans("click[next >]"))
    wrong = env.state.results[10]
    env.step(ans(f"click[{wrong}]"))
    env.step(ans("click[features]"))
    plan = env.expert_plan()
    assert plan[:3] == ["click[< prev]", "click[< prev]", "click[back to search]"]
    for a in plan:
        *_, term, trunc, info = env.step(ans(a))
    assert term and info["success"]
    # From the target's page with a wrong option chosen, the plan re-picks the option.
    env.reset(seed=0)
    plan = env.expert_plan()
    for a in plan[:2]:
        env.step(ans(a))
    name, value = next(iter(goal["options"].items()))
    other = next(v for v in env.catalog.by_asin[goal["asin"]]["options"][name] if v != value)
    env.step(ans(f"click[{other}]"))
    assert env.expert_plan()[0] == f"click[{value}]"
    assert env.expert_plan()[-1] == "click[buy now]"


def test_expert_clicks_the_product_id_as_the_results_page_shows_it(env):
    """A policy learning from the expert copies the id token for token from the page (clicks are
    case-insensitive, so the lower-cased id also works, but tokenizes differently)."""
    obs, *_ = env.step(ans(env.expert_plan()[0]))
    while (action := env.expert_plan()[0]) in ("click[next >]", "click[< prev]"):
        obs, *_ = env.step(ans(action))
    asin = action[len("click["):-1]
    assert asin == env.goal["asin"] and asin != asin.lower() and f" {asin} " in obs
    _, _, _, _, info = env.step(ans(action))
    assert info["action_is_valid"] and env.state.page == "item" and env.state.asin == asin


def test_index_product_refs_name_products_by_position():
    """product_refs="index": a results page numbers its products 1..per page and click[2] opens the
    second of this page (after Next >, the second of that page); the id is no longer clickable,
    the reward is unchanged and the expert clicks the number."""
    e = WebShopEnv(split="test", product_refs="index", results_per_page=3, show_available_actions=False)
    e.reset(seed=0)
    query = " ".join([e.goal["query"], *e.goal["attributes"]])
    obs, *_ = e.step(ans(f"search[{query}]"))
    results = e.state.results
    assert e._page.clickables[-3:] == ["1", "2", "3"] and results[0] not in obs and " [SEP] 2 [SEP] " in obs
    _, r, _, _, info = e.step(ans(f"click[{results[0]}]"))
    assert not info["action_is_valid"] and e.state.page == "results"
    e.step(ans("click[next >]"))
    _, _, _, _, info = e.step(ans("click[2]"))
    assert info["action_is_valid"] and e.state.page == "item" and e.state.asin == results[4]
    assert "click[1]" in e.instruction() and "product id" not in e.instruction()
    with pytest.raises(ValueError, match="product_refs"):
        WebShopEnv(product_refs="title")
    # the expert buys the same targets with the same reward under either naming
    for seed in range(6):
        rewards = []
        for refs in ("asin", "index"):
            e = WebShopEnv(split="test", product_refs=refs, results_per_page=3)
            e.reset(seed=seed)
            plan = e.expert_plan()
            for a in plan:
                _, r, term, _, _ = e.step(ans(a))
            assert term
            rewards.append(r)
            if refs == "index":
                assert any(a in ("click[1]", "click[2]", "click[3]") for a in plan)
        assert rewards[0] == rewards[1]


def test_first_match_expert_buys_the_first_product_that_scores_as_well():
    """expert_target="first_match": the expert opens the first ranked product that scores as well as
    the goal's own (usually the top hit) instead of paging to the goal's product; every purchase
    still earns the goal product's reward, in fewer turns, and an open product that scores as well
    is bought from where the expert takes over."""
    kw = dict(split="test", results_per_page=3, max_goal_options=1, product_refs="index")
    turns, page_turns, other_products = {}, {}, 0
    for target in ("goal", "first_match"):
        e = WebShopEnv(expert_target=target, **kw)
        turns[target] = page_turns[target] = 0
        for seed in range(40):
            e.reset(seed=seed)
            best = e.expert_choice(e.goal["asin"])[0]
            while True:
                action = e.expert_plan()[0]
                page_turns[target] += action == "click[next >]"
                _, r, term, trunc, info = e.step(ans(action))
                turns[target] += 1
                if term or trunc:
                    break
            assert term and r == pytest.approx(best)
            if target == "first_match":
                other_products += info["purchased"]["asin"] != e.goal["asin"]
                # what it bought ranks no lower than the goal's product
                assert e.state.results.index(info["purchased"]["asin"]) <= e.state.results.index(e.goal["asin"])
    assert other_products >= 10 and turns["first_match"] < turns["goal"]
    assert page_turns["first_match"] < page_turns["goal"] / 4
    # taking over on another product's page that scores as well: choose its options and buy
    e = WebShopEnv(expert_target="first_match", **kw)
    for seed in range(40):
        e.reset(seed=seed)
        e.step(ans(e.expert_plan()[0]))
        pick = e.expert_pick(e.state.results)
        if pick != e.goal["asin"]:
            break
    position = e.state.results.index(pick) % 3 + 1
    e.step(ans("click[next >]"))
    e.step(ans("click[< prev]"))
    e.step(ans(f"click[{position}]"))
    assert e.state.asin == pick and e.expert_plan()[-1] == "click[buy now]" and "click[< prev]" not in e.expert_plan()
    with pytest.raises(ValueError, match="expert_target"):
        WebShopEnv(expert_target="cheapest")


def test_mark_viewed_marks_opened_products_until_the_next_search():
    """mark_viewed: after opening a product and going back, the results page marks it (not
    clickable); a new search starts unmarked, and without the option no page changes."""
    kw = dict(split="test", results_per_page=3, product_refs="index", show_available_actions=False)
    e = WebShopEnv(mark_viewed=True, **kw)
    plain = WebShopEnv(**kw)
    pages = {}
    for x in (e, plain):
        x.reset(seed=3)
        before, *_ = x.step(ans("search[chair]"))
        x.step(ans("click[2]"))
        pages[x], *_ = x.step(ans("click[< prev]"))
    after = pages[e]
    assert before.count("Viewed") == 0 and after.count("[SEP] 2 [SEP] Viewed [SEP] ") == 1
    assert after.replace(" [SEP] Viewed", "") == before and "viewed" not in e._page.clickables
    assert pages[plain] == before and e.state.viewed == [e.state.results[1]]
    obs, *_ = e.step(ans("click[next >]"))
    assert "Viewed" not in obs
    obs, *_ = e.step(ans("click[< prev]"))
    assert "Viewed" in obs
    e.step(ans("click[back to search]"))
    obs, *_ = e.step(ans("search[chair]"))
    assert "Viewed" not in obs and e.state.viewed == []


def test_success_purchase_reward_pays_only_a_full_match():
    """purchase_reward="success": a full match earns 1, a partial one 0 (WebShop's score stays in
    the breakdown); success and the default reward are unchanged."""
    kw = dict(split="test", results_per_page=3, product_refs="index", show_available_actions=False)
    seen, partial = set(), 0
    for seed, expert in [(s, x) for s in range(6) for x in (True, False)]:
        outcomes = []
        for mode in ("score", "success"):
            e = WebShopEnv(purchase_reward=mode, **kw)
            e.reset(seed=seed)
            # the expert's whole plan, or its search and then the top hit bought as it is
            plan = e.expert_plan() if expert else [e.expert_plan()[0], "click[1]", "click[buy now]"]
            for action in plan:
                _, r, term, _, info = e.step(ans(action))
            assert term
            outcomes.append((r, info["success"], info["reward_breakdown"]["score"]))
        (r_score, ok, score), (r_success, ok2, score2) = outcomes
        assert r_score == score == score2 and ok == ok2 and r_success == float(ok)
        seen.add(ok)
        partial += not ok and r_score > 0
    assert seen == {True, False} and partial >= 3
    with pytest.raises(ValueError, match="purchase_reward"):
        WebShopEnv(purchase_reward="binary")


def test_visible_expert_decides_from_the_pages():
    """expert_target="visible": every decision follows from the page shown (with viewed marks): on
    a results page it opens the first unmarked product, on a product page it buys when the page
    offers the goal's option within its price and goes back otherwise. With the expert's query it
    buys what first_match buys, opening the products ranked above it first."""
    kw = dict(split="test", results_per_page=3, max_goal_options=1, product_refs="index",
              show_available_actions=False, mark_viewed=True)
    e, fm = WebShopEnv(expert_target="visible", **kw), WebShopEnv(expert_target="first_match", **kw)
    backs = same = 0
    for seed in range(40):
        e.reset(seed=seed)
        fm.reset(seed=seed)
        while True:
            page, obs = e.state.page, e._obs
            action = e.expert_plan()[0]
            if page == "results":
                # the first product on this page without a Viewed mark
                shown = e.state.results[(e.state.result_page - 1) * 3:e.state.result_page * 3]
                first = next(i for i, a in enumerate(shown, 1) if a not in e.state.viewed)
                assert action == f"click[{first}]" and f"[SEP] {first} [SEP] Viewed" not in obs
            elif page == "item":
                offers = e.offers_goal(e.state.asin)
                assert (action == "click[< prev]") == (not offers)
                backs += not offers
                if offers and action != "click[buy now]":
                    # the option it clicks is on the page
                    assert action[len("click["):-1].lower() in e._page.clickables
            _, r, term, trunc, info = e.step(ans(action))
            if term or trunc:
                break
        if term:
            same += info["purchased"]["asin"] == fm.expert_pick(e.state.results)
    assert backs >= 5 and same >= 36
    # from a product page without the goal's option: back, then the next product on the page
    for seed in range(40):
        e.reset(seed=seed)
        e.step(ans(e.expert_plan()[0]))
        if not e.offers_goal(e.state.results[0]):
            break
    e.step(ans("click[1]"))
    assert e.expert_plan()[:2] == ["click[< prev]", "click[2]"]


def test_instruction_expert_query_copies_the_instruction():
    """expert_query="instruction": the expert searches the instruction as the page shows it, up
    to the price clause; the goal's product ranks where it does for the keyword query (BM25
    drops the filler words as stop words), and the visible expert solves the same goals."""
    kw = dict(split="test", results_per_page=3, max_goal_options=1, product_refs="index",
              show_available_actions=False, mark_viewed=True, expert_target="visible")
    e, k = WebShopEnv(expert_query="instruction", **kw), WebShopEnv(**kw)
    same_results = solved = 0
    for seed in range(30):
        e.reset(seed=seed)
        k.reset(seed=seed)
        first = e.expert_plan()[0]
        goal = e.goal["instruction"]
        assert first == f"search[{goal[:goal.index(', and price lower than')]}]"
        assert "Instruction: [SEP] " + first[len("search["):-1] in e._obs  # a span of the page
        ranked = [env.catalog.search.search(q) for env, q in ((e, first[7:-1]), (k, k.expert_query()))]
        same_results += len({r.index(e.goal["asin"]) if e.goal["asin"] in r else -1 for r in ranked}) == 1
        while True:
            _, r, term, trunc, info = e.step(ans(e.expert_plan()[0]))
            if term or trunc:
                break
        solved += bool(info["success"])
    assert same_results >= 28 and solved >= 27
    with pytest.raises(ValueError, match="expert_query"):
        WebShopEnv(expert_query="title")


def test_fresh_goals_draw_unseen_training_goals():
    """fresh_goals: every reset draws a new goal by the shipped goals' rules: an instruction from
    the same templates for 1-3 of the target's attributes and its options, solvable (the visible
    expert solves them as it does the shipped ones), never the target and options of a held-out
    goal, the same goal for the same seed, and within max_goal_options / max_goal_attributes."""
    from roll.envs.webshop.goals import goal_key

    kw = dict(results_per_page=3, max_goal_options=1, product_refs="index", show_available_actions=False,
              mark_viewed=True, expert_target="visible", expert_query="instruction")
    e = WebShopEnv(split="train", fresh_goals=True, **kw)
    held_out = {goal_key(g) for s in ("validation", "test") for g in e.catalog.goals(s)}
    shipped = {g["instruction"] for g in e.catalog.goals("train")}
    seen, solved, n = set(), 0, 60
    for seed in range(n):
        obs, info = e.reset(seed=seed)
        g = e.goal
        assert goal_key(g) not in held_out and len(g["options"]) <= 1 and 1 <= len(g["attributes"]) <= 3
        assert set(g["attributes"]) <= set(e.catalog.by_asin[g["asin"]]["attributes"])
        assert g["instruction"] in obs and info["goal_id"] == g["id"] and g["id"].startswith(f"fresh-{g['asin']}-")
        seen.add(g["instruction"])
        while True:
            _, r, term, trunc, info = e.step(ans(e.expert_plan()[0]))
            if term or trunc:
                break
        solved += bool(info["success"])
    assert len(seen) == n and len(seen & shipped) <= 3 and solved >= 0.9 * n
    e.reset(seed=7)
    first = e.goal
    e.reset(seed=8)
    e.reset(seed=7)
    assert e.goal == first
    # goal_index still picks a shipped goal; max_goal_attributes caps the attributes drawn
    e.reset(seed=1, options={"goal_index": 3})
    assert e.goal == e.goal_list[3]
    one = WebShopEnv(split="train", fresh_goals=True, max_goal_attributes=1)
    for seed in range(20):
        one.reset(seed=seed)
        assert len(one.goal["attributes"]) == 1
    with pytest.raises(ValueError, match="split must be 'train'"):
        WebShopEnv(split="test", fresh_goals=True)
    with pytest.raises(ValueError, match="max_goal_attributes"):
        WebShopEnv(split="train", fresh_goals=True, max_goal_attributes=0)


def test_fresh_goals_follow_make_goals_rules():
    """A fresh goal is what make_goals would write for its product: the instruction names the
    product type, the chosen attributes, every option as "name: value" and the price limit, and
    the goal scores 1.0 on its own product with its own options; held-out keys are never drawn,
    also when a product has only held-out choices left."""
    import itertools
    import random

    from roll.envs.webshop.goals import FreshGoals, goal_key
    from roll.envs.webshop.reward import compute_reward

    e = WebShopEnv(split="train")
    products = e.catalog.products[:40]
    fresh = FreshGoals(products, held_out=[])
    rng = random.Random(0)
    for _ in range(50):
        g = fresh.draw(rng)
        product = e.catalog.by_asin[g["asin"]]
        assert g["query"] in g["instruction"] and all(a in g["instruction"] for a in g["attributes"])
        assert all(f"{k}: {v}" in g["instruction"] for k, v in g["options"].items())
        assert g["price_upper"] == 0 or f"price lower than {g['price_upper']:.2f} dollars" in g["instruction"]
        assert compute_reward(product, g, g["options"]).score == 1.0
    # hold out every choice of the first product: it is never drawn, the others still are
    p0 = products[0]
    dims = sorted((k, v) for k, v in p0["options"].items() if v)
    every = [{"asin": p0["asin"], "options": dict(zip([k for k, _ in dims], combo))}
             for combo in itertools.product(*(v for _, v in dims))]
    fresh = FreshGoals(products, held_out=every)
    assert p0 not in fresh.products and len(fresh.products) == len(products) - 1
    assert all(fresh.draw(rng)["asin"] != p0["asin"] for _ in range(100))
    assert all(goal_key(fresh.draw(rng)) not in {goal_key(g) for g in every} for _ in range(20))
    with pytest.raises(ValueError, match="no product"):
        FreshGoals(products[:1], held_out=every)


def test_determinism_same_seed_same_actions():
    def run(seed):
        e = WebShopEnv(split="train")
        obs, info = e.reset(seed=seed)
        out = [obs]
        for a in e.expert_plan():
            out.append(e.step(ans(a))[:4])
        return out
    assert run(3) == run(3)
    assert run(3) != run(4)


def test_roll_envs_play_drives_webshop():
    from roll.envs.play import play
    env = WebShopEnv(split="test")
    env.reset(seed=2)
    lines = "\n".join([*env.expert_plan(), "quit"]) + "\n"
    out = io.StringIO()
    assert play("roll/WebShop-v0", seed=2, env_kwargs={"split": "test"}, stdin=io.StringIO(lines), stdout=out) == 0
    assert "Thank you for shopping with us!" in out.getvalue()
