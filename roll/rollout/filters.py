"""Group filters: ``filter(trajectories_of_one_group, **args) -> keep: bool``.

Registered in ``roll.registry.FILTERS`` and chosen by ``EnvManagerConfig.group_filter``;
a rejected group is replaced by a new one (counted as ``rollout/groups_filtered``).
"""
from __future__ import annotations

from roll.data.trajectory import Trajectory
from roll.registry import FILTERS


def _per_episode(group: list[Trajectory], field: str) -> list[float]:
    """``field`` of each episode, once (step-mode groups hold several samples per episode)."""
    first: dict[str, float] = {}
    for t in group:
        first.setdefault(t.episode_id, float(getattr(t, field)))
    return list(first.values())


@FILTERS.register("zero_variance")
def drop_zero_variance(group: list[Trajectory], eps: float = 1e-6) -> bool:
    """Dynamic sampling: drop groups whose episode returns are all equal (no learning signal
    for group-relative baselines)."""
    returns = _per_episode(group, "episode_return")
    return len(returns) > 1 and max(returns) - min(returns) > eps


@FILTERS.register("success_rate_band")
def success_rate_band(group: list[Trajectory], low: float = 0.0, high: float = 1.0) -> bool:
    """Keep groups whose success rate lies in [low, high]; low=0.01, high=0.99 keeps only
    groups with both successes and failures."""
    successes = _per_episode(group, "success")
    return low <= sum(successes) / max(len(successes), 1) <= high
