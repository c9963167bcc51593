"""TorchTrainStrategy on the tiny model with a one-rank gloo group, in-process (no Ray).
Two-rank DDP vs FSDP2 and weight sync run on Ray in tests/distributed/test_runtime.py."""
from __future__ import annotations

import pytest
import torch

from roll.algorithms.losses import make_actor_loss_fn, make_critic_loss_fn
from roll.config.algorithm import AlgorithmConfig
from roll.config.roles import StrategyArgs, TrainingArgs, WorkerConfig
from roll.strategies.base import TrainingStrategy
from roll.strategies.torch_train import TorchTrainStrategy
from strategy_helpers import make_torch_train, train_batch


pytestmark = pytest.mark.usefixtures("single_rank_group")


def make(model_dir, parallel="ddp", critic=False, **train_kw):
    train_kw.setdefault("lr", 1e-3)
    return make_torch_train(model_dir, parallel, critic=critic, **train_kw)


batch = train_batch


ACTOR_LOSS = make_actor_loss_fn(AlgorithmConfig(policy_loss="pg"))


def test_logprobs_alignment(tiny_model_dir):
    s = make(tiny_model_dir)
    assert isinstance(s, TrainingStrategy)
    b = batch(rows=5)
    lp = s.logprobs(b)  # 5 rows in micro-batches of 3
    assert lp.shape == (5, 12) and torch.all(lp[:, 0] == 0)
    assert s.logprobs(b.select([])).shape == (0, 12)  # a data-parallel rank may get no rows
    model = s.hf_model
    with torch.no_grad():
        row = b["input_ids"][1:2, 4:]  # the left-padded row, unpadded
        logits = model(input_ids=row).logits[0]
        manual = logits[:-1].log_softmax(-1).gather(-1, row[0, 1:, None]).squeeze(-1)
    # response tokens start at column 6: the LM head runs from column 5, so column 6 on is scored
    assert torch.allclose(lp[1, 6:], manual[1:], atol=1e-5)
    assert torch.all(lp[:, :6] == 0)


def test_lm_head_runs_only_where_loss_tokens_need_it(tiny_model_dir):
    """Responses starting at different columns per row (step mode: prompts of different
    lengths): logprobs and entropy on every response token equal the full-logits ones, and
    the LM head sees only the hidden states that predict a response token."""
    from roll.strategies.torch_train import model_forward, token_entropy, token_logprobs

    s = make(tiny_model_dir)
    b = batch(rows=4, width=14, seed=3)
    resp = torch.zeros(4, 14, dtype=torch.long)
    for row, (a, e) in enumerate([(9, 14), (7, 12), (10, 13), (8, 14)]):
        resp[row, a:e] = 1
    b.tensors["response_mask"] = resp
    b.tensors["attention_mask"] = torch.ones(4, 14, dtype=torch.long)
    widths = []
    hook = s.hf_model.lm_head.register_forward_hook(lambda m, i, o: widths.append(o.shape[1]))
    try:
        with torch.no_grad():
            lp, extra = model_forward(s.model, b, entropy=True)
    finally:
        hook.remove()
    assert widths == [int(resp.sum())]  # one head row per response token, in one [1, N] call
    with torch.no_grad():
        logits = s.hf_model(input_ids=b["input_ids"]).logits
    mask = resp.bool()
    assert torch.allclose(lp[mask], token_logprobs(logits, b["input_ids"])[mask], atol=1e-5)
    assert torch.allclose(extra["entropy"][mask], token_entropy(logits)[mask], atol=1e-5)
    assert torch.all(lp[~mask] == 0) and torch.all(lp[mask] != 0)
    assert torch.all(extra["entropy"][~mask] == 0)
    # no response_mask: every column is scored
    del b.tensors["response_mask"]
    with torch.no_grad():
        full, _ = model_forward(s.model, b)
    assert torch.allclose(full, token_logprobs(logits, b["input_ids"]), atol=1e-5)


def test_right_padded_rows_run_cut_and_without_a_mask_and_score_as_alone(tiny_model_dir):
    """A right-padded batch is cut to its longest row and runs without an attention mask; each
    row's response logprobs equal the row's own forward, unpadded. A left-padded row keeps the
    masked path with the same result."""
    from roll.models.forward import right_padded_width
    from roll.strategies.torch_train import model_forward

    s = make(tiny_model_dir)
    gen = torch.Generator().manual_seed(5)
    lengths, width = [9, 14, 6, 11], 20
    ids = torch.randint(3, 3000, (4, width), generator=gen)
    attn = (torch.arange(width)[None] < torch.tensor(lengths)[:, None]).long()
    resp = attn.clone()
    resp[:, :4] = 0
    from roll.data.batch import Batch

    b = Batch({"input_ids": ids * attn, "attention_mask": attn, "response_mask": resp})
    assert right_padded_width(attn) == 14 and right_padded_width(attn.flip(-1)) is None
    seen = []
    hook = s.hf_model.model.register_forward_pre_hook(
        lambda m, args, kwargs: seen.append((kwargs["input_ids"].shape[1], kwargs.get("attention_mask"))), with_kwargs=True)
    try:
        with torch.no_grad():
            lp, _ = model_forward(s.model, b)
    finally:
        hook.remove()
    assert seen == [(14, None)] and lp.shape == (4, width)
    # the same rows, left-padded
    left = Batch({k: torch.stack([v[r].roll(width - n) for r, n in enumerate(lengths)]) for k, v in b.tensors.items()})
    with torch.no_grad():
        lp_left, _ = model_forward(s.model, left)
        for row, n in enumerate(lengths):
            logits = s.hf_model(input_ids=ids[row:row + 1, :n]).logits[0]
            alone = logits[:-1].log_softmax(-1).gather(-1, ids[row, 1:n, None]).squeeze(-1)
            torch.testing.assert_close(lp[row, 4:n], alone[3:], atol=1e-5, rtol=0)
            torch.testing.assert_close(lp_left[row, width - n + 4:], alone[3:], atol=1e-5, rtol=0)
    assert torch.all(lp[resp == 0] == 0)


def test_micro_batches_group_rows_of_similar_length(tiny_model_dir):
    """Rows go to micro-batches in order of length (each then cut to its longest row), every
    row exactly once; the train step's loss is that of row-order micro-batches."""
    from roll.data.batch import Batch

    s = make(tiny_model_dir, per_device_train_batch_size=2)
    lengths = [10, 3, 9, 2, 6]
    attn = (torch.arange(12)[None] < torch.tensor(lengths)[:, None]).long()
    plan = s._plan(Batch({"input_ids": attn.clone(), "attention_mask": attn}), 2)
    assert plan == [[1, 3], [2, 4], [0]]  # lengths (3, 2), (9, 6), (10)
    # the same rows in row order give the same step (adam_eps large: the update is linear in the gradient)
    b = batch(rows=5, width=12, seed=4)
    b.tensors["attention_mask"] = attn
    b.tensors["response_mask"] = b["response_mask"] * attn
    sorted_run, in_order = make(tiny_model_dir, per_device_train_batch_size=2, adam_eps=1.0), \
        make(tiny_model_dir, per_device_train_batch_size=2, adam_eps=1.0)
    in_order._plan = lambda bt, n: [list(range(i, min(i + n, len(bt)))) for i in range(0, len(bt), n)]
    m1, m2 = sorted_run.train_step(b, ACTOR_LOSS), in_order.train_step(b, ACTOR_LOSS)
    assert m1["loss"] == pytest.approx(m2["loss"], abs=1e-6) and m1["grad_norm"] == pytest.approx(m2["grad_norm"], abs=1e-5)
    for (n, p1), (_, p2) in zip(sorted_run.hf_model.named_parameters(), in_order.hf_model.named_parameters()):
        assert torch.allclose(p1, p2, atol=1e-6), n


def test_a_head_called_on_another_shape_still_scores_the_response_tokens(tiny_model_dir):
    """A model whose LM head input is not [B, T, H] (here: a wrapper that runs the head on
    the flattened hidden states) is not gathered: the response columns come from its logits."""
    from roll.strategies.torch_train import model_forward, token_logprobs

    s = make(tiny_model_dir)
    b = batch(rows=3, width=10, seed=2)
    b.tensors["attention_mask"] = torch.ones(3, 10, dtype=torch.long)
    resp = torch.zeros(3, 10, dtype=torch.long)
    resp[:, 6:] = 1
    b.tensors["response_mask"] = resp

    class FlatHead(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def get_output_embeddings(self):
            return self.model.lm_head

        def forward(self, input_ids, attention_mask=None, position_ids=None, use_cache=False):
            h = self.model.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids).last_hidden_state
            logits = self.model.lm_head(h.reshape(-1, h.shape[-1])).reshape(*h.shape[:2], -1)
            return type("Out", (), {"logits": logits})()

    with torch.no_grad():
        lp, _ = model_forward(FlatHead(s.hf_model), b)
        want = token_logprobs(s.hf_model(input_ids=b["input_ids"]).logits, b["input_ids"])
    mask = resp.bool()
    torch.testing.assert_close(lp[mask], want[mask], atol=1e-5, rtol=0)
    assert torch.all(lp[~mask] == 0)


def test_gradient_accumulation_matches_one_big_micro_batch(tiny_model_dir):
    # a large adam_eps makes the update linear in the gradient: Adam's first step is otherwise
    # lr * sign(g), which amplifies float noise on near-zero gradients
    whole = make(tiny_model_dir, per_device_train_batch_size=4, adam_eps=1.0)
    micro = make(tiny_model_dir, per_device_train_batch_size=1, adam_eps=1.0)
    b = batch()
    m1 = whole.train_step(b, ACTOR_LOSS)
    m2 = micro.train_step(b, ACTOR_LOSS)
    assert abs(m1["loss"] - m2["loss"]) < 1e-6 and abs(m1["grad_norm"] - m2["grad_norm"]) < 1e-5
    for (n, p1), (_, p2) in zip(whole.hf_model.named_parameters(), micro.hf_model.named_parameters()):
        assert torch.allclose(p1, p2, atol=1e-6), n
    assert m1["lr"] == 1e-3 and m1["nonfinite_grad_steps"] == 0


def _saved_after_two_steps(model_dir, parallel, path):
    """A strategy (linear schedule over 10 steps, 1 of warmup) after two steps, saved to ``path``."""
    s = make(model_dir, parallel, lr_scheduler_type="linear", warmup_steps=1)
    s.train_step(batch(), ACTOR_LOSS)
    s.train_step(batch(seed=1), ACTOR_LOSS)
    s.save(str(path))
    return s


@pytest.mark.parametrize("parallel", ["ddp", "fsdp2"])
def test_save_load_round_trip(tiny_model_dir, tmp_path, parallel):
    s = _saved_after_two_steps(tiny_model_dir, parallel, tmp_path / "ckpt")
    t = make(tiny_model_dir, parallel, lr_scheduler_type="linear", warmup_steps=1)
    t.load(str(tmp_path / "ckpt"))
    assert t.step == 2
    a, b = s.train_step(batch(seed=2), ACTOR_LOSS), t.train_step(batch(seed=2), ACTOR_LOSS)
    assert a["loss"] == pytest.approx(b["loss"], abs=1e-6) and a["lr"] == pytest.approx(b["lr"])
    from transformers import AutoModelForCausalLM

    assert AutoModelForCausalLM.from_pretrained(str(tmp_path / "ckpt")).config.vocab_size == 3052


@pytest.mark.parametrize("parallel", ["ddp", "fsdp2"])
def test_a_resume_trains_with_the_configs_optimizer_settings_and_the_checkpoints_moments(tiny_model_dir, tmp_path, parallel):
    # an optimizer's state holds its lr, betas, eps and weight decay, the LR schedule its base lr:
    # loaded as they are, they would overwrite a resumed run's new settings without a word
    s = _saved_after_two_steps(tiny_model_dir, parallel, tmp_path / "ckpt")
    t = make(tiny_model_dir, parallel, lr=2e-4, adam_betas=(0.9, 0.95), adam_eps=1e-6, weight_decay=0.1,
             lr_scheduler_type="linear", warmup_steps=1)
    t.load(str(tmp_path / "ckpt"))
    factor = 1.0 - (2 - 1) / (10 - 1)  # the linear schedule after 2 of its 10 steps (1 of warmup)
    for group in t.optimizer.param_groups:
        assert group["lr"] == pytest.approx(2e-4 * factor)
        assert tuple(group["betas"]) == (0.9, 0.95) and group["eps"] == 1e-6 and group["weight_decay"] == 0.1
    moments = [st["exp_avg"].clone() for st in t.optimizer.state.values()]
    assert moments and all(torch.equal(a, st["exp_avg"]) for a, st in zip(moments, s.optimizer.state.values()))
    a, b = s.train_step(batch(seed=2), ACTOR_LOSS), t.train_step(batch(seed=2), ACTOR_LOSS)
    assert b["lr"] == pytest.approx(a["lr"] * 2e-4 / 1e-3) and a["loss"] == pytest.approx(b["loss"], abs=1e-6)
    assert t.step == 3


def test_sync_buckets_hold_every_parameter(tiny_model_dir):
    s = make(tiny_model_dir, "fsdp2")
    buckets = list(s.named_parameters_for_sync(bucket_size_mb=1))
    names = [n for b in buckets for n, _ in b]
    assert names == [n for n, _ in s.hf_model.named_parameters()] and len(buckets) > 1
    assert all(not hasattr(t, "full_tensor") for b in buckets for _, t in b)  # plain, gathered tensors
    assert sum(t.numel() * t.element_size() for b in buckets for _, t in b) == s.num_parameter_bytes()


def test_critic_values_and_train_step(tiny_model_dir):
    c = make(tiny_model_dir, critic=True)
    b = batch()
    v = c.values(b)
    assert v.shape == (4, 12)
    m = c.train_step(b, make_critic_loss_fn(AlgorithmConfig(value_clip=None)))
    assert m["loss"] > 0 and "critic/vf_loss" in m
    with pytest.raises(RuntimeError, match="critic"):
        c.logprobs(b)


def test_config_errors(tiny_model_dir):
    with pytest.raises(ValueError, match="parallel must be ddp or fsdp2"):
        make(tiny_model_dir, "zero3")
    cfg = WorkerConfig(model_name_or_path=tiny_model_dir, training_args=TrainingArgs(lr_scheduler_type="cosine"))
    with pytest.raises(ValueError, match="num_training_steps"):
        TorchTrainStrategy(cfg).setup()


def test_actor_train_stops_past_early_stop_kl(tiny_model_dir):
    """ActorWorker.train: mini-batches of 2 rows, 3 epochs over 8 rows = 12 optimizer steps unless
    the KL to the rollout policy (old_logprobs = the start model's) passes early_stop_kl."""
    from roll.workers.actor import ActorWorker

    def run(early_stop_kl, shift=0.0):
        torch.manual_seed(0)
        cfg = WorkerConfig(model_name_or_path=tiny_model_dir, strategy_args=StrategyArgs("torch_train", {"parallel": "ddp"}),
                           training_args=TrainingArgs(lr=1e-2, per_device_train_batch_size=2))
        worker = ActorWorker("actor_train", 0, 1, cfg)
        worker.strategy = make(tiny_model_dir, lr=1e-2, per_device_train_batch_size=2)
        b = batch(rows=8, seed=3)
        b["advantages"] = torch.ones_like(b["advantages"])
        b["old_logprobs"] = worker.strategy.logprobs(b) + shift
        return worker.train(b, ACTOR_LOSS, epochs=3, early_stop_kl=early_stop_kl)

    free = run(None)
    assert free["actor/optimizer_steps"] == 12 and "actor/early_stopped" not in free
    # the first mini-batch is scored before any update; later ones after the policy moved
    assert abs(free["actor/ppo_kl_first"]) < 1e-5 and free["actor/ppo_kl_max"] > 1e-3
    assert free["actor/ppo_kl_max"] >= free["actor/ppo_kl"]
    loose = run(1e9)
    assert loose["actor/optimizer_steps"] == 12 and loose["actor/early_stopped"] == 0.0
    tight = run(0.05)
    # the first mini-batch is on-policy (KL 0), so at least 2 steps run before the stop
    assert 2 <= tight["actor/optimizer_steps"] < 12 and tight["actor/early_stopped"] == 1.0
    assert tight["actor/early_stop_ppo_kl"] > 0.05
    # old log-probs that do not match the trainer's (an engine that scores differently) show in the first
    assert run(None, shift=0.3)["actor/ppo_kl_first"] == pytest.approx(0.3, abs=1e-4)
    with pytest.raises(ValueError, match="early_stop_kl must be > 0"):
        make_actor_loss_fn(AlgorithmConfig(policy_loss="pg", early_stop_kl=0.0))


def test_lr_schedules_match_hf_and_hold_after_their_length():
    from transformers import get_scheduler

    from roll.strategies.torch_train import lr_factor, make_lr_scheduler

    for kind in ("linear", "cosine", "constant"):
        args = TrainingArgs(lr=1.0, lr_scheduler_type=kind, warmup_steps=3)
        ours = make_lr_scheduler(torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0), args, 10)
        hf_kind = "constant_with_warmup" if kind == "constant" else kind
        hf = get_scheduler(hf_kind, torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0), num_warmup_steps=3,
                           **({} if kind == "constant" else {"num_training_steps": 10}))
        for _ in range(10):  # within the schedule: the same LR as transformers' schedules
            assert ours.get_last_lr()[0] == pytest.approx(hf.get_last_lr()[0], abs=1e-12)
            ours.optimizer.step(), ours.step(), hf.optimizer.step(), hf.step()
    # past its length a cosine schedule stays at 0 (a periodic cosine would climb back to the peak)
    assert [lr_factor(s, "cosine", 0, 10) for s in (10, 15, 20)] == [0.0, 0.0, 0.0]
    assert lr_factor(20, "linear", 2, 10) == 0.0 and lr_factor(1, "linear", 2, 10) == 0.5
    with pytest.raises(ValueError, match="needs training_args.num_training_steps"):
        make_lr_scheduler(torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0), TrainingArgs(lr_scheduler_type="cosine"), None)
