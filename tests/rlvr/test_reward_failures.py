"""RLVR: a reward function that fails permanently (broken code, wrong signature, a result that
is not a RewardOutput) stops the run with one line naming the domain and the log file; an
error about one sample is counted only; a step with no trainable sample stops the run."""
from __future__ import annotations

from pathlib import Path

import pytest

from roll.config.loader import load_config
from roll.data.rlvr import PromptSample
from roll.errors import RunFailedError
from roll.rewards.base import RewardOutput
from roll.rewards.llm_judge import JudgeParseError
from roll.workers.reward import RewardResult, score_sample

REPO = Path(__file__).resolve().parents[2]


def _undefined_name(sample, **fields):
    return RewardOutput(float(sample["response"] == anwser))  # noqa: F821  (the typo is the point)


def _no_fields(sample):
    return RewardOutput(1.0)


def _forgot_return(sample, **fields):
    float(sample["response"] == "4")


def _per_sample_bug(sample, **fields):
    return RewardOutput(len(int(sample["response"])))  # TypeError inside the body: about this sample


def _judge_unparseable(sample, **fields):
    raise JudgeParseError(f"no score in judge reply {sample['response']!r}")


def _zero_division(sample, **fields):
    return RewardOutput(1 / 0)


@pytest.mark.parametrize("fn,permanent", [
    (_undefined_name, True), (_no_fields, True), (_forgot_return, True),
    (_per_sample_bug, False), (_judge_unparseable, False), (_zero_division, False)])
def test_reward_errors_are_classified_and_keep_their_traceback(fn, permanent):
    result = score_sample(fn, {"response": "4"}, {"weight": 1})
    assert result.failed == "error"
    assert result.permanent is permanent, result.error
    if fn not in (_no_fields, _forgot_return):  # those two never raised inside the function
        assert f'File "{__file__}", line' in result.traceback
    assert result.error.split(":")[0] in result.traceback.rstrip().splitlines()[-1]  # the exception line


@pytest.fixture
def pipeline(tmp_path):
    from roll.pipelines.rlvr import RLVRPipeline

    cfg = load_config(REPO / "configs/rlvr/multi_domain_cpu.yaml", [f"output_dir={tmp_path}"])
    p = RLVRPipeline(cfg)
    p.tag_to_reward = {tag: tag for tag in cfg.rewards}
    p._make_tracker()
    yield p
    p.tracker.finish()


def _response(tag: str, result: RewardResult, i: int = 0):
    from roll.pipelines.rlvr import Prompt, Response

    prompt = Prompt(PromptSample(f"{tag}-{i}", tag, [{"role": "user", "content": "2+2?"}]), [1, 2, 3])
    return Response(prompt, f"train-s0-r0-p{i}", [5, 6], [-0.1, -0.2], "4", False, result)


def test_a_permanently_failing_reward_stops_the_run(pipeline, tmp_path):
    broken = score_sample(_undefined_name, {"response": "4"}, {})
    counted = score_sample(_judge_unparseable, {"response": "xx"}, {})
    pipeline.record_failures([[_response("qa", counted)]])  # about one sample: counted, logged
    with pytest.raises(RunFailedError) as info:
        pipeline.record_failures([[_response("math", RewardResult(score=1.0)), _response("math", broken, 1)]])
    msg = str(info.value)
    assert "\n" not in msg
    assert "reward 'math' (reward_fn 'math_rule', domain 'math') fails permanently: NameError: name 'anwser'" in msg
    assert f"traceback in {tmp_path / 'reward_errors.log'}" in msg
    log = (tmp_path / "reward_errors.log").read_text()
    assert "JudgeParseError" in log and "NameError" in log
    assert f'File "{__file__}", line' in log


def test_a_step_with_no_trainable_response_stops_the_run(pipeline, tmp_path):
    from collections import Counter

    pipeline.step_failures = (10, 10, 0, Counter({"error: ZeroDivisionError: division by zero": 10}))
    metrics = {"reward/failed": 10.0}
    with pytest.raises(RunFailedError, match=r"step 1: no trainable sample \(10 of 10 responses failed\); "
                                             r"most common: 10x error: ZeroDivisionError"):
        pipeline.check_rollout(0, None, metrics)
    assert metrics["rollout/empty_batch"] == 1.0
    assert '"rollout/empty_batch": 1.0' in (tmp_path / "logs" / "metrics.jsonl").read_text()  # the step is on record
