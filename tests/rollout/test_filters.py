"""Group filters registered by name."""
from roll.data.trajectory import Trajectory
from roll.registry import FILTERS


def _group(returns, successes=None):
    successes = successes or [False] * len(returns)
    return [Trajectory(episode_id=f"e{i}", episode_return=r, success=s) for i, (r, s) in enumerate(zip(returns, successes))]


def test_builtin_filters_are_registered():
    assert {"zero_variance", "success_rate_band"} <= set(FILTERS.ids())


def test_zero_variance_drops_groups_without_signal():
    f = FILTERS.get("zero_variance")
    assert not f(_group([1.0, 1.0, 1.0]))
    assert f(_group([1.0, 0.0, 1.0]))
    assert not f(_group([1.0, 1.0 + 1e-9]), eps=1e-6)
    # step-mode groups repeat an episode: returns count once per episode
    step = _group([1.0, 0.0]) + [Trajectory(episode_id="e0", episode_return=1.0)]
    assert f(step)


def test_success_rate_band():
    f = FILTERS.get("success_rate_band")
    mixed = _group([1, 0, 1, 0], [True, False, True, False])
    assert f(mixed, low=0.01, high=0.99)
    assert not f(_group([1, 1], [True, True]), low=0.01, high=0.99)
    assert f(_group([1, 1], [True, True]))  # the default band keeps everything
