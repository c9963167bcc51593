"""Sequence packing in training (``training_args.max_tokens_per_micro_batch``) through the shared
HF training base: packed micro-batches give the padded path's logprobs, entropy, values, loss,
gradient norm and updated parameters, for torch_train (DDP, FSDP2) and deepspeed (ZeRO-2), in
one process and over two gloo ranks whose packed micro-batch counts differ.

float32 on CPU. Packed and padded forwards differ only in summation order (attention over a
block-diagonal mask of the packed row vs a padded row), so per-token values are compared at
1e-5 and parameters after one step at 1e-6 (adam_eps=1 keeps Adam's first step linear in the
gradient, as in test_accumulation_invariance.py).
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch

from roll.algorithms.losses import make_actor_loss_fn, make_critic_loss_fn
from roll.config.algorithm import AlgorithmConfig
from roll.config.roles import StrategyArgs, TrainingArgs, WorkerConfig
from roll.data.batch import Batch
from roll.data.packing import plan_packing
from roll.registry import STRATEGIES
from roll.strategies.hf_train import model_forward
from roll.workers.base import free_port

OPTIONS = {"ddp": ("torch_train", {"parallel": "ddp"}), "fsdp2": ("torch_train", {"parallel": "fsdp2"}),
           "deepspeed": ("deepspeed", {"zero_stage": 2})}
LENGTHS = [9, 30, 14, 6, 22, 11, 27, 8]  # a long tail: the longest row is 5x the shortest
BUDGET = 26  # rows 1 (30) and 6 (27) are longer than the budget: micro-batches of their own


def _needs(kind: str) -> None:
    if kind == "deepspeed":
        pytest.importorskip("deepspeed", reason="DeepSpeed is not installed (extra `deepspeed`)")


pytestmark = pytest.mark.usefixtures("single_rank_group")


def make(model_dir, kind="ddp", budget=0, critic=False, micro=8):
    backend, opts = OPTIONS[kind]
    cfg = WorkerConfig(model_name_or_path=model_dir, strategy_args=StrategyArgs(backend, dict(opts)), infer_batch_size=micro,
                       training_args=TrainingArgs(lr=1e-3, adam_eps=1.0, per_device_train_batch_size=micro,
                                                  max_tokens_per_micro_batch=budget))
    s = STRATEGIES.get(backend)(cfg, critic=critic, num_training_steps=4)
    s.setup()
    return s


def multi_turn_batch(lengths=LENGTHS, seed=5, left_pad_rows=(3,)) -> Batch:
    """Ragged conversations: a prompt, then assistant turns (loss tokens) separated by env
    observations (no loss), right-padded (left-padded for ``left_pad_rows``); row 5 has no
    loss token; per-row sampling temperatures, one greedy (0) row."""
    g = torch.Generator().manual_seed(seed)
    rows, width = len(lengths), max(lengths)
    ids = torch.zeros(rows, width, dtype=torch.long)
    attn, resp = torch.zeros_like(ids), torch.zeros_like(ids)
    for i, n in enumerate(lengths):
        cols = slice(width - n, width) if i in left_pad_rows else slice(0, n)
        ids[i, cols] = torch.randint(3, 3000, (n,), generator=g)
        attn[i, cols] = 1
        r = torch.zeros(n, dtype=torch.long)
        p = 3 + i % 3  # prompt
        while p < n and i != 5:
            turn = int(torch.randint(2, 6, (1,), generator=g))
            r[p: p + turn] = 1
            p += turn + int(torch.randint(2, 5, (1,), generator=g))  # then an observation
        resp[i, cols] = r
    temps = torch.tensor([0.7, 1.0, 1.3, 0.0, 0.5, 1.0, 0.9, 1.0])[:rows]
    return Batch({"input_ids": ids, "attention_mask": attn, "response_mask": resp, "temperature": temps,
                  "advantages": torch.randn(rows, width, generator=g) * resp,
                  "old_logprobs": -torch.rand(rows, width, generator=g) * resp,
                  "returns": torch.randn(rows, width, generator=g) * resp, "values": torch.zeros(rows, width)})


def test_the_budget_packs_several_rows_and_isolates_long_ones():
    plan = plan_packing(LENGTHS, BUDGET, oversize="alone")
    assert [1] in plan and [6] in plan and any(len(rows) > 1 for rows in plan)
    assert sorted(i for rows in plan for i in rows) == list(range(len(LENGTHS)))


@pytest.mark.parametrize("kind", ["ddp", "fsdp2", "deepspeed"])
def test_logprobs_entropy_and_values_equal_the_padded_path(tiny_model_dir, kind):
    _needs(kind)
    b = multi_turn_batch()
    mask = b["response_mask"].bool()
    padded, packed = make(tiny_model_dir, kind), make(tiny_model_dir, kind, budget=BUDGET)
    want, got = padded.logprobs(b), packed.logprobs(b)
    assert mask.sum() > 40 and got.shape == want.shape
    torch.testing.assert_close(got[mask], want[mask], atol=1e-5, rtol=0)
    assert torch.all(got[~mask] == 0)  # only loss tokens are scored in a packed micro-batch
    with torch.no_grad():
        _, e_pad = model_forward(padded.model, b, entropy=True)
        _, e_pack = packed._forward(b, entropy=True)
    torch.testing.assert_close(e_pack["entropy"][mask], e_pad["entropy"][mask], atol=1e-5, rtol=0)
    if kind == "ddp":
        c_pad, c_pack = make(tiny_model_dir, kind, critic=True), make(tiny_model_dir, kind, budget=BUDGET, critic=True)
        real = b["attention_mask"].bool()
        torch.testing.assert_close(c_pack.values(b)[real], c_pad.values(b)[real], atol=1e-5, rtol=0)


def test_per_sample_temperature_is_applied(tiny_model_dir):
    """Each row is scored under logits / its own temperature (greedy rows at 1), packed or not."""
    s = make(tiny_model_dir, budget=BUDGET)
    b = multi_turn_batch()
    lp = s.logprobs(b)
    at_one = s.logprobs(Batch({k: v for k, v in b.tensors.items() if k != "temperature"}))
    for i, temp in enumerate(b["temperature"].tolist()):
        keep = b["attention_mask"][i].bool()
        row = b["input_ids"][i][keep]
        with torch.no_grad():
            logits = s.hf_model(input_ids=row[None]).logits[0, :-1]
        t = temp if temp > 0 else 1.0
        manual = (logits / t).log_softmax(-1).gather(-1, row[1:, None]).squeeze(-1)
        loss_tok = b["response_mask"][i][keep][1:].bool()
        torch.testing.assert_close(lp[i][keep][1:][loss_tok], manual[loss_tok], atol=1e-5, rtol=0)
        differs = not torch.allclose(lp[i], at_one[i], atol=1e-4)
        assert differs == (t != 1.0 and bool(loss_tok.any())), (i, t)


@pytest.mark.parametrize("kind", ["ddp", "fsdp2", "deepspeed"])
@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean"])
def test_train_step_equals_the_padded_path(tiny_model_dir, kind, mode):
    """One optimizer step: padded micro-batches of 3 rows vs packed to 26 tokens (5 micro-batches,
    two rows longer than the budget alone), with an entropy bonus and a KL-free PPO-clip loss."""
    _needs(kind)
    b = multi_turn_batch()
    loss_fn = make_actor_loss_fn(AlgorithmConfig(policy_loss="ppo_clip", loss_agg_mode=mode, entropy_coef=0.01))
    padded, packed = make(tiny_model_dir, kind, micro=3), make(tiny_model_dir, kind, budget=BUDGET)
    m_pad, m_pack = padded.train_step(b, loss_fn), packed.train_step(b, loss_fn)
    assert m_pad["grad_norm"] > 0
    assert m_pack["loss"] == pytest.approx(m_pad["loss"], abs=1e-6)
    assert m_pack["grad_norm"] == pytest.approx(m_pad["grad_norm"], rel=1e-5)
    for (name, p1), (_, p2) in zip(padded._full_parameters(), packed._full_parameters()):  # FSDP2: gathered
        assert torch.allclose(p1, p2, atol=1e-6), name


def test_critic_train_step_equals_the_padded_path(tiny_model_dir):
    b = multi_turn_batch()
    loss_fn = make_critic_loss_fn(AlgorithmConfig())
    padded, packed = make(tiny_model_dir, micro=3, critic=True), make(tiny_model_dir, budget=BUDGET, critic=True)
    for m in [*padded.hf_model.modules(), *packed.hf_model.modules()]:
        if isinstance(m, torch.nn.Dropout):  # the HF value head's dropout draws differ with the layout
            m.p = 0.0
    m_pad, m_pack = padded.train_step(b, loss_fn), packed.train_step(b, loss_fn)
    assert m_pack["loss"] == pytest.approx(m_pad["loss"], abs=1e-6)
    assert m_pack["grad_norm"] == pytest.approx(m_pad["grad_norm"], rel=1e-5)


def test_budget_must_not_be_negative():
    from roll.config.validate import ConfigError, build_dataclass

    with pytest.raises(ConfigError, match="max_tokens_per_micro_batch"):
        build_dataclass(TrainingArgs, {"max_tokens_per_micro_batch": -1})


WORKER = textwrap.dedent(
    """
    import sys, torch, torch.multiprocessing as mp
    sys.path.insert(0, sys.argv[6])
    from test_packed_training import make, multi_turn_batch, BUDGET
    from roll.algorithms import make_actor_loss_fn
    from roll.config.algorithm import AlgorithmConfig
    from roll.strategies.torch_train import init_process_group

    model_dir, kind, world, port, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]

    def run(rank):
        torch.set_num_threads(1)
        init_process_group(rank, world, "127.0.0.1", port, 60)
        s = make(model_dir, kind, budget=BUDGET if world == 2 else 0, micro=8)
        loss_fn = make_actor_loss_fn(AlgorithmConfig(policy_loss="ppo_clip", loss_agg_mode="seq-mean-token-sum"))
        b = multi_turn_batch()
        # rank 0: the 4 short rows (one packed micro-batch); rank 1: the 4 long ones (three)
        share = b if world == 1 else b.select([0, 3, 5, 7] if rank == 0 else [1, 2, 4, 6])
        m = s.train_step(share, loss_fn)
        lp = s.logprobs(share if world == 1 else b.select([1, 2, 4, 6] if rank == 0 else []))
        params = {k: v.detach().clone() for k, v in s._full_parameters()}  # FSDP2 gathers: every rank
        if rank == 0:
            torch.save({"loss": m["loss"], "grad_norm": m["grad_norm"], "logprobs": lp, "params": params}, out)

    if world == 1:
        run(0)
    else:
        mp.start_processes(run, nprocs=world, start_method="fork")
    """
)


def _run(tmp_path, model_dir, kind, world):
    out = tmp_path / f"{kind}-{world}.pt"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    args = [model_dir, kind, str(world), str(free_port()), str(out), os.path.dirname(__file__)]
    proc = subprocess.run([sys.executable, "-c", WORKER, *args], capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return torch.load(out, weights_only=True)


@pytest.mark.integration
@pytest.mark.parametrize("kind", ["ddp", "fsdp2"])
def test_two_packed_ranks_equal_one_padded_rank(tmp_path, tiny_model_dir, kind):
    """Two gloo ranks with 2 and 4 packed micro-batches (the first runs two throw-away ones to keep
    the gradient all-reduce / FSDP gathers in step) give the one-rank padded step; for logprobs,
    a rank with no rows runs as many throw-away forwards as the other's packed micro-batches."""
    one, two = _run(tmp_path, tiny_model_dir, kind, 1), _run(tmp_path, tiny_model_dir, kind, 2)
    assert one["grad_norm"] > 0
    assert two["loss"] == pytest.approx(one["loss"], abs=1e-6)
    assert two["grad_norm"] == pytest.approx(one["grad_norm"], rel=1e-5)
    for name, p in one["params"].items():
        assert torch.allclose(p, two["params"][name], atol=1e-6), name
    mask = multi_turn_batch().select([1, 2, 4, 6])["response_mask"].bool()
    assert torch.allclose(two["logprobs"][mask], one["logprobs"][[1, 2, 4, 6]][mask], atol=1e-5)
