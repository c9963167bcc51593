"""Demonstrations render prompts as the env manager does (instruction, turn template)."""
import json

import gymnasium

import roll.envs  # noqa: F401
from roll.config.rollout import EnvConfig
from roll.envs.agents import ExpertAgent
from roll.pipelines.sft_data import episode_messages, generate, step_samples

REPO_CFG = "configs/agentic/frozenlake_cpu.yaml"


def test_episode_messages_follow_the_turn_template_and_instruction_switch():
    env = gymnasium.make("roll/FrozenLake-v0")
    cfg = EnvConfig(env_id="roll/FrozenLake-v0", max_turns=6, turn_template="{observation}")
    obs, info = env.reset(seed=5)
    msgs, out = episode_messages(cfg, env, ExpertAgent(env, think=False), seed=5)
    assert msgs[0]["content"] == f"{info['instruction']}\n\n{obs}"
    assert out["success"] and all(m["content"].startswith("<answer>") for m in msgs[1::2])
    short = EnvConfig(env_id="roll/FrozenLake-v0", max_turns=6, turn_template="{observation}", include_instruction=False)
    msgs2, out2 = episode_messages(short, env, ExpertAgent(env, think=False), seed=5)
    assert msgs2[0]["content"] == obs and out2["instruction"] == ""
    assert [m["content"] for m in msgs2[1::2]] == [m["content"] for m in msgs[1::2]]


def test_episode_messages_render_feedback_as_the_env_manager_does():
    """{feedback} after an answer that is no action and after a move that changes nothing, the
    same text as in rollouts (roll/rollout/env_manager.py action_feedback)."""
    from roll.rollout.env_manager import action_feedback

    class Fumbling:
        answers = ["junk", "<answer>Up</answer>"]

        def __init__(self, expert):
            self.expert = expert

        def act(self, obs, info):
            return self.answers.pop(0) if self.answers else self.expert.act(obs, info)

    env = gymnasium.make("roll/FrozenLake-v0")
    cfg = EnvConfig(env_id="roll/FrozenLake-v0", max_turns=8, turn_template="{observation}{feedback}",
                    include_instruction=False)
    msgs, out = episode_messages(cfg, env, Fumbling(ExpertAgent(env, think=False)), seed=3)
    users = [m["content"] for m in msgs[::2]]
    assert users[1].endswith(action_feedback({"action_is_valid": False, "parse_error": "missing <answer>...</answer>"}))
    assert users[2].endswith("\nYour last action changed nothing.")
    assert all("Your last" not in u for u in users[3:]) and out["success"]


def test_step_samples_keep_the_window_and_instruction():
    msgs = [{"role": "user", "content": f"u{i}"} if i % 2 == 0 else {"role": "assistant", "content": f"a{i}"} for i in range(6)]
    samples = list(step_samples(msgs, "RULES", window=1))
    assert [len(s) for s in samples] == [2, 4, 4]
    assert samples[2][0]["content"] == "RULES\n\nu2" and samples[2][-1]["content"] == "a5"


def test_generate_writes_chat_rows(tmp_path):
    out = tmp_path / "demos.jsonl"
    stats = generate(REPO_CFG, str(out), episodes=5, epsilon=0.0)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert stats["rows"] == len(rows) > 0 and stats["FrozenLake"]["success_rate"] == 1.0
    assert all(r["messages"][-1]["role"] == "assistant" for r in rows)


def test_sft_collate_builds_the_trajectory_batch():
    """SFT builds its batch through trajectories_to_batch: the loss mask is response_mask,
    right padding, and the batch has the fields every training batch has."""
    from roll.data.trajectory import Trajectory, trajectories_to_batch
    from roll.pipelines.sft import collate

    b = collate([([1, 2, 3, 4], [0, 1, 1, 0]), ([5, 6], [0, 1])], pad_id=9)
    assert b["input_ids"].tolist() == [[1, 2, 3, 4], [5, 6, 9, 9]]
    assert b["attention_mask"].tolist() == [[1, 1, 1, 1], [1, 1, 0, 0]]
    assert b["response_mask"].tolist() == [[0, 1, 1, 0], [0, 1, 0, 0]]
    assert b["position_ids"].tolist() == [[0, 1, 2, 3], [0, 1, 1, 1]]
    agentic = trajectories_to_batch([Trajectory(input_ids=[1], loss_mask=[1], logprobs=[0.0], token_turns=[0],
                                                token_versions=[0], turn_versions=[0])], pad_token_id=0)
    assert set(b.tensors) == set(agentic.tensors)
