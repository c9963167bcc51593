"""Demonstrations for SFT warm starts, from the expert agents of any registered env.

Conversations are rendered exactly as the agentic env manager renders episodes (system
prompt, instruction + first observation, then ``turn_template`` per turn; in step mode one
sample per turn with the same history window), so a model fine-tuned on them sees the same
prompts during RL. ``epsilon`` is the share of random actions: a noisy expert gives a weak
but non-zero starting policy that RL can improve.

    roll data demos configs/agentic/frozenlake_cpu.yaml --out demos.jsonl --episodes 400 --epsilon 0.5
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Iterator, Optional

import gymnasium

import roll.envs  # noqa: F401  (registers the shipped envs)
from roll.config import load_config
from roll.config.validate import ConfigError
from roll.config.rollout import EnvConfig, EnvManagerConfig
from roll.envs.agents import demo_agent
from roll.rollout.env_manager import action_feedback, format_turn

DEMO_SEED_BASE = 50_000_000
"""Demonstration episodes use env seeds from here on: far from training and validation seeds."""


def episode_messages(env_cfg: EnvConfig, env: Any, agent: Any, seed: int) -> tuple[list[dict], dict[str, Any]]:
    """Play one episode; returns the conversation (user/assistant turns) and its outcome
    (``success``, ``turns``, ``instruction``).

    A tool env's tool-calling turn is handled as the env manager does (roll/rollout/env_manager.py):
    no env step, one ``tool`` message per result, the turn counted against ``max_turns`` (a tool
    turn on the last allowed turn ends the episode, its results unseen); the agent gets the
    results as ``info["tool_results"]``."""
    tool_turn = _tool_turn_hook(env)
    obs, info = env.reset(seed=seed)
    instruction = str(info.get("instruction", "")) if env_cfg.include_instruction else ""
    messages: list[dict] = []
    reward, success, turn, feedback = 0.0, False, 0, ""
    tool_results: list[str] | None = None
    while turn < env_cfg.max_turns:
        if tool_results is None:
            text = format_turn(env_cfg.turn_template, turn_idx=turn + 1, observation=str(obs),
                               actions_left=env_cfg.max_turns - turn, reward=reward, max_turns=env_cfg.max_turns,
                               feedback=feedback)
            if turn == 0 and instruction:
                text = f"{instruction}\n\n{text}"
            messages.append({"role": "user", "content": text})
            answer = agent.act(obs, info)
        else:
            messages += [{"role": "tool", "content": c} for c in tool_results]
            answer = agent.act(obs, {**info, "tool_results": tool_results})
        messages.append({"role": "assistant", "content": answer})
        turn += 1
        called = tool_turn(answer) if tool_turn is not None else None
        if called is not None:
            tool_results = [r.content for r in called.results]
            continue
        tool_results = None
        obs, reward, terminated, truncated, info = env.step(answer)
        success = success or bool(info.get("success", False))
        feedback = action_feedback(info)
        if terminated or truncated:
            break
    return messages, {"success": success, "turns": turn, "instruction": instruction}


def _tool_turn_hook(env: Any) -> Any:
    """The tool env's ``tool_turn`` (roll/Tools-v0, through wrappers), or None."""
    try:
        return env.get_wrapper_attr("tool_turn")
    except AttributeError:
        return None


def _tool_schemas(env: Any) -> list[dict] | None:
    try:
        return list(env.get_wrapper_attr("tool_schemas"))
    except AttributeError:
        return None


def step_samples(messages: list[dict], instruction_first: str, window: int) -> Iterator[list[dict]]:
    """Step mode: one conversation per assistant turn with ``window`` earlier turns, the
    instruction kept in the first kept user turn (as the env manager's windowed prompt)."""
    n_turns = len(messages) // 2
    for t in range(n_turns):
        first_kept = max(t - max(window, 0), 0)
        turns = [dict(m) for m in messages[2 * first_kept: 2 * t + 2]]
        if first_kept > 0 and instruction_first:
            turns[0]["content"] = f"{instruction_first}\n\n{turns[0]['content']}"
        yield turns


def generate(cfg_path: str, out: str, episodes: int, epsilon: float, seed: int = 0,
             tags: Optional[list[str]] = None, overrides: tuple[str, ...] = ()) -> dict[str, Any]:
    cfg = load_config(cfg_path, overrides)
    mcfg: EnvManagerConfig = cfg.train_env_manager
    tags = tags or list(mcfg.tags) or list(cfg.custom_envs)
    stats: dict[str, Any] = {}
    n_rows = 0
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w") as f:
        for tag in tags:
            env_cfg = cfg.custom_envs[tag]
            env = gymnasium.make(env_cfg.env_id, **env_cfg.env_kwargs)
            schemas = _tool_schemas(env)
            if schemas and mcfg.mode == "step":
                env.close()
                raise ConfigError([f"custom_envs.{tag}: an env with tools needs env manager mode 'trajectory' "
                                   "for its demonstrations, as for its rollouts"])
            successes = 0
            for i in range(episodes):
                ep_seed = DEMO_SEED_BASE + seed * 1_000_003 + i
                agent = demo_agent(env, epsilon=epsilon, seed=ep_seed, think=False)
                messages, outcome = episode_messages(env_cfg, env, agent, ep_seed)
                successes += outcome["success"]
                head = [{"role": "system", "content": env_cfg.system_prompt}] if env_cfg.system_prompt else []
                if mcfg.mode == "step":
                    rows = [head + turns for turns in step_samples(messages, outcome["instruction"], mcfg.history_window)]
                else:
                    rows = [head + messages]
                for r in rows:
                    # a tool env's rows carry the schemas its prompts render (pipelines/sft.py)
                    row = {"messages": r, "tag": tag, **({"tools": schemas} if schemas else {})}
                    f.write(json.dumps(row) + "\n")
                    n_rows += 1
            env.close()
            stats[tag] = {"episodes": episodes, "success_rate": successes / max(1, episodes)}
    stats["rows"] = n_rows
    return stats


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="roll data demos", description=__doc__.split("\n\n")[0])
    p.add_argument("config", help="an agentic pipeline YAML (its custom_envs and train_env_manager)")
    p.add_argument("overrides", nargs="*")
    p.add_argument("--out", required=True)
    p.add_argument("--episodes", type=int, default=200, help="episodes per env tag")
    p.add_argument("--epsilon", type=float, default=0.5, help="share of random actions")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tags", nargs="*", default=None)
    args = p.parse_args(argv)
    stats = generate(args.config, args.out, args.episodes, args.epsilon, args.seed, args.tags, tuple(args.overrides))
    print(json.dumps(stats, indent=2))
    return 0
