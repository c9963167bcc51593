"""LoRA (roll/models/lora.py) on torch_train, DDP and FSDP2, one-rank gloo group, in-process:
only the adapters train, weight sync sends the merged model under the base names, checkpoints
hold the adapters and resume exactly, the merged save loads without peft, bad settings fail
with a clear message. DeepSpeed ZeRO-2/3: tests/strategies/test_lora_deepspeed.py."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("peft", reason="LoRA needs peft (extra `lora`)")

from roll.algorithms.losses import make_actor_loss_fn
from roll.config.algorithm import AlgorithmConfig
from roll.config.roles import LoraArgs, WorkerConfig
from roll.models.lora import LoraError, is_adapter_name, merge_weight
from strategy_helpers import make_torch_train, train_batch

pytestmark = pytest.mark.usefixtures("single_rank_group")

ACTOR_LOSS = make_actor_loss_fn(AlgorithmConfig(policy_loss="pg"))


def make(model_dir, parallel="ddp", lora=None, critic=False, **train_kw):
    train_kw.setdefault("lr", 1e-2)
    return make_torch_train(model_dir, parallel, critic=critic, lora=LoraArgs(r=4, alpha=8.0) if lora is None else lora,
                            **train_kw)


def batch(rows=4, width=12, seed=0):
    return train_batch(rows, width, seed, critic_fields=False)


def full(t: torch.Tensor) -> torch.Tensor:
    return (t.full_tensor() if hasattr(t, "full_tensor") else t).detach().clone()


def params(s) -> dict[str, torch.Tensor]:
    return {n: full(p) for n, p in s.hf_model.named_parameters()}


def probe():
    b = batch(rows=3, width=14, seed=7)
    del b.tensors["response_mask"]  # every column scored
    return b


@pytest.mark.parametrize("parallel", ["ddp", "fsdp2"])
def test_only_adapters_train(tiny_model_dir, parallel):
    s = make(tiny_model_dir, parallel)
    before = params(s)
    adapters = {n for n in before if is_adapter_name(n)}
    assert adapters and all(".base_layer." in n or not n.endswith(("q_proj.weight", "v_proj.weight")) for n in before)
    trainable = {n for n, p in s.hf_model.named_parameters() if p.requires_grad}
    assert trainable == adapters
    opt_params = {id(p) for g in s.optimizer.param_groups for p in g["params"]}
    assert opt_params == {id(p) for n, p in s.hf_model.named_parameters() if n in adapters}
    for seed in range(3):
        m = s.train_step(batch(seed=seed), ACTOR_LOSS)
        assert m["grad_norm"] > 0
    after = params(s)
    for n in before:
        if n in adapters:
            continue
        assert torch.equal(before[n], after[n]), f"frozen base weight {n} changed"
    changed = [n for n in adapters if not torch.equal(before[n], after[n])]
    assert set(changed) == adapters  # A and B of every adapted module moved
    # optimizer state exists for the adapters only
    state_ids = {id(p) for p in s.optimizer.state}
    assert state_ids == opt_params


@pytest.mark.parametrize("parallel", ["ddp", "fsdp2"])
def test_sync_sends_merged_base_weights_and_hf_infer_matches(tiny_model_dir, parallel):
    from transformers import AutoModelForCausalLM

    from roll.strategies.hf_infer import HFInferStrategy

    s = make(tiny_model_dir, parallel, lora=LoraArgs(r=4, alpha=8.0, target_modules=["all-linear"]))
    for seed in range(2):
        s.train_step(batch(seed=seed), ACTOR_LOSS)
    trained = params(s)
    buckets = list(s.named_parameters_for_sync(bucket_size_mb=1))
    synced = [(n, t.clone()) for b in buckets for n, t in b]
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    base_names = [(n, tuple(p.shape)) for n, p in base.named_parameters()]
    assert [(n, tuple(t.shape)) for n, t in synced] == base_names and len(buckets) > 1
    assert all(not hasattr(t, "full_tensor") for _, t in synced)
    # the merge is W + (alpha / r) * B @ A of the trained adapters, base untouched
    prefix = "model.layers.1.mlp.down_proj"
    got = dict(synced)[f"{prefix}.weight"]
    want = merge_weight(trained[f"{prefix}.base_layer.weight"], trained[f"{prefix}.lora_A.default.weight"],
                        trained[f"{prefix}.lora_B.default.weight"], 2.0)
    assert torch.equal(got, want) and not torch.equal(got, trained[f"{prefix}.base_layer.weight"])
    after = params(s)
    assert all(torch.equal(trained[n], after[n]) for n in trained)  # syncing does not modify the trained module

    infer = HFInferStrategy(WorkerConfig(model_name_or_path=tiny_model_dir), device="cpu")
    infer.update_weights(synced, version=2)
    b = probe()
    with torch.no_grad():
        trainer_logits = s.model(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits
        infer_logits = infer.model(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits
        base_logits = base(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits
    assert (trainer_logits - infer_logits).abs().max() < 1e-4
    assert (trainer_logits - base_logits).abs().max() > 1e-2  # the adapters did change the model
    assert torch.allclose(s.logprobs(b), infer.logprobs(b), atol=1e-4)


@pytest.mark.parametrize("parallel", ["ddp", "fsdp2"])
def test_checkpoint_holds_adapters_and_resumes_exactly(tiny_model_dir, tmp_path, parallel):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from roll.utils.checkpoint import safe_torch_load

    kw = dict(lr_scheduler_type="linear", warmup_steps=1)
    s = make(tiny_model_dir, parallel, **kw)
    s.train_step(batch(), ACTOR_LOSS)
    s.train_step(batch(seed=1), ACTOR_LOSS)
    ckpt = tmp_path / "ckpt"
    s.save(str(ckpt))
    assert (ckpt / "adapter" / "adapter_model.safetensors").is_file()
    assert json.loads((ckpt / "adapter" / "adapter_config.json").read_text())["r"] == 4
    assert not (ckpt / "adapter_config.json").exists()  # from_pretrained(ckpt) must load the merged model
    optim = safe_torch_load(ckpt / "trainer_state.pt")["optimizer"]
    assert optim["state"] and all("lora_" in k for k in optim["state"])  # adapter state only
    p = probe()
    ids, attn = p["input_ids"], p["attention_mask"]
    with torch.no_grad():
        saved = s.model(input_ids=ids, attention_mask=attn).logits

    t = make(tiny_model_dir, parallel, **kw)
    t.load(str(ckpt))
    assert t.step == 2
    ps, pt = params(s), params(t)
    assert all(torch.equal(ps[n], pt[n]) for n in ps)
    a, b = s.train_step(batch(seed=2), ACTOR_LOSS), t.train_step(batch(seed=2), ACTOR_LOSS)
    assert a["loss"] == pytest.approx(b["loss"], abs=1e-7) and a["lr"] == pytest.approx(b["lr"])
    ps, pt = params(s), params(t)
    assert all(torch.allclose(ps[n], pt[n], atol=1e-7) for n in ps)  # same optimizer state: same update

    # the merged save is a plain HF model; the adapters load with peft onto the base
    with torch.no_grad():
        merged = AutoModelForCausalLM.from_pretrained(str(ckpt))
        assert not any("lora" in n for n, _ in merged.named_parameters())
        assert (merged(input_ids=ids, attention_mask=attn).logits - saved).abs().max() < 1e-4
        peft_model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model_dir), str(ckpt / "adapter"))
        assert (peft_model(input_ids=ids, attention_mask=attn).logits - saved).abs().max() < 1e-4
        base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
        assert (base(input_ids=ids, attention_mask=attn).logits - saved).abs().max() > 1e-3


def test_adapters_only_checkpoint(tiny_model_dir, tmp_path):
    s = make(tiny_model_dir, lora=LoraArgs(r=2, alpha=4.0, target_modules=["q_proj"], save_merged=False))
    s.train_step(batch(), ACTOR_LOSS)
    s.save(str(tmp_path / "ckpt"))
    files = sorted(p.relative_to(tmp_path / "ckpt").as_posix() for p in (tmp_path / "ckpt").rglob("*") if p.is_file())
    assert files == ["adapter/adapter_config.json", "adapter/adapter_model.safetensors", "trainer_state.pt"]
    t = make(tiny_model_dir, lora=LoraArgs(r=2, alpha=4.0, target_modules=["q_proj"], save_merged=False))
    t.load(str(tmp_path / "ckpt"))
    assert all(torch.equal(a, b) for a, b in zip(params(s).values(), params(t).values()))
    # a checkpoint of another rank is refused with the reason
    other = make(tiny_model_dir, lora=LoraArgs(r=4, alpha=4.0, target_modules=["q_proj"]))
    with pytest.raises(LoraError, match="r=2"):
        other.load(str(tmp_path / "ckpt"))
    wider = make(tiny_model_dir, lora=LoraArgs(r=2, alpha=4.0, target_modules=["q_proj", "v_proj"]))
    with pytest.raises(LoraError, match="missing"):
        wider.load(str(tmp_path / "ckpt"))


def test_packed_training_with_lora_equals_padded(tiny_model_dir):
    padded = make(tiny_model_dir, adam_eps=1.0)
    packed = make(tiny_model_dir, adam_eps=1.0, max_tokens_per_micro_batch=24)
    b = batch()
    m1, m2 = padded.train_step(b, ACTOR_LOSS), packed.train_step(b, ACTOR_LOSS)
    assert m1["loss"] == pytest.approx(m2["loss"], abs=1e-5)
    for (n, p1), (_, p2) in zip(padded.hf_model.named_parameters(), packed.hf_model.named_parameters()):
        assert torch.allclose(p1, p2, atol=1e-6), n


def test_bad_settings_fail_clearly(tiny_model_dir, monkeypatch):
    with pytest.raises(LoraError, match=r"'q_prj' matches no linear module .*down_proj, gate_proj, k_proj, o_proj, q_proj"):
        make(tiny_model_dir, lora=LoraArgs(target_modules=["q_prj"]))
    with pytest.raises(LoraError, match="critic is not supported"):
        make(tiny_model_dir, critic=True)
    monkeypatch.setitem(sys.modules, "peft", None)  # as if peft were not installed
    with pytest.raises(ImportError, match=r"lora needs the peft package.*pip install peft"):
        make(tiny_model_dir)


RLVR = "configs/rlvr/multi_domain_cpu.yaml"


@pytest.mark.parametrize("overrides, expected", [
    (["actor_train.lora={r: 4, target_modules: [q_prj, v_proj]}"],
     "actor_train.lora.target_modules: 'q_prj' matches no linear module of the model (its linear modules: down_proj, "
     "gate_proj, k_proj, o_proj, q_proj, up_proj, v_proj)"),
    (["actor_train.lora={r: 4}", "actor_train.strategy_args.strategy_name=megatron"],
     "actor_train.lora: LoRA is not supported on the megatron strategy"),
    (["actor_train.lora={r: 0}"], "actor_train.lora.r: must be >= 1, got 0"),
])
def test_preflight_rejects_bad_lora(overrides, expected, tmp_path):
    from roll.config import ConfigError, load_config
    from roll.config.preflight import preflight

    repo = Path(__file__).resolve().parents[2]
    try:
        cfg = load_config(repo / RLVR, [f"output_dir={tmp_path}", *overrides])
    except ConfigError as e:  # numeric ranges are checked when the YAML is validated
        problems = e.errors
    else:
        problems = preflight(cfg, offline=True)
    assert any(expected in p for p in problems), problems


def test_preflight_accepts_lora_and_names_missing_peft(tmp_path, monkeypatch):
    import importlib.util

    from roll.config import load_config
    from roll.config.preflight import preflight

    cfg = load_config(Path(__file__).resolve().parents[2] / RLVR,
                      [f"output_dir={tmp_path}", "actor_train.lora={r: 4, target_modules: [all-linear]}"])
    assert cfg.actor_train.lora.r == 4 and not [p for p in preflight(cfg, offline=True) if "lora" in p]
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "peft" else real(name, *a))
    assert any("actor_train.lora: LoRA needs the 'peft' package" in p and "pip install peft" in p
               for p in preflight(cfg, offline=True))
