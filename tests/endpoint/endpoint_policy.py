"""A scripted inference worker for the endpoint tests, and a helper that runs one agent episode
through the real rollout loop (EnvironmentWorker -> EnvManager -> endpoint)."""
from __future__ import annotations

import asyncio

import roll.envs  # noqa: F401  (registers roll/AgentFunction-v0)

from roll.config.roles import GeneratingArgs
from roll.config.rollout import EnvConfig, EnvManagerConfig
from roll.rollout.env_manager import EpisodeSpec
from roll.workers.environment import EnvironmentWorker
import scripted_clients


class ScriptedPolicy(scripted_clients.ScriptedPolicy):
    """The shared scripted policy with logprob ``-(k + 1) / 10`` per token of request ``k``, so
    a test can tell which request wrote which tokens."""

    def __init__(self, tok, script):
        super().__init__(tok, script, logprob=lambda k: -(k + 1) / 10)


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
