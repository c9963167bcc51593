"""LoRA through peft for the Hugging Face training strategies (torch_train, deepspeed).

The training strategies (roll/strategies/hf_train.py) call :func:`apply_lora` on the loaded
model: peft replaces each targeted ``nn.Linear`` with a LoRA layer in place, so the module the
strategies wrap (DDP, FSDP2, DeepSpeed) is still the Hugging Face model, with parameter names
``<module>.base_layer.weight`` (frozen) and ``<module>.lora_A.default.weight`` /
``<module>.lora_B.default.weight`` (trained). Forwards keep the model's own signature
(``logits_to_keep``, packed ``position_ids``), which a ``PeftModel`` wrapper would hide.

Three conversions live here, all on ``(name, tensor)`` streams so they work on whatever the
backend gathers (FSDP2 ``full_tensor``, ZeRO-3 ``GatheredParameters``) one parameter at a time:

- :func:`merged_parameters`: the base model's names with ``W + (alpha / r) * B @ A`` for the
  weight of every adapted module (computed in float32, cast back), the trained module
  untouched; the inference engines load these as a full model;
- :func:`adapter_tensors` / :func:`save_adapter`: the adapters in peft's file format
  (``adapter_config.json`` + ``adapter_model.safetensors``, keys
  ``base_model.model.<module>.lora_A.weight``), loadable with ``PeftModel.from_pretrained``;
- :func:`load_adapter`: that file back to the training module's names (safetensors: no
  pickle).

:func:`model_linear_names` and :func:`target_problems` let the pre-flight check
``target_modules`` against the model's architecture (built on the meta device, no weights).
"""
from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from typing import Any

import torch

from roll.errors import RollError

ADAPTER = "default"
"""peft's adapter name inside the modules (one adapter per model here)."""
ADAPTER_DIR = "adapter"
"""Subdirectory of a role's checkpoint holding the adapter files: kept apart from a merged
model's ``config.json``, because ``from_pretrained`` on a directory with ``adapter_config.json``
at its top loads the base model named there instead."""
ALL_LINEAR = "all-linear"
PEFT_INSTALL = "pip install peft (or the `lora` extra: pip install -e '.[lora]')"

_BASE = ".base_layer."
_A = f".lora_A.{ADAPTER}."
_B = f".lora_B.{ADAPTER}."


class LoraError(RollError, ValueError):
    """A LoRA setting the model or backend cannot honour."""


def require_peft() -> Any:
    """The peft module, or an ImportError that says how to install it."""
    try:
        import peft
    except ImportError as e:
        raise ImportError(f"lora needs the peft package ({e}); {PEFT_INSTALL}") from e
    return peft


# ---- targets ------------------------------------------------------------------------------------
def linear_names(model: torch.nn.Module) -> list[str]:
    """Full names of the model's ``nn.Linear`` modules that can take an adapter: all but the
    output embedding (the LM head, often tied to the input embedding)."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    return [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and m is not head]


def _matches(key: str, name: str) -> bool:
    return name == key or name.endswith("." + key)


def target_problems(target_modules: list[str], names: list[str]) -> list[str]:
    """One line per entry of ``target_modules`` that matches none of ``names`` (the model's
    adaptable linear modules), listing the short names that exist."""
    if not target_modules:
        return ["target_modules is empty: name the linear modules to adapt (or ['all-linear'])"]
    if ALL_LINEAR in target_modules:
        return [] if len(target_modules) == 1 else [f"'{ALL_LINEAR}' cannot be combined with other target_modules"]
    short = sorted({n.rsplit(".", 1)[-1] for n in names})
    return [f"target_modules: {key!r} matches no linear module of the model (its linear modules: {', '.join(short)})"
            for key in target_modules if not any(_matches(key, n) for n in names)]


def model_linear_names(model_path: str) -> list[str] | None:
    """The adaptable linear module names of the model at ``model_path`` (a local directory, a
    cached hub id or ``roll-tiny://SIZE``), from its config alone (meta device, no weights);
    None when its config cannot be read (the model check reports that)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    try:
        if model_path.startswith("roll-tiny://"):
            from transformers import Qwen2Config

            from roll.models.tiny import SIZES, TOKENIZER_VOCAB_SIZE

            config = Qwen2Config(vocab_size=TOKENIZER_VOCAB_SIZE, tie_word_embeddings=True,
                                 **SIZES[model_path[len("roll-tiny://"):].strip("/")])
        else:
            config = AutoConfig.from_pretrained(model_path)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
    except (OSError, ValueError, KeyError):  # unreadable or unknown: the model check says why
        return None
    return linear_names(model)


# ---- applying ---------------------------------------------------------------------------------
def apply_lora(model: torch.nn.Module, args: Any, base_model_path: str | None = None) -> Any:
    """Inject adapters into ``model`` in place (only they require grad); returns the
    ``PeftModel`` (its ``peft_config`` is what the checkpoints save). Adapter A is drawn from
    torch's global generator, so ranks seeded alike start with identical adapters; B is zero,
    so the merged model starts equal to the base."""
    peft = require_peft()
    problems = target_problems(list(args.target_modules), linear_names(model))
    if problems:
        raise LoraError("; ".join(problems))
    targets: Any = ALL_LINEAR if list(args.target_modules) == [ALL_LINEAR] else list(args.target_modules)
    config = peft.LoraConfig(r=int(args.r), lora_alpha=float(args.alpha), lora_dropout=float(args.dropout),
                             target_modules=targets, bias="none")
    peft_model = peft.get_peft_model(model, config)
    if peft_model.get_base_model() is not model:
        raise LoraError("peft wrapped a copy of the model; roll needs the adapters injected in place")
    peft_model.peft_config[ADAPTER].base_model_name_or_path = base_model_path
    return peft_model


def is_adapter_name(name: str) -> bool:
    return _A in name or _B in name


def adapter_parameters(model: torch.nn.Module) -> list[tuple[str, torch.nn.Parameter]]:
    return [(n, p) for n, p in model.named_parameters() if is_adapter_name(n)]


# ---- merged weights -------------------------------------------------------------------------------
def _scaling(model: torch.nn.Module, prefix: str) -> float:
    return float(model.get_submodule(prefix).scaling[ADAPTER])


def merge_weight(weight: torch.Tensor, a: torch.Tensor, b: torch.Tensor, scaling: float) -> torch.Tensor:
    """``weight + scaling * b @ a`` [out, in], computed in float32 and returned in weight's dtype."""
    delta = (b.float() @ a.float()) * scaling
    return (weight.float() + delta.to(weight.device)).to(weight.dtype)


def merged_parameters(model: torch.nn.Module, named: Iterable[tuple[str, torch.Tensor]]) -> Iterator[tuple[str, torch.Tensor]]:
    """``named`` (the training module's ``(name, full tensor)`` in ``named_parameters`` order)
    as the base model's parameters: adapted weights merged, ``.base_layer`` dropped from the
    names, adapters consumed. Holds one module's tensors at a time; the trained module and the
    tensors it yields from are not modified."""
    pending: dict[str, dict[str, torch.Tensor]] = {}
    for name, tensor in named:
        for marker, part in ((_BASE, None), (_A, "A"), (_B, "B")):
            if marker in name:
                prefix, rest = name.split(marker, 1)
                slot = pending.setdefault(prefix, {})
                slot[part or rest] = tensor
                break
        else:
            yield name, tensor
            continue
        slot = pending[prefix]
        if "weight" in slot and "A" in slot and "B" in slot:
            del pending[prefix]
            yield f"{prefix}.weight", merge_weight(slot.pop("weight"), slot.pop("A"), slot.pop("B"), _scaling(model, prefix))
            for rest, t in slot.items():  # the base layer's bias
                yield f"{prefix}.{rest}", t
    if pending:
        raise RuntimeError(f"LoRA merge: incomplete adapted modules {sorted(pending)} (a weight or adapter never came)")


# ---- files ----------------------------------------------------------------------------------------
def _peft_key(name: str) -> str:
    """``model.layers.0.q_proj.lora_A.default.weight`` -> ``base_model.model.model.layers.0.q_proj.lora_A.weight``."""
    return "base_model.model." + name.replace(f".{ADAPTER}.", ".")


def _model_key(peft_key: str) -> str:
    name = peft_key.removeprefix("base_model.model.")
    for part in ("lora_A", "lora_B"):
        name = name.replace(f".{part}.", f".{part}.{ADAPTER}.")
    return name


def adapter_tensors(named: Iterable[tuple[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """The adapters among ``named`` (training-module names) keyed as peft saves them, on CPU."""
    return {_peft_key(n): t.detach().cpu().contiguous() for n, t in named if is_adapter_name(n)}


def save_adapter(path: str | os.PathLike, peft_model: Any, tensors: dict[str, torch.Tensor]) -> None:
    """Write ``adapter_config.json`` and ``adapter_model.safetensors`` (peft's layout) to ``path``."""
    from safetensors.torch import save_file

    os.makedirs(path, exist_ok=True)
    peft_model.peft_config[ADAPTER].save_pretrained(str(path))
    save_file(tensors, os.path.join(path, "adapter_model.safetensors"), metadata={"format": "pt"})


def load_adapter(path: str | os.PathLike, model: torch.nn.Module, peft_model: Any) -> dict[str, torch.Tensor]:
    """The adapter tensors saved at ``path`` keyed by the training module's names; a checkpoint
    whose adapters differ from the model's (rank, targets) is a LoraError naming the difference."""
    from safetensors.torch import load_file

    from roll.errors import CheckpointError

    file = os.path.join(path, "adapter_model.safetensors")
    if not os.path.isfile(file):
        raise CheckpointError(f"LoRA checkpoint without adapters: {file} does not exist")
    with open(os.path.join(path, "adapter_config.json")) as f:
        saved = json.load(f)
    ours = peft_model.peft_config[ADAPTER]
    if int(saved.get("r", -1)) != int(ours.r):
        raise LoraError(f"the checkpoint's adapters have r={saved.get('r')}, this run's lora.r is {ours.r}")
    tensors = {_model_key(k): v for k, v in load_file(file).items()}
    expected = {n: p.shape for n, p in adapter_parameters(model)}
    missing, extra = sorted(set(expected) - set(tensors)), sorted(set(tensors) - set(expected))
    if missing or extra:
        raise LoraError(f"the checkpoint's adapters do not match this run's lora.target_modules: missing {missing[:4]}"
                        f"{' ...' if len(missing) > 4 else ''}, unexpected {extra[:4]}{' ...' if len(extra) > 4 else ''}")
    return tensors


def validate_role(lora: Any, strategy_name: str, role: str, critic: bool) -> list[str]:
    """Problems of a role's ``lora`` setting that show without the model (pre-flight and strategies)."""
    if lora is None:
        return []
    where = f"{role}.lora"
    if strategy_name == "megatron":
        return [f"{where}: LoRA is not supported on the megatron strategy (use torch_train or deepspeed, or set lora: null)"]
    if strategy_name not in ("torch_train", "deepspeed"):
        return [f"{where}: LoRA applies to training roles (torch_train, deepspeed); {role} runs {strategy_name!r}"]
    if critic:
        return [f"{where}: LoRA on the critic is not supported (its value head must train in full); set lora: null"]
    return []
