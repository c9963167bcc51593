"""The "adding an estimator" example in docs/algorithms.md runs as written, and the pipeline
reaches it through compute_advantages with no other change; AdvantageInputs.from_batch reads
the rollout's batch names."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from roll.algorithms.advantages import AdvantageInputs, compute_advantages
from roll.config.algorithm import AlgorithmConfig
from roll.registry import ADVANTAGES

DOC = Path(__file__).resolve().parents[2] / "docs" / "algorithms.md"


def test_docs_example_estimator_registers_and_runs():
    code = re.search(r"```python example-estimator\n(.*?)```", DOC.read_text(), re.S)
    assert code, "docs/algorithms.md lost its example estimator"
    try:
        exec(compile(code.group(1), str(DOC), "exec"), {})
        assert "max_baseline" in ADVANTAGES.ids()
        rewards = torch.zeros(4, 5)
        rewards[:, 4] = torch.tensor([1.0, 3.0, 2.0, 2.0])
        mask = torch.zeros(4, 5)
        mask[:, 2:] = 1
        cfg = AlgorithmConfig(adv_estimator="max_baseline", adv_estimator_args={"scale": 0.5})
        out = compute_advantages(AdvantageInputs(rewards, mask, ["a", "a", "b", "b"]), cfg)
        expected = torch.tensor([-1.0, 0.0, 0.0, 0.0])[:, None] * mask  # (score - group best) * 0.5
        torch.testing.assert_close(out.advantages, expected)
        with pytest.raises(ValueError, match="not an argument"):
            compute_advantages(AdvantageInputs(rewards, mask, [0, 0, 1, 1]),
                               AlgorithmConfig(adv_estimator="max_baseline", adv_estimator_args={"scael": 1}))
    finally:
        ADVANTAGES._entries.pop("max_baseline", None)  # keep the registry as the other tests expect


def test_from_batch_reads_rollout_names():
    from roll.data.trajectory import Trajectory, trajectories_to_batch

    def traj(ep, group, step, reward, state=""):
        ids = [1, 2, 3, 4, 5, 6]
        return Trajectory(input_ids=ids, loss_mask=[0, 0, 1, 1, 0, 0], logprobs=[0, 0, -0.5, -0.2, 0, 0],
                          token_turns=[-1, -1, step if step >= 0 else 0, step if step >= 0 else 0, -1, -1],
                          token_versions=[-1, -1, 0, 0, -1, -1], turn_versions=[0], turn_rewards=[reward],
                          episode_return=reward, num_turns=1 if step < 0 else 2, group_id=group, episode_id=ep,
                          env_tag="sokoban", state_key=state, step_index=step)

    batch = trajectories_to_batch([traj("e0", "g0", -1, 1.0), traj("e1", "g0", -1, 0.0)], pad_token_id=0)
    inp = AdvantageInputs.from_batch(batch)
    assert inp.state_keys is None and inp.group_ids == ["g0", "g0"] and inp.tags == ["sokoban", "sokoban"]
    out = compute_advantages(inp, AlgorithmConfig(adv_estimator="grpo"))
    assert out.advantages[0, 2] > 0 > out.advantages[1, 2]

    steps = trajectories_to_batch([traj("e0", "g0", 0, 0.0, "s0"), traj("e0", "g0", 1, 1.0, "s1"),
                                   traj("e1", "g0", 0, 0.0, "s0"), traj("e1", "g0", 1, 0.0, "s2")], pad_token_id=0)
    inp = AdvantageInputs.from_batch(steps)
    assert inp.step_ids == [0, 1, 0, 1] and inp.state_keys == ["s0", "s1", "s0", "s2"]
    out = compute_advantages(inp, AlgorithmConfig(adv_estimator="gigpo", gamma=0.9))
    assert torch.isfinite(out.advantages).all()
    assert out.advantages[0, 2] > out.advantages[2, 2]  # same state s0, e0 went on to succeed
