"""Actor train step: sequence packing against padding on multi-turn batches, and the LM head
over every column against the head on the scored columns of micro-batches cut to their rows.

    python bench/train_step.py            # packing on tiny and small, 192 rows; head on tiny and small
    python bench/train_step.py --quick    # tiny model only, 64 rows (prints, never writes docs)

**Packing.** A multi-turn (trajectory-mode) batch: a prompt of 40-60 tokens, then 1-12 turns
(geometric, mean about 3) of a 4-24 token response and a 16-40 token observation: a long tail
of lengths, right-padded to the longest row as ``trajectories_to_batch`` builds it. The same
rows go through ``train_step`` (PPO-clip) and the forward-only logprob pass padded
(micro-batches of 8 rows, the whole batch's width) and packed
(``training_args.max_tokens_per_micro_batch``), alternating in one process, best of N; tokens/s
counts real tokens. Peak RSS per role: each (mode, role) once more alone in a fresh process
(``actor_train`` runs train_step, ``reference`` runs logprobs). The packed logprobs are checked against the padded ones on loss
tokens (largest difference reported).

**LM head.** Step-mode batches (grid: prompts of 44-48 tokens, responses of 4-8; webshop:
prompts of 60-260, responses of 8-21), train_step with the head over all columns at the
batch's width with its mask (``full``), from the column before the first response token
(``keep``) and on the scored columns of length-sorted micro-batches cut to their longest row and
run without a mask (``scored``, the default), alternating in one process, best of N.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from common import result_line, write_section

ROOT = Path(__file__).resolve().parents[1]
SECTION = "## Train step"
MICRO_ROWS = 8


def multi_turn_batch(rows: int, seed: int = 0):
    """Trajectory-mode rows with a long tail of lengths (see the module docstring)."""
    from roll.data.batch import Batch
    from roll.data.packing import pad_sequences

    g = torch.Generator().manual_seed(seed)

    def randint(lo: int, hi: int) -> int:
        return int(torch.randint(lo, hi + 1, (1,), generator=g))

    ids, masks = [], []
    for _ in range(rows):
        turns = 1
        while turns < 12 and torch.rand(1, generator=g).item() < 0.65:
            turns += 1
        parts, loss = [randint(40, 60)], [0]
        for _ in range(turns):
            parts += [randint(4, 24), randint(16, 40)]
            loss += [1, 0]
        n = sum(parts)
        ids.append(torch.randint(3, 3000, (n,), generator=g))
        masks.append(torch.cat([torch.full((k,), m) for k, m in zip(parts, loss)]))
    input_ids, attn = pad_sequences(ids)
    resp, _ = pad_sequences(masks)
    width = input_ids.shape[1]
    adv = torch.randn(rows, 1, generator=g).expand(rows, width) * resp
    return Batch({"input_ids": input_ids, "attention_mask": attn, "response_mask": resp, "advantages": adv.contiguous(),
                  "old_logprobs": torch.zeros(rows, width)})


def _strategy(size: str, budget: int, micro: int):
    import roll.strategies.torch_train as tt
    from roll.config.roles import StrategyArgs, TrainingArgs, WorkerConfig
    from roll.models.tiny import tiny_model_path

    cfg = WorkerConfig(model_name_or_path=tiny_model_path(size), strategy_args=StrategyArgs("torch_train", {}),
                       training_args=TrainingArgs(lr=1e-6, per_device_train_batch_size=micro,
                                                  max_tokens_per_micro_batch=budget), infer_batch_size=micro)
    s = tt.TorchTrainStrategy(cfg, num_training_steps=1000)
    s.setup()
    return s


def child(spec: dict) -> dict:
    """One (mode, role) alone in this process: its peak RSS."""
    import torch.distributed as dist

    from roll.algorithms.losses import make_actor_loss_fn
    from roll.config.algorithm import AlgorithmConfig
    from roll.strategies.torch_train import init_process_group
    from roll.workers.base import free_port

    init_process_group(0, 1, "127.0.0.1", free_port(), timeout_s=120)
    try:
        batch = multi_turn_batch(spec["rows"])
        s = _strategy(spec["size"], spec["budget"] if spec["mode"] == "packed" else 0, MICRO_ROWS)
        mask = batch["response_mask"].bool()
        lp = s.logprobs(batch)[mask]  # before any update: the same weights in every process
        loss_fn = make_actor_loss_fn(AlgorithmConfig(policy_loss="ppo_clip"))
        run = (lambda: s.train_step(batch, loss_fn)) if spec["role"] == "actor_train" else (lambda: s.logprobs(batch))
        run()  # warm-up
        best = float("inf")
        for _ in range(spec["repeats"]):
            t0 = time.perf_counter()
            run()
            best = min(best, time.perf_counter() - t0)
        torch.save(lp, spec["logprobs_out"])
    finally:
        dist.destroy_process_group()
    return {"seconds": best, "tokens": int(batch["attention_mask"].sum()),
            "peak_rss_mb": _peak_rss_mb()}


def _peak_rss_mb() -> float:
    """This process's peak RSS. VmHWM, not getrusage: ru_maxrss survives exec, so a child would
    report at least the parent's peak."""
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def bench_packing(size: str, rows: int, budget: int, repeats: int, tmp: Path) -> dict:
    batch = multi_turn_batch(rows)
    lengths = batch["attention_mask"].sum(-1)
    out = {"size": size, "rows": rows, "width": batch["input_ids"].shape[1], "budget": budget,
           "tokens": int(lengths.sum()), "median_len": int(lengths.median()), "max_len": int(lengths.max())}
    lps = {}
    from roll.algorithms.losses import make_actor_loss_fn
    from roll.config.algorithm import AlgorithmConfig

    # timing: both modes in this process, alternating, so a load spike from elsewhere hits both
    strategies = {"padded": _strategy(size, 0, MICRO_ROWS), "packed": _strategy(size, budget, MICRO_ROWS)}
    loss_fn = make_actor_loss_fn(AlgorithmConfig(policy_loss="ppo_clip"))
    roles = {"actor_train": lambda s: s.train_step(batch, loss_fn), "reference": lambda s: s.logprobs(batch)}
    for role, run in roles.items():
        best = {mode: float("inf") for mode in strategies}
        for i in range(repeats + 1):  # the first round warms up
            for mode, s in strategies.items():
                t0 = time.perf_counter()
                run(s)
                if i:
                    best[mode] = min(best[mode], time.perf_counter() - t0)
        for mode in strategies:
            out[f"{role}_{mode}_s"] = best[mode]
        out[f"{role}_speedup"] = best["padded"] / best["packed"]
    del strategies
    for role in roles:  # peak RSS: each (mode, role) alone in a fresh process
        for mode in ("padded", "packed"):
            spec = {"size": size, "rows": rows, "budget": budget, "repeats": 1, "mode": mode, "role": role,
                    "logprobs_out": str(tmp / f"{mode}.pt")}
            proc = subprocess.run([sys.executable, __file__, "--child", json.dumps(spec)], capture_output=True, text=True,
                                  env=dict(os.environ, PYTHONPATH=str(ROOT)))
            if proc.returncode != 0:
                raise RuntimeError(f"{mode} {role} failed:\n{proc.stderr[-3000:]}")
            r = json.loads(proc.stdout.strip().splitlines()[-1])
            out[f"{role}_{mode}_rss_mb"] = r["peak_rss_mb"]
            lps[mode] = torch.load(spec["logprobs_out"], weights_only=True)
    out["logprob_diff"] = float((lps["padded"] - lps["packed"]).abs().max())
    return out


def step_mode_batch(rows: int, seed: int = 0, prompt_range: tuple[int, int] = (44, 49), resp_range: tuple[int, int] = (4, 9)):
    """Step-mode rows: a prompt of ``prompt_range`` tokens, then a response of ``resp_range``,
    right-padded."""
    from roll.data.batch import Batch

    g = torch.Generator().manual_seed(seed)
    prompt = torch.randint(*prompt_range, (rows,), generator=g)
    resp = torch.randint(*resp_range, (rows,), generator=g)
    width = int((prompt + resp).max())
    ids = torch.zeros(rows, width, dtype=torch.long)
    attn = torch.zeros_like(ids)
    mask = torch.zeros_like(ids)
    for i in range(rows):
        p, r = int(prompt[i]), int(resp[i])
        ids[i, : p + r] = torch.randint(3, 3000, (p + r,), generator=g)
        attn[i, : p + r] = 1
        mask[i, p: p + r] = 1
    adv = torch.randn(rows, 1, generator=g).expand(rows, width) * mask
    return Batch({"input_ids": ids, "attention_mask": attn, "response_mask": mask, "advantages": adv.contiguous(),
                  "old_logprobs": torch.zeros(rows, width)})


HEAD_BATCHES = {
    # Sokoban / FrozenLake turns: prompts of one length, short answers
    "grid": dict(prompt_range=(44, 49), resp_range=(4, 9)),
    # WebShop turns (search, results and item pages): prompts of 60-260 tokens, answers of 8-21
    "webshop": dict(prompt_range=(60, 261), resp_range=(8, 22)),
}
HEAD_MODES = ("full", "keep", "scored")


def bench_head(size: str, kind: str, rows: int, micro: int, repeats: int) -> dict:
    """train_step under three forwards of the same rows: ``full`` (LM head over every column,
    the batch's width and attention mask, micro-batches in row order), ``keep`` (the head from
    the first response column on) and ``scored`` (the default: micro-batches of similar lengths,
    each cut to its longest row and run without a mask, the head on the scored columns only)."""
    import roll.strategies.hf_train as hf
    from roll.algorithms.losses import make_actor_loss_fn
    from roll.config.algorithm import AlgorithmConfig

    strategy = _strategy(size, 0, micro)
    batch = step_mode_batch(rows, **HEAD_BATCHES[kind])
    loss_fn = make_actor_loss_fn(AlgorithmConfig(policy_loss="ppo_clip"))
    real = {"logits_start": hf.logits_start, "output_head": hf.output_head, "right_padded_width": hf.right_padded_width}
    in_order = lambda self, b, n: [list(range(i, min(i + n, len(b)))) for i in range(0, len(b), n)]  # noqa: E731
    masked = {"output_head": lambda m: None, "right_padded_width": lambda m: None}
    modes = {"full": {**masked, "logits_start": lambda b: 0}, "keep": masked, "scored": {}}

    def use(name: str) -> None:
        for attr, fn in real.items():
            setattr(hf, attr, modes[name].get(attr, fn))
        strategy._plan = (lambda b, n: in_order(strategy, b, n)) if name != "scored" else type(strategy)._plan.__get__(strategy)

    mask = batch["response_mask"].bool()
    lps = {}
    best = {name: float("inf") for name in modes}
    try:
        for name in modes:  # before any update: the same weights for each
            use(name)
            lps[name] = strategy.logprobs(batch)[mask]
        for name in modes:  # warm-up
            use(name)
            strategy.train_step(batch, loss_fn)
        for _ in range(repeats):
            for name in modes:
                use(name)
                t0 = time.perf_counter()
                strategy.train_step(batch, loss_fn)
                best[name] = min(best[name], time.perf_counter() - t0)
    finally:
        for attr, fn in real.items():
            setattr(hf, attr, fn)
    width = batch["input_ids"].shape[1]
    return {"size": size, "kind": kind, "rows": rows, "width": width, "micro": micro,
            "head_cols": width - real["logits_start"](batch), "scored_tokens": int(mask.sum()),
            **{f"{m}_s": best[m] for m in modes},
            "speedup": best["full"] / best["scored"], "keep_speedup": best["full"] / best["keep"],
            "logprob_diff": max(float((lps["full"] - lps[m]).abs().max()) for m in modes)}


def write_docs(packing: list[dict], head: list[dict], args: argparse.Namespace, wall: float) -> None:
    cmd = "python bench/train_step.py" + (" --quick" if args.quick else "")
    lines = [SECTION, "",
             f"`{cmd}` ({os.cpu_count()} CPUs, load average {args.load_avg:.1f} at the start, {wall:.0f} s). "
             "TorchTrainStrategy, DDP on a one-rank gloo group, PPO-clip loss, float32.", "",
             "### Sequence packing", "",
             "Multi-turn batches: a 40-60 token prompt, then 1-12 turns (geometric, mean about 3) of a 4-24 token "
             "response and a 16-40 token observation, right-padded to the longest row. `padded`: micro-batches of "
             f"{MICRO_ROWS} rows at the batch's width; `packed`: `max_tokens_per_micro_batch` (budget) real tokens per "
             "micro-batch, one packed row each, attention confined to each sequence. Tokens/s counts real tokens; "
             "best of N, alternating in one process; peak RSS: each (mode, role) alone in a fresh process (model, optimizer and "
             "activations; the Python + torch baseline is about 0.4 GB).", "",
             "| model | rows (tokens) | length median / max | budget | role | padded tok/s | packed tok/s | speedup "
             "| peak RSS padded / packed (MB) |", "|---|---|---|---|---|---|---|---|---|"]
    for r in packing:
        for role in ("actor_train", "reference"):
            lines.append(f"| {r['size']} | {r['rows']} ({r['tokens']}) | {r['median_len']} / {r['max_len']} | {r['budget']} "
                         f"| {role} | {r['tokens'] / r[f'{role}_padded_s']:.0f} | {r['tokens'] / r[f'{role}_packed_s']:.0f} "
                         f"| {r[f'{role}_speedup']:.2f}x | {r[f'{role}_padded_rss_mb']:.0f} / {r[f'{role}_packed_rss_mb']:.0f} |")
    lines += ["", "Packed and padded logprobs on loss tokens differ by at most "
              f"{max(r['logprob_diff'] for r in packing):.1e} (summation order); tests/strategies/test_packed_training.py "
              "holds losses, gradients and updated parameters equal. The gain is the padding the padded path computes: "
              "with a long tail most rows are far shorter than the batch's width. Attention inside a packed row is a "
              "block-diagonal mask on CPU sdpa (it costs budget x budget per micro-batch), so the budget is set near "
              "the longest row.", "",
              "### LM head on scored columns, micro-batches cut to their rows", "",
              "Step-mode batches, right-padded: `grid` (prompts of 44-48 tokens, responses of 4-8, as Sokoban and "
              "FrozenLake turns) and `webshop` (prompts of 60-260 tokens, responses of 8-21, as WebShop's search, "
              "results and item pages). One train_step of the same rows three ways: `full`: the LM head over "
              "every column, every micro-batch at the batch's width with its attention mask, rows in order; "
              "`keep`: the head from the column before the first response token (`logits_to_keep`); `scored` (the "
              "default): rows in order of length, each micro-batch cut to its longest row and run without a "
              "mask (right padding needs none under causal attention, and sdpa then runs its causal kernel), the "
              "head on the hidden states that predict a response token only. Best of N, alternating in one process.", "",
              "| model | batch | rows x columns | micro-batch | scored tokens | full (s) | keep (s) | scored (s) | "
              "speedup (full / scored) | max logprob diff |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for r in head:
        lines.append(f"| {r['size']} | {r['kind']} | {r['rows']} x {r['width']} | {r['micro']} | {r['scored_tokens']} | "
                     f"{r['full_s']:.3f} | {r['keep_s']:.3f} | {r['scored_s']:.3f} | {r['speedup']:.2f}x | "
                     f"{r['logprob_diff']:.1e} |")
    lines += ["", "The head's share is large where the vocabulary (3072) is large next to the width (128 for tiny) "
              "and small where the transformer body dominates (small: width 384, 6 layers); cutting and the causal "
              "kernel matter where prompt lengths spread (webshop).", ""]
    write_section("\n".join(lines), quick=args.quick, no_docs=args.no_docs)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="tiny model, 64 rows, 2 repeats")
    p.add_argument("--no-docs", action="store_true", help="do not rewrite docs/benchmarks.md")
    p.add_argument("--budget", type=int, default=768, help="max_tokens_per_micro_batch of the packed runs")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return 0
    import tempfile

    import torch.distributed as dist

    from roll.strategies.torch_train import init_process_group
    from roll.workers.base import free_port

    args.load_avg = os.getloadavg()[0]
    t0 = time.perf_counter()
    sizes = ["tiny"] if args.quick else ["tiny", "small"]
    init_process_group(0, 1, "127.0.0.1", free_port(), timeout_s=120)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            packing = [bench_packing(s, 64 if args.quick else 192, args.budget, 2 if args.quick else 3, Path(tmp))
                       for s in sizes]
        head = [bench_head(s, kind, *((128, 64) if kind == "grid" else (64, 16)) if args.quick else
                           ((448, 64) if kind == "grid" else (128, 16)), 3 if args.quick else 5)
                for s in sizes for kind in HEAD_BATCHES]
    finally:
        dist.destroy_process_group()
    wall = time.perf_counter() - t0
    for r in packing:
        for role in ("actor_train", "reference"):
            print(f"packing {r['size']} {role}: {r['rows']} rows, {r['tokens']} tokens (median {r['median_len']}, max "
                  f"{r['max_len']}), padded {r[f'{role}_padded_s']:.3f} s, packed {r[f'{role}_packed_s']:.3f} s "
                  f"({r[f'{role}_speedup']:.2f}x), peak RSS {r[f'{role}_padded_rss_mb']:.0f} / {r[f'{role}_packed_rss_mb']:.0f} MB")
    for r in head:
        print(f"head {r['size']} {r['kind']}: {r['rows']}x{r['width']}, full {r['full_s']:.3f} s, keep {r['keep_s']:.3f} s, "
              f"scored {r['scored_s']:.3f} s ({r['speedup']:.2f}x), logprob diff {r['logprob_diff']:.1e}")
    write_docs(packing, head, args, wall)
    figures = {"packing_speedup": min(r["actor_train_speedup"] for r in packing),
               "packing_logprob_speedup": min(r["reference_speedup"] for r in packing),
               "packing_logprob_diff": max(r["logprob_diff"] for r in packing)}
    figures.update({f"{r['size']}_{r['kind']}_speedup": round(r["speedup"], 3) for r in head})
    figures.update(max_logprob_diff=max(r["logprob_diff"] for r in head), wall_s=round(wall))
    print(result_line(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
