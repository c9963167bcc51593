"""Demonstrations render prompts as the env manager does (instruction, turn template); the SFT
pipeline's data loading drops, counts and refuses what it cannot train on."""
import json

import gymnasium
import pytest
from transformers import AutoTokenizer

import roll.envs  # noqa: F401
from roll.config.rollout import EnvConfig
from roll.envs.agents import ExpertAgent
from roll.config import load_config
from roll.config.validate import ConfigError
from roll.pipelines import sft as sft_module
from roll.pipelines.sft import SFTPipeline, read_examples
from roll.pipelines.sft_data import episode_messages, generate, step_samples
from roll.workers.base import resolve_model

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


def _sft_pipeline(tmp_path, train_rows, val_rows, max_seq_length):
    paths = []
    for name, rows in (("train", train_rows), ("val", val_rows)):
        paths.append(tmp_path / f"{name}.jsonl")
        paths[-1].write_text("".join(json.dumps({"messages": m}) + "\n" for m in rows))
    cfg = load_config("configs/sft/frozenlake_sft_cpu.yaml", [
        f"output_dir={tmp_path / 'run'}", f"data.train_files=[{paths[0]}]", f"data.val_files=[{paths[1]}]",
        f"data.max_seq_length={max_seq_length}"])
    return SFTPipeline(cfg)


SHORT = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "<answer>Up</answer>"}]
LONG = [{"role": "user", "content": "word " * 300}, {"role": "assistant", "content": "<answer>Up</answer>"}]
NO_ANSWER = [{"role": "user", "content": "hi"}]


def test_sft_data_dropped_at_load_is_warned_of_and_counted_with_the_first_step(tmp_path, log_calls):
    pipe = _sft_pipeline(tmp_path, [SHORT, LONG, NO_ANSWER, SHORT], [SHORT], max_seq_length=64)
    pipe.tokenizer = AutoTokenizer.from_pretrained(resolve_model("roll-tiny://tiny"))
    calls = log_calls(sft_module.logger)
    kept = pipe._tokenize(read_examples([str(tmp_path / "train.jsonl")], "messages"), "train")
    pipe._tokenize(read_examples([str(tmp_path / "val.jsonl")], "messages"), "val")
    assert len(kept) == 2
    [msg] = [m for level, m in calls if level == "WARNING" and "dropped" in m]
    assert msg.startswith("train data: dropped 1 of 4 conversations over data.max_seq_length=64 (the longest has ")
    assert msg.endswith("and 1 without assistant turns")
    # both splits' counts are kept for the first step's metrics
    assert pipe.data_metrics == {"data/train_dropped_too_long": 1.0, "data/train_dropped_no_loss": 1.0,
                                 "data/val_dropped_too_long": 0.0, "data/val_dropped_no_loss": 0.0}


def test_sft_validation_data_that_is_all_dropped_is_an_error_before_ray_starts(tmp_path):
    pipe = _sft_pipeline(tmp_path, [SHORT], [LONG, NO_ANSWER], max_seq_length=64)
    with pytest.raises(ConfigError, match=r"data.val_files: no usable conversation \(all over data.max_seq_length=64"):
        pipe.setup()
    assert pipe.pool is None
