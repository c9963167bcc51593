"""LearningSignal (pipelines/base.py): a run whose every step had only zero advantages is named."""
from __future__ import annotations

from roll.pipelines.base import LearningSignal


def test_all_zero_advantages_are_a_problem_and_one_nonzero_step_is_not():
    signal = LearningSignal()
    for _ in range(3):
        signal.add({"reward/advantages_max": 0.0, "reward/advantages_min": 0.0, "actor/loss": 0.1})
    msg = signal.problem(5, 8)
    assert msg is not None and "every advantage of steps 6-8 was zero" in msg
    signal.add({"reward/advantages_max": 0.0, "reward/advantages_min": -0.25})  # a negative advantage is a signal
    assert signal.problem(5, 9) is None


def test_steps_without_advantages_are_not_judged():
    signal = LearningSignal()  # sft steps report a loss, no advantages
    signal.add({"train/loss": 1.2})
    assert signal.problem(0, 1) is None


ZERO = {"reward/advantages_max": 0.0, "reward/advantages_min": 0.0}
SIGNAL = {"reward/advantages_max": 0.5, "reward/advantages_min": -0.5}


def test_cut_responses_are_named_as_the_likely_cause_of_no_signal():
    signal = LearningSignal()
    signal.add({**ZERO, "env/A/cut_response_rate": 1.0, "env/B/cut_response_rate": 0.5,
                "val/env/A/cut_response_rate": 0.0})  # validation does not count
    signal.add({**ZERO, "env/A/cut_response_rate": 0.5, "env/B/cut_response_rate": 0.5})
    msg = signal.problem(0, 2)
    assert msg.startswith("no learning signal") and "62% of the training responses were cut at max_new_tokens" in msg
    few = LearningSignal()
    few.add({**ZERO, "rollout/math/truncated_rate": 0.2})
    assert "cut" not in few.problem(0, 1)


def test_a_run_that_learnt_with_nearly_every_response_cut_is_warned_of():
    signal = LearningSignal()
    signal.add({**SIGNAL, "rollout/math/truncated_rate": 0.95})
    assert signal.problem(0, 1).startswith("most responses never finished: 95% of the training responses")
    signal.add({**SIGNAL, "rollout/math/truncated_rate": 0.7})
    assert signal.problem(0, 2) is None  # 82%: below the warning's share


def test_an_lr_schedule_that_ends_before_the_run_is_named_with_its_steps():
    signal = LearningSignal()
    for lr in [0.0, 1e-4, 2e-4, 1e-4, 0.0, 0.0, 0.0]:  # a warmup from 0, then the schedule ran out at step 5
        signal.add({**SIGNAL, "actor/lr": lr, "critic/lr": 1e-5})
    [msg] = signal.lr_problems(10)
    assert msg.startswith("actor/lr reached 0 at step 15 and stayed 0 for the last 3 of the run's 7 steps")
    assert "actor_train.training_args.num_training_steps is shorter" in msg and "actor/optimizer_steps" in msg
    ends_with_the_run = LearningSignal()
    for lr in [2e-4, 1e-4, 5e-5, 0.0]:  # a cosine whose last step reads 0
        ends_with_the_run.add({**SIGNAL, "actor/lr": lr})
    assert ends_with_the_run.lr_problems(0) == []
    warmup_only = LearningSignal()
    for _ in range(3):
        warmup_only.add({"actor/lr": 0.0})
    assert warmup_only.lr_problems(0) == []
