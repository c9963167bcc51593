"""What every bench shares: the docs/benchmarks.md section writer, the RESULT line, and running
a chain config once per seed (bench/main_job.py, bench/tool_task.py).

A bench's full run rewrites its own ``## `` section of docs/benchmarks.md and nothing else; a
``--quick`` run (the same comparison, small) prints and never touches the docs, so a smoke run
cannot replace measured tables with small-run numbers.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Mapping

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "benchmarks.md"


def replace_section(old: str, text: str) -> str:
    """``old`` with the section that ``text`` is (its first line is the ``## `` header)
    replaced, or appended; other sections untouched."""
    header = text.splitlines()[0].rstrip()
    if not header.startswith("## "):
        raise ValueError(f"a section starts with its '## ' header, got {header!r}")
    lines = old.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if line.rstrip() == header), None)
    body = text.rstrip("\n") + "\n"
    if start is None:
        return old.rstrip("\n") + "\n\n" + body
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    return "".join(lines[:start]) + body + ("\n" if end < len(lines) else "") + "".join(lines[end:])


def write_section(text: str, *, quick: bool, no_docs: bool = False, doc: Path = DOCS) -> bool:
    """Rewrite this bench's section of ``doc``, unless the run is ``--quick`` or ``--no-docs``.
    Returns whether the file was written."""
    if quick or no_docs:
        print(f"(docs not written: {'--quick run' if quick else '--no-docs'})")
        return False
    old = doc.read_text() if doc.exists() else "# Benchmarks\n"
    doc.parent.mkdir(parents=True, exist_ok=True)
    doc.write_text(replace_section(old, text))
    return True


def result_line(figures: Mapping[str, Any]) -> str:
    """``RESULT key=value ...``: the headline figures, the last line of every bench."""
    def fmt(v: Any) -> str:
        return f"{v:.4g}" if isinstance(v, float) else str(v)

    for key in figures:
        if not key or any(c.isspace() or c == "=" for c in key):
            raise ValueError(f"bad RESULT key {key!r}")
    return "RESULT " + " ".join(f"{k}={fmt(v)}" for k, v in figures.items())


def loadavg() -> str:
    """The machine's 1, 5 and 15 minute load averages, as /proc/loadavg gives them."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def rate_se(pct: float, n: int) -> float:
    """Standard error (in points) of a success rate of ``pct`` % over ``n`` episodes."""
    p = pct / 100
    return 100 * math.sqrt(max(p * (1 - p), 0.0) / max(n, 1))


def run_logged(cmd: list[str], log: Path, what: str) -> float:
    """Run ``cmd`` from the repository root (Ray usage stats off, Hugging Face offline), its
    output to ``log``; the wall seconds. A non-zero exit raises with the log's last 30 lines."""
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled", "HF_HUB_OFFLINE": "1"}
    t0 = time.perf_counter()
    with open(log, "w") as f:
        rc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT).returncode
    wall = time.perf_counter() - t0
    if rc != 0:
        tail = log.read_text(errors="replace").splitlines()[-30:]
        raise RuntimeError(f"{what} failed (exit {rc}, log {log}):\n" + "\n".join(tail))
    return wall


def run_chain_seed(config: str, seed: int, out: Path, extra: list[str], reuse: bool,
                   measure: Callable[[Path, dict[str, Any]], dict[str, Any]]) -> dict[str, Any]:
    """One fresh `roll run` of a chain config for ``seed`` in ``out``, timed from start to exit:
    its summary.json, wall, the load average before and after, and ``measure(out, summary)``.
    The record is written to ``seed-N.json`` next to ``out``; with ``reuse`` a seed whose run
    finished before is read back instead of run again (seeds run by separate invocations can
    be reported together)."""
    record = out.parent / f"{out.name}.json"
    if reuse and record.exists() and (out / "summary.json").exists():
        print(f"seed {seed}: reusing the run recorded in {record}", flush=True)
        return json.loads(record.read_text())
    record.unlink(missing_ok=True)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    cmd = [sys.executable, "-m", "roll.cli", "run", config, f"seed={seed}", f"output_dir={out}", *extra]
    load_before = loadavg()
    print(f"$ {shlex.join(['roll', *cmd[3:]])}   (load average {load_before})", flush=True)
    wall = run_logged(cmd, out.parent / f"{out.name}.log", f"seed {seed}: roll run")
    summary = json.loads((out / "summary.json").read_text())
    result = {"seed": seed, "wall_s": wall, "load_before": load_before, "load_after": loadavg(), "summary": summary,
              **measure(out, summary)}
    record.write_text(json.dumps(result, indent=1))
    return result


def chain_figures(summary: dict[str, Any], tag: str) -> dict[str, Any]:
    """Untrained, SFT start and RL end success (in %) of env ``tag`` per decoding mode, from a
    chain's summary: the untrained point is the one without a step, the start and end are the
    grpo stage's first and last validation rounds; gain = end - start, ``gain`` the smaller."""
    pts = summary["points"]
    base = next(p for p in pts if p["step"] is None)
    rl = [p for p in pts if p["stage"] == "grpo"]
    if len(rl) != 2:
        raise ValueError(f"expected the grpo stage's first and last validation rounds, got {[p['label'] for p in rl]}")
    out: dict[str, Any] = {"episodes": rl[0]["episodes"], "base_episodes": base["episodes"], "end_step": rl[1]["step"]}
    for mode in ("greedy", "sampled"):
        out[f"untrained_{mode}"] = 100 * base["success"][tag][mode]
        out[f"start_{mode}"] = 100 * rl[0]["success"][tag][mode]
        out[f"end_{mode}"] = 100 * rl[1]["success"][tag][mode]
        out[f"gain_{mode}"] = out[f"end_{mode}"] - out[f"start_{mode}"]
    out["gain"] = min(out["gain_greedy"], out["gain_sampled"])
    return out


def chain_arg_parser(description: str, out: str, seeds: list[int]) -> argparse.ArgumentParser:
    """The options of a bench that runs a chain once per seed (see :func:`run_chain_seeds`)."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--quick", action="store_true", help="one seed, tiny stages; prints, never writes docs")
    p.add_argument("--seeds", type=int, nargs="+", default=None,
                   help=f"default: {' '.join(map(str, seeds))} (--quick: {seeds[0]})")
    p.add_argument("--out", default=out)
    p.add_argument("--reuse", action="store_true", help="read back seeds whose run finished before (see run_chain_seed)")
    p.add_argument("--note", default="", help="a sentence for the docs section (e.g. which runs overlapped)")
    p.set_defaults(default_seeds=seeds)
    return p


def run_chain_seeds(config: str, args: argparse.Namespace, quick_overrides: list[str],
                    measure: Callable[[Path, dict[str, Any]], dict[str, Any]]) -> list[dict[str, Any]]:
    """:func:`run_chain_seed` for every seed of a :func:`chain_arg_parser` invocation, each
    seed's figures printed as it ends; every record is also written to ``results.json``."""
    seeds = args.seeds or (args.default_seeds[:1] if args.quick else args.default_seeds)
    out_root = (ROOT / args.out / ("quick" if args.quick else "full")).resolve()
    runs = []
    for seed in seeds:
        r = run_chain_seed(config, seed, out_root / f"seed-{seed}", quick_overrides if args.quick else [], args.reuse,
                           measure)
        runs.append(r)
        print(f"seed {seed}: untrained {r['untrained_greedy']:.1f} / {r['untrained_sampled']:.1f}, "
              f"SFT {r['start_greedy']:.1f} / {r['start_sampled']:.1f}, RL {r['end_greedy']:.1f} / {r['end_sampled']:.1f} "
              f"(greedy / sampled %; gain {r['gain_greedy']:+.1f} / {r['gain_sampled']:+.1f}), wall {r['wall_s']:.0f} s, "
              f"load {r['load_before']} -> {r['load_after']}", flush=True)
    (out_root / "results.json").write_text(json.dumps(runs, indent=1))
    return runs


def chain_cells(r: dict[str, Any], n: int) -> list[str]:
    """A seed's untrained, SFT start and RL end table cells: greedy / sampled % ± standard error
    (the untrained rate over ``base_episodes``, the others over ``n``)."""
    cells = []
    for key in ("untrained", "start", "end"):
        nn = r["base_episodes"] if key == "untrained" else n
        cells.append(" / ".join(f"{r[f'{key}_{m}']:.1f} ± {rate_se(r[f'{key}_{m}'], nn):.1f}" for m in ("greedy", "sampled")))
    return cells


def pad_rows(rows: list[tuple[list[int], list[int]]], pad: int) -> tuple[Any, Any, Any]:
    """Right-padded tensors of tokenized conversations ``(ids, loss_mask)``: input ids, the loss
    mask (bool) and the attention mask. For the plain-PyTorch SFT probes."""
    import torch

    n = max(len(x) for x, _ in rows)
    ids = torch.full((len(rows), n), pad)
    mask = torch.zeros((len(rows), n), dtype=torch.bool)
    att = torch.zeros((len(rows), n), dtype=torch.long)
    for i, (x, m) in enumerate(rows):
        ids[i, :len(x)], mask[i, :len(m)], att[i, :len(x)] = torch.tensor(x), torch.tensor(m, dtype=torch.bool), 1
    return ids, mask, att


def response_loss(model: Any, ids: Any, mask: Any, att: Any) -> Any:
    """Next-token cross-entropy over the loss-mask tokens; the LM head runs only there (the same
    loss as over every column, a fraction of the time)."""
    import torch

    hidden = model.model(input_ids=ids, attention_mask=att).last_hidden_state[:, :-1]
    sel = mask[:, 1:]
    return torch.nn.functional.cross_entropy(model.lm_head(hidden[sel]), ids[:, 1:][sel])
