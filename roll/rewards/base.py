"""The reward-function contract: a plain callable ``(sample, **fields) -> RewardOutput``.

An exception raised by a reward function is counted and surfaced by the caller (reward
workers), never silently scored 0.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, TypeVar


@dataclass
class RewardOutput:
    score: float
    """The scalar reward."""
    success: bool = False
    """Whether the sample fully solved its task (for success-rate metrics)."""
    components: dict[str, float] = field(default_factory=dict)
    """Named parts of the score (logged as reward/<name>)."""
    info: dict[str, Any] = field(default_factory=dict)
    """Anything else worth keeping with the sample (e.g. extracted answer, first failing test)."""


class RewardFn(Protocol):
    def __call__(self, sample: dict[str, Any], **fields: Any) -> RewardOutput: ...


F = TypeVar("F", bound=Callable[..., Any])


def reads(*names: str) -> Callable[[F], F]:
    """Declare the fields a ``(sample, **fields)`` reward function reads, from
    ``reward_fn_args`` or the sample: pre-flight then names any ``reward_fn_args`` key it would
    never read (a typo would otherwise be ignored). Set as ``fn.reward_options``."""
    def mark(fn: F) -> F:
        fn.reward_options = frozenset(names)  # type: ignore[attr-defined]
        return fn
    return mark
