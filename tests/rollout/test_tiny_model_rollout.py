"""The rollout loop on the real tiny model (HF strategy) and the real envs."""
import asyncio

import pytest

pytestmark = pytest.mark.integration

import roll.envs  # noqa: F401

from roll.config.roles import GeneratingArgs, WorkerConfig
from roll.config.rollout import EnvConfig, EnvManagerConfig, RolloutConfig
from roll.rollout.scheduler import RolloutScheduler
from roll.workers.environment import EnvironmentWorker
from scripted_clients import Recording

hf_infer = pytest.importorskip("roll.strategies.hf_infer", reason="roll.strategies.hf_infer (HF inference strategy) is missing")


def test_tiny_model_trajectories_are_token_exact_on_real_envs(tok, tiny_model_dir):
    strategy = hf_infer.HFInferStrategy(WorkerConfig(), tiny_model_dir)
    client = Recording(strategy)
    envs = {"sokoban": EnvConfig(env_id="roll/Sokoban-v0", max_turns=2),
            "lake": EnvConfig(env_id="roll/FrozenLake-v0", max_turns=2)}
    mcfg = EnvManagerConfig(group_size=2, max_context_tokens=1024)
    gen = GeneratingArgs(max_new_tokens=12, temperature=1.0)

    async def main():
        worker = EnvironmentWorker(envs, mcfg, gen, tok, [client])
        sched = RolloutScheduler(envs, mcfg, RolloutConfig(mode="async"), [worker], pad_token_id=tok.pad_token_id)
        out = await sched.get_batch(4)
        await sched.shutdown()
        await strategy.stop()
        return out

    out = asyncio.run(main())
    assert len(out.trajectories) == 4 and all(t.failure is None for t in out.trajectories)
    by_id = {req.request_id: (req, res) for req, res in client.calls}
    for t in out.trajectories:
        reqs = sorted((r for r in by_id if r.startswith(t.episode_id + "/")), key=lambda r: int(r.split("/t")[1].split("/")[0]))
        assert len(reqs) == t.num_turns
        pos = 0
        for rid in reqs:
            req, res = by_id[rid]
            start = len(req.prompt_ids)
            assert t.input_ids[:start] == req.prompt_ids  # the prompt is the exact history
            assert t.input_ids[start:start + len(res.output_ids)] == res.output_ids
            assert t.logprobs[start:start + len(res.output_ids)] == pytest.approx(res.logprobs)
            assert all(t.loss_mask[start:start + len(res.output_ids)])
            pos = start + len(res.output_ids)
        assert not any(t.loss_mask[pos:])
        # the text of the trajectory is the whole conversation through the chat template
        rendered = tok.apply_chat_template([{"role": "system", "content": envs[t.env_tag].system_prompt}] + t.messages,
                                           tokenize=False)
        assert tok.decode(t.input_ids) == rendered
    assert out.batch["input_ids"].shape[0] == 4
