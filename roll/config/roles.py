"""Per-role worker configuration: placement, strategy (backend), training and generation."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Optional, Union

from roll.config.validate import ranged


@dataclass
class StrategyArgs:
    """Which backend runs the role; everything under ``strategy_config`` goes to it untouched."""

    strategy_name: str = "hf_infer"
    """Registered strategy id: inference `hf_infer`, `vllm`, `sglang`; training `torch_train`
    (alias `ddp`/`fsdp2` by `strategy_config.parallel`), `deepspeed`, `megatron`. See `roll list strategies`."""
    strategy_config: dict[str, Any] = field(default_factory=dict)
    """Backend options passed through unvalidated (e.g. any vLLM engine argument, a DeepSpeed config)."""


@dataclass
class TrainingArgs:
    """Optimizer and batching for a training role."""

    lr: float = ranged(1e-6, ge=0)
    """Peak learning rate."""
    weight_decay: float = ranged(0.0, ge=0)
    """AdamW weight decay."""
    adam_betas: list[float] = ranged(default_factory=lambda: [0.9, 0.999], ge=0, lt=1)
    """AdamW betas."""
    adam_eps: float = ranged(1e-8, gt=0)
    """AdamW epsilon."""
    per_device_train_batch_size: int = ranged(1, ge=1)
    """Micro-batch size (samples) per data-parallel rank for one forward/backward."""
    max_tokens_per_micro_batch: int = ranged(0, ge=0)
    """Sequence packing (torch_train, deepspeed): 0 (default) runs micro-batches of
    `per_device_train_batch_size` rows (`infer_batch_size` for logprob/value passes) of similar
    lengths, each cut to its longest row (right-padded ones without an attention mask). N > 0
    packs each rank's rows into micro-batches of at most N real tokens (first-fit decreasing),
    each run as one row with positions restarting per sequence and
    attention confined to it, no compute on padding; same loss and gradients as padding. Used
    for the training step and the old/reference logprob and value passes (row counts are then
    ignored). A row longer than N is a micro-batch of its own. Set it to about the longest
    row: attention in a packed row costs N x N on kernels without varlen support (CPU sdpa),
    where the default is as fast or faster."""
    gradient_accumulation_steps: int = ranged(1, ge=1)
    """Micro-batches accumulated per optimizer step on each rank."""
    max_grad_norm: float = ranged(1.0, ge=0)
    """Gradient clipping by global norm; 0 disables clipping."""
    lr_scheduler_type: Literal["constant", "linear", "cosine"] = "constant"
    """Learning-rate schedule after warmup."""
    warmup_steps: int = ranged(0, ge=0)
    """Linear warmup optimizer steps."""
    num_training_steps: Optional[int] = ranged(None, ge=1)
    """Total optimizer steps for decaying schedules (null: derived from the pipeline's max_steps
    and rollout_batch_size; agentic step mode needs it set, as its batches vary in size). Past
    it the LR stays at its final value."""
    gradient_checkpointing: bool = False
    """Recompute activations in backward to save memory."""


@dataclass
class LoraArgs:
    """LoRA adapters (through the `peft` package) on a training role's linear layers: only the
    adapters train and sit in the optimizer; weight sync sends merged weights under the base
    model's names; checkpoints hold the adapters (docs/backends.md, LoRA)."""

    r: int = ranged(8, ge=1)
    """Rank of each adapter (A: r x in_features, B: out_features x r)."""
    alpha: float = ranged(16.0, gt=0)
    """Scale numerator: the update added to a weight is (alpha / r) * B @ A."""
    dropout: float = ranged(0.0, ge=0, lt=1)
    """Dropout on the adapter's input while training (not applied to merged weights)."""
    target_modules: list[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])
    """Linear modules that get adapters, by name or name suffix (`q_proj` matches every layer's
    `self_attn.q_proj`), or `["all-linear"]` for every linear layer but the LM head. A name that
    matches no linear layer of the model is a pre-flight error listing the model's names."""
    save_merged: bool = True
    """Checkpoints (and so `final_model`) also hold the merged model in Hugging Face format,
    loadable by `from_pretrained` without peft; false: adapters only (under `adapter/`)."""


@dataclass
class GeneratingArgs:
    """Sampling parameters for an inference role."""

    max_new_tokens: int = ranged(128, ge=1)
    """Maximum tokens generated per request (one turn in agentic rollouts)."""
    temperature: float = ranged(1.0, ge=0)
    """Sampling temperature; 0 means greedy."""
    top_p: float = ranged(1.0, gt=0, le=1)
    """Nucleus sampling mass."""
    top_k: int = ranged(-1, ge=-1)
    """Top-k sampling; -1 disables it."""
    num_return_sequences: int = ranged(1, ge=1)
    """Responses per prompt (RLVR group size)."""
    stop_strings: list[str] = field(default_factory=list)
    """Generation stops after any of these strings (kept in the output)."""
    do_sample: bool = True
    """Sample (true) or greedy decode (false)."""


@dataclass
class WorkerConfig:
    """One role (actor_train, actor_infer, reference, critic, ...): where it runs and how."""

    model_name_or_path: Optional[str] = None
    """Model directory or hub id; null inherits the pipeline's `pretrain`. `roll-tiny://tiny` and
    `roll-tiny://small` build (once, cached) the local tiny model and load it from disk."""
    device_mapping: Optional[Union[str, list[int]]] = None
    """GPU ranks of the pool this role uses: a list, or a range string like "0-7" or "0-3,8-11".
    Overlapping mappings colocate roles; disjoint ones run them concurrently. Null: CPU-only workers."""
    num_gpus_per_worker: int = ranged(1, ge=1)
    """Devices each worker (Ray actor) of this role holds; the mapping is split into groups of this size."""
    world_size: Optional[int] = ranged(None, ge=1)
    """Number of workers when the role runs on CPU slots without a device_mapping."""
    num_cpus_per_worker: float = ranged(1.0, ge=0)
    """CPUs reserved per worker on Ray. Ray also sets the worker's OMP_NUM_THREADS, so torch's threads, to
    this (at least 1): a CPU trainer whose phase runs alone wants the machine's cores."""
    strategy_args: StrategyArgs = field(default_factory=StrategyArgs)
    """Backend selection and passthrough options."""
    training_args: TrainingArgs = field(default_factory=TrainingArgs)
    """Optimizer and batching (training roles)."""
    generating_args: GeneratingArgs = field(default_factory=GeneratingArgs)
    """Sampling parameters (inference roles)."""
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """Parameter and compute dtype."""
    infer_batch_size: int = ranged(8, ge=1)
    """Micro-batch size for forward-only passes (logprobs, values)."""
    max_concurrency: int = ranged(64, ge=1)
    """Concurrent requests a worker accepts (inference) before the router queues them."""
    call_timeout_s: float = ranged(600.0, gt=0)
    """A call to this role that takes longer fails with an error naming role and rank."""
    lora: Optional[LoraArgs] = None
    """LoRA fine-tuning of a training role (torch_train, deepspeed): `{r, alpha, dropout,
    target_modules, save_merged}`; null trains every parameter (full fine-tuning)."""
    max_restarts: int = ranged(3, ge=-1)
    """Times Ray restarts a dead worker of this role (-1: unlimited); a collective role (trainer)
    restarts all its ranks together."""
