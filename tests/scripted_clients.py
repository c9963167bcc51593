"""Inference clients for tests that drive the real rollout loop: a scripted policy in place of
the model, and a recorder around a real strategy. Imported by name from any test folder
(pytest puts tests/, the folder of the root conftest.py, on sys.path)."""
from __future__ import annotations

from collections.abc import Callable

from roll.strategies.base import GenerationResult


class ScriptedPolicy:
    """Answers request ``k`` of an episode (``meta["turn"]``) with ``script[k]`` (the last entry
    repeats) as the tokenizer's canonical ids plus the end-of-turn token, cut at
    ``max_new_tokens``; ``logprob(k)`` per token. Keeps every request."""

    def __init__(self, tok, script, logprob: Callable[[int], float] = lambda k: -0.5):
        self.tok, self.script, self.logprob = tok, script, logprob
        self.eot = tok.convert_tokens_to_ids("<|im_end|>")
        self.requests = []

    async def generate(self, request):
        self.requests.append(request)
        k = request.meta["turn"]
        ids = (self.tok.encode(self.script[min(k, len(self.script) - 1)], add_special_tokens=False) + [self.eot])
        ids = ids[: request.max_new_tokens]
        return GenerationResult(request.request_id, ids, [self.logprob(k)] * len(ids), "stop", 0)

    async def abort(self, request_ids):
        pass


class Recording:
    """Delegates to a strategy and keeps every (request, result) in ``calls``."""

    def __init__(self, inner):
        self.inner = inner
        self.calls = []

    async def generate(self, request):
        result = await self.inner.generate(request)
        self.calls.append((request, result))
        return result

    async def abort(self, ids):
        await self.inner.abort(ids)
