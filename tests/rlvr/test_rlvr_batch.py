"""The RLVR batch contract, query filters and advantages, without Ray."""
import pytest
import torch
from roll.pipelines.policy import batch_advantages
from roll.pipelines.rlvr import Prompt, Response, RLVRPipeline

from roll.config.loader import load_config
from roll.data.rlvr import PromptSample
from roll.data.trajectory import Trajectory, trajectories_to_batch
from roll.workers.reward import RewardResult


class _Tok:
    pad_token_id = 0


def _pipeline(**overrides):
    cfg = load_config("configs/rlvr/multi_domain_cpu.yaml", [f"{k}={v}" for k, v in overrides.items()])
    p = object.__new__(RLVRPipeline)  # the batch/filter phases need only the config and tokenizer
    p.cfg, p.tokenizer = cfg, _Tok()
    p.tag_to_reward = {t: t for t in cfg.rewards}
    from roll.algorithms import build_kl_controller

    p.kl_ctl = build_kl_controller(cfg.algorithm)
    return p


def _resp(tag, group, score, n_out=3, failed=None, truncated=False, prompt_len=4, version=0, index=0):
    prompt = Prompt(PromptSample(f"{tag}-{group}", tag, [{"role": "user", "content": "q"}]), list(range(1, prompt_len + 1)))
    return Response(prompt, f"g{group}", [7] * n_out, [-0.5] * n_out, "text", truncated,
                    RewardResult(score=score, success=score > 0.5, failed=failed), version, index)


def test_rlvr_batch_is_built_like_the_agentic_one():
    """One batch builder: an RLVR response is a one-turn trajectory, so its batch has every
    field of an agentic batch, with the generating version on its tokens."""
    p = _pipeline()
    b = p.build_batch([_resp("math", 0, 1.0, version=3), _resp("math", 0, 0.0, n_out=5, version=2, index=1),
                       _resp("mcq", 1, 0.5, prompt_len=2, version=3)])
    agentic = trajectories_to_batch([Trajectory(
        input_ids=[1, 2, 3], loss_mask=[0, 1, 1], logprobs=[0.0, -1.0, -1.0], token_turns=[-1, 0, 0],
        token_versions=[-1, 0, 0], turn_versions=[0], turn_rewards=[1.0], num_turns=1)], pad_token_id=0)
    assert set(agentic.tensors) <= set(b.tensors) and set(agentic.non_tensors) <= set(b.non_tensors)
    assert b["policy_versions"][0].tolist() == [-1] * 4 + [3] * 3 + [-1] * 2
    assert b["policy_versions"][1].tolist() == [-1] * 4 + [2] * 5
    assert b["min_policy_version"].tolist() == [3, 2, 3]
    assert list(b["env_id"]) == ["math", "math", "mcq"]  # the reward domain that scored it
    assert list(b["episode_id"]) == ["g0-0", "g0-1", "g1-0"] and list(b["num_turns"]) == [1, 1, 1]
    assert list(b["prompt_id"]) == ["math-0", "math-0", "mcq-1"]


def test_batch_fields_follow_the_trajectory_contract():
    p = _pipeline()
    samples = [_resp("math", 0, 1.0, n_out=3), _resp("math", 0, 0.0, n_out=5, truncated=True), _resp("mcq", 1, 0.5, prompt_len=2)]
    b = p.build_batch(samples)
    assert b["input_ids"].shape == (3, 9)
    assert b["response_mask"][0].tolist() == [0, 0, 0, 0, 1, 1, 1, 0, 0]
    assert b["attention_mask"][1].sum() == 9 and b["response_mask"][1].sum() == 5
    assert b["token_rewards"][0, 6] == 1.0 and b["token_rewards"][0].sum() == 1.0  # on the last response token
    assert b["token_rewards"][2, 4] == 0.5
    assert torch.equal(b["infer_logprobs"] != 0, b["response_mask"].bool())
    assert b["turn_ids"][0].tolist() == [-1] * 4 + [0] * 3 + [-1] * 2
    nt = {k: list(v) for k, v in b.non_tensors.items()}
    assert nt["group_id"] == ["g0", "g0", "g1"] and nt["env_tag"] == nt["tag"] == ["math", "math", "mcq"]
    assert nt["success"] == [True, False, False] and nt["truncated"] == [False, True, False]


def test_grpo_advantages_on_the_batch():
    p = _pipeline(**{"algorithm.mask_overlong": "true"})
    b = p.build_batch([_resp("math", 0, 1.0), _resp("math", 0, 0.0), _resp("mcq", 1, 1.0), _resp("mcq", 1, 1.0, truncated=True)])
    b["old_logprobs"] = b["infer_logprobs"]
    metrics = batch_advantages(b, p.cfg.algorithm, p.kl_ctl)
    adv = b["advantages"]
    assert (adv[0][b["response_mask"][0].bool()] > 0).all() and (adv[1][b["response_mask"][1].bool()] < 0).all()
    assert adv[2].abs().sum() == 0  # a group with equal rewards carries no signal
    assert b["response_mask"][3].sum() == 0 and metrics["reward/masked_overlong"] == 1  # response filter


def test_reference_kl_without_kl_in_reward():
    """A reference for the KL loss only (use_kl_in_reward false): the rewards are untouched
    and the KL to the reference is reported."""
    p = _pipeline(**{"algorithm.use_kl_loss": "true", "algorithm.kl_loss_coef": "0.1"})
    b = p.build_batch([_resp("math", 0, 1.0), _resp("math", 0, 0.0)])
    b["old_logprobs"] = b["infer_logprobs"]
    b["ref_logprobs"] = b["infer_logprobs"] - 0.2 * b["response_mask"]
    metrics = batch_advantages(b, p.cfg.algorithm, p.kl_ctl)
    assert metrics["actor/ref_kl"] > 0 and "reward/kl_coef" not in metrics
    assert (b["advantages"][0][b["response_mask"][0].bool()] > 0).all()


def test_query_filter():
    p = _pipeline(**{"rewards.math.drop_uniform_groups": "true"})
    assert p.query_filter([_resp("math", 0, 1.0), _resp("math", 0, 1.0)]) == "filtered"
    assert p.query_filter([_resp("math", 0, 1.0), _resp("math", 0, 0.0)]) == "keep"
    assert p.query_filter([_resp("mcq", 0, 1.0), _resp("mcq", 0, 1.0)]) == "keep"  # mcq does not filter
    # failed samples do not count: the one valid reward is "uniform"; all failed drops the group
    assert p.query_filter([_resp("math", 0, 1.0), _resp("math", 0, 0.0, failed="timeout")]) == "filtered"
    assert p.query_filter([_resp("mcq", 0, 0.0, failed="error"), _resp("mcq", 0, 0.0, failed="timeout")]) == "all_failed"


def test_config_errors_are_collected(tmp_path):
    from roll.config.validate import ConfigError

    cfg = load_config("configs/rlvr/multi_domain_cpu.yaml", ["rollout_batch_size=7", "data.train_files=[]",
                                                             f"output_dir={tmp_path}"])
    with pytest.raises(ConfigError) as e:
        RLVRPipeline(cfg)
    assert "train_files" in str(e.value) and "multiple of" in str(e.value)
