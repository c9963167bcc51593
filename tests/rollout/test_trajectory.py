"""Collation of trajectories into a Batch: masks, rewards on the right tokens, versions."""
import pytest
import torch

from roll.data.trajectory import Trajectory, masked_trajectory, response_trajectory, trajectories_to_batch


def _two_turn() -> Trajectory:
    # prompt(3) | model(2, turn 0) | close(1) | obs(2) | model(3, turn 1) | close(1)
    ids = [10, 11, 12, 20, 21, 2, 30, 31, 40, 41, 42, 2]
    mask = [0, 0, 0, 1, 1, 0, 0, 0, 1, 1, 1, 0]
    turns = [-1, -1, -1, 0, 0, -1, -1, -1, 1, 1, 1, -1]
    vers = [-1, -1, -1, 3, 3, -1, -1, -1, 3, 4, 4, -1]
    lps = [0.0, 0.0, 0.0, -0.5, -0.25, 0.0, 0.0, 0.0, -1.0, -2.0, -3.0, 0.0]
    return Trajectory(
        input_ids=ids, loss_mask=mask, logprobs=lps, token_turns=turns, token_versions=vers,
        turn_versions=[3, 3], turn_rewards=[0.5, 1.0], final_reward=2.0, episode_return=3.5,
        success=True, num_turns=2, terminated=True, env_tag="a", group_id="a/0", episode_id="e0",
    )


def test_collation_places_turn_rewards_on_last_model_token_of_each_turn():
    t = _two_turn()
    short = Trajectory(input_ids=[5, 6], loss_mask=[0, 1], logprobs=[0.0, -0.1], token_turns=[-1, 0],
                       token_versions=[-1, 4], turn_versions=[4], turn_rewards=[-1.0], episode_return=-1.0,
                       num_turns=1, env_tag="b", group_id="b/0", episode_id="e1")
    b = trajectories_to_batch([t, short], pad_token_id=0)
    assert b["input_ids"].shape == (2, 12)
    assert b["attention_mask"][1].tolist() == [1, 1] + [0] * 10
    assert b["position_ids"][0].tolist() == list(range(12))
    assert b["response_mask"][0].tolist() == t.loss_mask
    assert b["turn_ids"][0].tolist() == t.token_turns
    assert b["policy_versions"][0].tolist() == t.token_versions
    assert torch.allclose(b["infer_logprobs"][0], torch.tensor(t.logprobs))
    expected = [0.0] * 12
    expected[4] = 0.5          # turn 0 reward on its last model token
    expected[10] = 1.0 + 2.0   # last turn: its reward plus the final reward
    assert b["token_rewards"][0].tolist() == expected
    assert b["token_rewards"][1].tolist() == [0.0, -1.0] + [0.0] * 10
    assert b["scores"].tolist() == [3.5, -1.0]
    assert b["min_policy_version"].tolist() == [3, 4]
    assert list(b["group_id"]) == ["a/0", "b/0"] and list(b["success"]) == [True, False]
    # the rewards on tokens add up to the episode return
    assert float(b["token_rewards"][0].sum()) == pytest.approx(t.episode_return)


def test_step_mode_sample_gets_its_own_turn_reward_and_final_reward_only_at_the_end():
    mid = Trajectory(input_ids=[1, 7, 8], loss_mask=[0, 1, 1], logprobs=[0, -1, -1], token_turns=[-1, 1, 1],
                     token_versions=[-1, 0, 0], turn_versions=[0], turn_rewards=[0.25], final_reward=5.0,
                     num_turns=3, step_index=1, state_key="k", episode_id="e")
    last = Trajectory(input_ids=[1, 9], loss_mask=[0, 1], logprobs=[0, -1], token_turns=[-1, 2],
                      token_versions=[-1, 0], turn_versions=[0], turn_rewards=[1.0], final_reward=5.0,
                      num_turns=3, step_index=2, state_key="k2", episode_id="e")
    b = trajectories_to_batch([mid, last], pad_token_id=0)
    assert b["token_rewards"][0].tolist() == [0.0, 0.0, 0.25]
    assert b["token_rewards"][1].tolist() == [0.0, 6.0, 0.0]
    assert list(b["state_key"]) == ["k", "k2"] and list(b["step_index"]) == [1, 2]


def test_failed_or_inconsistent_trajectories_are_rejected():
    bad = _two_turn()
    bad.failure = "env_error"
    with pytest.raises(ValueError, match="failed"):
        trajectories_to_batch([bad], 0)
    broken = _two_turn()
    broken.loss_mask.pop()
    with pytest.raises(ValueError, match="loss_mask"):
        trajectories_to_batch([broken], 0)
    with pytest.raises(ValueError):
        trajectories_to_batch([], 0)


def test_response_trajectory_is_a_one_turn_episode():
    t = response_trajectory([1, 2, 3], [7, 8], [-0.5, -0.25], reward=2.0, policy_version=4, temperature=0.7,
                            group_id="g", episode_id="g-0")
    b = trajectories_to_batch([t, response_trajectory([1], [9], [-1.0], reward=-1.0, policy_version=5)], pad_token_id=0)
    assert b["response_mask"].tolist() == [[0, 0, 0, 1, 1], [0, 1, 0, 0, 0]]
    assert b["token_rewards"][0].tolist() == [0, 0, 0, 0, 2.0] and b["token_rewards"][1, 1] == -1.0
    assert b["scores"].tolist() == [2.0, -1.0]
    assert b["policy_versions"][0].tolist() == [-1, -1, -1, 4, 4] and b["min_policy_version"].tolist() == [4, 5]
    assert b["turn_ids"][0].tolist() == [-1, -1, -1, 0, 0]
    assert b["temperature"][0].item() == pytest.approx(0.7)
    assert t.num_turns == 1 and t.prompt_length == 3
    with pytest.raises(ValueError, match="'g-0': 2 tokens but 1 logprobs"):
        response_trajectory([1], [7, 8], [-1.0], episode_id="g-0")


def test_masked_trajectory_makes_each_trained_run_a_turn():
    t = masked_trajectory([5, 6, 7, 8, 9, 10, 11], [0, 1, 1, 0, 0, 1, 0])
    assert t.token_turns == [-1, 0, 0, -1, -1, 1, -1] and t.num_turns == 2 and t.prompt_length == 1
    b = trajectories_to_batch([t], pad_token_id=0)
    assert b["response_mask"][0].tolist() == [0, 1, 1, 0, 0, 1, 0] and b["token_rewards"].abs().sum() == 0
    with pytest.raises(ValueError, match="loss_mask has 2 entries for 3 tokens"):
        masked_trajectory([1, 2, 3], [0, 1])
