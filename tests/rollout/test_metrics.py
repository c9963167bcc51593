"""episode_metrics: per-tag token NLL over every sample's model tokens."""
import math

import pytest

from roll.data.trajectory import response_trajectory
from roll.rollout.metrics import episode_metrics


def _sample(tag, episode, logprobs, success=False):
    return response_trajectory([1, 2, 3], list(range(10, 10 + len(logprobs))), logprobs,
                               env_tag=tag, episode_id=episode, success=success)


def test_token_nll_counts_every_step_sample_and_skips_missing_logprobs():
    trajs = [
        # episode a: two step-mode samples (turns); episode b: one
        _sample("Grid", "a", [-1.0, -3.0], success=True), _sample("Grid", "a", [-2.0]),
        _sample("Grid", "b", [-0.5, -0.5, -1.0]),
        # an engine that reports no log-probs: zeros, no NLL for the tag
        _sample("Shop", "c", [0.0, 0.0]),
    ]
    m = episode_metrics(trajs, version=0)
    # (1 + 3 + 2 + 0.5 + 0.5 + 1) / 6 tokens; success stays per episode (a succeeded, b did not)
    assert m["env/Grid/token_nll"] == pytest.approx(8.0 / 6)
    assert m["env/Grid/success"] == pytest.approx(0.5) and m["env/Grid/episodes"] == 2.0
    assert "env/Shop/token_nll" not in m and m["env/Shop/episodes"] == 1.0


def test_token_nll_of_samples_estimates_the_entropy():
    """Tokens drawn from p: the mean -log p approaches p's entropy (the metric's reading)."""
    import random

    probs = [0.7, 0.2, 0.1]
    rng = random.Random(0)
    draws = rng.choices(range(3), weights=probs, k=4000)
    trajs = [_sample("Grid", f"e{i}", [math.log(probs[d]) for d in draws[i * 40:(i + 1) * 40]]) for i in range(100)]
    entropy = -sum(p * math.log(p) for p in probs)
    assert episode_metrics(trajs, version=0)["env/Grid/token_nll"] == pytest.approx(entropy, abs=0.03)
