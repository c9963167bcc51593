"""The README's main job, measured: `roll run configs/agentic/frozenlake_main_cpu.yaml` (a chain:
untrained baseline, demonstrations, SFT, GRPO) for several seeds, each a fresh `roll run`
process timed from start to exit.

Reported per seed: held-out success (greedy and sampled, with the standard error) of the
untrained model, of the SFT model (the GRPO stage's step-0 validation) and after GRPO; the gain
is RL end minus SFT start, per decoding mode; wall time per stage and in all; the load average
of the machine before and after (the CPU is shared). Writes the ``## Main job`` section of
docs/benchmarks.md and ends with ``RESULT main_gain_pp=... main_wall_s=...`` (the smallest gain
over seeds and decoding modes; the longest wall).

    python bench/main_job.py            # 3 seeds, one after another (about 20 minutes unloaded)
    python bench/main_job.py --quick    # one seed, every stage tiny; prints, never writes docs
"""
from __future__ import annotations

import json
import math
import shlex
import sys
from pathlib import Path
from typing import Any, Optional

import yaml
from common import chain_arg_parser, chain_cells, chain_figures, result_line, run_chain_seeds, write_section

ROOT = Path(__file__).resolve().parent.parent
CONFIG = "configs/agentic/frozenlake_main_cpu.yaml"
TAG = "FrozenLake"
SECTION = "## Main job"
QUICK = ["stages.baseline.overrides.val_batch_size=4", "stages.demos.demos.episodes=8",
         "stages.sft.overrides.max_steps=2", "stages.grpo.overrides.max_steps=2", "stages.grpo.overrides.eval_steps=2",
         "stages.grpo.overrides.val_batch_size=4", "stages.grpo.overrides.rollout_batch_size=8",
         "stages.grpo.overrides.train_env_manager.group_size=4",
         "stages.grpo.overrides.actor_train.training_args.per_device_train_batch_size=8"]
"""--quick: the same chain, every stage as small as it goes."""


def section_text(runs: list[dict[str, Any]], invocation: str, result: str, note: str = "") -> str:
    n = runs[0]["episodes"]
    with open(ROOT / CONFIG) as f:
        grpo = yaml.safe_load(f)["stages"]["grpo"]["overrides"]
    steps, every = grpo["max_steps"], grpo["eval_steps"]
    rounds = ", ".join(str(s) for s in range(0, steps, every)) + f" and {steps}"
    lines = [SECTION, "",
             f"`{invocation}`: the README's main command, `roll run {CONFIG}`, once per seed (`seed=S`), each a",
             "fresh process on the 2-core CPU (the load average before and after each run is in the",
             "table: with a load of L on 2 cores a run gets about 2/L of the",
             "CPU). The chain: `baseline` (validation of the untrained model), `demos` (1000 expert",
             f"episodes, half the actions random), `sft` (300 steps), `grpo` ({steps} steps, validation at",
             f"steps {rounds}). Held-out success on {n} FrozenLake maps never trained on (env seeds",
             "seed+100000 on), greedy and sampled at temperature 1.0; ± is the standard error of one",
             f"rate over {n} episodes (at most {50 / math.sqrt(n):.1f} points), so a gain has a standard error of at",
             f"most {50 * math.sqrt(2 / n):.1f}.",
             "Gain = RL end - SFT start (the grpo stage's step-0 validation), per decoding mode. Wall =",
             "the whole `roll run` process (Ray start-up, every stage, validation rounds). Sizes from the",
             "Learning section's FrozenLake chain (25 / 27 -> 59 / 59 % at RL step 50 of 300, on 64 maps):",
             f"{steps} RL steps keep the chain within 10 minutes; {n} validation maps keep the noise of a gain well under 20.",
             *([note] if note else []), "",
             "| seed | untrained greedy / sampled | SFT start greedy / sampled | RL end greedy / sampled | "
             "gain greedy / sampled (pp) | wall (s): baseline, demos, sft, grpo; total | load before / after |",
             "|---|---|---|---|---|---|---|"]
    for r in runs:
        st = r["summary"]["stages"]
        walls = ", ".join(f"{st[k]['wall_s']:.0f}" for k in ("baseline", "demos", "sft", "grpo"))
        cells = chain_cells(r, n)
        lines.append(f"| {r['seed']} | {cells[0]} | {cells[1]} | {cells[2]} | {r['gain_greedy']:+.1f} / "
                     f"{r['gain_sampled']:+.1f} | {walls}; {r['wall_s']:.0f} | {r['load_before']} / {r['load_after']} |")
    lines += ["", "Validation rounds of the grpo stage (step: greedy / sampled, %):", ""]
    for r in runs:
        lines.append(f"- seed {r['seed']}: " + ", ".join(
            f"{s}: {100 * v[TAG]['greedy']:.0f} / {100 * v[TAG]['sampled']:.0f}" for s, v in r["curve"]))
    lines += ["", "```", result, "```", ""]
    return "\n".join(lines)


def curve(out: Path) -> list[tuple[int, dict[str, dict[str, float]]]]:
    """Every validation round of the grpo stage: (step, {tag: {greedy, sampled}})."""
    pts = []
    for line in (out / "grpo" / "logs" / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        s = {m: row.get(f"{p}/env/{TAG}/success") for m, p in (("greedy", "val_greedy"), ("sampled", "val"))}
        if all(v is not None for v in s.values()):
            pts.append((int(row["step"]), {TAG: s}))
    return pts


def main(argv: Optional[list[str]] = None) -> int:
    args = chain_arg_parser(__doc__.split("\n\n")[0], "output/bench/main_job", [42, 43, 44]).parse_args(argv)
    runs = run_chain_seeds(CONFIG, args, QUICK,
                           lambda out, summary: {**chain_figures(summary, TAG), "curve": curve(out)})
    result = result_line({"main_gain_pp": round(min(r["gain"] for r in runs), 1),
                          "main_wall_s": round(max(r["wall_s"] for r in runs))})
    given = list(argv if argv is not None else sys.argv[1:])
    if "--note" in given:  # the note is in the section already
        i = given.index("--note")
        del given[i:i + 2]
    invocation = shlex.join(["python", "bench/main_job.py", *given])
    write_section(section_text(runs, invocation, result, args.note), quick=args.quick)
    print(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
