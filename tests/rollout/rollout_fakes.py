"""Test doubles for rollout tests: a scripted inference client and small text envs.

ScriptedClient is deterministic: the text it answers depends only on (prompt ids, seed), its
tokens are the canonical tokenization of that text plus the end-of-turn token, and its
latency is simulated per token, so tests control timing and long tails exactly. It honours
abort: an aborted request returns the tokens "decoded" so far with finish_reason "abort".
"""
from __future__ import annotations

import asyncio
import itertools
import random
import time
import zlib
from collections.abc import Callable

import gymnasium
from gymnasium import spaces

from roll.strategies.base import GenerationRequest, GenerationResult

ACTIONS = ["Up", "Down", "Left", "Right"]


class ScriptedClient:
    """``answer(prompt_ids, seed) -> text``; default: a pseudo-random action in <answer> tags."""

    def __init__(
        self,
        tokenizer,
        answer: Callable[[list[int], int], str] | None = None,
        token_latency_s: float = 0.0,
        eot_id: int | None = None,
        length_fn: Callable[[list[int], int], int] | None = None,
    ):
        self.tok = tokenizer
        self.answer = answer or self._default_answer
        self.token_latency_s = token_latency_s
        self.eot_id = tokenizer.convert_tokens_to_ids("<|im_end|>") if eot_id is None else eot_id
        self.length_fn = length_fn
        self.version = 0
        self.requests: list[GenerationRequest] = []
        self.aborted: set[str] = set()
        self._abort_events: dict[str, asyncio.Event] = {}
        self.inflight = 0
        self.max_inflight = 0

    @staticmethod
    def _default_answer(prompt_ids: list[int], seed: int) -> str:
        h = zlib.crc32(bytes(str((len(prompt_ids), sum(prompt_ids[-50:]), seed)), "utf8"))
        return f"<answer>{ACTIONS[h % 4]}</answer>"

    def output_ids(self, request: GenerationRequest) -> list[int]:
        text = self.answer(request.prompt_ids, request.seed or 0)
        ids = list(self.tok.encode(text, add_special_tokens=False))
        if self.length_fn is not None:  # pad to a chosen length with filler tokens (bench-like)
            n = self.length_fn(request.prompt_ids, request.seed or 0)
            filler = self.tok.encode(" x", add_special_tokens=False)
            while len(ids) < n:
                ids = filler + ids
        return ids + [self.eot_id]

    async def generate(self, request: GenerationRequest) -> GenerationResult:
        self.requests.append(request)
        self.inflight += 1
        self.max_inflight = max(self.max_inflight, self.inflight)
        try:
            full = self.output_ids(request)[: max(request.max_new_tokens, 0)]
            version = self.version
            n = len(full)
            reason = "stop" if full and full[-1] == self.eot_id else "length"
            if self.token_latency_s > 0 and n:
                ev = self._abort_events.setdefault(request.request_id, asyncio.Event())
                if request.request_id in self.aborted:
                    ev.set()
                t0 = time.monotonic()
                try:
                    await asyncio.wait_for(ev.wait(), timeout=n * self.token_latency_s)
                    done = min(n, int((time.monotonic() - t0) / self.token_latency_s))
                    full, reason = full[:done], "abort"
                except TimeoutError:
                    pass
                finally:
                    self._abort_events.pop(request.request_id, None)
            logprobs = [-0.01 * ((i + (request.seed or 0)) % 7 + 1) for i in range(len(full))]
            return GenerationResult(request.request_id, full, logprobs, reason, version)
        finally:
            self.inflight -= 1

    async def abort(self, request_ids: list[str]) -> None:
        for rid in request_ids:
            self.aborted.add(rid)
            ev = self._abort_events.get(rid)
            if ev is not None:
                ev.set()


class CountdownEnv(gymnasium.Env):
    """A tiny text env: the episode lasts ``1 + seed % max_len`` turns; reward 1 per valid
    ``<answer>Dir</answer>``, -0.1 otherwise; success when every action was valid."""

    metadata = {"render_modes": []}

    def __init__(self, max_len: int = 4, step_delay_s: float = 0.0):
        self.observation_space = spaces.Text(max_length=10_000)
        self.action_space = spaces.Text(max_length=10_000)
        self.max_len = max_len
        self.step_delay_s = step_delay_s
        self.left = 0
        self.all_valid = True
        self.seed_ = 0

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.seed_ = int(seed or 0)
        self.left = 1 + self.seed_ % self.max_len
        self.all_valid = True
        return f"{self.left} steps to go", {"instruction": "Move with <answer>Up|Down|Left|Right</answer>."}

    def step(self, action):
        if self.step_delay_s:
            time.sleep(self.step_delay_s)
        valid = any(f"<answer>{a}</answer>" in action for a in ACTIONS)
        self.all_valid &= valid
        self.left -= 1
        done = self.left <= 0
        info = {"success": done and self.all_valid, "action_is_valid": valid, "action_is_effective": valid}
        return f"{self.left} steps to go", (1.0 if valid else -0.1), done, False, info


_flaky_calls = itertools.count()


class FlakyEnv(CountdownEnv):
    """CountdownEnv that raises on ``error_p`` of steps and hangs ``hang_s`` on ``hang_p`` of them.

    Its error messages carry a call number, as transient errors (a dropped connection, a busy
    server) rarely repeat word for word: the same message at the same turn from the same seed
    twice is what roll/rollout/failures.py calls permanent."""

    def __init__(self, error_p: float = 0.10, hang_p: float = 0.05, hang_s: float = 2.0, **kw):
        super().__init__(**kw)
        self.error_p, self.hang_p, self.hang_s = error_p, hang_p, hang_s
        # not tied to the env seed: a retried episode (same seed) must not fail the same way
        self.rng = random.Random()

    def step(self, action):
        u = self.rng.random()
        if u < self.error_p:
            raise RuntimeError(f"injected env failure (call {next(_flaky_calls)})")
        if u < self.error_p + self.hang_p:
            time.sleep(self.hang_s)
        return super().step(action)


def register_test_envs() -> None:
    for env_id, entry in (("rolltest/Countdown-v0", CountdownEnv), ("rolltest/Flaky-v0", FlakyEnv)):
        if env_id not in gymnasium.registry:
            gymnasium.register(id=env_id, entry_point=entry, disable_env_checker=True)


class FailingClient(ScriptedClient):
    """A ScriptedClient whose generation raises (an ``inference_error``: transient, retried) on
    the first turn of the scripted episode attempts ``{(group_id, slot, attempt)}``: the same
    failures in any scheduling mode and completion order."""

    def __init__(self, tokenizer, fail: set[tuple[str, int, int]], **kw):
        super().__init__(tokenizer, **kw)
        self.fail = set(fail)

    async def generate(self, request: GenerationRequest) -> GenerationResult:
        group, slot, attempt = request.meta["episode_id"].split("#")[0].rsplit("/", 2)
        if request.meta["turn"] == 0 and (group, int(slot), int(attempt[1:])) in self.fail:
            raise RuntimeError(f"scripted inference failure of {request.request_id}")
        return await super().generate(request)
