"""Structured trajectory dumps: what an episode, an RLVR response and an SFT conversation
become in ``trajectories/step-NNNNNN.jsonl.gz`` (roll/viewer/records.py)."""
from __future__ import annotations

import asyncio
import gzip
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from roll.config.roles import GeneratingArgs
from roll.config.rollout import EnvConfig, EnvManagerConfig
from roll.data.trajectory import trajectories_to_batch
from roll.rollout.env_manager import EpisodeSpec
from roll.viewer import records as R
from roll.workers.environment import EnvironmentWorker

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "rollout"))
import roll.envs  # noqa: F401  (registers the shipped envs)
from rollout_fakes import ScriptedClient


@pytest.fixture(scope="module")
def tok(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


def play(tok, answers, env_id="roll/Sokoban-v0", mode="trajectory", group="t/0", episode="ep0", seed=3):
    """One real episode of a shipped env, the model's turns scripted by ``answers``."""
    it = iter(answers)
    client = ScriptedClient(tok, answer=lambda ids, s: next(it))
    envs = {"t": EnvConfig(env_id=env_id, max_turns=len(answers))}
    worker = EnvironmentWorker(envs, EnvManagerConfig(group_size=1, mode=mode), GeneratingArgs(max_new_tokens=32),
                               tok, [client])
    return asyncio.run(worker.run_episode(EpisodeSpec(episode, "t", group, seed)))


def test_pick_groups_takes_whole_groups_one_per_tag_first():
    gids = ["a/0", "a/0", "a/1", "a/1", "b/0", "b/0"]
    tags = ["a", "a", "a", "a", "b", "b"]
    assert R.pick_groups(gids, tags, 4) == [0, 1, 4, 5]  # the first group of each tag
    assert R.pick_groups(gids, tags, 6) == [0, 1, 4, 5, 2, 3]
    assert R.pick_groups(gids, tags, 5) == [0, 1, 4, 5]  # a/1 would not fit whole
    assert R.pick_groups(["g"] * 8, ["a"] * 8, 3) == [0, 1, 2]  # a group larger than n is cut
    assert R.pick_groups(gids, tags, 0) == []


def test_episode_record_has_turns_parsed_actions_and_token_view(tok):
    [traj] = play(tok, ["<think>go</think><answer>Left</answer>", "no tags here", "<answer>Down</answer>"])
    assert traj.failure is None and traj.num_turns == 3
    # the env's own parse of each turn reaches the trajectory
    assert [a["valid"] for a in traj.turn_actions] == [True, False, True]
    assert traj.turn_actions[0]["actions"] == ["Left"]
    assert "answer" in traj.turn_actions[1]["error"]
    batch = trajectories_to_batch([traj], pad_token_id=0)
    adv = torch.zeros_like(batch["infer_logprobs"])
    adv[0, batch["response_mask"][0].bool()] = 0.5
    [rec] = R.agentic_records(7, [traj], 4, tok, advantages=adv, trained=batch["response_mask"])
    assert rec["schema"] == R.SCHEMA_VERSION and rec["kind"] == "agentic" and rec["step"] == 7
    assert (rec["env_tag"], rec["env_id"], rec["group_id"], rec["seed"]) == ("t", "roll/Sokoban-v0", "t/0", 3)
    assert rec["advantage"] == pytest.approx(0.5) and rec["trained"] is True
    assert rec["return"] == pytest.approx(traj.episode_return)
    turns = rec["turns"]
    assert len(turns) == 3
    assert "<answer>Left</answer>" in turns[0]["model_text"]
    assert turns[0]["action"] == {"actions": ["Left"], "valid": True, "error": ""}
    assert turns[1]["action"]["valid"] is False
    assert turns[1]["reward"] == pytest.approx(traj.turn_rewards[1])
    assert [t["policy_version"] for t in turns] == [0, 0, 0]
    assert "Turn 1:" in turns[0]["observation"] and "Turn 2:" in turns[1]["observation"]  # the text the model saw
    tk = rec["tokens"]
    assert tk["ids"] == traj.input_ids and tk["mask"] == traj.loss_mask
    assert "".join(tk["text"]) == tok.decode(traj.input_ids, skip_special_tokens=False)
    assert tk["logprobs"] == pytest.approx(traj.logprobs, abs=1e-4)
    assert [a for a, m in zip(tk["advantages"], tk["mask"]) if m] == pytest.approx([0.5] * sum(traj.loss_mask))
    json.dumps(rec, allow_nan=False)  # plain JSON, no NaN


def test_step_mode_samples_join_into_one_episode_record(tok):
    samples = play(tok, ["<answer>Left</answer>", "<answer>Up</answer>"], mode="step")
    assert len(samples) == 2 and all(s.step_index >= 0 for s in samples)
    [rec] = R.agentic_records(1, samples, 4, tok)
    assert rec["num_turns"] == 2 and len(rec["turns"]) == 2
    assert [t["action"]["actions"] for t in rec["turns"]] == [["Left"], ["Up"]]
    assert "<answer>Up</answer>" in rec["turns"][1]["model_text"]
    assert rec["advantage"] is None and rec["tokens"]["advantages"] is None  # before advantages exist


def test_write_step_is_gzip_jsonl(tmp_path, tok):
    [traj] = play(tok, ["<answer>Left</answer>"])
    recs = R.agentic_records(3, [traj], 4, tok)
    path = R.write_step(tmp_path, 3, recs)
    assert path == tmp_path / "trajectories" / "step-000003.jsonl.gz"
    with gzip.open(path, "rt") as f:
        back = [json.loads(line) for line in f]
    assert back == json.loads(json.dumps(recs))
    assert not list(path.parent.glob("*.tmp"))


def test_rlvr_response_is_a_one_turn_trajectory(tok):
    prompt_ids = tok.encode("What is 2+2?", add_special_tokens=False)
    out_ids = tok.encode("\\boxed{4}", add_special_tokens=False)
    resp = SimpleNamespace(
        prompt=SimpleNamespace(ids=prompt_ids, sample=SimpleNamespace(id="p7", prompt_text="What is 2+2?")),
        group_id="train-s0-r0-p0", output_ids=out_ids, logprobs=[-0.5] * len(out_ids), text="\\boxed{4}",
        truncated=False, tag="math",
        reward=SimpleNamespace(score=1.0, success=True, failed=None, error="", components={"format": 1.0}))
    adv = [0.0] * len(prompt_ids) + [0.75] * len(out_ids)
    rec = R.rlvr_record(2, resp, 3, tok, adv, True, policy_version=1)
    assert rec["kind"] == "rlvr" and rec["id"] == "train-s0-r0-p0-3" and rec["env_tag"] == "math"
    assert rec["num_turns"] == 1 and rec["turns"][0]["observation"] == "What is 2+2?"
    assert rec["turns"][0]["model_text"] == "\\boxed{4}" and rec["turns"][0]["policy_version"] == 1
    assert rec["success"] is True and rec["return"] == 1.0 and rec["advantage"] == pytest.approx(0.75)
    assert rec["tokens"]["mask"] == [0] * len(prompt_ids) + [1] * len(out_ids)
    assert rec["info"] == {"reward/format": 1.0}
    failed = SimpleNamespace(**{**vars(resp), "reward": SimpleNamespace(score=0.0, success=False, failed="timeout",
                                                                          error="TimeoutError: 1s", components={})})
    rec = R.rlvr_record(2, failed, 0, tok, None, None)
    assert rec["failure"] == "timeout" and rec["success"] is None and rec["return"] is None
    assert rec["info"]["reward_error"] == "TimeoutError: 1s"


def test_sft_conversation_turns_follow_the_loss_mask(tok):
    from roll.data.chat import tokenize_conversation

    messages = [{"role": "user", "content": "grid A"}, {"role": "assistant", "content": "<answer>Up</answer>"},
                {"role": "user", "content": "grid B"}, {"role": "assistant", "content": "<answer>Left</answer>"}]
    ids, mask = tokenize_conversation(tok, messages)
    rec = R.sft_record(5, 0, ids, mask, tok)
    assert rec["kind"] == "sft" and rec["num_turns"] == 2
    assert "grid A" in rec["turns"][0]["observation"] and "<answer>Up</answer>" in rec["turns"][0]["model_text"]
    assert "grid B" in rec["turns"][1]["observation"] and "<answer>Left</answer>" in rec["turns"][1]["model_text"]
    assert rec["tokens"]["logprobs"] is None and rec["advantage"] is None


def test_long_text_and_token_arrays_are_bounded(tok):
    ids = [5] * (R.MAX_DUMP_TOKENS + 10)
    block = R.token_block(tok, ids, [1] * len(ids))
    assert len(block["ids"]) == R.MAX_DUMP_TOKENS and block["truncated"] is True
    t = R.turn("x" * (R.MAX_TEXT_CHARS + 5), "y")
    assert len(t["observation"]) < R.MAX_TEXT_CHARS + 40 and t["observation"].endswith("chars]")


def test_unknown_record_field_is_an_error():
    with pytest.raises(ValueError, match="unknown trajectory record fields"):
        R.record("agentic", 1, episode="x")
