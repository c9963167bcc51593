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
