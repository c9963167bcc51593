"""RLVR learning proof: does RLVR raise held-out arithmetic accuracy of an SFT-warm-started
tiny policy?

The chain runs through the CLI, each stage a subprocess:

1. generated arithmetic: two-digit addition without carries (every digit column sums to at
   most 9), split into RL prompts and held-out prompts (disjoint problem strings), plus SFT
   demonstrations of every one-digit fact and of a third, disjoint set of two-digit problems;
2. ``roll run`` of a short SFT warm start of ``roll-tiny://tiny`` on the (partly wrong)
   demonstrations (answers written as ``\\boxed{c}``);
3. ``roll run`` of the rlvr pipeline (math_rule reward, GRPO) from the SFT model, validating on
   the held-out prompts (greedy and sampled) at step 0 (the SFT model) and every
   ``eval_steps`` up to the last step.

The gain is the held-out accuracy after RL minus that at step 0, in points (greedy and
sampled reported; the RESULT gain is the smaller). Numbers, commands and the curve go to the
``## RLVR`` section of docs/benchmarks.md.

    python bench/rlvr_learning.py            # full run
    python bench/rlvr_learning.py --quick    # the same chain, tiny (start-up bound)
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from common import write_section

ROOT = Path(__file__).resolve().parent.parent
SECTION = "## RLVR"
PROMPT = "What is {a} + {b}? Put the final answer in \\boxed{{}}."
DEMOS_PER_PROBLEM = 2


def no_carry_problems() -> list[tuple[int, int]]:
    """Every ``a + b`` with two-digit operands whose digit-wise sums stay below 10 (no carry):
    1,980 problems built from the 55 one-digit facts ``x + y <= 9``."""
    tens = [(x, y) for x in range(1, 10) for y in range(1, 10) if x + y <= 9]
    ones = [(x, y) for x in range(10) for y in range(10) if x + y <= 9]
    return [(10 * t[0] + o[0], 10 * t[1] + o[1]) for t in tens for o in ones]


def make_data(out: Path, seed: int, noise: float = 0.0, n_val: int = 200, n_rl: int = 1000,
              n_sft_two_digit: int = 600) -> dict[str, int]:
    """SFT demonstrations, RL prompts and held-out prompts.

    The held-out set is honest but learnable: 200 two-digit no-carry problems whose strings
    never occur in SFT or RL, while the skill they need (add the digit columns, using the
    one-digit facts) is exactly what the RL prompts (other two-digit no-carry problems)
    exercise. The SFT set holds every one-digit fact ``a + b`` (a, b in 0-9) and a disjoint
    share of the two-digit problems, two demonstrations each; a ``noise`` share of the
    demonstrations carries a wrong answer (off by 1-3), so the warm start is weak the way a
    noisy SFT set is and the reward has something to correct."""
    rng = random.Random(seed)
    problems = no_carry_problems()
    rng.shuffle(problems)
    if n_val + n_rl + n_sft_two_digit > len(problems):
        raise ValueError(f"only {len(problems)} two-digit no-carry problems; asked for "
                         f"{n_val} + {n_rl} + {n_sft_two_digit}")
    val, rl = problems[:n_val], problems[n_val:n_val + n_rl]
    sft = [(a, b) for a in range(10) for b in range(10)] + problems[n_val + n_rl:n_val + n_rl + n_sft_two_digit]
    out.mkdir(parents=True, exist_ok=True)

    def rec(a: int, b: int) -> dict[str, Any]:
        return {"tag": "math", "prompt": PROMPT.format(a=a, b=b), "ground_truth": str(a + b)}

    with open(out / "sft.jsonl", "w") as f:
        for a, b in sft:
            for _ in range(DEMOS_PER_PROBLEM):  # each demonstration noisy on its own
                c = a + b + (rng.choice([-3, -2, -1, 1, 2, 3]) if rng.random() < noise else 0)
                f.write(json.dumps({"messages": [{"role": "user", "content": PROMPT.format(a=a, b=b)},
                                                 {"role": "assistant", "content": f"\\boxed{{{c}}}"}]}) + "\n")
    for name, items in (("rl.jsonl", rl), ("val.jsonl", val)):
        with open(out / name, "w") as f:
            f.writelines(json.dumps(rec(a, b)) + "\n" for a, b in items)
    return {"sft": len(sft), "rl": len(rl), "val": len(val)}


COMMON = {
    "pretrain": "roll-tiny://tiny", "ray": {"num_cpus": 8}, "resources": {"device": "cpu"},
    "tracking": {"track_with": ["jsonl"], "dump_trajectories": 2}, "show_progress": False,
}


def sft_config(data: Path, steps: int, seed: int) -> dict[str, Any]:
    """A deliberately short warm start: probes of this chain show held-out greedy accuracy of
    the tiny model near 0 up to ~100 steps of 32, then climbing through 0.2-0.6 around 200-250
    steps as it learns to read the digit columns; stopping there leaves sampled accuracy in
    the range where GRPO groups have mixed rewards."""
    return {**COMMON, "pipeline": "sft", "exp_name": "rlvr_bench_sft", "seed": seed, "max_steps": steps,
            "rollout_batch_size": 32, "val_batch_size": 32, "save_steps": 0, "eval_steps": 0,
            "data": {"train_files": [str(data / "sft.jsonl")], "max_seq_length": 128},
            "actor_train": {"world_size": 1, "strategy_args": {"strategy_name": "torch_train", "strategy_config": {"parallel": "ddp"}},
                            "training_args": {"lr": 2.0e-3, "per_device_train_batch_size": 32, "gradient_accumulation_steps": 1,
                                              "lr_scheduler_type": "constant", "warmup_steps": 3}}}


def rl_config(data: Path, pretrain: str, steps: int, eval_steps: int, seed: int, val_size: int,
              lr: float) -> dict[str, Any]:
    """GRPO from the SFT model. Adam at lr >= 1e-3 on these noisy policy gradients collapses the
    format tokens of the tiny model within a few steps (and an all-fail group has zero
    advantage, so it never recovers); lr 2e-4 is stable."""
    return {**COMMON, "pipeline": "rlvr", "exp_name": "rlvr_bench_rl", "seed": seed, "pretrain": pretrain,
            "max_steps": steps, "rollout_batch_size": 64, "val_batch_size": val_size, "save_steps": 0,
            "eval_steps": eval_steps, "val_decoding": ["greedy", "sampled"],
            "data": {"train_files": [str(data / "rl.jsonl")], "val_files": [str(data / "val.jsonl")],
                     "domain_interleave_probs": {"math": 1.0}, "max_sampling_rounds": 0},
            "rewards": {"math": {"reward_fn": "math_rule", "tags": ["math"], "timeout_s": 10}},
            "actor_train": {"world_size": 1, "strategy_args": {"strategy_name": "torch_train", "strategy_config": {"parallel": "ddp"}},
                            "training_args": {"lr": lr, "per_device_train_batch_size": 32, "gradient_accumulation_steps": 2}},
            "actor_infer": {"world_size": 1, "strategy_args": {"strategy_name": "hf_infer"},
                            "generating_args": {"max_new_tokens": 10, "temperature": 1.0, "num_return_sequences": 8}},
            "algorithm": {"adv_estimator": "grpo", "policy_loss": "ppo_clip", "loss_agg_mode": "token-mean",
                          "recompute_old_logprobs": False}}


def roll_cmd(*args: str) -> list[str]:
    script = Path(sys.executable).parent / "roll"
    return [str(script) if script.exists() else sys.executable, *([] if script.exists() else ["-m", "roll"]), *args]


def run(cmd: list[str], log: Path, commands: list[str]) -> float:
    commands.append(" ".join(shlex.quote(c) for c in cmd))
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled", "HF_HUB_OFFLINE": "1"}
    t0 = time.perf_counter()
    with open(log, "w") as f:
        proc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=ROOT, check=False)
    if proc.returncode != 0:
        sys.exit(f"command failed ({proc.returncode}), see {log}: {commands[-1]}")
    return time.perf_counter() - t0


def curve(rows: list[dict[str, Any]], prefix: str) -> list[tuple[int, float]]:
    key = f"{prefix}/reward/math/correct"
    return [(int(r["step"]), float(r[key])) for r in rows if r.get(key) is not None]


def section(result: dict[str, Any], commands: list[str], result_line: str) -> str:
    sz = result["sizes"]
    lines = [SECTION, "",
             "`python bench/rlvr_learning.py" + (" --quick`" if result["quick"] else "`") +
             f" (seed {result['seed']}): two-digit addition without carries (`a + b`, every digit "
             f"column sums to at most 9). SFT warm start of `roll-tiny://tiny` ({result['sft_steps']} steps "
             f"of 32) on {sz['sft']} problems (all 100 one-digit facts plus {sz['sft'] - 100} two-digit "
             f"problems, {DEMOS_PER_PROBLEM} demonstrations each, {result['noise']:.0%} of them with a wrong "
             f"answer), then RLVR (math_rule, GRPO, lr {result['rl_lr']:.0e}, {result['rl_steps']} steps x 64 "
             f"responses = 8 prompts x 8) on {sz['rl']} other two-digit problems; accuracy on {sz['val']} "
             f"held-out two-digit problems (greedy, and one sample at T=1). Wall time: SFT "
             f"{result['sft_s']:.0f} s, RLVR {result['rl_s']:.0f} s including validation (2-core CPU, "
             "shared with other jobs).", "",
             "Why this held-out set: the earlier version held out one-digit pairs, i.e. facts the model "
             "had never seen anywhere, which RL on other facts cannot teach (0.10 -> 0.10). Here no "
             "held-out problem string occurs in SFT or RL, but every held-out problem is the same "
             "skill the RL prompts exercise: add two digit columns using the one-digit facts. What "
             "RL can improve (reading the right column, combining the facts, the answer distribution "
             "sharpened against the noisy demonstrations) carries over to new combinations; what it "
             "cannot (an unseen fact) is not asked.", "",
             "| step | held-out accuracy, greedy | held-out accuracy, sampled (T=1) | training reward (RL prompts, T=1, mean of the 5 steps up to here) |",
             "|---|---|---|---|"]
    g, s, t = dict(result["greedy"]), dict(result["sampled"]), dict(result["train"])
    for step in sorted(set(g) | set(s)):
        near = [v for k, v in t.items() if step - 5 < k <= step]  # mean over the last 5 steps
        tr = f"{sum(near) / len(near):.3f}" if near else "-"
        lines.append(f"| {step} | {g.get(step, float('nan')):.3f} | {s.get(step, float('nan')):.3f} | {tr} |")
    met = min(result["gain_greedy"], result["gain_sampled"]) >= 10 and result["rl_s"] <= 20 * 60
    lines += ["", f"Gain (points): greedy {result['gain_greedy']:+.1f}, sampled {result['gain_sampled']:+.1f}. "
              f"Target (+10 points held-out, greedy and sampled, within 20 minutes of RL wall): "
              f"**{'met' if met else 'not met'}**" + (" (a --quick run only checks the chain)." if result["quick"] else "."), "",
              "Recipe (picked with plain-PyTorch probes of the same model and data): the tiny model's "
              "held-out greedy accuracy stays near 0 for ~200 SFT steps of 32 at lr 2e-3, then climbs "
              "steeply as it learns to read the digit columns; the warm start stops early in that climb "
              "(constant lr, so the stopping point does not depend on a decay), where sampled accuracy "
              "is 10-30% and most GRPO groups have mixed rewards. A 220-step cosine warm start stayed at "
              "0.04 held-out and RL did not move it (all-fail groups carry no advantage). RL uses Adam "
              "at lr 2e-4: at >= 1e-3 the noisy policy gradients collapse the format tokens of the tiny "
              "model within a few steps.", "",
              "Commands:", "", "```"] + commands + ["```", "", f"`{result_line}`", "", ""]
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny sizes (start-up bound)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="output/bench_rlvr")
    p.add_argument("--noise", type=float, default=0.3, help="share of SFT demonstrations with a wrong answer")
    p.add_argument("--sft-steps", type=int, default=None, help="SFT optimizer steps (default 260; 15 with --quick)")
    p.add_argument("--rl-steps", type=int, default=None, help="RLVR steps (default 300; 2 with --quick)")
    p.add_argument("--eval-steps", type=int, default=None, help="validate every N RL steps (default 50)")
    p.add_argument("--rl-lr", type=float, default=2.0e-4)
    p.add_argument("--sft-model", default=None, help="skip the SFT stage and start RL from this model (recipe search)")
    p.add_argument("--no-docs", action="store_true", help="do not rewrite docs/benchmarks.md")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sft_steps = args.sft_steps or (15 if args.quick else 260)
    rl_steps = args.rl_steps or (2 if args.quick else 300)
    eval_steps = args.eval_steps or (2 if args.quick else 50)
    out = (ROOT / args.out).resolve()
    data = out / "data"
    sizes = make_data(data, args.seed, noise=args.noise)
    val_size = 40 if args.quick else sizes["val"]  # --quick: the same chain, validation cut short
    commands: list[str] = []
    sft_s = 0.0
    if args.sft_model:
        pretrain = str(Path(args.sft_model).resolve())
    else:
        (out / "sft.yaml").write_text(yaml.safe_dump(sft_config(data, sft_steps, args.seed)))
        sft_s = run(roll_cmd("run", str(out / "sft.yaml"), f"output_dir={out / 'sft'}"), out / "sft.log", commands)
        pretrain = str(out / "sft" / "final_model")
    (out / "rl.yaml").write_text(yaml.safe_dump(rl_config(data, pretrain, rl_steps, eval_steps, args.seed, val_size, args.rl_lr)))
    rl_s = run(roll_cmd("run", str(out / "rl.yaml"), f"output_dir={out / 'rl'}"), out / "rl.log", commands)
    rows = [json.loads(line) for line in (out / "rl" / "logs" / "metrics.jsonl").read_text().splitlines()]
    greedy, sampled = curve(rows, "val_greedy"), curve(rows, "val")
    train = [(int(r["step"]), float(r["reward/math/correct"])) for r in rows if r.get("reward/math/correct") is not None]
    if not greedy or not sampled:
        sys.exit(f"no validation metrics in {out / 'rl' / 'logs' / 'metrics.jsonl'}")
    gain_g = 100 * (greedy[-1][1] - greedy[0][1])
    gain_s = 100 * (sampled[-1][1] - sampled[0][1])
    result = {"quick": args.quick, "seed": args.seed, "noise": args.noise, "sizes": {**sizes, "val": val_size},
              "sft_steps": sft_steps, "rl_steps": rl_steps, "rl_lr": args.rl_lr, "sft_model": args.sft_model,
              "sft_s": sft_s, "rl_s": rl_s, "greedy": greedy, "sampled": sampled, "train": train,
              "gain_greedy": gain_g, "gain_sampled": gain_s}
    (out / "result.json").write_text(json.dumps(result, indent=2))
    result_line = (f"RESULT gain_pp={min(gain_g, gain_s):.1f} greedy_gain_pp={gain_g:.1f} sampled_gain_pp={gain_s:.1f} "
                   f"acc_start_greedy={greedy[0][1]:.3f} acc_end_greedy={greedy[-1][1]:.3f} "
                   f"acc_start_sampled={sampled[0][1]:.3f} acc_end_sampled={sampled[-1][1]:.3f} "
                   f"rl_wall_s={rl_s:.0f} wall_s={sft_s + rl_s:.0f}")
    write_section(section(result, commands, result_line), quick=args.quick, no_docs=args.no_docs)
    print(result_line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
