"""Fuzzing model outputs through the real env loop: whatever token ids an engine returns
(garbage, special tokens, no end-of-turn, the full token budget), every shipped env turns them
into counted invalid actions or ordinary turns; no exception escapes and no episode is lost."""
from __future__ import annotations

import asyncio

import gymnasium
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import roll.envs  # noqa: F401  (registers the shipped envs)
from roll.config.roles import GeneratingArgs
from roll.config.rollout import EnvConfig, EnvManagerConfig
from roll.rollout.env_manager import EpisodeSpec
from roll.strategies.base import GenerationRequest, GenerationResult
from roll.workers.environment import EnvironmentWorker

SHIPPED_ENV_IDS = sorted(k for k in gymnasium.registry if k.startswith("roll/"))
MAX_NEW_TOKENS = 24


class FixedOutputClient:
    """Answers every request with the next of ``outputs`` (cycled), cut to the request budget."""

    def __init__(self, outputs: list[list[int]], finish_reasons: list[str]):
        self.outputs, self.finish_reasons = outputs, finish_reasons
        self.calls = 0
        self.returned_tokens = 0

    async def generate(self, request: GenerationRequest) -> GenerationResult:
        ids = self.outputs[self.calls % len(self.outputs)][: max(request.max_new_tokens, 0)]
        reason = self.finish_reasons[self.calls % len(self.finish_reasons)]
        self.calls += 1
        self.returned_tokens += len(ids)
        return GenerationResult(request.request_id, list(ids), [-1.0] * len(ids), reason, 0)

    async def abort(self, request_ids: list[str]) -> None:
        return None


@pytest.fixture(scope="module")
def tok(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


def _outputs(vocab_size: int):
    token = st.integers(min_value=0, max_value=vocab_size - 1)
    one = st.one_of(
        st.lists(token, min_size=0, max_size=MAX_NEW_TOKENS),  # anything, maybe empty
        st.lists(token, min_size=MAX_NEW_TOKENS, max_size=MAX_NEW_TOKENS),  # the full budget, no EOS
    )
    return st.lists(one, min_size=1, max_size=4)


@pytest.mark.parametrize("env_id", SHIPPED_ENV_IDS)
def test_garbage_model_outputs_are_counted_invalid_actions(tok, env_id):
    vocab = len(tok)
    env_cfg = EnvConfig(env_id=env_id, max_turns=3, step_timeout_s=30.0)
    gen = GeneratingArgs(max_new_tokens=MAX_NEW_TOKENS)

    @settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(outputs=_outputs(vocab), reasons=st.lists(st.sampled_from(["stop", "length"]), min_size=1, max_size=3),
           seed=st.integers(min_value=0, max_value=2**31 - 1), short_context=st.booleans())
    def check(outputs, reasons, seed, short_context):
        client = FixedOutputClient(outputs, reasons)
        # a short context limit makes episodes hit the maximum length mid-conversation
        mcfg = EnvManagerConfig(group_size=1, **({"max_context_tokens": 1000} if short_context else {}))
        worker = EnvironmentWorker({"t": env_cfg}, mcfg, gen, tok, [client])
        [traj] = asyncio.run(worker.run_episode(EpisodeSpec("ep0", "t", "t/0", seed)))
        # garbage is the model's problem, not an infrastructure failure: the episode is kept
        assert traj.failure is None, (traj.failure, traj.failure_detail)
        traj.check()
        assert 1 <= traj.num_turns <= 3 or traj.truncated
        assert client.calls >= 1
        rate = traj.metrics["invalid_action_rate"]
        assert 0.0 <= rate <= 1.0
        # every token the engine returned is in the sample, as model tokens
        assert traj.num_model_tokens == client.returned_tokens
        assert len(traj.turn_rewards) == traj.num_turns

    check()


def test_pure_garbage_is_counted_as_invalid(tok):
    """A model that never writes an answer: every turn is an invalid action, counted."""
    garbage = tok.encode("zz qq !! <answer", add_special_tokens=False)
    client = FixedOutputClient([garbage], ["length"])
    env_cfg = EnvConfig(env_id="roll/FrozenLake-v0", max_turns=3, step_timeout_s=30.0)
    worker = EnvironmentWorker({"t": env_cfg}, EnvManagerConfig(group_size=1), GeneratingArgs(max_new_tokens=MAX_NEW_TOKENS),
                               tok, [client])
    [traj] = asyncio.run(worker.run_episode(EpisodeSpec("ep0", "t", "t/0", 5)))
    assert traj.failure is None
    assert traj.metrics["invalid_action_rate"] == 1.0
    assert not traj.success
