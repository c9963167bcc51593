"""DeepSpeed checkpoints load without unpickling objects: a ZeRO-2 round trip continues
identically through the weights_only loader, and an optimizer file carrying a pickle payload
is refused without running it (DeepSpeed's own loader uses torch.load(weights_only=False))."""
from __future__ import annotations

import json
import math
import os
import pickle
import shutil
from pathlib import Path

import pytest
import torch

pytest.importorskip("deepspeed", reason="DeepSpeed is not installed (extra `deepspeed`)")

from roll.config.roles import StrategyArgs, TrainingArgs, WorkerConfig
from roll.data.batch import Batch
from strategy_helpers import free_port, nll_loss, prompt_response_batch
from roll.utils.checkpoint import DEEPSPEED_SAFE_GLOBALS


class _Payload:
    """Unpickling this calls open(marker, "w"): proof that the file's code ran."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _batch(seed: int) -> Batch:
    return prompt_response_batch(seed, rows=2)


def _worker(rank: int, port: int, model_dir: str, out_dir: str) -> None:
    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    from roll.errors import CheckpointError
    from roll.strategies.deepspeed import DeepSpeedStrategy
    from roll.strategies.torch_train import init_process_group

    init_process_group(0, 1, "127.0.0.1", port, timeout_s=120)
    cfg = WorkerConfig(model_name_or_path=model_dir, strategy_args=StrategyArgs("deepspeed", {"zero_stage": 2}),
                       training_args=TrainingArgs(lr=1e-3, per_device_train_batch_size=2, lr_scheduler_type="cosine",
                                                  num_training_steps=10))
    out: dict = {}
    first = DeepSpeedStrategy(cfg, seed=0)
    first.setup()
    first.train_step(_batch(1), nll_loss)
    ckpt = os.path.join(out_dir, "ckpt")
    first.save(ckpt)
    out["expected"] = first.train_step(_batch(2), nll_loss)["loss"]
    # a copy of the checkpoint with a payload appended to DeepSpeed's optimizer state
    bad = os.path.join(out_dir, "bad")
    shutil.copytree(ckpt, bad)
    optim = next(Path(bad, "deepspeed", "roll").glob("*optim_states.pt"))
    state = torch.load(optim, weights_only=False)  # the test's own file, just written
    state["payload"] = _Payload(os.path.join(out_dir, "PWNED"))
    torch.save(state, optim, pickle_protocol=pickle.HIGHEST_PROTOCOL)
    again = DeepSpeedStrategy(cfg, seed=0)
    again.setup()
    try:
        again.load(bad)
        out["refused"] = None
    except CheckpointError as e:
        out["refused"] = str(e)
    again.load(ckpt)  # a refused load leaves the engine usable; the good checkpoint loads in full
    out["resumed"] = again.train_step(_batch(2), nll_loss)["loss"]
    out["step"] = again.step
    # resumed with another lr and betas: the config's settings win over the optimizer state's
    cfg.training_args = TrainingArgs(lr=4e-4, adam_betas=(0.9, 0.95), per_device_train_batch_size=2,
                                     lr_scheduler_type="cosine", num_training_steps=10)
    changed = DeepSpeedStrategy(cfg, seed=0)
    changed.setup()
    changed.load(ckpt)
    group = changed.optimizer.param_groups[0]
    out["changed"] = {"lr": group["lr"], "betas": list(group["betas"]),
                      "train_lr": changed.train_step(_batch(2), nll_loss)["lr"]}
    with open(os.path.join(out_dir, "result.json"), "w") as f:
        json.dump(out, f)


def test_allowlist_names_real_deepspeed_classes():
    from roll.strategies.deepspeed import deepspeed_safe_globals

    classes = deepspeed_safe_globals()
    assert [f"{c.__module__}.{c.__qualname__}" for c in classes] == list(DEEPSPEED_SAFE_GLOBALS)


@pytest.mark.integration
def test_zero2_round_trip_is_safe_and_refuses_a_payload(tiny_model_dir, tmp_path):
    torch.multiprocessing.spawn(_worker, args=(free_port(), tiny_model_dir, str(tmp_path)), nprocs=1, join=True)
    res = json.loads((tmp_path / "result.json").read_text())
    assert res["resumed"] == pytest.approx(res["expected"], abs=1e-6)
    assert res["step"] == 2
    assert res["refused"] is not None and "optim_states.pt" in res["refused"], res["refused"]
    assert not (tmp_path / "PWNED").exists(), "loading the checkpoint ran the payload"
    cosine = 0.5 * (1 + math.cos(math.pi * 1 / 10))  # the schedule after 1 of its 10 steps
    assert res["changed"]["lr"] == pytest.approx(4e-4 * cosine) and res["changed"]["betas"] == [0.9, 0.95]
    assert res["changed"]["train_lr"] == pytest.approx(4e-4 * cosine)
