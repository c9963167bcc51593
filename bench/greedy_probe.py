"""Why does a greedy grid policy fail? A probe of the learning chains' SFT and RL models.

Plays held-out episodes of one env tag of a learning config greedily with a saved model
(observation-only step-mode prompts, with the ``{feedback}`` line where the tag's template has one,
rendered as the env manager renders them), and sorts each failed episode by how it ended:
``stuck`` (its last three moves changed nothing: a policy without history that sees the same room
answers the same), ``some_noops`` (moves that changed nothing, but not at the end) or
``all_effective`` (every move changed the room). Also prints the share of all moves that changed
nothing.

    python bench/greedy_probe.py output/learning/bench/full/sokoban/sft/final_model
    python bench/greedy_probe.py MODEL --config configs/agentic/learning/multi_env_grpo.yaml --tag LargerSokoban

With ``--first-move`` it also scores, on each episode's first room, every one-move answer
(``<answer>Up</answer>`` ..., each answer's tokens scored whole) and reports how committed the
policy is (the mean probability of its top move and the entropy over the moves, renormalised
over them) and how right (the share of rooms whose top move is optimal, i.e. shortens the
env's optimal plan by one or solves the room, and the mean probability on optimal moves: the
first move's accuracy when sampling). Needs an env with ``action_words`` and ``expert_plan``.

Prints only (the finding is written up in docs/benchmarks.md, Learning). Ends with
``RESULT success=... stuck=... noop_share=...`` (shares of the episodes and of the moves), and
``top_prob=... entropy=... top_optimal=... p_optimal=...`` with ``--first-move``.
"""
from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parent.parent
# the step-mode prompts the learning configs use: the observation, and with the second the line after a
# move that changed nothing or an answer that was no move (roll/rollout/env_manager.py action_feedback)
PROBE_TEMPLATES = ("{observation}", "{observation}{feedback}")


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model", help="a model directory (a run's final_model) or a roll-tiny:// name")
    p.add_argument("--config", default="configs/agentic/learning/sokoban_grpo.yaml")
    p.add_argument("--tag", default="SimpleSokoban")
    p.add_argument("--episodes", type=int, default=200)
    p.add_argument("--seed", type=int, default=42, help="the run's seed: episodes use the validation seeds seed+100000+i")
    p.add_argument("--first-move", action="store_true",
                   help="also score every one-move answer on the first rooms: commitment and optimality")
    args = p.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    import gymnasium as gym
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import envs  # noqa: F401  (registers the roll/ envs)
    from roll.config.loader import load_raw
    from roll.rollout.env_manager import action_feedback, format_turn
    from roll.workers.base import resolve_model

    spec = load_raw(args.config)["custom_envs"][args.tag]
    template = spec.get("turn_template", "{observation}")
    if spec.get("include_instruction", True) or spec.get("system_prompt") or template not in PROBE_TEMPLATES:
        p.error(f"{args.tag}: the probe renders observation-only prompts (include_instruction false, no system "
                f"prompt, turn_template one of {', '.join(map(repr, PROBE_TEMPLATES))}), as the learning configs do")
    turns = int(spec.get("max_turns", 8))
    path = resolve_model(args.model) if args.model.startswith("roll-tiny://") else args.model
    tok = AutoTokenizer.from_pretrained(path)
    tok.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(path).eval()
    n = args.episodes
    envs_ = [gym.make(spec["env_id"], **spec.get("env_kwargs", {})) for _ in range(n)]
    obs = [e.reset(seed=args.seed + 100000 + i)[0] for i, e in enumerate(envs_)]
    feedback = [""] * n  # the {feedback} line after each episode's last step, as the env manager shows it
    first = first_move_stats(model, tok, envs_, obs) if args.first_move else {}
    done, success = [False] * n, [False] * n
    same: list[list[bool]] = [[] for _ in range(n)]
    for _ in range(turns):
        live = [i for i in range(n) if not done[i]]
        if not live:
            break
        turns_ = [format_turn(template, observation=obs[i], feedback=feedback[i]) for i in live]
        prompts = [tok.apply_chat_template([{"role": "user", "content": t}], tokenize=False, add_generation_prompt=True)
                   for t in turns_]
        enc = tok(prompts, return_tensors="pt", padding=True)
        with torch.no_grad():
            out = model.generate(**enc, max_new_tokens=8, do_sample=False, pad_token_id=tok.pad_token_id)
        for i, text in zip(live, tok.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)):
            nxt, _, term, trunc, info = envs_[i].step(text)
            same[i].append(nxt == obs[i])
            obs[i], feedback[i] = nxt, action_feedback(info)
            if term or trunc:
                done[i], success[i] = True, bool(info.get("success", False))
    kinds = Counter()
    for i in range(n):
        tail = same[i][-3:]
        kinds["success" if success[i] else "stuck" if len(tail) == 3 and all(tail)
              else "some_noops" if any(same[i]) else "all_effective"] += 1
    moves = sum(len(s) for s in same)
    noop = sum(sum(s) for s in same) / max(1, moves)
    print(f"{args.model} on {args.tag} ({n} held-out episodes, greedy): " +
          ", ".join(f"{k} {kinds[k]}" for k in ("success", "stuck", "some_noops", "all_effective")) +
          f"; {noop:.1%} of {moves} moves changed nothing")
    if first:
        print(f"first move over {n} rooms: top move's probability {first['top_prob']:.3f}, entropy "
              f"{first['entropy']:.3f} nats (uniform: {first['uniform_entropy']:.3f}), top move optimal in "
              f"{first['top_optimal']:.1%} of the rooms, probability on optimal moves {first['p_optimal']:.3f}, "
              f"off the one-move answers {first['off_answers']:.3f}")
    extra = "".join(f" {k}={first[k]:.3f}" for k in ("top_prob", "entropy", "top_optimal", "p_optimal") if k in first)
    print(f"RESULT success={kinds['success'] / n:.3f} stuck={kinds['stuck'] / n:.3f} noop_share={noop:.3f}{extra}")
    return 0


def first_move_stats(model, tok, envs_: list, obs: list[str]) -> dict[str, float]:
    """Means over rooms of the renormalised one-move answer distribution: top probability,
    entropy, whether the top move is optimal, probability on optimal moves; and the mass the
    model puts off those answers."""
    import math

    import torch

    from envs.agents import format_answer

    words = list(getattr(envs_[0].unwrapped, "action_words", None) or [])
    if not words or not callable(getattr(envs_[0].unwrapped, "expert_plan", None)):
        raise SystemExit("--first-move needs an env with action_words and expert_plan()")
    answers = [format_answer([w]) for w in words]
    sums = dict(top_prob=0.0, entropy=0.0, top_optimal=0.0, p_optimal=0.0, off_answers=0.0)
    for env, o in zip(envs_, obs):
        prompt = tok.apply_chat_template([{"role": "user", "content": o}], tokenize=False, add_generation_prompt=True)
        n_prompt = len(tok(prompt)["input_ids"])
        rows = [tok(prompt + a)["input_ids"] for a in answers]
        width = max(map(len, rows))
        ids = torch.tensor([r + [tok.pad_token_id] * (width - len(r)) for r in rows])
        mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
        with torch.no_grad():
            lp = torch.log_softmax(model(input_ids=ids, attention_mask=mask).logits.float(), -1)
        probs = [math.exp(sum(lp[j, t - 1, r[t]].item() for t in range(n_prompt, len(r)))) for j, r in enumerate(rows)]
        z = sum(probs)
        q = [x / z for x in probs]
        optimal = optimal_moves(env, answers)
        top = max(range(len(q)), key=q.__getitem__)
        sums["top_prob"] += q[top]
        sums["entropy"] -= sum(x * math.log(x) for x in q if x > 0)
        sums["top_optimal"] += float(optimal[top])
        sums["p_optimal"] += sum(x for x, ok in zip(q, optimal) if ok)
        sums["off_answers"] += 1.0 - z
    out = {k: v / len(obs) for k, v in sums.items()}
    out["uniform_entropy"] = math.log(len(words))
    return out


def optimal_moves(env, answers: list[str]) -> list[bool]:
    """Per answer: does it solve the room or shorten the env's optimal plan by one (tried on a copy)?"""
    import copy

    plan = len(env.unwrapped.expert_plan())
    out = []
    for a in answers:
        trial = copy.deepcopy(env)
        _, _, term, _, info = trial.step(a)
        out.append(bool(info.get("success")) if term else bool(plan) and len(trial.unwrapped.expert_plan()) == plan - 1)
    return out


if __name__ == "__main__":
    sys.exit(main())
