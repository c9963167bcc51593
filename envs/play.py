"""Play any registered env in the terminal: ``roll envs play roll/Sokoban-v0 --seed 3``.

Type an action word (``up``) or full model text (``<answer>Up, Left</answer>``); bare text is
wrapped in ``<answer>...</answer>`` for you. Commands: ``quit``/``exit`` (or end of input)
leaves, ``reset`` starts the next seed, ``plan`` shows the expert's plan where the env has one,
``help`` shows the instruction again.
"""
from __future__ import annotations

import sys
from typing import Any, TextIO

import gymnasium as gym

_SHOWN_INFO_SKIP = {"instruction"}


def _fmt_info(info: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in info.items() if k not in _SHOWN_INFO_SKIP)


def play(
    env_id: str,
    seed: int = 0,
    env_kwargs: dict[str, Any] | None = None,
    stdin: TextIO | None = None,
    stdout: TextIO | None = None,
) -> int:
    """Run the interactive loop; returns the process exit code (0, or 2 for an unknown env id)."""
    import roll.envs  # noqa: F401  (registers the shipped envs)

    stdin = stdin or sys.stdin
    out = stdout or sys.stdout

    def say(text: str = "") -> None:
        print(text, file=out, flush=True)

    try:
        env = gym.make(env_id, **(env_kwargs or {}))
    except gym.error.Error as e:
        say(f"cannot make {env_id!r}: {e}")
        return 2
    obs, info = env.reset(seed=seed)
    say(f"== {env_id}  seed {seed} ==")
    say(info.get("instruction", ""))
    say()
    say(obs)
    total, turns = 0.0, 0
    while True:
        print("action> ", end="", file=out, flush=True)
        line = stdin.readline()
        if not line:  # end of input
            say()
            break
        text = line.rstrip("\n")
        command = text.strip().lower()
        if command in ("quit", "exit", "q"):
            break
        if command == "help":
            say(info.get("instruction", "") if isinstance(info, dict) else "")
            continue
        if command == "plan":
            fn = getattr(env.unwrapped, "expert_plan", None)
            say(f"expert plan: {fn()}" if callable(fn) else "this env has no expert_plan()")
            continue
        if command == "reset":
            seed += 1
            obs, info = env.reset(seed=seed)
            total, turns = 0.0, 0
            say(f"== new episode, seed {seed} ==")
            say(obs)
            continue
        if not text.strip():
            continue
        if "<answer>" not in text.lower():
            text = f"<answer>{text.strip()}</answer>"
        obs, reward, terminated, truncated, info = env.step(text)
        total += float(reward)
        turns += 1
        say(obs)
        say(f"reward {reward:+g} (total {total:+g})  terminated={terminated} truncated={truncated}")
        say(f"info: {_fmt_info(info)}")
        if terminated or truncated:
            outcome = "solved" if info.get("success") else ("out of steps" if truncated else "failed")
            seed += 1
            say(f"== episode over after {turns} turns: {outcome}. Next episode, seed {seed} (type quit to leave) ==")
            obs, info = env.reset(seed=seed)
            total, turns = 0.0, 0
            say(obs)
    env.close()
    return 0
