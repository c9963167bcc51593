"""A stricter env checker for roll's text envs.

``check_text_env(env_id)`` runs ``gymnasium.utils.env_checker.check_env`` (with gymnasium's
warnings turned into failures) plus what the roll contract adds for text envs:

- observation and action spaces are ``gymnasium.spaces.Text``; observations are ``str`` inside
  the observation space, after reset and after every step;
- reset info has a non-empty ``instruction``; step info has bool ``success``,
  ``action_is_valid`` and ``action_is_effective``; rewards are finite numbers;
- determinism: two fresh envs, same seed, same actions -> identical observations, rewards,
  flags and infos (for several seeds);
- garbage actions (empty, huge, unicode, nested or unbalanced tags, non-strings) never raise
  and are reported as invalid when the env requires the answer format;
- episodes end (terminate or truncate) within ``max_episode_turns`` turns of random play;
- ``expert_plan()``, where present, returns a list of strings.

It raises ``EnvCheckError`` listing every failed check, and returns a report otherwise.
"""
from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.spaces import Text
from gymnasium.utils.env_checker import check_env, data_equivalence
from roll.envs.agents import RandomAgent

#: Text with no well-formed answer: it must never crash an env, and an env that requires the
#: answer format must report it as invalid.
MALFORMED_ACTIONS: tuple[Any, ...] = (
    "",
    " ",
    "\x00\x01\x02",
    "<answer>",
    "</answer>",
    "<answer></answer>",
    "<answer><answer>Up</answer></answer>",
    "<think><answer>unclosed think",
    "<think></think>",
    "😀" * 50,
    "<answer>" * 5000,
    "a" * 200_000,
    None,
    12345,
)
#: Well-formed but meaningless answers (odd unicode, bytes): they must only never crash.
ODD_ACTIONS: tuple[Any, ...] = (
    "<answer>" + "\u202e\ud800\uffff" + "</answer>",
    "<ANSWER>no such action for any env 🤖</ANSWER>",
    b"<answer>bytes</answer>",
    "<answer>" + "x" * 100_000 + "</answer>",
)


class EnvCheckError(AssertionError):
    """One or more checks failed; the message lists them."""


@dataclass
class CheckReport:
    env_id: str
    passed: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _make(env: str | Callable[[], gym.Env], env_kwargs: dict | None) -> gym.Env:
    if isinstance(env, str):
        return gym.make(env, **(env_kwargs or {}))
    return env()


def _check_info(info: Any, where: str, keys: tuple[str, ...]) -> list[str]:
    errs = []
    if not isinstance(info, dict):
        return [f"{where}: info is {type(info).__name__}, not dict"]
    for k in keys:
        if k not in info:
            errs.append(f"{where}: info lacks {k!r}")
        elif k != "instruction" and not isinstance(info[k], (bool, np.bool_)):
            errs.append(f"{where}: info[{k!r}] is {type(info[k]).__name__}, not bool")
    if "instruction" in keys and "instruction" in info:
        if not isinstance(info["instruction"], str) or not info["instruction"].strip():
            errs.append(f"{where}: info['instruction'] must be a non-empty string")
    return errs


def _check_step(env: gym.Env, result: Any, where: str) -> list[str]:
    if not isinstance(result, tuple) or len(result) != 5:
        return [f"{where}: step must return a 5-tuple"]
    obs, reward, terminated, truncated, info = result
    errs = []
    if not isinstance(obs, str):
        errs.append(f"{where}: observation is {type(obs).__name__}, not str")
    elif obs not in env.observation_space:
        bad = sorted({c for c in obs if c not in getattr(env.observation_space, "character_set", set(obs))})[:10]
        errs.append(f"{where}: observation not in observation_space (length {len(obs)}, characters outside: {bad})")
    if not isinstance(reward, (int, float, np.integer, np.floating)) or not math.isfinite(float(reward)):
        errs.append(f"{where}: reward {reward!r} is not a finite number")
    for name, flag in (("terminated", terminated), ("truncated", truncated)):
        if not isinstance(flag, (bool, np.bool_)):
            errs.append(f"{where}: {name} is {type(flag).__name__}, not bool")
    errs += _check_info(info, where, ("success", "action_is_valid", "action_is_effective"))
    return errs


def _rollout(env: gym.Env, seed: int, actions: list[Any]) -> list[Any]:
    out: list[Any] = [env.reset(seed=seed)]
    for a in actions:
        res = env.step(a)
        out.append(res)
        if res[2] or res[3]:
            break
    return out


def check_text_env(
    env: str | Callable[[], gym.Env],
    env_kwargs: dict | None = None,
    seeds: tuple[int, ...] = (0, 1, 2),
    determinism_turns: int = 20,
    max_episode_turns: int = 1000,
    run_gymnasium_checker: bool = True,
) -> CheckReport:
    """Check a registered env id (or a zero-argument env factory); raise EnvCheckError on failure."""
    env_id = env if isinstance(env, str) else getattr(env, "__name__", repr(env))
    report = CheckReport(str(env_id))
    errors: list[str] = []

    def run(name: str, fn: Callable[[], list[str]]) -> None:
        try:
            errs = fn()
        except Exception as e:  # a crash is a failed check, reported with the others
            errs = [f"{name}: raised {type(e).__name__}: {e}"]
        if errs:
            errors.extend(errs)
        else:
            report.passed.append(name)

    def gymnasium_checker() -> list[str]:
        e = _make(env, env_kwargs)
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                check_env(e.unwrapped)
            errs = []
            for w in caught:
                msg = str(w.message)
                if "WARN:" not in msg:  # only gymnasium's own checker warnings count
                    continue
                if "not having a spec" in msg:  # an env built by a factory, not gymnasium.make
                    report.notes.append("render modes not checked: env has no spec")
                    continue
                errs.append(f"gymnasium check_env warned: {msg}")
            return errs
        finally:
            e.close()

    def spaces_and_reset() -> list[str]:
        e = _make(env, env_kwargs)
        errs = []
        for name in ("observation_space", "action_space"):
            if not isinstance(getattr(e, name), Text):
                errs.append(f"{name} is {type(getattr(e, name)).__name__}, not gymnasium.spaces.Text")
        for seed in seeds:
            obs, info = e.reset(seed=seed)
            if not isinstance(obs, str) or obs not in e.observation_space:
                errs.append(f"reset(seed={seed}): observation is not a str in observation_space")
            errs += _check_info(info, f"reset(seed={seed})", ("instruction",))
        e.close()
        return errs

    def random_play() -> list[str]:
        e = _make(env, env_kwargs)
        errs = []
        for seed in seeds:
            agent = RandomAgent(e, seed=seed)
            obs, info = e.reset(seed=seed)
            for turn in range(max_episode_turns):
                res = e.step(agent.act(obs, info))
                errs += _check_step(e, res, f"seed {seed} turn {turn}")
                if errs:
                    break
                obs, _, terminated, truncated, info = res
                if terminated or truncated:
                    break
            else:
                errs.append(f"seed {seed}: episode did not end within {max_episode_turns} random turns (no truncation?)")
        e.close()
        return errs

    def determinism() -> list[str]:
        errs = []
        for seed in seeds:
            probe = _make(env, env_kwargs)
            agent = RandomAgent(probe, seed=seed)
            obs, info = probe.reset(seed=seed)
            actions: list[Any] = []
            for i in range(determinism_turns):
                # Mix random answers with an invalid one now and then: both paths must be deterministic.
                a = agent.act(obs, info) if i % 5 != 4 else "not an answer"
                actions.append(a)
                obs, _, term, trunc, info = probe.step(a)
                if term or trunc:
                    break
            probe.close()
            a_env, b_env = _make(env, env_kwargs), _make(env, env_kwargs)
            ra, rb = _rollout(a_env, seed, actions), _rollout(b_env, seed, actions)
            a_env.close()
            b_env.close()
            if len(ra) != len(rb) or not all(data_equivalence(x, y, exact=True) for x, y in zip(ra, rb)):
                first = next((i for i, (x, y) in enumerate(zip(ra, rb)) if not data_equivalence(x, y, exact=True)), len(ra))
                errs.append(f"seed {seed}: two envs diverged at call {first} with the same seed and actions")
        return errs

    def garbage() -> list[str]:
        e = _make(env, env_kwargs)
        errs = []
        strict = getattr(getattr(e.unwrapped, "parser_config", None), "require_answer_tag", False)
        for i, a in enumerate(MALFORMED_ACTIONS + ODD_ACTIONS):
            e.reset(seed=seeds[0])
            res = e.step(a)
            where = f"garbage action #{i} ({str(a)[:30]!r})"
            errs += _check_step(e, res, where)
            malformed = i < len(MALFORMED_ACTIONS)
            if malformed and strict and isinstance(res, tuple) and len(res) == 5 and res[4].get("action_is_valid") is True:
                errs.append(f"{where} was accepted as a valid action")
        e.close()
        return errs

    def expert() -> list[str]:
        e = _make(env, env_kwargs)
        fn = getattr(e.unwrapped, "expert_plan", None)
        if fn is None:
            report.notes.append("no expert_plan()")
            return []
        e.reset(seed=seeds[0])
        plan = fn()
        e.close()
        if not isinstance(plan, list) or not all(isinstance(p, str) for p in plan):
            return [f"expert_plan() must return list[str], got {plan!r:.80}"]
        return []

    if run_gymnasium_checker:
        run("gymnasium check_env", gymnasium_checker)
    run("text spaces and reset info", spaces_and_reset)
    run("random play: step outputs and termination", random_play)
    run("determinism per seed", determinism)
    run("garbage actions never raise", garbage)
    run("expert_plan type", expert)
    if errors:
        raise EnvCheckError(f"{env_id} failed {len(errors)} check(s):\n  " + "\n  ".join(errors[:50]))
    return report
