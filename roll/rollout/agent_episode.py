"""Agent functions as rollouts: the env manager's side of an agent-function env.

An env that exposes ``run_agent(base_url) -> result`` (and ``agent_options``), such as
``roll/AgentFunction-v0`` (envs/agent_function), is not stepped turn by turn. After ``reset``
picks the task, the episode's one "turn" phase opens a session on the worker's
OpenAI-compatible endpoint (roll/rollout/endpoint.py), runs the user's function on the env's
thread with the session's URL and a wall timeout, and builds the trajectories from what the
endpoint recorded: one per token-exact segment, each with the function's reward as its final
reward (docs/tools.md, "OpenAI-compatible endpoint").

The result contract: a finite number (the reward), or ``{"reward": number, "success": bool,
"info": {name: number}}`` (``success`` and ``info`` optional). Everything that goes wrong is a
typed episode failure with the usual retries and logging (roll/rollout/failures.py):

- the function raised: ``env_error`` with its traceback (a repeat at the same seed is permanent);
- it ran past ``timeout_s``: ``env_timeout``; its thread is abandoned, its session closed (later
  requests get 404), its generation aborted, and the env discarded;
- it returned something else, or made no request that completed: ``env_error``, permanent
  (a broken contract recurs);
- generation failed under it (dead worker, inference error, stale, discarded): that failure,
  whatever the function then did with the error it was answered.
"""
from __future__ import annotations

import asyncio
import functools
import math
import numbers
import time
import traceback
from collections.abc import Callable
from typing import Any

from roll.data.trajectory import Trajectory
from roll.rollout.control import CallTimeout
from roll.rollout.endpoint import (
    DEFAULT_MODEL_NAME,
    EpisodeSession,
    acquire_endpoint,
    release_endpoint,
)

RESULT_KEYS = ("reward", "success", "info")


def agent_result(value: Any) -> tuple[float, bool | None, dict[str, float]]:
    """(reward, success or None, numeric info) from what an agent function returned; raises
    TypeError or ValueError naming what is wrong."""
    info: dict[str, float] = {}
    success = None
    if isinstance(value, dict):
        unknown = sorted(set(map(str, value)) - set(RESULT_KEYS))
        if unknown:
            raise ValueError(f"the agent function returned a dict with unknown key(s) {unknown}; "
                             f"allowed: {', '.join(RESULT_KEYS)}")
        if "reward" not in value:
            raise ValueError("the agent function returned a dict without 'reward'")
        if "success" in value:
            if not isinstance(value["success"], bool):
                raise TypeError(f"'success' must be a bool, got {type(value['success']).__name__}")
            success = value["success"]
        raw_info = value.get("info") or {}
        if not isinstance(raw_info, dict):
            raise TypeError(f"'info' must be a dict, got {type(raw_info).__name__}")
        for k, v in raw_info.items():
            if isinstance(v, numbers.Real) and math.isfinite(float(v)):
                info[str(k)] = float(v)
        value = value["reward"]
    if not isinstance(value, numbers.Real):
        raise TypeError(f"the agent function returned a {type(value).__name__} ({str(value)[:80]!r}); "
                         "expected a number (the reward) or a dict with 'reward'")
    reward = float(value)
    if not math.isfinite(reward):
        raise ValueError(f"the agent function returned a non-finite reward {reward}")
    return reward, success, info


class AgentEpisode:
    """Runs one agent-function episode for an EnvManager (``manager``) whose env's
    ``run_agent`` is ``run``."""

    def __init__(self, manager: Any, run: Callable[[str], Any], options: dict[str, Any]):
        self.m = manager
        self.run_agent = run
        self.timeout_s = float(options.get("timeout_s", 300.0))
        self.model_name = str(options.get("model", DEFAULT_MODEL_NAME))
        self.max_requests = int(options.get("max_requests", 64))
        parser = options.get("tool_parser", "hermes")  # parses tool calls when a request passes tools
        if parser:
            from roll.tools.parsers import build_parser

            parser = build_parser(parser)
        self.tool_parser = parser or None
        self.session: EpisodeSession | None = None
        self.info: dict[str, float] = {}

    def check_mode(self) -> None:
        from roll.rollout.env_manager import EpisodeFailure

        if self.m.step_mode:
            self.m._fail(EpisodeFailure(
                "env_error", f"env {self.m.cfg.env_id!r} runs an agent function, which needs env manager mode "
                "'trajectory' (its samples are the segments the endpoint recorded)", permanent=True))

    async def run(self) -> None:
        from roll.rollout.env_manager import EpisodeFailure

        m = self.m
        gen = m.gen
        session = self.session = EpisodeSession(
            m.spec.episode_id, m.client, m.control, m.renderer,
            temperature=gen.temperature if gen.do_sample else 0.0, top_p=gen.top_p, top_k=gen.top_k,
            max_new_tokens=gen.max_new_tokens, max_context_tokens=m.mcfg.max_context_tokens,
            stop_strings=list(gen.stop_strings), sample_seed=m.spec.sample_seed, model_name=self.model_name,
            tool_parser=self.tool_parser, max_requests=self.max_requests)
        try:
            endpoint = await acquire_endpoint()
        except Exception as e:  # e.g. no free port: this episode fails, counted and retried
            return m._fail(EpisodeFailure("env_error", f"the chat endpoint could not start: {type(e).__name__}: {e}",
                                          traceback="".join(traceback.format_exception(e))))
        url = endpoint.open(session)
        error: EpisodeFailure | None = None
        value: Any = None
        t0 = time.monotonic()
        try:
            value = await m.runner.call(functools.partial(self.run_agent, url), timeout=self.timeout_s)
        except CallTimeout:
            error = EpisodeFailure("env_timeout", f"the agent function ran longer than timeout_s={self.timeout_s:g}")
        except asyncio.CancelledError:
            m.env_broken = True  # its thread may still be running the function: never reuse it
            raise
        except Exception as e:  # anything the user's function raised
            error = EpisodeFailure("env_error", f"the agent function raised {type(e).__name__}: {e}",
                                   traceback="".join(traceback.format_exception(e)))
        finally:
            await endpoint.close(session)
            await release_endpoint(endpoint)
            m.gen_time += session.gen_time
            m.env_time += max(0.0, time.monotonic() - t0 - session.gen_time)
        m.done = True
        m.turn = session.counts["requests"]
        if session.failure is not None:
            return m._fail(EpisodeFailure(session.failure.kind, session.failure.detail))
        if error is not None:
            return m._fail(error)
        try:
            reward, success, self.info = agent_result(value)
        except (TypeError, ValueError) as e:
            return m._fail(EpisodeFailure("env_error", str(e), permanent=True))
        if not any(s.num_turns for s in session.segments):
            return m._fail(EpisodeFailure("env_error", "the agent function made no chat-completion request that "
                                          "completed: there is nothing to train", permanent=True))
        m.final_reward = reward
        m.success = reward > 0 if success is None else success
        m.terminated = True

    def trajectories(self, common: dict[str, Any], metrics: dict[str, float]) -> list[Trajectory]:
        """One sample per segment; each carries the episode's reward on its last model token."""
        session = self.session
        assert session is not None
        segments = [(i, s) for i, s in enumerate(session.segments) if s.num_turns]
        counts = {f"agent/{k}": float(v) for k, v in session.counts.items()}
        counts["agent/segments"] = float(len(segments))
        counts.update({f"agent/info/{k}": v for k, v in self.info.items()})
        out = []
        for i, seg in segments:
            records = [r for r in session.records if r.segment == i]
            turn_actions = [{"actions": [f"tool:{c['function']['name']}" for c in r.messages[-1].get("tool_calls", [])],
                             "valid": True, "error": ""} for r in records]
            ids = seg.ids + seg.open_tail  # the last assistant turn closed as the template writes it
            n_tail = len(seg.open_tail)
            mask = seg.mask + [0] * n_tail
            out.append(Trajectory(
                input_ids=ids, loss_mask=mask, logprobs=seg.logprobs + [0.0] * n_tail,
                token_turns=seg.turns + [-1] * n_tail, token_versions=seg.versions + [-1] * n_tail,
                turn_versions=list(seg.turn_versions), turn_rewards=[0.0] * seg.num_turns,
                prompt_length=mask.index(1) if 1 in mask else len(mask), messages=list(seg.messages),
                metrics={**metrics, **counts, "response_tokens": float(sum(seg.mask))},
                **{**common, "num_turns": seg.num_turns, "turn_actions": turn_actions}))
        return out
