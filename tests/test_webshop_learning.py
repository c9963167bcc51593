"""The WebShop learning chain (bench/learning.py --envs webshop): the easier split's env kwargs,
the chain's spec and configs, its report rows and RESULT figures, and the page-by-page probe
(bench/webshop_probe.py) judged on the expert's own answers."""
from collections import Counter
from pathlib import Path

import gymnasium
import pytest
from bench_loader import load_bench

import roll.envs  # noqa: F401  (registers the shipped envs)
from roll.envs.agents import ExpertAgent, format_answer, run_episode
from roll.envs.webshop import pages

ROOT = Path(__file__).resolve().parent.parent
EASY = dict(results_per_page=3, show_available_actions=False, max_goal_options=1)
VISIBLE = dict(EASY, product_refs="index", expert_target="visible", mark_viewed=True)


@pytest.fixture(scope="module")
def bench():
    return load_bench("learning")


@pytest.fixture(scope="module")
def probe():
    return load_bench("webshop_probe")


def test_results_per_page_shows_fewer_products_and_the_expert_still_buys():
    env = gymnasium.make("roll/WebShop-v0", split="test", **EASY)
    u = env.unwrapped
    paged = 0
    for seed in range(40):
        ep = run_episode(env, ExpertAgent(env, think=False), seed=seed)
        assert ep["success"], (seed, [t["action"] for t in ep["transcript"]])
        for turn in ep["transcript"]:
            if turn["info"]["page"] == "results":
                shown = [c for c in turn["info"]["available_actions"]["clickables"] if c in u.catalog.asin_of]
                assert 1 <= len(shown) <= 3
        paged += sum("next >" in t["action"] for t in ep["transcript"])
    # a target below the third hit is reached by paging, which 10 products per page rarely needs
    assert paged > 0
    env.reset(seed=0)
    env.step(format_answer([f"search[{u.goal['query']}]"]))
    total = len(u.state.results)
    assert f"Total results: {total}" in u._obs and "next >" in u.available_actions()["clickables"]
    assert "Available actions" not in u._obs
    assert pages.n_result_pages(total, 3) == -(-total // 3)
    with pytest.raises(ValueError, match="results_per_page"):
        gymnasium.make("roll/WebShop-v0", results_per_page=0)


def test_goal_filters_keep_the_split_and_its_reward():
    full = gymnasium.make("roll/WebShop-v0", split="test").unwrapped
    easy = gymnasium.make("roll/WebShop-v0", split="test", max_goal_options=1, max_goal_attributes=2).unwrapped
    expected = [g for g in full.goal_list if len(g["options"]) <= 1 and len(g["attributes"]) <= 2]
    assert 0 < len(easy.goal_list) < len(full.goal_list) and easy.goal_list == expected
    easy.reset(seed=3)
    assert easy.goal is expected[3]  # evaluation seeds index the filtered list in order
    train = gymnasium.make("roll/WebShop-v0", split="train", max_goal_attributes=1).unwrapped
    drawn = set()
    for seed in range(30):
        train.reset(seed=seed)
        assert len(train.goal["attributes"]) == 1
        drawn.add(train.goal["id"])
    assert len(drawn) > 5
    with pytest.raises(ValueError, match="no test goals"):
        gymnasium.make("roll/WebShop-v0", split="test", max_goal_options=0)  # every goal has an option


def test_webshop_spec_and_configs(bench):
    from roll.config import load_config

    full, quick = bench.env_specs(False)["webshop"], bench.env_specs(True)["webshop"]
    assert bench.parse_args(["--envs", "webshop"]).envs == ["webshop"]
    assert quick.rl_steps < full.rl_steps and quick.sft_steps < full.sft_steps
    assert full.rl_steps % full.eval_steps == 0 and quick.rl_steps % quick.eval_steps == 0
    assert full.tag == full.val_tags[0] == "WebShopTest" and "WebShopFull" in full.val_tags
    cfg = load_config(str(ROOT / full.rl_configs["grpo"]))
    assert cfg.train_env_manager.tags == ["WebShop"] and list(cfg.val_env_manager.tags) == full.val_tags
    assert cfg.val_env_manager.seed_offset == 100000 and set(cfg.val_decoding) == {"sampled", "greedy"}
    train, test, whole = (cfg.custom_envs[t].env_kwargs for t in ("WebShop", "WebShopTest", "WebShopFull"))
    # validation on held-out goals of the same easier split, and on the full benchmark's
    # training draws fresh goals and pays a full match only; otherwise the same env
    assert train["split"] == "train" and train["fresh_goals"] and train["purchase_reward"] == "success"
    assert test == {k: v for k, v in {**train, "split": "test"}.items() if k not in ("fresh_goals", "purchase_reward")}
    # goals neither demonstrated nor validated on, for RL experiments (not trained on by default)
    assert cfg.custom_envs["WebShopRL"].env_kwargs == {**test, "split": "validation"}
    assert whole["split"] == "test" and "max_goal_options" not in whole and "results_per_page" not in whole
    # every split clicks products by their place on the page and marks the products opened; the
    # demonstrations decide from the pages alone
    assert train["product_refs"] == whole["product_refs"] == "index" and train["expert_target"] == "visible"
    assert train["mark_viewed"] is True and whole["mark_viewed"] is True
    for tag in ("WebShop", "WebShopTest", "WebShopFull"):
        env = cfg.custom_envs[tag]
        assert not env.include_instruction and env.turn_template == "{observation}{feedback}"
        gymnasium.make(env.env_id, **env.env_kwargs).reset(seed=0)
    sft = load_config(str(ROOT / full.sft_config))
    assert sft.pipeline == "sft" and sft.data.max_seq_length >= 512
    # quick mode shortens the training episodes too (the val tags get it from the shared list)
    assert "custom_envs.WebShop.max_turns=3" in quick.overrides


def _curves(bench, start, end):
    rows = []
    for tag, (s0, s1) in {"WebShopTest": (start, end), "WebShopFull": (start / 2, end / 2)}.items():
        rows += [{"step": 0, f"val/env/{tag}/success": s0, f"val_greedy/env/{tag}/success": s0},
                 {"step": 25, f"val/env/{tag}/success": s1, f"val_greedy/env/{tag}/success": s1 + 0.1}]
    return {t: bench.curves(rows, t) for t in ("WebShopTest", "WebShopFull")}


def test_webshop_rows_and_result_figures(bench):
    c = _curves(bench, 0.1, 0.4)
    per_tag = {t: {**bench.gains(ct), "curves": ct} for t, ct in c.items()}
    ws = {"tag": "WebShopTest", "epsilon": 0.1, "wall_s": {"grpo": 1200.0},
          "algos": {"grpo": {**per_tag["WebShopTest"], "per_tag": per_tag}}}
    text = bench.section_text({"webshop": ws}, [], "RESULT", "docs/learning_curves")
    # one row for the split trained on, one for the full benchmark; no duplicate of the first
    assert "| webshop | grpo | 0.1 | 10.0 | 50.0 | 10.0 | 40.0 | +30.0 | 1200 |" in text
    assert "| webshop (WebShopFull) | grpo | 0.1 | 5.0 | 30.0 | 5.0 | 20.0 | +15.0 | 1200 |" in text
    assert "| webshop (WebShopTest) |" not in text
    assert "- webshop grpo WebShopFull: 0: 5 / 5, 25: 30 / 20" in text
    # the WebShop notes (prompt lengths, the easier split) come with a WebShop row only
    assert bench.WEBSHOP_NOTES in text
    assert bench.WEBSHOP_PENDING not in text
    # without a WebShop row the notes still say what was measured, and that it is not in the table
    pending = bench.section_text({}, [], "RESULT", "docs/learning_curves")
    assert bench.WEBSHOP_PENDING in pending and bench.WEBSHOP_NOTES in pending
    figures = bench.result_figures({"webshop": ws})
    assert figures == ["webshop_gain_pp=30.0", "webshop_full_gain_pp=15.0"]


def test_probe_scores_the_expert_as_right_and_noise_as_wrong(probe):
    env = gymnasium.make("roll/WebShop-v0", split="test", **EASY)
    states, turns = probe.expert_states(env, 6)
    assert len(turns) == 6 and len(states) == sum(turns) and min(turns) >= 3
    assert {s["page"] for s in states} >= {"search", "results", "item"}
    for s in states:
        right = probe.judge(env, s, format_answer([s["expert"]]))
        wrong = probe.judge(env, s, "<answer>click[no such thing]</answer>")
        assert right["valid"] == 1.0 and wrong["valid"] == 0.0
        if s["page"] == "search":
            assert right["search"] == right["type_words"] == right["target_in_top_50"] == 1.0
            assert wrong["search"] == wrong["attributes_copied"] == 0.0
        elif s["page"] == "results" and s["expert"].startswith("click[b"):
            assert right["opens_target"] == right["opens_product"] == 1.0 and wrong["opens_product"] == 0.0
        elif s["page"] == "item":
            assert right["as_expert"] == 1.0 and wrong["as_expert"] == 0.0
    # item pages apart: where the page lacks the goal's option (the visible expert goes back)
    # and where it offers it (the expert clicks it)
    visible = gymnasium.make("roll/WebShop-v0", split="test", **VISIBLE)
    vstates, _ = probe.expert_states(visible, 12)
    kinds = Counter()
    for s in vstates:
        if s["page"] != "item":
            continue
        option = next(iter(s["goal"]["options"].values()), None)
        right = probe.judge(visible, s, format_answer([s["expert"]]))
        if s["expert"] == "click[< prev]" and option:
            clicks = probe.judge(visible, s, format_answer([f"click[{option}]"]))
            assert right["lacking_back"] == 1.0 and right["lacking_clicks_goal_option"] == 0.0
            assert clicks["lacking_back"] == 0.0 and clicks["lacking_clicks_goal_option"] == 1.0
            kinds["lacking"] += 1
        elif option and s["expert"] == f"click[{option}]".lower():
            buys = probe.judge(visible, s, format_answer(["click[buy now]"]))
            assert right["offering_clicks_goal_option"] == 1.0 and buys["offering_clicks_goal_option"] == 0.0
            assert "lacking_back" not in right
            kinds["offering"] += 1
    assert kinds["lacking"] >= 1 and kinds["offering"] >= 1, kinds
    # judging restores the snapshot each time: the expert's state sequence is unchanged
    again, _ = probe.expert_states(env, 6)
    assert [s["expert"] for s in again] == [s["expert"] for s in states]


def test_probe_id_mask_marks_the_clicked_product_id(probe):
    from roll.data.chat import tokenize_conversation
    from roll.workers.base import resolve_model
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(resolve_model("roll-tiny://tiny"))
    ids, mask = tokenize_conversation(tok, [{"role": "user", "content": "page"},
                                            {"role": "assistant", "content": format_answer(["click[B0HR5S35PN]"])}])
    state = {"target": [t for t, m in zip(ids, mask) if m]}
    inside = probe.id_mask(tok, state)
    assert "".join(tok.decode([t]) for t, i in zip(state["target"], inside) if i) == "B0HR5S35PN"
    assert not inside[0] and not inside[-1]


def test_play_sorts_episodes_by_how_they_ended(probe):
    """--play's loop and its sorting, with scripted policies in place of a model: the visible
    expert succeeds; a policy that buys the top hit with the goal's option sorts its failures by
    what the bought product's page shows, and each sort agrees with the purchase's reward."""
    from roll.config import load_config

    env_cfg = load_config(str(ROOT / "configs/agentic/learning/webshop_grpo.yaml")).custom_envs["WebShopTest"]
    prompts_seen = []

    def expert(prompts, envs):
        prompts_seen.extend(prompts)
        return [format_answer([e.unwrapped.expert_plan()[0]]) for e in envs]

    counts, items, episodes = probe.play(env_cfg, 24, expert)
    assert sum(counts.values()) == 24 and counts["success"] >= 22, counts
    assert all(p.startswith("WebShop [SEP] Instruction:") for p in prompts_seen)
    # the visible expert buys only where the page offers the goal's option within the price
    assert set(items[(True, True)]) <= {"goal_option", "buy"}
    assert sum(c["goal_option"] + c["buy"] for k, c in items.items() if k != (True, True)) == 0

    def top_hit(prompts, envs):
        out = []
        for e in envs:
            u = e.unwrapped
            if u.state.page == "search":
                out.append(format_answer([u.expert_plan()[0]]))
            elif u.state.page == "results":
                out.append("<answer>click[1]</answer>")
            elif not u.state.options and u.goal["options"]:
                out.append(format_answer([f"click[{next(iter(u.goal['options'].values()))}]"]))
            else:
                out.append("<answer>click[buy now]</answer>")
        return out

    counts, items, episodes = probe.play(env_cfg, 48, top_hit)
    assert sum(counts.values()) == 48 and 0 < counts["success"] < 48
    assert counts["over_price"] + counts["lacking_option"] > 0, counts
    assert items[(True, True)]["goal_option"] + items[(True, True)]["buy"] > 0
    env = gymnasium.make(env_cfg.env_id, **env_cfg.env_kwargs)
    for ep in episodes:
        # replay the episode: the sort is the purchase's reward seen through the page
        env.reset(seed=ep["goal"])
        for _, text in ep["turns"]:
            *_, info = env.step(text)
        bd = info.get("reward_breakdown", {})
        if ep["outcome"] == "over_price":
            assert bd["r_price"] is False
        elif ep["outcome"] in ("lacking_option", "wrong_option"):
            assert bd["r_price"] is not False and bd["r_option"] is not None and bd["r_option"] < 1
        elif ep["outcome"] == "success":
            assert info["success"] and bd["score"] == 1.0
        elif ep["outcome"] == "hidden":
            assert bd["score"] < 1.0 and bd["r_price"] is not False
        else:
            assert "purchased" not in info
