"""A task that needs a tool, measured: `roll run configs/agentic/tool_arith_cpu.yaml` (a chain:
untrained baseline, noisy tool-using demonstrations, SFT, GRPO on roll/Arith-v0 with the
calculator) for one or more seeds, each a fresh `roll run` process timed from start to exit.

Reported per seed: held-out success (greedy and sampled, with the standard error) of the
untrained model, of the SFT model (the GRPO stage's step-0 validation) and after GRPO; the gain
is RL end minus SFT start, per decoding mode; how often the final policy calls the calculator;
wall time per stage and in all; the machine's load average before and after. Writes the
``## Tool task`` section of docs/benchmarks.md and ends with ``RESULT tool_gain_pp=...
tool_untrained=... tool_sft=... tool_final=...`` (the gain is the smallest over seeds and
decoding modes; the success figures are greedy, averaged over seeds).

    python bench/tool_task.py              # seeds 42 and 43, one after another
    python bench/tool_task.py --quick      # one seed, every stage tiny; prints, never writes docs
    python bench/tool_task.py --probe --probe-steps 1000   # the copy probe below; prints only

``--probe`` trains the model in plain PyTorch on the chain's demonstrations (the token ids the
SFT stage trains on: the tool schemas, the call, the tool's result, the answer; ``--probe-max-digits``
and ``--probe-forms`` change the env's problems) and prints, every ``--probe-every`` steps, how
well it copies on 64 held-out problems, with the correct prefix given (teacher forcing: the
greedy choice at each place): the call's digits exactly, the answer's digits exactly, the share
of the call's digits right, and the probability of starting the turn with a call.
``--probe-short-steps N`` trains the first N steps on the same conversations without the
calculator's schema (the chain's ``sft_short`` stage) and scores both renderings.
"""
from __future__ import annotations

import json
import math
import shlex
import sys
from pathlib import Path
from typing import Any, Optional

import yaml
from common import (chain_arg_parser, chain_cells, chain_figures, pad_rows, response_loss, result_line,
                    run_chain_seeds, write_section)

ROOT = Path(__file__).resolve().parent.parent
CONFIG = "configs/agentic/tool_arith_cpu.yaml"
TAG = "Arith"
SECTION = "## Tool task"
STAGES = ("baseline", "demos_clean", "sft_short", "demos", "sft", "grpo")
QUICK = ["stages.baseline.overrides.val_batch_size=8", "stages.demos.demos.episodes=16",
         "stages.demos_clean.demos.episodes=16",
         "stages.sft_short.overrides.max_steps=2", "stages.sft_short.overrides.save_steps=0",
         "stages.sft.overrides.max_steps=2", "stages.sft.overrides.save_steps=0",
         "stages.grpo.overrides.max_steps=1", "stages.grpo.overrides.eval_steps=1",
         "stages.grpo.overrides.save_steps=0", "stages.grpo.overrides.val_batch_size=8",
         "stages.grpo.overrides.rollout_batch_size=8", "stages.grpo.overrides.train_env_manager.group_size=4",
         "stages.grpo.overrides.actor_train.training_args.per_device_train_batch_size=8",
         "stages.grpo.overrides.actor_infer.generating_args.max_new_tokens=16"]
"""--quick: the same chain, every stage as small as it goes (the model does not learn)."""


def measure(out: Path, summary: dict[str, Any]) -> dict[str, Any]:
    """A seed's figures, the demonstrations' success and the grpo stage's validation rounds."""
    demos = json.loads((out / "demos" / "demos_stats.json").read_text())
    return {"demo_success": 100 * demos[TAG]["success_rate"], **chain_figures(summary, TAG), **val_rounds(out)}


def val_rounds(out: Path) -> dict[str, Any]:
    """Every validation round of the grpo stage: success per decoding mode and the mean number
    of calculator calls per episode (how the policy uses the tool)."""
    rounds = []
    for line in (out / "grpo" / "logs" / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        r = {"step": int(row["step"])}
        for mode, prefix in (("greedy", "val_greedy"), ("sampled", "val")):
            r[mode] = row.get(f"{prefix}/env/{TAG}/success")
            r[f"calls_{mode}"] = row.get(f"{prefix}/env/{TAG}/tool/calls")
        if r["greedy"] is not None and r["sampled"] is not None:
            rounds.append(r)
    return {"rounds": rounds}


FORM_TEXT = {"mul": "a 3-digit by 2-digit product", "mul_add": "such a product plus a 4-digit number",
             "sum3": "a sum of three 3-4 digit numbers", "sum4": "a sum of four 3-4 digit numbers"}


def task_text(grpo: dict[str, Any]) -> str:
    """The chain's problems in words, from the env's settings in the config."""
    kwargs = grpo["custom_envs"][TAG]["env_kwargs"].get("env_kwargs") or {}
    forms = kwargs.get("forms") or list(FORM_TEXT)
    text = ", or ".join(FORM_TEXT[f] for f in forms)
    digits = kwargs.get("max_digits")
    return f"{text}, every operand cut to at most {digits} digits" if digits else text


def fmt_calls(v: Optional[float]) -> str:
    return "-" if v is None else f"{v:.2f}"


def setting(overrides: dict[str, Any], dotted: str) -> Any:
    """A stage's setting, given either as a dotted override key or nested."""
    if dotted in overrides:
        return overrides[dotted]
    node: Any = overrides
    for part in dotted.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def schedule(overrides: dict[str, Any]) -> str:
    kind = setting(overrides, "actor_train.training_args.lr_scheduler_type") or "constant"
    return "" if kind == "constant" else f" decayed to 0 over the stage ({kind})"


def kl_bound(overrides: dict[str, Any]) -> str:
    kl = setting(overrides, "algorithm.early_stop_kl")
    return f", a batch's optimizer steps stopped once the policy moved by a KL of {kl:g}" if kl else ""


def section_text(runs: list[dict[str, Any]], invocation: str, result: str, note: str = "") -> str:
    n = runs[0]["episodes"]
    with open(ROOT / CONFIG) as f:
        chain = yaml.safe_load(f)["stages"]
    grpo, demos = chain["grpo"]["overrides"], chain["demos"]["demos"]
    short, sft = chain["sft_short"]["overrides"], {**chain["sft_short"]["overrides"], **chain["sft"]["overrides"]}
    model = grpo["pretrain"].split("//")[-1]
    lines = [SECTION, "",
             f"`{invocation}`: `roll run {CONFIG}` once per seed (`seed=S`), each a fresh process on the",
             "2-core CPU (load average before and after in the table: with a load of L on 2 cores a run gets",
             f"about 2/L of the CPU). The task: roll/Arith-v0 ({task_text(grpo)}; reward 1 for the exact whole",
             f"number) with the calculator through roll/Tools-v0; the {model} model. The chain: `baseline` (the untrained",
             f"model), `demos_clean` ({chain['demos_clean']['demos']['episodes']} expert episodes: call the calculator",
             f"with the problem's expression, then answer its result), `demos` ({demos['episodes']} more with a share",
             f"{demos['epsilon']} of the problems answered from the head instead, one digit off, with no cue for which),",
             f"`sft_short` ({short['max_steps']} steps of {short['rollout_batch_size']} clean conversations without",
             "the calculator's schema in the system block), "
             f"`sft` ({sft['max_steps']} steps of {sft['rollout_batch_size']} noisy conversations with it, at lr "
             f"{setting(sft, 'actor_train.training_args.lr'):g}{schedule(sft)}), `grpo` "
             f"({grpo['max_steps']} steps of {grpo['rollout_batch_size']} episodes, groups of "
             f"{grpo['train_env_manager']['group_size']}, lr {setting(grpo, 'actor_train.training_args.lr'):g}"
             f"{schedule(grpo)}{kl_bound(grpo)}).",
             f"Held-out success on {n} problems never trained on (env seeds seed+100000 on), greedy and",
             f"sampled at temperature 1.0; ± is the standard error of one rate over {n} episodes (at most",
             f"{50 / math.sqrt(n):.1f} points). Gain = RL end - SFT start (the grpo stage's step-0 validation),",
             "per decoding mode. Calls = calculator calls per held-out episode (greedy). Wall = the whole",
             "`roll run` process.",
             *([note] if note else []), "",
             "| seed | untrained greedy / sampled | SFT start greedy / sampled | RL end greedy / sampled | "
             "gain greedy / sampled (pp) | calls SFT -> RL | demo success | wall (s): " + ", ".join(STAGES) + "; total "
             "| load before / after |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in runs:
        st = r["summary"]["stages"]
        walls = ", ".join(f"{st[k]['wall_s']:.0f}" for k in STAGES)
        cells = chain_cells(r, n)
        rounds = r["rounds"]
        calls = f"{fmt_calls(rounds[0]['calls_greedy'])} -> {fmt_calls(rounds[-1]['calls_greedy'])}" if rounds else "-"
        lines.append(f"| {r['seed']} | {cells[0]} | {cells[1]} | {cells[2]} | {r['gain_greedy']:+.1f} / "
                     f"{r['gain_sampled']:+.1f} | {calls} | {r['demo_success']:.0f} % | {walls}; {r['wall_s']:.0f} | "
                     f"{r['load_before']} / {r['load_after']} |")
    lines += ["", "Validation rounds of the grpo stage (step: greedy / sampled, %):", ""]
    for r in runs:
        lines.append(f"- seed {r['seed']}: " + ", ".join(
            f"{x['step']}: {100 * x['greedy']:.0f} / {100 * x['sampled']:.0f}" for x in r["rounds"]))
    lines += ["", "```", result, "```", ""]
    return "\n".join(lines)


def probe(args: Any) -> int:
    """The copy probe (module docstring); plain PyTorch on the chain's demonstration tokens."""
    import tempfile
    import time

    import numpy as np
    import torch
    from roll.data.chat import tokenize_conversation
    from roll.pipelines.sft_data import generate
    from roll.workers.base import resolve_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(args.probe_seed)
    with open(ROOT / CONFIG) as f:
        cfg = yaml.safe_load(f)["stages"]["baseline"]["overrides"]  # the env and rendering the grpo stage shares
    env_kwargs = dict(cfg["custom_envs"][TAG]["env_kwargs"].get("env_kwargs") or {})
    if args.probe_forms:
        env_kwargs["forms"] = args.probe_forms
    if args.probe_max_digits is not None:
        env_kwargs["max_digits"] = args.probe_max_digits or None
    cfg["custom_envs"][TAG]["env_kwargs"]["env_kwargs"] = env_kwargs
    model_path = args.probe_model or resolve_model(f"roll-tiny://{args.probe_size}")
    tok = AutoTokenizer.from_pretrained(model_path)
    with tempfile.TemporaryDirectory() as tmp:
        cfg["output_dir"] = tmp
        (Path(tmp) / "c.yaml").write_text(yaml.safe_dump(cfg))
        rows = {}
        for split, n, eps, seed in (("train", args.probe_rows, args.probe_epsilon, 0), ("val", 64, 0.0, 7)):
            generate(str(Path(tmp) / "c.yaml"), f"{tmp}/{split}.jsonl", n, eps, seed=seed)
            recs = [json.loads(line) for line in Path(f"{tmp}/{split}.jsonl").read_text().splitlines()]
            rows[split] = [tokenize_conversation(tok, r["messages"], tools=r.get("tools")) for r in recs]
            # the same conversations without the calculator's schema (the chain's sft_short stage);
            # the held-out ones are always scored, the training ones only trained on with --probe-short-steps
            if split == "val" or args.probe_short_steps:
                rows[f"{split}_short"] = [tokenize_conversation(tok, r["messages"]) for r in recs]
    digits = {tok.convert_tokens_to_ids(str(d)) for d in range(10)}
    pad = tok.pad_token_id
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    opt = torch.optim.AdamW(model.parameters(), lr=args.probe_lr, weight_decay=0.0)
    print(f"probe: {args.probe_size} model, env {env_kwargs}, {len(rows['train'])} rows (epsilon {args.probe_epsilon}), "
          f"about {np.mean([len(x) for x, _ in rows['train']]):.0f} tokens each; lr {args.probe_lr:g}, "
          f"batch {args.probe_batch}", flush=True)

    def score(x: list[int], m: list[int], logits: Any) -> tuple[int, int, int, int, float]:
        """One held-out row: call digits all right, answer digits all right, call digits right,
        call digits, P(the turn starts with the call)."""
        pred = logits.argmax(-1).tolist()
        starts = [t for t in range(1, len(m)) if m[t] and not m[t - 1]]
        ends = [t for t in range(1, len(m) + 1) if m[t - 1] and (t == len(m) or not m[t])]
        (s1, e1), (s2, e2) = (starts[0], ends[0]), (starts[-1], ends[-1])
        hits = [pred[t - 1] == x[t] for t in range(s1, e1) if x[t] in digits]
        answer = all(pred[t - 1] == x[t] for t in range(s2, e2) if x[t] in digits)
        return int(all(hits)), int(answer), sum(hits), len(hits), float(torch.softmax(logits[s1 - 1], -1)[x[s1]])

    @torch.no_grad()
    def evaluate(split: str = "val") -> str:
        model.eval()
        rows_scored = []
        for i in range(0, len(rows[split]), 16):
            chunk = rows[split][i:i + 16]
            ids, _, att = pad_rows(chunk, pad)
            rows_scored += [score(x, m, logits) for (x, m), logits in zip(chunk, model(input_ids=ids, attention_mask=att).logits)]
        model.train()
        call, answer, right, total, p_call = (sum(col) for col in zip(*rows_scored))
        n = len(rows_scored)
        return (f"call exact {100 * call / n:.0f}%, answer exact {100 * answer / n:.0f}%, "
                f"call digits {100 * right / max(total, 1):.0f}%, P(call) {p_call / n:.2f}")

    rng = np.random.default_rng(args.probe_seed)
    t0, losses = time.time(), []
    if args.probe_model or not args.probe_steps:  # where the model starts (a chain stage's model: how it copies)
        print(f"step 0: without the schema: {evaluate('val_short')}; with it: {evaluate()}", flush=True)
    for step in range(1, args.probe_steps + 1):
        split = "train_short" if step <= args.probe_short_steps else "train"
        loss = response_loss(model, *pad_rows([rows[split][i] for i in rng.integers(len(rows[split]), size=args.probe_batch)], pad))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        if step % args.probe_every == 0 or step == args.probe_steps:
            short = f"without the schema: {evaluate('val_short')}; with it: " if args.probe_short_steps else ""
            print(f"step {step} ({split}): loss {np.mean(losses[-args.probe_every:]):.3f}, {short}{evaluate()}, "
                  f"{time.time() - t0:.0f} s", flush=True)
    return 0


def main(argv: Optional[list[str]] = None) -> int:
    parser = chain_arg_parser(__doc__.split("\n\n")[0], "output/bench/tool_task", [42, 43])
    parser.add_argument("--probe", action="store_true", help="the copy probe (see above) instead of the chain")
    parser.add_argument("--probe-steps", type=int, default=600)
    parser.add_argument("--probe-model", default=None,
                        help="start from this model directory (e.g. a chain stage's final_model) instead of the "
                             "untrained one; scored before training (--probe-steps 0: scored only)")
    parser.add_argument("--probe-lr", type=float, default=3e-3)
    parser.add_argument("--probe-batch", type=int, default=8)
    parser.add_argument("--probe-size", default="tiny", help="roll-tiny:// size: tiny or small")
    parser.add_argument("--probe-forms", nargs="+", default=None, help="default: the chain's")
    parser.add_argument("--probe-max-digits", type=int, default=None, help="default: the chain's; 0: none")
    parser.add_argument("--probe-epsilon", type=float, default=0.0, help="share of head answers in the training rows")
    parser.add_argument("--probe-rows", type=int, default=1500)
    parser.add_argument("--probe-short-steps", type=int, default=0,
                        help="train the first N steps on the conversations without the calculator's schema")
    parser.add_argument("--probe-every", type=int, default=100)
    parser.add_argument("--probe-seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.probe:
        return probe(args)
    runs = run_chain_seeds(CONFIG, args, QUICK, measure)

    def mean(key: str) -> float:
        return round(sum(r[key] for r in runs) / len(runs), 1)

    result = result_line({"tool_gain_pp": round(min(r["gain"] for r in runs), 1),
                          "tool_untrained": mean("untrained_greedy"), "tool_sft": mean("start_greedy"),
                          "tool_final": mean("end_greedy")})
    given = list(argv if argv is not None else sys.argv[1:])
    if "--note" in given:  # the note is in the section already
        i = given.index("--note")
        del given[i:i + 2]
    if "--reuse" in given:  # the same runs, read back
        given.remove("--reuse")
    invocation = shlex.join(["python", "bench/tool_task.py", *given])
    text = section_text(runs, invocation, result, args.note)
    if args.quick:
        print(text)
    write_section(text, quick=args.quick)
    print(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
