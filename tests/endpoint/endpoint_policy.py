"""A scripted inference worker for the endpoint tests, and a helper that runs one agent episode
through the real rollout loop (EnvironmentWorker -> EnvManager -> endpoint)."""
from __future__ import annotations

import asyncio

import roll.envs  # noqa: F401  (registers roll/AgentFunction-v0)

from roll.config.roles import GeneratingArgs
from roll.config.rollout import EnvConfig, EnvManagerConfig
from roll.rollout.env_manager import EpisodeSpec
from roll.strategies.base import GenerationResult
from roll.workers.environment import EnvironmentWorker


class ScriptedPolicy:
    """Answers request ``k`` of an episode with ``script[k]`` (the last entry repeats) as the
    tokenizer's canonical ids plus the end-of-turn token; logprob ``-(k + 1) / 10`` per token."""

    def __init__(self, tok, script):
        self.tok, self.script = tok, script
        self.eot = tok.convert_tokens_to_ids("<|im_end|>")
        self.requests = []

    async def generate(self, request):
        self.requests.append(request)
        k = request.meta["turn"]
        ids = (self.tok.encode(self.script[min(k, len(self.script) - 1)], add_special_tokens=False) + [self.eot])
        ids = ids[: request.max_new_tokens]
        return GenerationResult(request.request_id, ids, [-(k + 1) / 10] * len(ids), "stop", 0)

    async def abort(self, request_ids):
        pass


def run_agent_episode(tok, worker_client, function, tasks=None, *, mode="trajectory", max_new_tokens=64,
                      max_context_tokens=4096, seed=3, **env_kwargs):
    """The trajectories of one episode of roll/AgentFunction-v0 running ``endpoint_agents:<function>``."""
    kwargs = {"function": f"endpoint_agents:{function}", "tasks": tasks or [{"n": 7}], **env_kwargs}
    envs = {"agent": EnvConfig(env_id="roll/AgentFunction-v0", env_kwargs=kwargs, max_turns=1)}
    mcfg = EnvManagerConfig(group_size=1, mode=mode, max_context_tokens=max_context_tokens)
    worker = EnvironmentWorker(envs, mcfg, GeneratingArgs(max_new_tokens=max_new_tokens), tok, [worker_client])

    async def main():
        out = await worker.run_episode(EpisodeSpec("agent/0/0", "agent", "agent/0", seed))
        await worker.shutdown()
        return out

    return asyncio.run(main())
