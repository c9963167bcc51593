"""roll's agentic pipeline against TRL's GRPOTrainer on one multi-turn task, side by side.

The task is roll's FrozenLake (``roll/FrozenLake-v0``: random 4x4 maps, not slippery, at most 8
turns, the grid alone as each turn's user message, ``<answer>Up</answer>``-style actions,
return +1 on the goal and -0.1 per unparseable answer), trained with GRPO over whole episodes
from one SFT warm start of ``roll-tiny://tiny``. Every setting both sides share is read from one
config, configs/agentic/bench/trl_frozenlake.yaml (:func:`load_task`).

Which of TRL 1.16's multi-turn APIs: ``rollout_func``. It runs on CPU without vLLM: the trainer
hands it the generation batch's prompts (each prompt ``num_generations`` times, from its
``RepeatSampler``) and takes back ``prompt_ids``, ``completion_ids``, ``logprobs`` and an
optional ``env_mask`` (0 on tokens the model did not write, left out of the loss; TRL turns it
into its ``tool_mask``); extra keys reach the reward functions. Generation inside it is ours:
here ``model.generate`` with the ``generation_config`` the trainer builds for its own
non-vLLM path (so vLLM, and its CPU build, are not needed). ``environment_factory`` does not fit this task: it exposes an env's
methods as *tools*, so the model must write JSON tool calls that TRL parses with a response
schema of the chat template, instead of the ``<answer>`` text the warm start learned; on the
tiny model's ChatML template it stops at construction (the bench records the error and TRL's
source line, :data:`_ENV_FACTORY_PROBE`).

What each side runs:

- roll: ``roll run`` of the config above: trajectory mode (one sample per episode, env tokens
  masked), 8 groups of 8 episodes per step, rollouts in lockstep on ``hf_infer``, GRPO on the
  episode return, PPO clip 0.2, token-mean loss, no KL, 2 micro-batches of 32;
- TRL: ``GRPOTrainer`` with ``rollout_func`` (the ``_TRL_RUNNER`` text). The rollout drives
  the very same env class (``gymnasium.make`` of roll's id) through :func:`run_episodes`: all
  running episodes decode one turn together, each reply is stepped in its env, the next
  observation is appended as the chat template's delta for one more user turn (roll's
  ``ChatRenderer``, so the token stream is the one roll's env manager builds: the test checks it
  token by token). ``completion_ids`` is everything after the first prompt, ``env_mask`` 1 on
  the model's tokens only; the reward is the episode return. ``loss_type="dapo"`` (token
  mean over the generation batch's model tokens), ``beta=0``, ``scale_rewards="group"``.

Both train on the same maps (env seeds ``seed + 0 .. 8 * steps - 1``, one group each; TRL's
sampler visits them in another order). Runs alternate (roll, TRL, TRL, roll, ...) and are
measured from outside as bench/trl_compare.py does: seconds per step (median of the gaps between
step ends, steps 3..N), start-up (process start to the first step's start), peak PSS of the
process tree, the CPU seconds to the first step; held-out success of both final models by one
evaluator (:func:`evaluate`: the same episode loop, HF ``generate``, greedy and sampled at T=1,
on env seeds 100000.. that no run trains on).

    python bench/trl_agentic.py            # 3 runs each, 20 steps; rewrites "## TRL side by side, agentic"
    python bench/trl_agentic.py --quick    # 1 run each, 4 steps; prints only
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Callable
from typing import Any

from common import rate_se, result_line, write_section
from trl_compare import BUSY_LOAD, TRL_VERSION, cpu_by_process_until, run_measured, step_seconds, trl_python

ROOT = Path(__file__).resolve().parents[1]
SECTION = "## TRL side by side, agentic"
CONFIG = "configs/agentic/bench/trl_frozenlake.yaml"
SFT_CONFIG = "configs/agentic/learning/frozenlake_sft.yaml"
DEMO_EPISODES, DEMO_EPSILON, SFT_STEPS = 1000, 0.5, 100
VAL_SEED, VAL_EPISODES = 100_000, 128

# Runs inside the TRL venv: one GRPOTrainer run with rollout_func; step times to a JSON file.
_TRL_RUNNER = r'''
import json, sys, time
cfg = json.loads(sys.argv[1])
sys.path.insert(0, cfg["bench_dir"])
import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
from trl import GRPOConfig, GRPOTrainer
from trl_agentic import hf_generate, run_episodes

task = cfg["task"]
# the env seed rides in the prompt message: rollout_func sees the prompts only
data = Dataset.from_list([{"prompt": [{"role": "user", "content": "", "env_seed": s}]} for s in cfg["env_seeds"]])
stats = []

def rollout(prompts, trainer):
    t0 = time.time()
    seeds = [p[-1]["env_seed"] for p in prompts]
    model = trainer.accelerator.unwrap_model(trainer.model)
    gen = lambda batch: hf_generate(model, batch, trainer.generation_config)
    eps = run_episodes(gen, trainer.processing_class, seeds, task)
    stats.append({"seconds": time.time() - t0, "episodes": len(eps), "groups": len(set(seeds)),
                  "model_tokens": sum(sum(e.env_mask) for e in eps),
                  "env_tokens": sum(len(e.env_mask) - sum(e.env_mask) for e in eps),
                  "success": sum(e.success for e in eps) / len(eps), "turns": sum(e.turns for e in eps) / len(eps)})
    return {"prompt_ids": [e.prompt_ids for e in eps], "completion_ids": [e.completion_ids for e in eps],
            "logprobs": [e.logprobs for e in eps], "env_mask": [e.env_mask for e in eps],
            "episode_return": [e.episode_return for e in eps]}

def episode_return(completions, episode_return, **_):
    return list(episode_return)

class Times(TrainerCallback):
    begins, ends = [], []
    def on_step_begin(self, args, state, control, **kw):
        self.begins.append(time.time())
    def on_step_end(self, args, state, control, **kw):
        self.ends.append(time.time())

args = GRPOConfig(output_dir=cfg["out"], **cfg["grpo"])
model = AutoModelForCausalLM.from_pretrained(cfg["model"], dtype=torch.float32)
tok = AutoTokenizer.from_pretrained(cfg["model"], padding_side="left")
times = Times()
trainer = GRPOTrainer(model=model, reward_funcs=[episode_return], args=args, train_dataset=data,
                      processing_class=tok, callbacks=[times], rollout_func=rollout)
trainer.train()
trainer.save_model(cfg["out"] + "/final_model")
tok.save_pretrained(cfg["out"] + "/final_model")
json.dump({"begins": times.begins, "ends": times.ends, "rollouts": stats, "torch_threads": torch.get_num_threads(),
           "rewards": [h["reward"] for h in trainer.state.log_history if "reward" in h]},
          open(cfg["out"] + "/times.json", "w"))
'''

# Runs inside the TRL venv: what environment_factory does with the tiny model's chat template.
_ENV_FACTORY_PROBE = r'''
import json, sys, traceback
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import GRPOConfig, GRPOTrainer

class Lake:
    def reset(self, **kwargs):
        return ""
    def move(self, direction: str) -> str:
        """Move one cell.

        Args:
            direction: Left, Down, Right or Up.

        Returns:
            The grid after the move.
        """
        return ""
    def get_reward(self) -> float:
        return 0.0

m = sys.argv[1]
args = GRPOConfig(output_dir=sys.argv[2], per_device_train_batch_size=8, num_generations=8, max_steps=1, use_cpu=True,
                  report_to="none", max_completion_length=8)
try:
    GRPOTrainer(model=AutoModelForCausalLM.from_pretrained(m), args=args, environment_factory=Lake,
                processing_class=AutoTokenizer.from_pretrained(m, padding_side="left"),
                train_dataset=Dataset.from_list([{"prompt": [{"role": "user", "content": "x"}]}] * 8))
    print(json.dumps({"error": None}))
except Exception as e:
    frames = [(f.filename.split("site-packages/")[-1], f.lineno) for f in traceback.extract_tb(e.__traceback__)]
    print(json.dumps({"error": f"{type(e).__name__}: {e}", "frames": [f"{f}:{n}" for f, n in frames if f.startswith("trl/")]}))
'''


# ---------------------------------------------------------------- the shared task
def load_task(overrides: tuple[str, ...] = ()) -> dict[str, Any]:
    """Everything both sides share, from :data:`CONFIG` (JSON-able: it is handed to TRL's runner)."""
    from roll.config import load_config

    cfg = load_config(str(ROOT / CONFIG), overrides)
    [tag] = cfg.train_env_manager.tags
    env, mgr = cfg.custom_envs[tag], cfg.train_env_manager
    gen, train = cfg.actor_infer.generating_args, cfg.actor_train.training_args
    return {"tag": tag, "env_id": env.env_id, "env_kwargs": dict(env.env_kwargs), "max_turns": env.max_turns,
            "system_prompt": env.system_prompt, "include_instruction": env.include_instruction,
            "turn_template": env.turn_template, "max_context_tokens": mgr.max_context_tokens, "mode": mgr.mode,
            "group": mgr.group_size, "episodes": cfg.rollout_batch_size, "max_new_tokens": gen.max_new_tokens,
            "temperature": gen.temperature, "top_p": gen.top_p, "top_k": gen.top_k, "lr": train.lr,
            "micro": train.per_device_train_batch_size, "accum": train.gradient_accumulation_steps,
            "max_grad_norm": train.max_grad_norm, "adv_estimator": cfg.algorithm.adv_estimator,
            "loss_agg_mode": cfg.algorithm.loss_agg_mode, "policy_loss": cfg.algorithm.policy_loss}


def grpo_args(task: dict[str, Any], steps: int, seed: int) -> dict[str, Any]:
    """TRL's ``GRPOConfig`` keyword arguments for ``task`` (output_dir aside)."""
    if task["mode"] != "trajectory" or task["adv_estimator"] != "grpo" or task["loss_agg_mode"] != "token-mean":
        raise ValueError(f"{CONFIG}: TRL trains one sample per episode with GRPO and a token-mean loss; the config has "
                         f"mode {task['mode']!r}, adv_estimator {task['adv_estimator']!r}, loss_agg_mode {task['loss_agg_mode']!r}")
    if task["micro"] * task["accum"] != task["episodes"] or task["episodes"] % task["group"]:
        raise ValueError(f"{CONFIG}: micro-batch x accumulation must be rollout_batch_size, a multiple of group_size")
    return {"per_device_train_batch_size": task["micro"], "gradient_accumulation_steps": task["accum"],
            "num_generations": task["group"], "max_completion_length": task["max_new_tokens"],
            "temperature": task["temperature"], "top_p": task["top_p"], "top_k": max(task["top_k"], 0),
            "beta": 0.0, "epsilon": 0.2, "loss_type": "dapo", "scale_rewards": "group",
            "learning_rate": task["lr"], "lr_scheduler_type": "constant", "warmup_steps": 0, "weight_decay": 0.0,
            "max_grad_norm": task["max_grad_norm"], "max_steps": steps, "logging_steps": 1, "save_strategy": "no",
            "report_to": "none", "use_cpu": True, "bf16": False, "seed": seed, "data_seed": seed,
            "disable_tqdm": True, "dataloader_num_workers": 0}


def train_seeds(seed: int, steps: int, task: dict[str, Any]) -> list[int]:
    """The env seeds a run trains on: roll's scheduler gives group ``i`` the seed ``seed + i``."""
    return [seed + i for i in range(steps * task["episodes"] // task["group"])]


# ---------------------------------------------------------------- one episode loop
@dataclass
class Episode:
    """One finished episode as TRL's rollout_func returns it: the first prompt, then every later
    token (model turns, turn ends, observations) with ``env_mask`` 1 on the model's tokens."""

    prompt_ids: list[int]
    completion_ids: list[int] = field(default_factory=list)
    env_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    episode_return: float = 0.0
    success: bool = False
    turns: int = 0
    done: bool = False


Generate = Callable[[list[list[int]]], list[tuple[list[int], list[float]]]]
"""Context ids of each running episode -> (output ids, their logprobs), one turn each."""


def run_episodes(generate: Generate, tokenizer: Any, seeds: list[int], task: dict[str, Any]) -> list[Episode]:
    """Play one episode per env seed, every running episode's turn decoded in one batch, each
    turn rendered as roll's env manager renders it (roll/rollout/env_manager.py)."""
    import gymnasium

    import roll.envs  # noqa: F401  (registers roll's envs)
    from roll.rollout.chat import ChatRenderer
    from roll.rollout.env_manager import format_turn

    renderer = ChatRenderer(tokenizer, task["system_prompt"] or None)
    envs, eps = [], []
    for s in seeds:
        env = gymnasium.make(task["env_id"], **task["env_kwargs"])
        o, info = env.reset(seed=int(s))
        first = format_turn(task["turn_template"], turn_idx=1, observation=str(o), actions_left=task["max_turns"],
                            reward=0.0, max_turns=task["max_turns"])
        instruction = str(info.get("instruction", "")) if task["include_instruction"] else ""
        envs.append(env)
        eps.append(Episode(renderer.initial_prompt(f"{instruction}\n\n{first}" if instruction else first)))
    while True:
        running = [i for i, e in enumerate(eps) if not e.done]
        if not running:
            break
        contexts = [eps[i].prompt_ids + eps[i].completion_ids for i in running]
        for i, ctx in zip(running, contexts):
            if len(ctx) + task["max_new_tokens"] + len(renderer.assistant_suffix_ids) > task["max_context_tokens"]:
                raise ValueError(f"env seed {seeds[i]}: context of {len(ctx)} tokens reaches max_context_tokens "
                                 f"{task['max_context_tokens']}; this loop does not truncate as roll's env manager does")
        for i, (out, lps) in zip(running, generate(contexts)):
            e = eps[i]
            close = renderer.close_assistant(out)
            e.completion_ids += list(out) + close
            e.env_mask += [1] * len(out) + [0] * len(close)
            e.logprobs += [float(x) for x in lps] + [0.0] * len(close)
            o, reward, terminated, truncated, info = envs[i].step(renderer.decode(out))
            e.turns += 1
            e.episode_return += float(reward)
            e.success = bool(info.get("success", e.success))
            if terminated or truncated or e.turns >= task["max_turns"]:
                e.episode_return += float(info.get("final_reward", 0.0))
                e.done = True
                envs[i].close()
                continue
            delta = renderer.user_turn_delta(format_turn(
                task["turn_template"], turn_idx=e.turns + 1, observation=str(o),
                actions_left=task["max_turns"] - e.turns, reward=float(reward), max_turns=task["max_turns"]))
            e.completion_ids += delta
            e.env_mask += [0] * len(delta)
            e.logprobs += [0.0] * len(delta)
    return eps


def hf_generate(model: Any, contexts: list[list[int]], generation_config: Any) -> list[tuple[list[int], list[float]]]:
    """One batched ``model.generate`` over left-padded contexts; each row cut after its first
    EOS (what follows is padding), with the log-probabilities of the (processed) sampling
    distribution for the chosen tokens."""
    import copy

    import torch

    generation_config = copy.deepcopy(generation_config)
    generation_config.output_scores = generation_config.return_dict_in_generate = True
    pad = generation_config.pad_token_id if generation_config.pad_token_id is not None else 0
    eos = generation_config.eos_token_id
    stops = set(eos if isinstance(eos, (list, tuple)) else [eos])
    width = max(len(c) for c in contexts)
    ids = torch.tensor([[pad] * (width - len(c)) + list(c) for c in contexts])
    mask = torch.tensor([[0] * (width - len(c)) + [1] * len(c) for c in contexts])
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, generation_config=generation_config)
    new = out.sequences[:, width:]
    logp = torch.stack(out.scores, 1).float().log_softmax(-1).gather(-1, new.unsqueeze(-1)).squeeze(-1)
    rows = []
    for toks, lps in zip(new.tolist(), logp.tolist()):
        n = next((k + 1 for k, t in enumerate(toks) if t in stops), len(toks))
        rows.append((toks[:n], lps[:n]))
    return rows


# ---------------------------------------------------------------- one evaluator for both
def evaluate(model_dir: str, task: dict[str, Any], seed: int, episodes: int = VAL_EPISODES) -> dict[str, float]:
    """Held-out success (and mean return) of a saved model, greedy and sampled at the task's
    temperature, on env seeds ``VAL_SEED ..``: the same episode loop as TRL's rollouts."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    eos = model.generation_config.eos_token_id
    stops = sorted(set(eos if isinstance(eos, list) else [eos]) | {tok.eos_token_id})
    seeds = [VAL_SEED + i for i in range(episodes)]
    out: dict[str, float] = {}
    for mode in ("greedy", "sampled"):
        sampled = mode == "sampled"
        gc = GenerationConfig(max_new_tokens=task["max_new_tokens"], do_sample=sampled, eos_token_id=stops,
                              pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else stops[0],
                              **({"temperature": task["temperature"], "top_k": 0, "top_p": task["top_p"]} if sampled else {}))
        torch.manual_seed(seed)
        eps = run_episodes(lambda c, gc=gc: hf_generate(model, c, gc), tok, seeds, task)
        out[mode] = sum(e.success for e in eps) / len(eps)
        out[f"{mode}_return"] = sum(e.episode_return for e in eps) / len(eps)
    return out


# ---------------------------------------------------------------- the SFT warm start
def roll_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "roll.cli", *args]


def sft_model(out: Path, env: dict[str, str]) -> tuple[str, list[str]]:
    """The warm start (built once under ``out/sft``): noisy expert demonstrations rendered from
    :data:`CONFIG` (whole episodes with their history, as both sides prompt) and a short SFT of
    the tiny model on them (bench/learning.py's FrozenLake recipe, fewer steps: a row here is
    an episode, not a turn)."""
    demos, sft = out / "demos.jsonl", out / "sft"
    cmds = [roll_cmd("data", "demos", CONFIG, "--out", str(demos), "--episodes", str(DEMO_EPISODES),
                     "--epsilon", str(DEMO_EPSILON), "--seed", "0"),
            roll_cmd("run", SFT_CONFIG, f"output_dir={sft}", f"data.train_files=[{demos}]", f"max_steps={SFT_STEPS}",
                     "seed=0", "show_progress=false")]
    if not (sft / "final_model" / "config.json").exists():
        for cmd, log in zip(cmds, ("demos.log", "sft.log")):
            run_measured(cmd, out / log, env)
    return str(sft / "final_model"), [shlex.join(["python", *c[1:]]) for c in cmds]


# ---------------------------------------------------------------- the two frameworks
def run_roll(task: dict[str, Any], model: str, steps: int, seed: int, out: Path, env: dict[str, str]) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    cmd = roll_cmd("run", CONFIG, f"pretrain={model}", f"output_dir={out / 'run'}", f"max_steps={steps}", f"seed={seed}")
    m = run_measured(cmd, out / "roll.log", env)
    rows = [json.loads(line) for line in (out / "run" / "logs" / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if r.get("step", 0) >= 1 and "timing/step" in r]
    ends = [float(r["time"]) for r in rows]
    first_begin = ends[0] - float(rows[0]["timing/step"])
    tag = task["tag"]
    phases = {name: statistics.median(float(r[key]) for r in rows[2:] if key in r)
              for name, key in (("rollout", "timing/rollout"), ("train", "timing/actor_train"),
                                ("model_update", "model_update/time_s"))
              if any(key in r for r in rows[2:])}
    samples = m.pop("cpu_samples")
    m["startup_cpu_by_process"] = cpu_by_process_until(samples, first_begin)
    m["cpu_per_step"] = cpu_seconds_per_step(samples, ends)
    return {**m, "cmd": shlex.join(["roll", *cmd[3:]]), "ends": ends, "startup_s": first_begin - m["t0"],
            "phases": phases, "model": str(out / "run" / "final_model"),
            "train_success": [float(r.get(f"env/{tag}/success", float("nan"))) for r in rows],
            "model_tokens": [float(r.get(f"reward/{tag}/tokens", float("nan"))) for r in rows],
            "turns": [float(r.get(f"env/{tag}/num_turns", float("nan"))) for r in rows]}


def run_trl(py: Path, task: dict[str, Any], model: str, steps: int, seed: int, out: Path,
            env: dict[str, str]) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    cfg = {"bench_dir": str(ROOT / "bench"), "task": task, "env_seeds": train_seeds(seed, steps, task), "model": model,
           "out": str(out / "run"), "grpo": grpo_args(task, steps, seed)}
    (out / "runner.py").write_text(_TRL_RUNNER)
    (out / "config.json").write_text(json.dumps(cfg, indent=1))
    cmd = [str(py), str(out / "runner.py"), json.dumps(cfg)]
    m = run_measured(cmd, out / "trl.log", {**env, "TRL_EXPERIMENTAL_SILENCE": "1"})
    t = json.loads((out / "run" / "times.json").read_text())
    samples = m.pop("cpu_samples")
    m["startup_cpu_by_process"] = cpu_by_process_until(samples, t["begins"][0])
    m["cpu_per_step"] = cpu_seconds_per_step(samples, t["ends"])
    return {**m, **trl_figures(t), "cmd": f"{py.name} runner.py \"$(cat config.json)\"", "startup_s": t["begins"][0] - m["t0"],
            "model": str(out / "run" / "final_model"), "torch_threads": t["torch_threads"]}


def cpu_seconds_per_step(samples: list[tuple[float, dict[int, tuple[str, float]]]], ends: list[float]) -> float:
    """CPU seconds (user + system) the whole process tree spent per step over steps 3..N, from
    the 0.5 s samples of :func:`trl_compare.run_measured`: on a machine shared with other jobs
    this moves far less with their load than the wall time does."""
    def total(t: float) -> float:
        return sum(cpu_by_process_until(samples, t).values())

    return (total(ends[-1]) - total(ends[1])) / (len(ends) - 2)


def trl_figures(times: dict[str, Any]) -> dict[str, Any]:
    """Step ends, phases and per-step rollout figures from the runner's ``times.json``: one
    rollout per optimizer step (the generation batch is the step's batch), its time is the
    rollout phase, the rest of the step trains."""
    ends, begins, rolls = times["ends"], times["begins"], times["rollouts"]
    if len(rolls) != len(ends):
        raise ValueError(f"TRL ran {len(rolls)} rollouts for {len(ends)} optimizer steps; expected one each "
                         "(generation batch = the step's batch)")
    steps = [e - b for b, e in zip(begins, ends)]
    later = range(2, len(ends))
    phases = {"rollout": statistics.median(rolls[i]["seconds"] for i in later),
              "train": statistics.median(steps[i] - rolls[i]["seconds"] for i in later)} if len(ends) > 2 else {}
    return {"ends": ends, "phases": phases, "train_success": [r["success"] for r in rolls],
            "model_tokens": [float(r["model_tokens"]) for r in rolls], "env_tokens": [float(r["env_tokens"]) for r in rolls],
            "turns": [r["turns"] for r in rolls]}


def probe_environment_factory(py: Path, model: str, out: Path, env: dict[str, str]) -> dict[str, Any]:
    """What TRL's ``environment_factory`` does with the warm start's tokenizer (error and TRL frames)."""
    import subprocess

    out.mkdir(parents=True, exist_ok=True)
    (out / "probe.py").write_text(_ENV_FACTORY_PROBE)
    proc = subprocess.run([str(py), str(out / "probe.py"), model, str(out / "run")], capture_output=True, text=True,
                          env={**env, "TRL_EXPERIMENTAL_SILENCE": "1"}, cwd=ROOT, timeout=600, check=False)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"environment_factory probe failed to run (exit {proc.returncode}): {proc.stderr[-1500:]}")
    return json.loads(lines[-1])


# ---------------------------------------------------------------- report
def summarise(runs: list[dict[str, Any]]) -> dict[str, float]:
    def med(key: str) -> float:
        return statistics.median(r[key] for r in runs)

    return {"step_s": statistics.median(statistics.median(step_seconds(r["ends"])[1:]) for r in runs),
            "startup_s": med("startup_s"), "wall_s": med("wall_s"), "peak_pss_mb": med("peak_pss_mb"),
            "startup_cpu_s": statistics.median(sum(r["startup_cpu_by_process"].values()) for r in runs),
            # results saved before it was measured have none
            "cpu_per_step": (statistics.median(r["cpu_per_step"] for r in runs)
                             if all("cpu_per_step" in r for r in runs) else 0.0),
            "success_greedy": statistics.mean(r["eval"]["greedy"] for r in runs),
            "success_sampled": statistics.mean(r["eval"]["sampled"] for r in runs),
            "model_tokens": statistics.mean(statistics.mean(r["model_tokens"]) for r in runs),
            "train_success": statistics.mean(statistics.mean(r["train_success"]) for r in runs)}


def figures(s: dict[str, dict[str, float]]) -> dict[str, float]:
    """The RESULT line's figures: speed-up = TRL's seconds per step / roll's; the success delta
    (roll minus TRL, points) is the smaller of the greedy and the sampled one."""
    roll, trl = s["roll"], s["trl"]
    return {"trl_agentic_step_speedup": trl["step_s"] / roll["step_s"],
            "trl_agentic_success_delta_pp": 100 * min(roll[k] - trl[k] for k in ("success_greedy", "success_sampled")),
            "trl_agentic_startup_s": roll["startup_s"], "trl_agentic_mem_ratio": roll["peak_pss_mb"] / trl["peak_pss_mb"],
            **({"trl_agentic_cpu_per_step_ratio": roll["cpu_per_step"] / trl["cpu_per_step"]}
               if roll["cpu_per_step"] and trl["cpu_per_step"] else {}),
            "roll_step_s": roll["step_s"], "trl_step_s": trl["step_s"], "trl_startup_s": trl["startup_s"]}


def section(saved: dict[str, Any], s: dict[str, dict[str, float]], line: str) -> str:
    task, runs, base, steps, n_val = saved["task"], saved["runs"], saved["base"], saved["steps"], saved["val_episodes"]
    n_runs = max(len(rs) for rs in runs.values())
    lines = [SECTION, "",
             f"`python bench/trl_agentic.py --runs {n_runs} --steps {steps}"
             f"{'' if n_val == VAL_EPISODES else f' --val-episodes {n_val}'}` ({n_runs} run{'s' if n_runs != 1 else ''} of each "
             f"framework, alternating; 2-core CPU shared with other jobs). roll's agentic pipeline vs TRL {TRL_VERSION} "
             "`GRPOTrainer` with `rollout_func` (the way bench/trl_agentic.py's docstring explains), on one multi-turn task: "
             f"`{task['env_id']}` (random 4x4 maps, not slippery), at most {task['max_turns']} turns, the grid alone as each "
             f"user turn, at most {task['max_new_tokens']} new tokens per turn at T={task['temperature']:g}, "
             f"{task['episodes'] // task['group']} maps x {task['group']} episodes per optimizer step (2 micro-batches of "
             f"{task['micro']}), one sample per episode (the conversation after the first prompt, loss on the model's "
             f"tokens only), reward = episode return, group-std normalised, lr {task['lr']:g} constant, PPO clip 0.2, "
             "token-mean loss (TRL `dapo`), no KL, the same SFT warm start (commands below); both sides train on the same "
             f"{steps * task['episodes'] // task['group']} maps. Settings: {CONFIG}. Held-out success: both final models "
             f"played by one evaluator (bench/trl_agentic.py `evaluate`: the episode loop of TRL's rollouts, HF generate) "
             f"on {n_val} maps no run trains on (env seeds {VAL_SEED}..), greedy and sampled at T=1; the SFT start scores "
             f"greedy {base['greedy']:.3f}, sampled {base['sampled']:.3f} (standard error about "
             f"{rate_se(100 * base['sampled'], n_val):.0f} points per rate).", "",
             "| | roll | TRL | roll / TRL |", "|---|---|---|---|"]

    def row(name: str, key: str, fmt: str) -> None:
        a, b = s["roll"][key], s["trl"][key]
        lines.append(f"| {name} | {a:{fmt}} | {b:{fmt}} | {a / b:.2f} |" if b else f"| {name} | {a:{fmt}} | {b:{fmt}} | - |")

    row("seconds per step (median, steps 3..N)", "step_s", ".2f")
    if s["roll"]["cpu_per_step"] and s["trl"]["cpu_per_step"]:
        row("CPU seconds per step, all processes (median, steps 3..N)", "cpu_per_step", ".2f")
    row("start-up, s (median)", "startup_s", ".1f")
    row("start-up CPU seconds, all processes (median)", "startup_cpu_s", ".1f")
    row("whole process wall, s (median)", "wall_s", ".1f")
    row("peak PSS of the process tree, MB (median)", "peak_pss_mb", ".0f")
    row("model tokens trained per step (mean)", "model_tokens", ".0f")
    row("training-episode success, mean over steps", "train_success", ".3f")
    row(f"held-out success after {steps} steps, greedy (mean)", "success_greedy", ".3f")
    row(f"held-out success after {steps} steps, sampled (mean)", "success_sampled", ".3f")
    lines += ["", "Per run (order as run):", "",
              "| framework | seed | s/step | rollout s | train s | start-up s | wall s | peak PSS MB (processes) | greedy | sampled |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for fw, r in sorted(((f, x) for f in runs for x in runs[f]), key=lambda fx: fx[1]["t0"]):
        ph = r["phases"]
        lines.append(f"| {fw} | {r['seed']} | {statistics.median(step_seconds(r['ends'])[1:]):.2f} | "
                     f"{ph.get('rollout', float('nan')):.2f} | {ph.get('train', float('nan')):.2f} | {r['startup_s']:.1f} | "
                     f"{r['wall_s']:.1f} | {r['peak_pss_mb']:.0f} ({r['peak_procs']}) | {r['eval']['greedy']:.3f} | "
                     f"{r['eval']['sampled']:.3f} |")
    trl0 = runs["trl"][0]
    env_share = sum(trl0["env_tokens"]) / (sum(trl0["env_tokens"]) + sum(trl0["model_tokens"]))
    lines += ["", "Token accounting: roll's trajectory samples carry `loss_mask` 1 on generated tokens only; TRL's "
              "`rollout_func` returns `env_mask` with the same meaning, which TRL multiplies into its loss mask and its "
              f"token count (`num_items_in_batch`). In TRL's first run {100 * env_share:.0f}% of the completion tokens "
              "(turn ends and the observations after the first) were masked out. Trained tokens per step differ only "
              f"by what the policies played (mean {s['roll']['model_tokens']:.0f} roll, {s['trl']['model_tokens']:.0f} "
              "TRL: longer episodes, more tokens); the test (tests/bench/test_trl_agentic.py) checks on scripted "
              "policies that TRL's rollout builds the very ids, loss mask, logprobs and returns roll's env manager does.", "",
              "Phases (median of steps 3..N, first run of each; rollout: roll `timing/rollout`, TRL the time inside "
              "`rollout_func`; train: roll `timing/actor_train`, TRL the rest of the step): roll "
              + ", ".join(f"{k} {v:.2f} s" for k, v in runs["roll"][0]["phases"].items()) + "; TRL "
              + ", ".join(f"{k} {v:.2f} s" for k, v in trl0["phases"].items()) + "."]
    for fw in ("roll", "trl"):
        lines += ["", f"{fw}'s peak PSS by process (first run, MB): "
                  + ", ".join(f"{k} {v:.0f}" for k, v in runs[fw][0]["peak_by_process"].items()) + "."]
    probe = saved["probe"]
    lines += ["", "`environment_factory` instead (TRL's tool-style API): it turns the env's public methods into tools the "
              "model calls with JSON, parsed by a response schema TRL knows for a few chat templates; the task's actions "
              "would become tool calls the warm start never wrote. On this model's tokenizer (ChatML without tool "
              "support) the trainer does not construct: "
              + (f"`{probe['error']}` (raised at {' -> '.join(probe['frames'])})." if probe.get("error")
                 else "it constructed (no error): the comparison above still uses `rollout_func`, which keeps the task's text actions.")]
    if saved.get("note"):
        lines += ["", saved["note"]]
    loads = [r["load_avg"] for rs in runs.values() for r in rs]
    lines += ["", f"Machine load average during the runs: {min(loads):.1f}-{max(loads):.1f} on 2 cores (the runs themselves and any other jobs); "
              "absolute times scale with it, the alternating order keeps the ratios fair."]
    if max(loads) > BUSY_LOAD:
        lines += ["", f"**Measured on a busy machine (load above {BUSY_LOAD:g} on 2 cores)**: the step and start-up "
                  "ratios are not those of a quiet machine."]
    lines += ["", "Not comparable, or not the same: the random draws (map order within the run, sampled tokens: success "
              "is compared over seeds, and a held-out rate has a standard error of about "
              f"{rate_se(100 * s['roll']['success_sampled'], n_val):.0f} points per run); roll decodes on its inference "
              "worker with its own sampler (`hf_infer`, every running episode's turn in one batch) while TRL's rollout "
              "calls `model.generate` on the training model in the trainer's process; roll's rollout of step k "
              "uses the weights after step k-1 as TRL's does (no overlap: `rollout.mode: sync`); TRL needs the episode loop in "
              "`rollout_func` written by its user (here `run_episodes` and `hf_generate`, shared with the evaluator), "
              "roll runs the env from its config; CPU seconds include OpenMP's spin-waiting, "
              "and each side runs with its own defaults (as in bench/trl_compare.py): TRL's one process spins its 2 "
              "torch threads at every barrier, roll's workers run `OMP_WAIT_POLICY=PASSIVE` (roll's trainer with 2 torch "
              "threads, `actor_train.num_cpus_per_worker: 2`; its inference and env workers 1), so on a contended machine "
              "TRL's CPU seconds overstate its useful work; TRL logs `completions/clipped_ratio` 1 because every completion ends "
              "with the last turn's closing newline rather than EOS, which only its logging reads "
              "(`mask_truncated_completions` is off). Start-up: roll starts Ray, an inference worker, a trainer and an "
              "env worker; TRL one process."]
    lines += ["", "Commands (the warm start, then per run; TRL's runner is the `_TRL_RUNNER` text in bench/trl_agentic.py):",
              "", "```", *saved["sft_cmds"], runs["roll"][0]["cmd"], runs["trl"][0]["cmd"], "```", "", f"`{line}`", "", ""]
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="1 run each, 4 steps, 32 held-out maps; prints, never writes docs")
    p.add_argument("--no-docs", action="store_true")
    p.add_argument("--runs", type=int, default=None, help="runs per framework (default 3; 1 with --quick)")
    p.add_argument("--steps", type=int, default=None, help="optimizer steps per run (default 20; 4 with --quick)")
    p.add_argument("--val-episodes", type=int, default=None, help=f"held-out maps (default {VAL_EPISODES}; 32 with --quick)")
    p.add_argument("--sft-model", default=None, help="start from this model instead of the bench's warm start")
    p.add_argument("--out", default="output/bench_trl_agentic")
    p.add_argument("--venv", default="output/bench_trl/trl_venv", help="TRL venv (shared with bench/trl_compare.py)")
    p.add_argument("--report-only", action="store_true", help="re-render the section and RESULT from <out>/result.json")
    p.add_argument("--note", default="", help="a sentence for the docs section (e.g. why a run was cut short)")
    p.add_argument("--result", default=None, help="with --report-only: this result file instead (e.g. a --quick run's)")
    args = p.parse_args(argv)
    args.runs = args.runs or (1 if args.quick else 3)
    args.steps = args.steps or (4 if args.quick else 20)
    args.val_episodes = args.val_episodes or (32 if args.quick else VAL_EPISODES)
    if args.steps < 4:
        p.error("--steps must be at least 4 (the step median skips the first two)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = (ROOT / args.out).resolve()
    if args.report_only:
        path = Path(args.result).resolve() if args.result else out / "result.json"
        saved = json.loads(path.read_text())
        if not all(saved["runs"].values()):
            sys.exit(f"{path} has no finished run of {[fw for fw, rs in saved['runs'].items() if not rs]}")
        saved["note"] = args.note or saved.get("note", "")
        return report(args, saved)
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled", "HF_HUB_OFFLINE": "1",
           "WANDB_MODE": "offline"}
    out.mkdir(parents=True, exist_ok=True)
    task = load_task()
    grpo_args(task, args.steps, 0)  # the settings TRL cannot take fail here, before anything runs
    if args.sft_model:
        model, sft_cmds = str(Path(args.sft_model).resolve()), [f"(warm start given: {args.sft_model})"]
    else:
        model, sft_cmds = sft_model(out, env)
    py = trl_python((ROOT / args.venv).resolve())
    probe = probe_environment_factory(py, model, out / "env_factory_probe", env)
    print(f"environment_factory on this tokenizer: {probe.get('error') or 'constructs'}", flush=True)
    base = evaluate(model, task, 0, args.val_episodes)
    print(f"SFT start: held-out success greedy {base['greedy']:.3f}, sampled {base['sampled']:.3f}", flush=True)
    runs: dict[str, list] = {"roll": [], "trl": []}
    saved = {"task": task, "base": base, "runs": runs, "steps": args.steps, "val_episodes": args.val_episodes,
             "probe": probe, "sft_cmds": sft_cmds, "quick": args.quick, "note": args.note}
    result = out / ("result_quick.json" if args.quick else "result.json")
    order = [fw for i in range(args.runs) for fw in (("roll", "trl") if i % 2 == 0 else ("trl", "roll"))]
    for fw in order:
        seed = len(runs[fw])
        where = out / ("quick" if args.quick else "full") / f"{fw}-{seed}"
        r = (run_roll(task, model, args.steps, seed, where, env) if fw == "roll"
             else run_trl(py, task, model, args.steps, seed, where, env))
        r["seed"] = seed
        r["eval"] = evaluate(r["model"], task, seed, args.val_episodes)
        runs[fw].append(r)
        # after every run: a run stopped part-way can still be reported (--report-only)
        result.write_text(json.dumps(saved, indent=1, default=str))
        print(f"{fw} seed {seed}: {statistics.median(step_seconds(r['ends'])[1:]):.2f} s/step "
              f"({r['cpu_per_step']:.1f} CPU s) {r['phases']}, start-up "
              f"{r['startup_s']:.1f} s, wall {r['wall_s']:.1f} s, peak PSS {r['peak_pss_mb']:.0f} MB ({r['peak_procs']} "
              f"processes), model tokens/step {statistics.mean(r['model_tokens']):.0f}, held-out success greedy "
              f"{r['eval']['greedy']:.3f} sampled {r['eval']['sampled']:.3f}", flush=True)
    return report(args, saved)


def report(args: argparse.Namespace, saved: dict[str, Any]) -> int:
    s = {fw: summarise(rs) for fw, rs in saved["runs"].items()}
    line = result_line(figures(s))
    text = section(saved, s, line)
    if args.quick:
        print(text)
    write_section(text, quick=args.quick, no_docs=args.no_docs)
    print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
