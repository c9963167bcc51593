"""Data-parallel invariance through the shared training base (roll/strategies/hf_train.py) of
both Hugging Face backends, torch_train (DDP) and deepspeed (ZeRO-2): one optimizer step on 8
rows with 2 ranks (4 rows each) equals the same step on 1 rank, for every loss aggregation
mode. Then a rank with no rows (more ranks than rows) scores nothing while the other rank's
logprobs equal the one-rank result: both backends run a throw-away forward there.
A wrong dp_size factor (gradients averaged over ranks of losses normalised by the global
counts) would halve the update and fail here.

Each backend and world size runs in fresh processes (gloo process groups); they take every mode
in turn, each from a fresh strategy and model, and write each step's loss, grad norm and updated
parameters to a file; float32 on CPU, compared at 1e-6.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch

from roll.algorithms import AGG_MODES

pytestmark = pytest.mark.integration

WORKER = textwrap.dedent(
    """
    import sys, torch, torch.multiprocessing as mp
    from roll.algorithms import make_actor_loss_fn
    from roll.config.algorithm import AlgorithmConfig
    from roll.config.roles import StrategyArgs, TrainingArgs, WorkerConfig
    from roll.data.batch import Batch
    from roll.registry import STRATEGIES
    from roll.strategies.torch_train import init_process_group

    model_dir, modes, world, port, out = sys.argv[1], sys.argv[2].split(","), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    backend = sys.argv[6]
    options = {"torch_train": {"parallel": "ddp"}, "deepspeed": {"zero_stage": 2}}[backend]

    def batch():
        g = torch.Generator().manual_seed(3)
        ids = torch.randint(3, 3000, (8, 16), generator=g)
        resp = torch.zeros_like(ids)
        for i in range(8):
            resp[i, 4 + i % 3: 16 - (i % 5)] = 1
        return Batch({"input_ids": ids, "attention_mask": torch.ones_like(ids), "response_mask": resp,
                      "advantages": torch.randn(8, 16, generator=g) * resp,
                      "old_logprobs": -torch.rand(8, 16, generator=g) * resp})

    def run(rank):
        torch.set_num_threads(1)
        init_process_group(rank, world, "127.0.0.1", port, 60)
        results = {mode: step(rank, mode) for mode in modes}
        if rank == 0:
            torch.save(results, out)

    def step(rank, mode):
        cfg = WorkerConfig(model_name_or_path=model_dir, strategy_args=StrategyArgs(backend, dict(options)),
                           training_args=TrainingArgs(lr=1e-3, adam_eps=1.0, per_device_train_batch_size=2),
                           infer_batch_size=2)
        s = STRATEGIES.get(backend)(cfg, num_training_steps=2)
        s.setup()
        loss_fn = make_actor_loss_fn(AlgorithmConfig(policy_loss="ppo_clip", loss_agg_mode=mode, loss_agg_norm_constant=16.0))
        share = batch().chunk(world)[rank]
        m = s.train_step(share, loss_fn)
        # 3 rows on rank 0 and none on rank 1 (two forwards there, none here: collectives must match)
        rows = batch().select([0, 1, 2] if rank == 0 else [])
        lp = s.logprobs(rows)
        if rank == 1:
            assert tuple(lp.shape) == (0, 16), lp.shape
        return {"loss": m["loss"], "grad_norm": m["grad_norm"], "logprobs": lp,
                "params": {k: v.detach().clone() for k, v in s.hf_model.named_parameters()}}

    if world == 1:
        run(0)
    else:
        mp.start_processes(run, nprocs=world, start_method="fork")
    """
)


def _port() -> int:
    from roll.workers.base import free_port

    return free_port()


def _run(tmp_path, model_dir, world, backend):
    out = tmp_path / f"{backend}-{world}.pt"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-c", WORKER, model_dir, ",".join(AGG_MODES), str(world), str(_port()),
                           str(out), backend],
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return torch.load(out)


@pytest.mark.parametrize("backend", ["torch_train", "deepspeed"])
def test_two_ranks_equal_one(tmp_path, tiny_model_dir, backend):
    if backend == "deepspeed":
        pytest.importorskip("deepspeed", reason="DeepSpeed is not installed (extra `deepspeed`)")
    ones = _run(tmp_path, tiny_model_dir, 1, backend)
    twos = _run(tmp_path, tiny_model_dir, 2, backend)
    assert list(ones) == list(twos) == list(AGG_MODES)
    for mode in AGG_MODES:
        one, two = ones[mode], twos[mode]
        assert one["grad_norm"] > 0, mode
        assert two["loss"] == pytest.approx(one["loss"], abs=1e-6), mode
        assert two["grad_norm"] == pytest.approx(one["grad_norm"], rel=1e-5), mode
        for name, p in one["params"].items():
            assert torch.allclose(p, two["params"][name], atol=1e-6), (mode, name)
        assert torch.allclose(one["logprobs"], two["logprobs"], atol=1e-5), mode
