"""roll's RLVR pipeline against TRL's GRPOTrainer, side by side in one run.

Both frameworks train the same SFT-warm-started ``roll-tiny://tiny`` model (the warm start of
bench/rlvr_learning.py: two-digit addition without carries, answers as ``\\boxed{c}``) with
GRPO on the same RL prompts: 8 prompts x 8 completions per optimizer step (two micro-batches
of 32), lr 2e-4 constant, at most 10 new tokens at temperature 1, no KL term, PPO clip 0.2,
token-mean loss (TRL ``loss_type="dapo"``), rewards normalised per group by their std, reward
``math_rule`` (TRL calls roll's function from its reward hook), CPU, float32. TRL is installed
by this bench into a throwaway venv that sees this environment's torch and transformers
through a ``.pth`` file and a constraints file pinning them, so both run the same torch and
transformers.

Runs alternate (roll, TRL, TRL, roll, roll, TRL for 3 runs each) so that load from other jobs
on the machine hits both alike. Measured per run, from outside the framework:

- seconds per step: the gap between consecutive step ends (roll: the ``time`` of each row of
  ``metrics.jsonl``; TRL: a ``TrainerCallback``), median over steps 3..N;
- start-up: process start to the start of the first step;
- wall: the whole process, from start to exit (includes saving the final model);
- start-up CPU: the CPU seconds (user + system) the process tree spent up to the first step,
  sampled with the memory;
- peak memory: the largest sum of PSS (``/proc/<pid>/smaps_rollup``) over the process and all
  its descendants (Ray's GCS, raylet and worker processes for roll), sampled every 0.5 s;
- held-out accuracy: both final models are scored by the same evaluator here (Hugging Face
  ``generate``, greedy and one sample at T=1, ``math_rule``) on the 200 held-out problems.

    python bench/trl_compare.py            # 3 runs each, N=30 steps; rewrites "## TRL side by side"
    python bench/trl_compare.py --quick    # 1 run each, N=6 steps; prints only
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import yaml

from common import result_line, write_section
from rlvr_learning import make_data, rl_config, roll_cmd, sft_config

ROOT = Path(__file__).resolve().parents[1]
SECTION = "## TRL side by side"
TRL_VERSION = "1.16.0"
PINS = ("torch==2.13.0", "transformers==5.19.0")
"""What the TRL venv must not replace: it uses this environment's builds through a .pth file."""
GROUP, PROMPTS, LR, MAX_NEW, MICRO = 8, 8, 2.0e-4, 10, 32

SETTINGS_CHECKED = (
    "Settings compared line by line with TRL 1.16's `grpo_trainer.py` (both sides equal): one optimizer step per "
    "generation batch of 64 (8 distinct prompts x 8; TRL's `steps_per_generation` = gradient accumulation 2); "
    "advantages (r - group mean) / (unbiased group std + eps) (TRL eps 1e-4, roll 1e-6; with 0/1 rewards a group's std "
    "is 0 or at least 0.35, so this changes nothing); loss -min(ratio x A, clip(ratio, 0.8, 1.2) x A) summed over the "
    "batch's completion tokens / their count (TRL `dapo`: `num_items_in_batch` spans the generation batch; roll "
    "`token-mean` with the mini-batch's global token count), EOS token trained, truncated completions kept; old "
    "log-probabilities = the sampling policy's (TRL: the detached current ones at one iteration; roll: the inference "
    "engine's, `recompute_old_logprobs: false`; its ppo_kl stays below 1e-6); sampling T=1, no top-k (TRL `top_k=0` "
    "adds no warper in transformers 5.19), top-p 1, no min-p or repetition penalty, EOS ids [2, 0] from the model's "
    "generation config on both sides; AdamW betas (0.9, 0.999), eps 1e-8, weight decay 0, grad-norm clip 1.0, "
    "constant lr without warmup; no reference model (beta 0 / no KL); no dropout in the model. What still differs: "
    "the random draws (prompt order, sampled tokens), so accuracy is compared over seeds. Checked on one step, token "
    "by token: roll's training path run on the 64 completions TRL sampled at its first step (seed 0) renders the same "
    "prompt ids (chat template, no BOS), trains the same 448 completion tokens (EOS included, nothing after it) and "
    "gives the same advantages (within 7e-4, the eps) and gradient (relative difference 2.8e-4, cosine 1.000000); "
    "roll's rollouts use the previous step's weights (ppo_kl below 1e-6 at every step). Greedy accuracy moves in jumps "
    "across seeds (the tiny model's argmax digit flips for many problems at once; per-seed sd about 7 points on both "
    "sides): over seeds 0-6 roll 0.270-0.435 (mean 0.354) and TRL 0.180-0.365 (mean 0.295); sampled, mean roll 0.111, "
    "TRL 0.113; the exact probability of sampling the right answer, mean over the 200 problems and the 7 seeds, roll "
    "0.127, TRL 0.124. Resolving 2 points of greedy accuracy would take about 100 seeds per side.")
"""What the accuracy comparison rests on (the docs section prints it)."""

# Runs inside the TRL venv: one GRPOTrainer run, step times written to a JSON file.
_TRL_RUNNER = r'''
import json, sys, time
cfg = json.loads(sys.argv[1])
import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
from trl import GRPOConfig, GRPOTrainer
from roll.rewards.math_rule import math_rule_reward

rows = [json.loads(l) for l in open(cfg["train_file"])]
data = Dataset.from_list([{"prompt": [{"role": "user", "content": r["prompt"]}], "ground_truth": r["ground_truth"]}
                          for r in rows])

def math_rule(completions, ground_truth, **_):
    return [math_rule_reward({"response": c[0]["content"], "ground_truth": g}).score
            for c, g in zip(completions, ground_truth)]

class Times(TrainerCallback):
    begins, ends = [], []
    def on_step_begin(self, args, state, control, **kw):
        self.begins.append(time.time())
    def on_step_end(self, args, state, control, **kw):
        self.ends.append(time.time())

args = GRPOConfig(
    output_dir=cfg["out"], per_device_train_batch_size=cfg["micro"], gradient_accumulation_steps=cfg["accum"],
    num_generations=cfg["group"], max_completion_length=cfg["max_new"], temperature=1.0, top_p=1.0, top_k=0,
    beta=0.0, epsilon=0.2, loss_type="dapo", scale_rewards="group", learning_rate=cfg["lr"],
    lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0, max_grad_norm=1.0, max_steps=cfg["steps"],
    logging_steps=1, save_strategy="no", report_to="none", use_cpu=True, bf16=False, seed=cfg["seed"],
    data_seed=cfg["seed"], disable_tqdm=True, dataloader_num_workers=0)
model = AutoModelForCausalLM.from_pretrained(cfg["model"], dtype=torch.float32)
tok = AutoTokenizer.from_pretrained(cfg["model"], padding_side="left")
times = Times()
trainer = GRPOTrainer(model=model, reward_funcs=[math_rule], args=args, train_dataset=data,
                      processing_class=tok, callbacks=[times])
trainer.train()
trainer.save_model(cfg["out"] + "/final_model")
tok.save_pretrained(cfg["out"] + "/final_model")
json.dump({"begins": times.begins, "ends": times.ends, "torch_threads": torch.get_num_threads(),
           "rewards": [h["reward"] for h in trainer.state.log_history if "reward" in h]},
          open(cfg["out"] + "/times.json", "w"))
'''


# ---------------------------------------------------------------- the TRL venv
def trl_python(venv: Path) -> Path:
    """A venv with TRL whose torch and transformers are this environment's (never replaced)."""
    import site as _site

    py = venv / "bin" / "python"
    stamp = venv / f".trl-{TRL_VERSION}"
    if not stamp.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True, timeout=300)
    site = next((venv / "lib").glob("python3*/site-packages"))
    # addsitedir, not plain paths: it also reads the .pth files there (roll's editable install).
    # Rewritten on every use, resolved: a venv kept from a run under another checkout (or a
    # symlinked venv that has gone) must see this environment's torch, not a stale path
    (site / "roll_env.pth").write_text("".join(f"import site; site.addsitedir({str(Path(p).resolve())!r})\n"
                                               for p in _site.getsitepackages()))
    if stamp.exists():
        return py
    constraints = venv / "constraints.txt"
    constraints.write_text("\n".join(PINS) + "\n")
    proc = subprocess.run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", "-c", str(constraints),
                           f"trl=={TRL_VERSION}"], capture_output=True, text=True, timeout=1200)
    if proc.returncode != 0:
        sys.exit(f"could not install trl=={TRL_VERSION} into {venv}:\n{proc.stderr[-2000:]}")
    check = subprocess.run([str(py), "-c", "import torch, transformers, trl; print(torch.__version__, transformers.__version__, trl.__version__)"],
                           capture_output=True, text=True, check=True).stdout.split()
    if check[0].split("+")[0] != PINS[0].split("==")[1] or check[1] != PINS[1].split("==")[1]:
        sys.exit(f"TRL venv resolved torch {check[0]} / transformers {check[1]}, expected {PINS}")
    stamp.write_text(" ".join(check) + "\n")
    return py


# ---------------------------------------------------------------- measuring a process tree
def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        kids.setdefault(ppid, []).append(int(entry))
    return kids


def _process_name(pid: int) -> str:
    """A short name for a process of the tree: Ray's title (``ray::ActorWorker``), else the
    script or binary it runs."""
    try:
        with open(f"/proc/{pid}/cmdline") as f:
            argv = [a for a in f.read().split("\0") if a]
    except OSError:
        return "?"
    if not argv:
        return "?"
    if argv[0].startswith("ray::"):
        return argv[0].split()[0].split(".")[0]
    exe = Path(argv[0].split()[0]).name
    if not exe.startswith("python"):
        return exe
    if argv[1:2] == ["-m"] and len(argv) > 2:
        return argv[2]
    return Path(next((a for a in argv[1:] if a.endswith(".py") or "/bin/" in a), exe)).name


def _tree_values(root: int, read) -> dict[int, tuple[str, float]]:
    """``read(pid)`` for ``root`` and each of its descendants: pid -> (name, value); a process
    that exits meanwhile (or has no value) is left out."""
    kids, todo, out = _children(), [root], {}
    while todo:
        pid = todo.pop()
        todo += kids.get(pid, [])
        try:
            value = read(pid)
        except (OSError, IndexError, ValueError):  # exited meanwhile
            continue
        if value is not None:
            out[pid] = (_process_name(pid), value)
    return out


def _pss_mb(pid: int) -> float | None:
    with open(f"/proc/{pid}/smaps_rollup") as f:
        return next((int(line.split()[1]) / 1024 for line in f if line.startswith("Pss:")), None)


_TICK = os.sysconf("SC_CLK_TCK")


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def tree_pss(root: int) -> dict[int, tuple[str, float]]:
    """PSS in MB of ``root`` and each of its descendants: pid -> (name, MB)."""
    return _tree_values(root, _pss_mb)


def tree_cpu(root: int) -> dict[int, tuple[str, float]]:
    """CPU seconds (user + system) so far of ``root`` and each of its descendants: pid -> (name, s)."""
    return _tree_values(root, _cpu_s)


def cpu_by_process_until(samples: list[tuple[float, dict[int, tuple[str, float]]]], until: float) -> dict[str, float]:
    """CPU seconds by process name spent up to ``until``: each pid's last sample at or before it."""
    last: dict[int, tuple[str, float]] = {}
    for t, procs in samples:
        if t > until:
            break
        last.update(procs)
    by_name: dict[str, float] = {}
    for name, cpu in last.values():
        by_name[name] = by_name.get(name, 0.0) + cpu
    return dict(sorted(by_name.items(), key=lambda kv: -kv[1]))


def tree_pss_mb(root: int) -> tuple[float, int]:
    """(sum of PSS in MB, number of processes) over ``root`` and its descendants."""
    procs = tree_pss(root)
    return sum(mb for _, mb in procs.values()), len(procs)


BUSY_LOAD = 2.5
"""Load average (2-core machine) above which the docs section says the ratios are not a quiet machine's."""

RAY_START_TIMEOUT = "timed out during startup"
"""Ray's own 30 s limit for its node to come up, which a heavily loaded machine can miss."""


def run_measured(cmd: list[str], log: Path, env: dict[str, str], retries: int = 2) -> dict[str, float]:
    """Run ``cmd`` to completion; its start time, wall and peak tree PSS. A run whose Ray node
    did not come up in time is run again (at most ``retries`` times, counted in the result)."""
    for attempt in range(retries + 1):
        try:
            return {**_run_once(cmd, log, env), "ray_start_retries": attempt}
        except RuntimeError as e:
            if RAY_START_TIMEOUT not in log.read_text(errors="replace") or attempt == retries:
                sys.exit(str(e))
            print(f"Ray did not start in time (machine load {os.getloadavg()[0]:.0f}); running again", flush=True)
    raise AssertionError("unreachable")


def _run_once(cmd: list[str], log: Path, env: dict[str, str]) -> dict[str, float]:
    t0 = time.time()
    load0 = os.getloadavg()[0]
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    peak: list[Any] = [0.0, 0, {}]
    cpu: list[tuple[float, dict[int, tuple[str, float]]]] = []
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.5):
            cpu.append((time.time(), tree_cpu(proc.pid)))
            procs = tree_pss(proc.pid)
            mb = sum(m for _, m in procs.values())
            if mb > peak[0]:
                peak[:] = [mb, len(procs), procs]

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    rc = proc.wait()
    done.set()
    th.join()
    wall = time.time() - t0
    if rc != 0:
        raise RuntimeError(f"command failed ({rc}), see {log}: {' '.join(shlex.quote(c) for c in cmd)}")
    by_name: dict[str, float] = {}
    for name, mb in peak[2].values():
        by_name[name] = by_name.get(name, 0.0) + mb
    return {"t0": t0, "wall_s": wall, "peak_pss_mb": peak[0], "peak_procs": peak[1],
            "peak_by_process": dict(sorted(by_name.items(), key=lambda kv: -kv[1])),
            "load_avg": (load0 + os.getloadavg()[0]) / 2, "cpu_samples": cpu}


def step_seconds(ends: list[float]) -> list[float]:
    return [b - a for a, b in zip(ends, ends[1:])]


# ---------------------------------------------------------------- the two frameworks
def run_roll(data: Path, model: str, steps: int, seed: int, out: Path, env: dict[str, str]) -> dict[str, Any]:
    cfg = rl_config(data, model, steps, 0, seed, 0, LR)
    cfg["data"].pop("val_files")
    cfg.update(exp_name="trl_compare_roll", eval_steps=0, val_batch_size=1)
    cfg["tracking"] = {"track_with": ["jsonl"], "dump_trajectories": 0}
    out.mkdir(parents=True, exist_ok=True)
    (out / "rl.yaml").write_text(yaml.safe_dump(cfg))
    cmd = roll_cmd("run", str(out / "rl.yaml"), f"output_dir={out / 'run'}")
    m = run_measured(cmd, out / "rl.log", env)
    rows = [json.loads(line) for line in (out / "run" / "logs" / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if r.get("step", 0) >= 1 and "timing/step" in r]
    ends = [float(r["time"]) for r in rows]
    first_begin = ends[0] - float(rows[0]["timing/step"])
    phases = {k.split("/", 1)[1]: statistics.median(float(r[k]) for r in rows[2:] if k in r)
              for k in ("timing/rollout", "timing/actor_train", "timing/old_logprobs", "timing/model_update")
              if any(k in r for r in rows[2:])}
    startup = {k.split("/", 2)[2]: float(v) for k, v in rows[0].items() if k.startswith("timing/startup/")}
    m["startup_cpu_by_process"] = cpu_by_process_until(m.pop("cpu_samples"), first_begin)
    return {**m, "cmd": " ".join(shlex.quote(c) for c in cmd), "ends": ends, "startup_s": first_begin - m["t0"],
            "startup_phases": startup,
            "train_reward": [float(r.get("reward/math/correct", float("nan"))) for r in rows],
            "phases": phases, "model": str(out / "run" / "final_model")}


def run_trl(py: Path, data: Path, model: str, steps: int, seed: int, out: Path, env: dict[str, str]) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    cfg = {"train_file": str(data / "rl.jsonl"), "model": model, "out": str(out / "run"), "steps": steps, "seed": seed,
           "micro": MICRO, "accum": GROUP * PROMPTS // MICRO, "group": GROUP, "max_new": MAX_NEW, "lr": LR}
    (out / "runner.py").write_text(_TRL_RUNNER)
    cmd = [str(py), str(out / "runner.py"), json.dumps(cfg)]
    m = run_measured(cmd, out / "trl.log", {**env, "TRL_EXPERIMENTAL_SILENCE": "1"})
    t = json.loads((out / "run" / "times.json").read_text())
    m["startup_cpu_by_process"] = cpu_by_process_until(m.pop("cpu_samples"), t["begins"][0])
    return {**m, "cmd": f"{py.name} runner.py '<config>'", "ends": t["ends"], "startup_s": t["begins"][0] - m["t0"],
            "train_reward": t["rewards"], "phases": {}, "model": str(out / "run" / "final_model"),
            "torch_threads": t["torch_threads"]}


# ---------------------------------------------------------------- one evaluator for both
def evaluate(model_dir: str, val_file: Path, seed: int) -> dict[str, float]:
    """Held-out accuracy of a saved model, greedy and one sample at T=1, scored by math_rule."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from roll.rewards.math_rule import math_rule_reward

    rows = [json.loads(line) for line in val_file.read_text().splitlines()]
    tok = AutoTokenizer.from_pretrained(model_dir, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    texts = [tok.apply_chat_template([{"role": "user", "content": r["prompt"]}], tokenize=False, add_generation_prompt=True)
             for r in rows]
    enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    out: dict[str, float] = {}
    for mode in ("greedy", "sampled"):
        torch.manual_seed(seed)
        with torch.inference_mode():
            gen = model.generate(**enc, max_new_tokens=MAX_NEW, do_sample=mode == "sampled", temperature=1.0 if mode == "sampled" else None,
                                 top_k=0 if mode == "sampled" else None, top_p=1.0 if mode == "sampled" else None, pad_token_id=pad)
        replies = tok.batch_decode(gen[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
        out[mode] = sum(math_rule_reward({"response": t, "ground_truth": r["ground_truth"]}).score
                        for t, r in zip(replies, rows)) / len(rows)
    return out


# ---------------------------------------------------------------- report
def summarise(runs: list[dict[str, Any]]) -> dict[str, float]:
    def med(key: str) -> float:
        return statistics.median(r[key] for r in runs)

    return {"step_s": statistics.median(statistics.median(step_seconds(r["ends"])[1:]) for r in runs),
            "startup_s": med("startup_s"), "wall_s": med("wall_s"), "peak_pss_mb": med("peak_pss_mb"),
            "startup_cpu_s": statistics.median(sum(r.get("startup_cpu_by_process", {}).values()) for r in runs),
            "acc_greedy": statistics.mean(r["acc"]["greedy"] for r in runs),
            "acc_sampled": statistics.mean(r["acc"]["sampled"] for r in runs)}


def _startup_phases(run: dict[str, Any]) -> dict[str, float]:
    """roll's ``timing/startup/*`` of one run (from its metrics file for results saved without them)."""
    if run.get("startup_phases"):
        return run["startup_phases"]
    metrics = Path(run["model"]).parent / "logs" / "metrics.jsonl"
    if not metrics.exists():
        return {}
    first = json.loads(metrics.read_text().splitlines()[0])
    return {k.split("/", 2)[2]: float(v) for k, v in first.items() if k.startswith("timing/startup/")}


def section(args: argparse.Namespace, base: dict[str, float], runs: dict[str, list], s: dict[str, dict], line: str,
            sft_cmd: str) -> str:
    roll_s, trl_s = s["roll"], s["trl"]
    phases = runs["roll"][0]["phases"] if runs["roll"] else {}
    lines = [SECTION, "",
             f"`python bench/trl_compare.py{'' if args.runs == 3 else f' --runs {args.runs}'}` ({args.runs} run{'s' if args.runs != 1 else ''} of each framework, alternating; {args.steps} steps each; "
             f"2-core CPU shared with other jobs). roll's rlvr pipeline vs TRL {TRL_VERSION} `GRPOTrainer`, both on "
             "torch 2.13.0 and transformers 5.19.0, from the same SFT warm start of `roll-tiny://tiny` (bench/rlvr_learning.py's "
             f"data and recipe: `{sft_cmd}`): {PROMPTS} prompts x {GROUP} completions per optimizer step (2 micro-batches of "
             f"{MICRO}), lr {LR:g} constant, at most {MAX_NEW} new tokens at T=1, no KL, PPO clip 0.2, token-mean loss, "
             "group-std reward normalisation, `math_rule` reward. Seconds per step: median of the gaps between step ends, "
             "steps 3..N; start-up: process start to first step; peak memory: the largest sum of PSS over the process "
             "tree (roll: driver, Ray's GCS/raylet and every worker). Each runs with its own defaults: roll's workers set "
             "`OMP_WAIT_POLICY=PASSIVE`, TRL keeps OpenMP's spinning default (faster for its one process: 1.02 s per step "
             "under PASSIVE against about 0.7 without, quiet machine). Accuracy: both final models scored by one "
             f"evaluator (HF generate, math_rule) on the 200 held-out problems; the SFT start scores greedy "
             f"{base['greedy']:.3f}, sampled {base['sampled']:.3f}.", "",
             "| | roll | TRL | roll / TRL |", "|---|---|---|---|"]

    def row(name: str, key: str, fmt: str) -> None:
        a, b = roll_s[key], trl_s[key]
        lines.append(f"| {name} | {a:{fmt}} | {b:{fmt}} | {a / b:.2f} |" if b else f"| {name} | {a:{fmt}} | {b:{fmt}} | - |")

    row("seconds per step (median, steps 3..N)", "step_s", ".3f")
    row("start-up, s (median)", "startup_s", ".1f")
    if roll_s["startup_cpu_s"] and trl_s["startup_cpu_s"]:  # results saved before it was measured have none
        row("start-up CPU seconds, all processes (median)", "startup_cpu_s", ".1f")
    row("whole process wall, s (median)", "wall_s", ".1f")
    row("peak PSS of the process tree, MB (median)", "peak_pss_mb", ".0f")
    row(f"held-out accuracy after {args.steps} steps, greedy (mean)", "acc_greedy", ".3f")
    row(f"held-out accuracy after {args.steps} steps, sampled (mean)", "acc_sampled", ".3f")
    lines += ["", "Per run (order as run):", "", "| framework | seed | s/step | start-up s | wall s | peak PSS MB (processes) | greedy | sampled |",
              "|---|---|---|---|---|---|---|---|"]
    for fw, r in sorted(((fw, r) for fw in runs for r in runs[fw]), key=lambda x: x[1]["t0"]):
        lines.append(f"| {fw} | {r['seed']} | {statistics.median(step_seconds(r['ends'])[1:]):.3f} | {r['startup_s']:.1f} | "
                     f"{r['wall_s']:.1f} | {r['peak_pss_mb']:.0f} ({r['peak_procs']}) | {r['acc']['greedy']:.3f} | {r['acc']['sampled']:.3f} |")
    if phases:
        lines += ["", "roll's phases (first run, median of steps 3..N, s): " + ", ".join(f"{k} {v:.3f}" for k, v in phases.items()) + "."]
    startup = _startup_phases(runs["roll"][0]) if runs["roll"] else {}
    if startup:
        lines += ["", "roll's start-up phases (first run, s; `timing/startup/*` of its first step): "
                  + ", ".join(f"{k} {v:.1f}" for k, v in startup.items())
                  + " (process: interpreter, imports and config checks; data: tokenizer and prompts, loaded while "
                  "ray: the local cluster starts; workers: the reward workers and the policy roles, built at the same "
                  "time; total: process start to the end of set-up)."]
    for fw in ("roll", "trl"):
        procs = runs[fw][0].get("peak_by_process") if runs[fw] else None
        if procs:
            lines += ["", f"{fw}'s peak PSS by process (first run, MB): " + ", ".join(f"{k} {v:.0f}" for k, v in procs.items()) + "."]
        cpu = runs[fw][0].get("startup_cpu_by_process") if runs[fw] else None
        if cpu:
            lines += ["", f"{fw}'s CPU seconds to its first step by process (first run; less sensitive to the machine's "
                      "load than the start-up time): " + ", ".join(f"{k} {v:.1f}" for k, v in cpu.items() if v >= 0.05) + "."]
    retried = sum(r.get("ray_start_retries", 0) for rs in runs.values() for r in rs)
    if retried:
        lines += ["", f"{retried} roll run(s) were started again because Ray's node missed its 30 s start-up limit "
                  "under the machine's load (the measured run is the one that started)."]
    loads = [r["load_avg"] for rs in runs.values() for r in rs if "load_avg" in r]
    if loads:
        lines += ["", f"Machine load average during the runs: {min(loads):.1f}-{max(loads):.1f} on 2 cores (other jobs); "
                  "absolute times scale with it, the alternating order keeps the ratios fair."]
        if max(loads) > BUSY_LOAD:
            lines += ["", f"**Measured on a busy machine (load above {BUSY_LOAD:g} on 2 cores): the step and start-up "
                      "ratios are not those of a quiet machine.** Under load TRL's single process with two torch "
                      "threads loses far more per step than roll's workers, and roll's start-up (several processes "
                      "starting at once) far more than TRL's; run again on a quiet machine for the headline figures."]
    speedup = trl_s["step_s"] / roll_s["step_s"]
    delta = 100 * min(roll_s[k] - trl_s[k] for k in ("acc_greedy", "acc_sampled"))
    mem = roll_s["peak_pss_mb"] / trl_s["peak_pss_mb"]
    verdict = lambda ok: "met" if ok else "not met"  # noqa: E731
    lines += ["", f"Targets: step time at least 1.5x faster than TRL at equal or better accuracy: {speedup:.2f}x, "
              f"accuracy {delta:+.1f} points (**{verdict(speedup >= 1.5 and delta >= -2.0)}**); start-up under 15 s: "
              f"{roll_s['startup_s']:.1f} s (**{verdict(roll_s['startup_s'] < 15)}**); peak memory at most 1.5x TRL's: "
              f"{mem:.2f}x (**{verdict(mem <= 1.5)}**). Accuracy counts as equal within 2 points (200 problems, "
              f"{args.runs} seed{'s' if args.runs != 1 else ''})."]
    lines += ["", SETTINGS_CHECKED]
    lines += ["", "Commands (per run; TRL's runner is the `_TRL_RUNNER` text in bench/trl_compare.py):", "", "```"]
    lines += [runs["roll"][0]["cmd"], runs["trl"][0]["cmd"], "```", "", f"`{line}`", "", ""]
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="1 run each, 6 steps; prints, never writes docs")
    p.add_argument("--no-docs", action="store_true")
    p.add_argument("--runs", type=int, default=None, help="runs per framework (default 3; 1 with --quick)")
    p.add_argument("--steps", type=int, default=None, help="optimizer steps per run (default 30; 6 with --quick)")
    p.add_argument("--sft-model", default=None, help="start from this model instead of running the SFT warm start")
    p.add_argument("--only", choices=["roll", "trl"], default=None, help="run one framework (profiling)")
    p.add_argument("--out", default="output/bench_trl")
    p.add_argument("--venv", default=None, help="TRL venv (default: <out>/trl_venv, kept between runs)")
    p.add_argument("--report-only", action="store_true",
                   help="re-render the docs section and RESULT line from <out>/result.json of a finished run")
    args = p.parse_args(argv)
    args.runs = args.runs or (1 if args.quick else 3)
    args.steps = args.steps or (6 if args.quick else 30)
    if args.steps < 4:
        p.error("--steps must be at least 4 (the step median skips the first two)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = (ROOT / args.out).resolve()
    # each framework with its own defaults: roll's workers set OMP_WAIT_POLICY=PASSIVE themselves
    # (pipelines/base.py); TRL's one process keeps OpenMP's spinning default, which suits it
    # (under PASSIVE its steps took 1.02 s instead of about 0.7 on a quiet machine)
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled", "HF_HUB_OFFLINE": "1",
           "WANDB_MODE": "offline"}
    data = out / "data"
    sft_cmd = "python bench/rlvr_learning.py's SFT stage (260 steps of 32, lr 2e-3, 30% noisy demonstrations)"
    if args.report_only:
        saved = json.loads((out / "result.json").read_text())
        args.steps = saved.get("steps", args.steps)
        args.runs = max(len(rs) for rs in saved["runs"].values())
        return report(args, saved["base"], saved["runs"], sft_cmd)
    make_data(data, 0, noise=0.3)
    if args.sft_model:
        model = str(Path(args.sft_model).resolve())
    else:
        model = str(out / "sft" / "final_model")
        if not Path(model, "config.json").exists():
            (out / "sft.yaml").write_text(yaml.safe_dump(sft_config(data, 260, 0)))
            run_measured(roll_cmd("run", str(out / "sft.yaml"), f"output_dir={out / 'sft'}"), out / "sft.log", env)
    py = trl_python(Path(args.venv).resolve() if args.venv else out / "trl_venv") if args.only != "roll" else None
    base = evaluate(model, data / "val.jsonl", 0)
    print(f"SFT start: held-out greedy {base['greedy']:.3f}, sampled {base['sampled']:.3f}", flush=True)
    runs: dict[str, list] = {"roll": [], "trl": []}
    order = [fw for i in range(args.runs) for fw in (("roll", "trl") if i % 2 == 0 else ("trl", "roll"))]
    if args.only:
        order = [fw for fw in order if fw == args.only]
    for fw in order:
        seed = len(runs[fw])
        where = out / f"{fw}-{seed}"
        r = (run_roll(data, model, args.steps, seed, where, env) if fw == "roll"
             else run_trl(py, data, model, args.steps, seed, where, env))
        r["seed"] = seed
        r["acc"] = evaluate(r["model"], data / "val.jsonl", seed)
        runs[fw].append(r)
        print(f"{fw} seed {seed}: {statistics.median(step_seconds(r['ends'])[1:]):.3f} s/step, start-up {r['startup_s']:.1f} s, "
              f"wall {r['wall_s']:.1f} s, peak PSS {r['peak_pss_mb']:.0f} MB ({r['peak_procs']} processes), "
              f"held-out greedy {r['acc']['greedy']:.3f} sampled {r['acc']['sampled']:.3f} {r['phases'] or ''}", flush=True)
    (out / "result.json").write_text(json.dumps({"base": base, "runs": runs, "steps": args.steps}, indent=1, default=str))
    if args.only:
        return 0
    return report(args, base, runs, sft_cmd)


def report(args: argparse.Namespace, base: dict[str, float], runs: dict[str, list], sft_cmd: str) -> int:
    s = {fw: summarise(rs) for fw, rs in runs.items()}
    # the accuracy delta is the smaller of the greedy and the sampled one (roll minus TRL)
    delta = min(s["roll"][k] - s["trl"][k] for k in ("acc_greedy", "acc_sampled"))
    line = result_line({"trl_step_speedup": s["trl"]["step_s"] / s["roll"]["step_s"],
                        "trl_acc_delta_pp": 100 * delta,
                        "startup_s": s["roll"]["startup_s"],
                        "mem_ratio_vs_trl": s["roll"]["peak_pss_mb"] / s["trl"]["peak_pss_mb"],
                        "roll_step_s": s["roll"]["step_s"], "trl_step_s": s["trl"]["step_s"],
                        "trl_startup_s": s["trl"]["startup_s"]})
    write_section(section(args, base, runs, s, line, sft_cmd), quick=args.quick, no_docs=args.no_docs)
    print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
