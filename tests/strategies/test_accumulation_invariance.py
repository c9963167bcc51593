"""Issue acceptance: one optimizer step on a batch of 8 as 1 micro-batch x 8 rows equals
8 micro-batches x 1 row (gradient accumulation), for every loss aggregation mode, through the
shared training base (roll/strategies/hf_train.py) of both Hugging Face backends, torch_train
(DDP) and deepspeed (ZeRO-2), on the tiny model.

Tolerance: float32 on CPU. Summation order differs between the two splits, so parameters are
compared at 1e-6 absolute (their magnitudes are ~1e-2..1); a large adam_eps makes Adam's first
update linear in the gradient instead of lr * sign(g), which would amplify float noise on
near-zero gradients into full-size steps.
"""
from __future__ import annotations

import pytest
import torch

from roll.algorithms import AGG_MODES, make_actor_loss_fn
from roll.config.algorithm import AlgorithmConfig
from roll.config.roles import StrategyArgs, TrainingArgs, WorkerConfig
from roll.data.batch import Batch
from roll.registry import STRATEGIES
from roll.strategies.hf_train import HFTrainStrategy

BACKENDS = {"torch_train": {"parallel": "ddp"}, "deepspeed": {"zero_stage": 2}}


def _available(backend: str) -> bool:
    if backend != "deepspeed":
        return True
    try:
        import deepspeed  # noqa: F401
    except ImportError:
        return False
    return True


pytestmark = pytest.mark.usefixtures("single_rank_group")


def _strategy(model_dir: str, micro: int, backend: str) -> HFTrainStrategy:
    cfg = WorkerConfig(model_name_or_path=model_dir, strategy_args=StrategyArgs(backend, dict(BACKENDS[backend])),
                       training_args=TrainingArgs(lr=1e-3, adam_eps=1.0, per_device_train_batch_size=micro))
    s = STRATEGIES.get(backend)(cfg, num_training_steps=4)
    assert isinstance(s, HFTrainStrategy)  # one micro-batch loop for both backends
    s.setup()
    return s


def _batch(rows: int = 8, width: int = 16) -> Batch:
    g = torch.Generator().manual_seed(7)
    ids = torch.randint(3, 3000, (rows, width), generator=g)
    resp = torch.zeros_like(ids)
    for i in range(rows):  # ragged responses, one row without any model token
        start = 4 + i % 3
        resp[i, start: width - (i % 4)] = 1
    resp[5] = 0
    return Batch({"input_ids": ids, "attention_mask": torch.ones_like(ids), "response_mask": resp,
                  "advantages": torch.randn(rows, width, generator=g) * resp,
                  "old_logprobs": -torch.rand(rows, width, generator=g) * resp})


@pytest.mark.parametrize("backend", list(BACKENDS))
@pytest.mark.parametrize("mode", AGG_MODES)
def test_one_by_eight_equals_eight_by_one(tiny_model_dir, mode, backend):
    if not _available(backend):
        pytest.skip("DeepSpeed is not installed (extra `deepspeed`)")
    cfg = AlgorithmConfig(policy_loss="ppo_clip", loss_agg_mode=mode, loss_agg_norm_constant=16.0)
    loss_fn = make_actor_loss_fn(cfg)
    whole, split = _strategy(tiny_model_dir, 8, backend), _strategy(tiny_model_dir, 1, backend)
    b = _batch()
    m_whole = whole.train_step(b, loss_fn)
    m_split = split.train_step(b, loss_fn)
    assert m_whole["grad_norm"] > 0
    assert m_whole["loss"] == pytest.approx(m_split["loss"], abs=1e-6)
    assert m_whole["grad_norm"] == pytest.approx(m_split["grad_norm"], rel=1e-5)
    for (name, p1), (_, p2) in zip(whole.hf_model.named_parameters(), split.hf_model.named_parameters()):
        assert torch.allclose(p1, p2, atol=1e-6), name
