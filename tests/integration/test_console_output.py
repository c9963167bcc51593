"""What `roll run` prints, as a person (or a CI log) sees it: by default one line per step, one
per validation round and the closing line, and nothing else (no warnings but the one that a run
learnt nothing or that its answers never finished, no Ray worker
prefixes, no progress bars off a terminal, no traceback); with --verbose also the full
metric dump. Worker output is kept in the run directory instead."""
from __future__ import annotations

import json
import re

import pytest

pytestmark = pytest.mark.integration

STEP = re.compile(r"^step [12]/2 \| SimpleSokoban success \S+ return \S+ invalid \S+ \| .* s/step")
STEP3 = re.compile(r"^step [123]/3 \| SimpleSokoban success \S+ return \S+ invalid \S+ \| .* s/step")
VAL = re.compile(r"^val  [02]/2 \| sampled: SimpleSokoban success \S+ return \S+ invalid \S+$")


def test_default_console_is_one_line_per_step(console_run):
    out, proc = console_run  # SMALL with eval_steps=2 (tests/integration/conftest.py)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text[-4000:]
    lines = [ln for ln in text.splitlines() if ln.strip()]
    steps = [ln for ln in lines if STEP.match(ln)]
    vals = [ln for ln in lines if VAL.match(ln)]
    assert [ln.split(" |")[0] for ln in steps] == ["step 1/2", "step 2/2"], text
    assert [ln.split(" |")[0] for ln in vals] == ["val  0/2", "val  2/2"], text
    assert "ETA" in steps[0] and "ETA" not in steps[1]
    last = [ln for ln in proc.stdout.splitlines() if ln.strip()][-1]  # (warnings go to stderr)
    assert last.startswith("done: 2 steps in ") and f"roll view {out}" in last
    # the random model's two steps may see no reward that differs within a group: then, and only
    # then, one warning says that nothing was learnt (pipelines/base.py LearningSignal)
    records = [json.loads(ln) for ln in (out / "logs" / "metrics.jsonl").read_text().splitlines()]
    adv = [(r["reward/advantages_min"], r["reward/advantages_max"]) for r in records if "reward/advantages_max" in r]
    assert len(adv) == 2
    # or, where it learnt and nine in ten of its responses were cut at max_new_tokens, that warning
    cut = [r["env/SimpleSokoban/cut_response_rate"] for r in records if "reward/advantages_max" in r]
    expected = ("no learning signal: every advantage of steps 1-2 was zero" if all(a == (0.0, 0.0) for a in adv)
                else "most responses never finished" if sum(cut) / len(cut) >= 0.9 else None)
    no_signal = [ln for ln in lines if expected and expected in ln]
    assert len(no_signal) == (1 if expected else 0), text
    # nothing else at all: the lines above are the whole output
    assert len(lines) == len(steps) + len(vals) + len(no_signal) + 1, text
    assert not re.search(r"warn", "\n".join(ln for ln in lines if ln not in no_signal), re.IGNORECASE), text
    assert "(pid=" not in text and "Traceback" not in text and "\r" not in text, text
    # the full metrics are in the files, the workers' output in the run directory
    assert "actor/ppo_kl" in (out / "logs" / "metrics.jsonl").read_text()
    assert (out / "logs" / "ray").is_symlink()
    copied = list((out / "logs" / "workers").glob("*/worker-*"))
    assert any(":actor_name:ActorWorker" in p.read_text() for p in copied)


def test_verbose_console_has_the_metric_dump(verbose_resumable_run):
    _, proc = verbose_resumable_run  # 3 steps, no validation, with --verbose (tests/integration/conftest.py)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text[-4000:]
    dumps = [ln for ln in text.splitlines() if ln.startswith("[step ")]
    assert [d.split("]")[0] for d in dumps] == ["[step 1", "[step 2", "[step 3"], text
    assert all("actor: " in d and "env/SimpleSokoban: " in d and "timing: " in d for d in dumps)
    steps = [ln for ln in text.splitlines() if STEP3.match(ln)]
    assert [ln.split(" |")[0] for ln in steps] == ["step 1/3", "step 2/3", "step 3/3"], text
    assert "INFO" in text  # roll's own log lines too
