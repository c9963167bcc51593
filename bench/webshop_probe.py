"""What a model has learnt of WebShop, page by page: a cheap probe of the learning chain's models.

The clean expert walks held-out test goals of a split of the WebShop chain
(configs/agentic/learning/webshop_rl_base.yaml: ``easy`` is the split the chain trains on,
``full`` the shipped benchmark on the same prompts). On every page it visits, the probed model
sees exactly the RL prompt (the page alone, chat template applied) and

* teacher-forced: the share of the expert answer's tokens that are the model's argmax given the
  expert's prefix, and how often all of them are;
* greedy (generated, up to ``max_new_tokens``): its answer is carried out on a copy of the
  env's state and scored by page: on the search page whether it is a search, whether it names the
  goal's product type and how many of the goal's attributes it copies, and where the goal's
  target then ranks; on a results page whether it opens a product, the target or the top hit;
  on an item page whether it does what the expert does (the goal's option, or buy now), apart
  for pages that offer the goal's option and pages that lack it (where the visible expert goes
  back): whether it goes back there, and how often it clicks the goal's option on each.

It prints the prompt length per page in tokens and the expert's turns per goal too. Prints
only (the chain's numbers live in docs/benchmarks.md, Learning).

With ``--play`` the model plays the goals itself, greedily, on the RL stage's prompts (the page
and the ``{feedback}`` line, as the env manager renders them), and each episode is sorted by how
it ended: ``success``; a purchase over the goal's price limit (``over_price``), of a product whose
page does not offer the goal's option (``lacking_option``), of one that offers it with another
option chosen (``wrong_option``), or of one that offers the option within the price and still
scores below 1 (``hidden``: attributes or product type the page does not show); or no purchase
within the turn limit (``no_purchase``). On each product page it opens (none of its options
chosen yet) what it answered, by what the page shows: whether it offers the goal's option and
whether its price is within the limit (the visible expert buys only where both hold).

    python bench/webshop_probe.py                       # the chain's SFT model, easy split
    python bench/webshop_probe.py --model roll-tiny://tiny --split full
    python bench/webshop_probe.py --model roll-tiny://tiny --train-steps 600 --lr 2e-3   # SFT, probed on the way
    python bench/webshop_probe.py --model M --play --goals 243 --max-new-tokens 64         # its own episodes
"""
from __future__ import annotations

import argparse
import copy
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Optional

from common import pad_rows, response_loss

ROOT = Path(__file__).resolve().parent.parent
CONFIG = "configs/agentic/learning/webshop_grpo.yaml"
TAGS = {"easy": "WebShopTest", "full": "WebShopFull"}
DEFAULT_MODEL = "output/learning/bench/full/webshop/sft/final_model"


def expert_states(env: Any, goals: int) -> tuple[list[dict[str, Any]], list[int]]:
    """Every page the clean expert visits on test goals 0..goals-1: the observation, the page
    kind, the expert's action, the goal and a snapshot of the env to try other actions from."""
    from roll.envs.agents import format_answer

    u = env.unwrapped
    states, turns = [], []
    for i in range(goals):
        obs, _ = env.reset(seed=i)
        for t in range(u.max_steps):
            plan = u.expert_plan()
            states.append({"obs": obs, "page": u.state.page, "expert": plan[0], "goal": u.goal,
                           "snapshot": (copy.deepcopy(u.state), u._page, u._obs, u.steps)})
            obs, _, terminated, truncated, _ = env.step(format_answer([plan[0]]))
            if terminated or truncated:
                break
        turns.append(t + 1)
    return states, turns


def judge(env: Any, state: dict[str, Any], answer: str) -> dict[str, float]:
    """Carry ``answer`` out from the state's snapshot and score it for its page (module docstring)."""
    from roll.envs.webshop.search import tokenize

    u = env.unwrapped
    u.state, u._page, u._obs, u.steps = copy.deepcopy(state["snapshot"][0]), *state["snapshot"][1:]
    before = copy.deepcopy(u.state)
    _, _, _, _, info = env.step(answer)
    goal, page = state["goal"], state["page"]
    out = {"valid": float(info["action_is_valid"])}
    if page == "search":
        is_search = info["action_is_valid"] and u.state.page == "results"
        words = set(tokenize(u.state.keywords)) if is_search else set()
        out["search"] = float(is_search)
        out["type_words"] = float(is_search and set(tokenize(goal["query"])) <= words)
        attrs = [set(tokenize(a)) for a in goal["attributes"]]
        out["attributes_copied"] = sum(a <= words for a in attrs) / max(len(attrs), 1) if is_search else 0.0
        rank = u.state.results.index(goal["asin"]) if is_search and goal["asin"] in u.state.results else -1
        out["target_on_page_1"] = float(0 <= rank < u.results_per_page)
        out["target_in_top_50"] = float(rank >= 0)
    elif page == "results":
        opened = info["action_is_valid"] and u.state.page == "item" and before.page == "results"
        out["opens_product"] = float(opened)
        out["opens_target"] = float(opened and u.state.asin == goal["asin"])
        first = (before.result_page - 1) * u.results_per_page
        out["opens_top_hit"] = float(opened and before.results and u.state.asin == before.results[first])
        # the valid answers that open nothing: another results page, or back to the search page
        out["pages_on"] = float(info["action_is_valid"] and u.state.page == "results" and u.state.result_page != before.result_page)
        out["back_to_search"] = float(info["action_is_valid"] and u.state.page == "search")
    elif page == "item":
        expert = state["expert"]
        out["as_expert"] = float(info["action_is_valid"] and answer_action(answer) == expert.lower())
        out["expert_buys"] = float(expert == "click[buy now]")
        # does the model tell a page that offers the goal's option from one that does not? (the
        # visible expert goes back from the latter)
        wanted = {f"click[{v}]".lower() for v in goal["options"].values()}
        if expert == "click[< prev]":
            out["lacking_back"] = out["as_expert"]
            out["lacking_clicks_goal_option"] = float(answer_action(answer) in wanted)
        elif expert.lower() in wanted:  # the page offers it and it is not chosen yet
            out["offering_clicks_goal_option"] = float(answer_action(answer) in wanted)
    return out


def answer_action(text: str) -> str:
    """The action inside <answer>...</answer>, lower-cased and trimmed ('' when there is none)."""
    start, end = text.find("<answer>"), text.find("</answer>")
    return text[start + len("<answer>"):end].strip().lower() if 0 <= start < end else ""


def id_mask(tok: Any, state: dict[str, Any]) -> list[bool]:
    """For each token of the expert answer (``state["target"]``), whether it spells part of the
    clicked element (between ``click[`` and ``]``)."""
    text, spans = "", []
    for t in state["target"]:
        start = len(text)
        text += tok.decode([t])
        spans.append((start, len(text)))
    lo = text.find("click[") + len("click[")
    hi = text.find("]", lo)
    return [lo <= a and b <= hi and b > a for a, b in spans]


def probe(model_path: str, split: str, goals: int, max_new_tokens: int, batch: int,
          loaded: Optional[tuple[Any, Any]] = None, overrides: tuple[str, ...] = ()) -> dict[str, dict[str, float]]:
    """The per-page report of the module docstring; ``loaded`` (model, tokenizer) probes a model
    in memory instead of loading ``model_path``; ``overrides`` change the chain's config
    (``--set``, e.g. ``custom_envs.WebShopTest.env_kwargs.results_per_page=1``)."""
    import gymnasium
    import numpy as np
    import torch
    from roll.config import load_config
    from roll.data.chat import tokenize_conversation
    from roll.envs.agents import format_answer
    from roll.workers.base import resolve_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import roll.envs  # noqa: F401  (registers the shipped envs)

    env_cfg = load_config(str(ROOT / CONFIG), overrides).custom_envs[TAGS[split]]
    env = gymnasium.make(env_cfg.env_id, **env_cfg.env_kwargs)
    states, turns = expert_states(env, goals)
    if loaded is None:
        path = resolve_model(model_path)
        tok = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    else:
        model, tok = loaded
    was_training = model.training
    model.eval()
    for s in states:
        ids, mask = tokenize_conversation(tok, [{"role": "user", "content": s["obs"]},
                                                {"role": "assistant", "content": format_answer([s["expert"]])}])
        cut = mask.index(1)
        s["prompt"], s["target"] = ids[:cut], [t for t, m in zip(ids, mask) if m]
    per_page: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    pad = tok.pad_token_id
    with torch.no_grad():
        for lo in range(0, len(states), batch):
            chunk = states[lo:lo + batch]
            # teacher forcing: prompt + expert answer, right-padded
            rows = [s["prompt"] + s["target"] for s in chunk]
            n = max(map(len, rows))
            ids = torch.tensor([r + [pad] * (n - len(r)) for r in rows])
            att = torch.tensor([[1] * len(r) + [0] * (n - len(r)) for r in rows])
            pred = model(input_ids=ids, attention_mask=att).logits.argmax(-1)
            # greedy generation from the prompt alone, left-padded
            m = max(len(s["prompt"]) for s in chunk)
            gen_ids = torch.tensor([[pad] * (m - len(s["prompt"])) + s["prompt"] for s in chunk])
            gen_att = torch.tensor([[0] * (m - len(s["prompt"])) + [1] * len(s["prompt"]) for s in chunk])
            gen = model.generate(input_ids=gen_ids, attention_mask=gen_att, max_new_tokens=max_new_tokens,
                                 do_sample=False, pad_token_id=pad, eos_token_id=tok.eos_token_id)
            for i, s in enumerate(chunk):
                p = len(s["prompt"])
                hits = [int(pred[i, t - 1]) == rows[i][t] for t in range(p, len(rows[i]))]
                answer = tok.decode(gen[i, m:], skip_special_tokens=True)
                row = per_page[s["page"]]
                row["prompt_tokens"].append(p)
                row["tf_token_acc"].append(float(np.mean(hits)))
                row["tf_exact"].append(float(all(hits)))
                if s["page"] == "results" and s["expert"] not in ("click[next >]", "click[< prev]"):
                    # the product id's tokens alone (the answer's format tokens are learnt early)
                    row["tf_id_token_acc"].append(float(np.mean([h for h, inside in zip(hits, id_mask(tok, s)) if inside])))
                for k, v in judge(env, s, answer).items():
                    row[k].append(v)
    env.close()
    model.train(was_training)
    report = {page: {k: float(np.mean(v)) for k, v in row.items()} | {"n": len(row["valid"])}
              for page, row in per_page.items()}
    report["episodes"] = {"expert_turns": float(np.mean(turns)), "n": len(turns)}
    return report


OUTCOMES = ("success", "over_price", "lacking_option", "wrong_option", "hidden", "no_purchase")
ITEM_ANSWERS = ("goal_option", "other_option", "buy", "back", "other_valid", "invalid")


def page_shows(u: Any, asin: str) -> tuple[bool, bool]:
    """(the product's page offers a value for each of the goal's options, its price is within the
    goal's limit): what the visible expert checks before it buys (envs/webshop/env.py offers_goal)."""
    return len(u.expert_choice(asin)[1]) == len(u.goal["options"]), u.price_within(asin)


def outcome(u: Any, info: dict[str, Any]) -> str:
    """How an ended episode ended (one of OUTCOMES; module docstring), from its last step's info."""
    if info.get("success"):
        return "success"
    if "purchased" not in info:
        return "no_purchase"
    offers, within = page_shows(u, info["purchased"]["asin"])
    if not within:
        return "over_price"
    if not offers:
        return "lacking_option"
    r_option = info["reward_breakdown"].get("r_option")
    return "wrong_option" if r_option is not None and r_option < 1 else "hidden"


def item_answer(u: Any, answer: str, info: dict[str, Any]) -> str:
    """What an answer on a product page did (one of ITEM_ANSWERS)."""
    action = answer_action(answer)
    if not info.get("action_is_valid"):
        return "invalid"
    if action == "click[buy now]":
        return "buy"
    if action == "click[< prev]":
        return "back"
    if action in {f"click[{v}]".lower() for v in u.goal["options"].values()}:
        return "goal_option"
    return "other_option" if u.state.page == "item" and u.state.options else "other_valid"


def play(env_cfg: Any, goals: int, answer: Any) -> tuple[Counter, dict[tuple[bool, bool], Counter], list[dict[str, Any]]]:
    """Episodes on goals 0..goals-1 of ``env_cfg`` (a custom_envs entry), all turns batched:
    ``answer(prompts, envs)`` returns one answer per live episode for its prompt (the turn
    template rendered with the observation and the feedback line). Returns the outcome counts,
    the answers on first visits to product pages by (offers the goal's option, price within),
    and per episode its goal, outcome and (page, answer) turns."""
    import gymnasium
    from roll.rollout.env_manager import action_feedback, format_turn

    import roll.envs  # noqa: F401  (registers the shipped envs)

    template = env_cfg.turn_template or "{observation}"
    envs = [gymnasium.make(env_cfg.env_id, **env_cfg.env_kwargs) for _ in range(goals)]
    obs = [e.reset(seed=i)[0] for i, e in enumerate(envs)]
    feedback, ended = [""] * goals, [None] * goals
    episodes = [{"goal": i, "turns": []} for i in range(goals)]
    items: dict[tuple[bool, bool], Counter] = defaultdict(Counter)
    for _ in range(envs[0].unwrapped.max_steps if goals else 0):
        live = [i for i in range(goals) if ended[i] is None]
        if not live:
            break
        answers = answer([format_turn(template, observation=obs[i], feedback=feedback[i]) for i in live],
                         [envs[i] for i in live])
        for i, text in zip(live, answers):
            u = envs[i].unwrapped
            page = u.state.page
            shown = page_shows(u, u.state.asin) if page == "item" and not u.state.options else None
            obs[i], _, terminated, truncated, info = envs[i].step(text)
            feedback[i] = action_feedback(info)
            episodes[i]["turns"].append((page, text))
            if shown is not None:
                items[shown][item_answer(u, text, info)] += 1
            if terminated or truncated:
                ended[i] = info
    for i, e in enumerate(envs):
        episodes[i]["outcome"] = outcome(e.unwrapped, ended[i] or {})
        e.close()
    return Counter(ep["outcome"] for ep in episodes), items, episodes


def play_model(model_path: str, split: str, goals: int, max_new_tokens: int, batch: int,
               overrides: tuple[str, ...] = ()) -> tuple[Counter, dict[tuple[bool, bool], Counter]]:
    """``--play``: the model's greedy episodes (``play``)."""
    import torch
    from roll.config import load_config
    from roll.workers.base import resolve_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    env_cfg = load_config(str(ROOT / CONFIG), overrides).custom_envs[TAGS[split]]
    if env_cfg.include_instruction or env_cfg.system_prompt:
        raise SystemExit(f"--play renders the page alone as the prompt; {TAGS[split]} has an instruction or system prompt")
    path = resolve_model(model_path)
    tok = AutoTokenizer.from_pretrained(path)
    tok.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()

    def answer(prompts: list[str], _envs: list[Any]) -> list[str]:
        out: list[str] = []
        for lo in range(0, len(prompts), batch):
            texts = [tok.apply_chat_template([{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True)
                     for p in prompts[lo:lo + batch]]
            enc = tok(texts, return_tensors="pt", padding=True)
            with torch.no_grad():
                gen = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=tok.pad_token_id)
            out += tok.batch_decode(gen[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
        return out

    counts, items, _ = play(env_cfg, goals, answer)
    return counts, items


def train(args: Any) -> int:
    """``--train-steps``: plain-PyTorch SFT of ``--model`` on the chain's demonstrations (noisy
    expert episodes on training goals, rendered as the RL prompts), probed every ``--every`` steps:
    how many steps and which learning rate teach the copying, without a pipeline run per try."""
    import json
    import math
    import tempfile
    import time

    import numpy as np
    import torch
    from roll.data.chat import tokenize_conversation
    from roll.pipelines.sft_data import generate
    from roll.workers.base import resolve_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(args.seed)
    path = resolve_model(args.model)
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).train()
    with tempfile.TemporaryDirectory() as tmp:
        stats = generate(str(ROOT / CONFIG), f"{tmp}/demos.jsonl", args.episodes, args.epsilon, seed=args.seed,
                         overrides=tuple(args.set))
        recs = [json.loads(line) for line in Path(f"{tmp}/demos.jsonl").read_text().splitlines()]
    rows = [tokenize_conversation(tok, r["messages"]) for r in recs]
    rows = [(x[:args.max_seq_length], m[:args.max_seq_length]) for x, m in rows]
    pad = tok.pad_token_id
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    warmup = 3

    def lr_at(step: int) -> float:
        if step <= warmup:
            return args.lr * step / warmup
        if args.schedule == "constant":
            return args.lr
        return args.lr * 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(args.train_steps - warmup, 1)))

    print(f"train: {args.model}, {len(rows)} turns from {args.episodes} episodes (epsilon {args.epsilon}; "
          f"{stats}), about {np.mean([len(x) for x, _ in rows]):.0f} tokens each; lr {args.lr:g} {args.schedule}, "
          f"batch {args.train_batch}", flush=True)
    rng = np.random.default_rng(args.seed)
    t0, losses = time.time(), []
    for step in range(1, args.train_steps + 1):
        loss = response_loss(model, *pad_rows([rows[i] for i in rng.integers(len(rows), size=args.train_batch)], pad))
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        if step % args.every == 0 or step == args.train_steps:
            report = probe(args.model, args.split, args.goals, args.max_new_tokens, args.batch, loaded=(model, tok),
                           overrides=tuple(args.set))
            brief = "; ".join(f"{page} " + ", ".join(f"{k} {v:.2f}" for k, v in row.items()
                                                    if k not in ("n", "prompt_tokens", "expert_turns"))
                              for page, row in report.items() if page != "episodes")
            print(f"step {step}: loss {np.mean(losses[-args.every:]):.3f}, {time.time() - t0:.0f} s; {brief}", flush=True)
    if args.save:
        model.save_pretrained(args.save)
        tok.save_pretrained(args.save)
    return 0


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=DEFAULT_MODEL, help="a model directory or roll-tiny://SIZE")
    p.add_argument("--split", choices=sorted(TAGS), default="easy")
    p.add_argument("--goals", type=int, default=64, help="held-out test goals 0..N-1")
    p.add_argument("--max-new-tokens", type=int, default=40)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--train-steps", type=int, default=0,
                   help="first train --model this many SFT steps on fresh demonstrations (plain PyTorch), probing every --every")
    p.add_argument("--every", type=int, default=100)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--schedule", choices=["constant", "cosine"], default="cosine")
    p.add_argument("--train-batch", type=int, default=32)
    p.add_argument("--episodes", type=int, default=1000, help="demonstration episodes (training goals)")
    p.add_argument("--epsilon", type=float, default=0.1, help="share of random actions in the demonstrations")
    p.add_argument("--max-seq-length", type=int, default=512)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override the chain's config (webshop_grpo.yaml), for the demonstrations and the probe")
    p.add_argument("--save", default="", help="with --train-steps: save the trained model here")
    p.add_argument("--play", action="store_true", help="the model plays the goals greedily; outcomes by cause")
    args = p.parse_args(argv)
    if args.train_steps:
        return train(args)
    if args.play:
        counts, items = play_model(args.model, args.split, args.goals, args.max_new_tokens, args.batch, tuple(args.set))
        print(f"{args.model} plays {args.goals} test goals of the {args.split} split greedily:")
        print("  outcomes: " + ", ".join(f"{k} {counts[k]} ({counts[k] / max(args.goals, 1):.1%})" for k in OUTCOMES))
        for (offers, within), c in sorted(items.items(), reverse=True):
            n = sum(c.values())
            print(f"  product pages opened, {'offers' if offers else 'lacks'} the goal's option, price "
                  f"{'within' if within else 'over'} the limit: {n}; answers " +
                  ", ".join(f"{k} {c[k] / n:.0%}" for k in ITEM_ANSWERS if c[k]))
        print("RESULT " + " ".join(f"{k}={counts[k] / max(args.goals, 1):.3f}" for k in OUTCOMES))
        return 0
    report = probe(args.model, args.split, args.goals, args.max_new_tokens, args.batch, overrides=tuple(args.set))
    print(f"probe {args.model} on the {args.split} split, {args.goals} test goals:")
    for page, row in report.items():
        print(f"  {page}: " + ", ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
