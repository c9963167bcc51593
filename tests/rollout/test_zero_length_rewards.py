"""A sample without model tokens keeps its reward in the batch (group statistics need it)."""
import torch

from roll.algorithms import AdvantageInputs, compute_advantages
from roll.config.algorithm import AlgorithmConfig
from roll.data.trajectory import Trajectory, trajectories_to_batch


def _traj(n_model: int, reward: float, group: str = "g") -> Trajectory:
    prompt = [5, 6, 7]
    out = list(range(10, 10 + n_model))
    return Trajectory(
        input_ids=prompt + out, loss_mask=[0] * 3 + [1] * n_model, logprobs=[0.0] * (3 + n_model),
        token_turns=[-1] * 3 + [0] * n_model, token_versions=[-1] * 3 + [0] * n_model, turn_versions=[0],
        turn_rewards=[reward], episode_return=reward, num_turns=1, group_id=group, env_tag="t", episode_id=f"e{n_model}",
    )


def test_zero_length_row_keeps_its_reward_and_baseline():
    batch = trajectories_to_batch([_traj(0, 1.0), _traj(2, 0.0)], pad_token_id=0)
    rewards = batch["token_rewards"]
    assert rewards[0].sum().item() == 1.0 and rewards[0, 2].item() == 1.0  # on the last real token
    assert rewards[1].sum().item() == 0.0
    out = compute_advantages(AdvantageInputs(rewards, batch["response_mask"], list(batch["group_id"])),
                             AlgorithmConfig(adv_estimator="grpo"))
    # the empty row raised the group mean, so the other sample's advantage is negative
    assert out.advantages[1][batch["response_mask"][1].bool()].lt(0).all()
    assert torch.all(out.advantages[0] == 0)
