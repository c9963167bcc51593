"""A LoRA pipeline through the CLI: two GRPO steps of the tiny Sokoban config with adapters on
every linear layer. The run trains, the checkpoint holds the adapters (optimizer state for them
only), and final_model is a merged Hugging Face model that loads without peft and equals the
base model plus the saved adapters."""
from __future__ import annotations

import pytest
import torch

from roll.cli import main as roll_main

from .helpers import CONSOLE_SMALL, REPO, read_metrics

pytestmark = pytest.mark.integration

pytest.importorskip("peft", reason="LoRA needs peft (extra `lora`)")


def test_lora_run_two_steps(tmp_path, ray_cluster):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from roll.models.tiny import tiny_model_path
    from roll.utils.checkpoint import safe_torch_load

    out = tmp_path / "run"
    overrides = [o for o in CONSOLE_SMALL if not o.startswith("show_progress")]
    rc = roll_main(["run", str(REPO / "configs/agentic/sokoban_cpu.yaml"), *overrides, "save_steps=2", "eval_steps=0",
                    "val_env_manager=null", "show_progress=false", f"output_dir={out}",
                    # an entropy bonus moves the weights even when every episode scores alike (zero advantages)
                    "actor_train.training_args.lr=1e-2", "algorithm.entropy_coef=0.05",
                    "actor_train.lora={r: 4, alpha: 8, target_modules: [all-linear]}"])
    assert rc == 0
    metrics = read_metrics(out)
    assert all("actor/loss" in metrics[s] or metrics[s].get("rollout/empty_batch") == 1.0 for s in (1, 2))
    ckpt = out / "checkpoints" / "step-2" / "actor_train"
    optim = safe_torch_load(ckpt / "trainer_state.pt")["optimizer"]["state"]
    assert optim and all("lora_" in k for k in optim)
    final = out / "final_model"
    assert (final / "adapter" / "adapter_model.safetensors").is_file() and not (final / "adapter_config.json").exists()
    merged = AutoModelForCausalLM.from_pretrained(final)
    assert not any("lora" in n for n, _ in merged.named_parameters())
    base_dir = tiny_model_path("tiny")
    adapted = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base_dir), str(final / "adapter"))
    ids = torch.randint(3, 3000, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want = adapted(input_ids=ids).logits
        assert (merged(input_ids=ids).logits - want).abs().max() < 1e-4
        # B starts at zero: a non-zero difference from the base model means the adapters trained
        assert (AutoModelForCausalLM.from_pretrained(base_dir)(input_ids=ids).logits - want).abs().max() > 1e-4
