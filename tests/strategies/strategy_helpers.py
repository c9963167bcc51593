"""Builders shared by the strategy tests: a torch_train strategy on the tiny model, the batches
they train on, and the pieces the spawned DeepSpeed workers need (a token NLL loss, a free
port). Imported by name: pytest puts this folder on sys.path, and a spawned worker inherits it."""
from __future__ import annotations

import socket

import torch

from roll.config.roles import LoraArgs, StrategyArgs, TrainingArgs, WorkerConfig
from roll.data.batch import Batch
from roll.strategies.torch_train import TorchTrainStrategy


def make_torch_train(model_dir, parallel="ddp", critic=False, lora: LoraArgs | None = None, **train_kw):
    """A set-up TorchTrainStrategy (10 scheduled steps, inference micro-batches of 3 rows)."""
    cfg = WorkerConfig(model_name_or_path=model_dir, strategy_args=StrategyArgs("torch_train", {"parallel": parallel}),
                       training_args=TrainingArgs(**train_kw), infer_batch_size=3, lora=lora)
    s = TorchTrainStrategy(cfg, critic=critic, num_training_steps=10)
    s.setup()
    return s


def train_batch(rows=4, width=12, seed=0, critic_fields=True) -> Batch:
    """Random ids with one left-padded row and rows of different response lengths; advantages
    and old logprobs for the actor loss, and with ``critic_fields`` returns and values too."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 3000, (rows, width), generator=g)
    attn = torch.ones_like(ids)
    attn[1, :4] = 0  # left padding
    resp = torch.zeros_like(ids)
    resp[:, 6:] = 1
    resp[2, 6:9] = 0  # rows with different numbers of response tokens
    tensors = {"input_ids": ids, "attention_mask": attn, "response_mask": resp,
               "advantages": torch.randn(rows, width, generator=g), "old_logprobs": torch.zeros(rows, width)}
    if critic_fields:
        tensors.update(returns=torch.randn(rows, width, generator=g), values=torch.zeros(rows, width))
    return Batch(tensors)


def nll_loss(mb: Batch, logprobs: torch.Tensor, extra: dict):
    """Token-mean NLL over the mini-batch (global normaliser x dp_size, per the loss contract)."""
    mask = mb["response_mask"].float()
    return -(logprobs * mask).sum() / mb.meta["global_num_tokens"] * mb.meta["dp_size"], {}


def prompt_response_batch(seed: int, rows: int) -> Batch:
    """``rows`` random sequences of 16 tokens, the last 8 of them the response."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 3000, (rows, 16), generator=g)
    resp = torch.ones_like(ids)
    resp[:, :8] = 0
    return Batch({"input_ids": ids, "attention_mask": torch.ones_like(ids), "response_mask": resp})


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
