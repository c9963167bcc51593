"""HFTrainStrategy: the one base of the Hugging Face training strategies (torch_train's DDP and
FSDP2, deepspeed's ZeRO), and the helpers every training backend shares (megatron included).

The base owns rank / dp-size properties, model loading, AdamW + LR schedule, the forward-only
pass (every rank runs as many forwards as the busiest one, since sharded forwards are
collective: a rank with no rows runs a throw-away two-token batch and returns [0, T]), the
``train_step`` micro-batch loop (global loss normalisers, backward of ``loss x dp_size``,
gradient sync on the last micro-batch only, metrics reduced over micro-batches and ranks; a
non-finite gradient norm is counted in ``nonfinite_grad_steps``; a rank with fewer micro-batches
runs zero-loss ones), sequence packing (``max_tokens_per_micro_batch``, roll/data/packing.py), bucketed
full-parameter sync (:func:`bucket_tensors`), LoRA (``worker_config.lora``, roll/models/lora.py:
adapters injected at load, only they in the optimizer, sync of merged weights under the base
model's names, adapter checkpoint files). A backend overrides the hooks ``_configure``,
``_wrap``, ``hf_model``, ``_backward``, ``_set_grad_sync``, ``_zero_grad``, ``_optimizer_step``
and ``_full_parameters``, plus checkpoints and offload. The contracts (logprob alignment,
micro-batching, loss normalisation) are in roll/strategies/torch_train.py's docstring.
"""
from __future__ import annotations

import datetime
import functools
import math
from collections.abc import Iterable, Iterator
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F

from roll.data.batch import Batch
from roll.data.packing import packed_forward, plan_packing, scored_logprobs
from roll.models.forward import accepts_logits_to_keep, output_head, right_padded_width
from roll.utils.logging import get_logger

logger = get_logger(__name__)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


# ---- forward helpers (also used by hf_infer for train/infer parity, and megatron) -----------------
def position_ids_for(batch: Batch) -> torch.Tensor:
    if "position_ids" in batch.tensors:
        return batch["position_ids"]
    return (batch["attention_mask"].long().cumsum(-1) - 1).clamp(min=0)


def sampling_temperatures(batch: Batch) -> torch.Tensor | None:
    """[B] temperature each row was sampled with (``batch["temperature"]``), or None when the
    batch has none or every row is at 1. A greedy row (0) is scored at 1, as hf_infer reports it."""
    if "temperature" not in batch.tensors:
        return None
    t = batch["temperature"].float()
    t = torch.where(t > 0, t, torch.ones_like(t))
    return None if bool((t == 1).all()) else t


def _tempered(logits: torch.Tensor, temperature: torch.Tensor | None) -> torch.Tensor:
    logits = logits.float()
    return logits if temperature is None else logits / temperature.to(logits.device)[:, None, None]


def token_logprobs(logits: torch.Tensor, input_ids: torch.Tensor, temperature: torch.Tensor | None = None) -> torch.Tensor:
    """logits [B, T, V] (position t predicts t+1), input_ids [B, T] -> [B, T], column 0 is 0.
    ``temperature`` [B]: score each row under logits / temperature (the sampling distribution)."""
    logits = _tempered(logits[:, :-1], temperature)
    target = input_ids[:, 1:]
    lp = logits.gather(-1, target[..., None]).squeeze(-1) - torch.logsumexp(logits, dim=-1)
    return F.pad(lp, (1, 0))


def token_entropy(logits: torch.Tensor, temperature: torch.Tensor | None = None) -> torch.Tensor:
    """Entropy of the distribution that predicted each token, aligned like token_logprobs."""
    logp = _tempered(logits[:, :-1], temperature).log_softmax(-1)
    return F.pad(-(logp.exp() * logp).sum(-1), (1, 0))


def forward_logprobs(model: torch.nn.Module, batch: Batch) -> torch.Tensor:
    return model_forward(model, batch)[0]


def logits_start(batch: Batch) -> int:
    """First column whose logits a loss token needs (column t predicts token t+1): the one
    before the first column holding a response token in any row; 0 without ``response_mask``
    or when it is empty."""
    if "response_mask" not in batch.tensors:
        return 0
    cols = batch["response_mask"].bool().any(0).nonzero()
    return max(int(cols[0]) - 1, 0) if len(cols) else 0


def model_forward(model: Any, batch: Batch, critic: bool = False, entropy: bool = False) -> tuple[torch.Tensor | None, dict[str, torch.Tensor]]:
    """One forward of a (wrapped) causal LM: ``(logprobs [B, T], extra)``; a critic returns
    ``(None, {"values": [B, T]})`` (the first logit is the value head); ``extra["entropy"]``
    when asked. Shared by the torch and DeepSpeed strategies.

    What is computed (the same values on every scored token, only less work):
    - a right-padded batch (no ``position_ids`` given) runs without its all-padding columns and
      without an attention mask (:func:`roll.models.forward.right_padded_width`);
    - with ``response_mask``, the LM head runs only on the hidden states that predict a response
      token (a pre-hook on the head gathers them), so logprobs and entropy are 0 elsewhere, as in
      a packed micro-batch; a model without a reachable head runs it from :func:`logits_start` on.
    """
    ids = batch["input_ids"]
    b, t = ids.shape
    width = None if "position_ids" in batch.tensors else right_padded_width(batch["attention_mask"])
    if width is not None:
        ids = ids[:, :width]
        inputs = {"input_ids": ids, "attention_mask": None, "position_ids": None}
    else:
        inputs = {"input_ids": ids, "attention_mask": batch["attention_mask"], "position_ids": position_ids_for(batch)}
    w = ids.shape[1]
    if critic:
        values = model(**inputs, use_cache=False).logits[..., 0].float()
        return None, {"values": F.pad(values, (0, t - w))}
    temp = sampling_temperatures(batch)
    head = output_head(model) if "response_mask" in batch.tensors else None
    if head is not None:
        return _scored_forward(model, head, inputs, batch["response_mask"][:, :w], temp, entropy, t)
    start = 0 if not accepts_logits_to_keep(model) else logits_start(batch)
    kwargs = {"logits_to_keep": w - start} if start > 0 else {}
    out = model(**inputs, use_cache=False, **kwargs)
    extra = {"entropy": F.pad(token_entropy(out.logits, temp), (start, t - w))} if entropy else {}
    return F.pad(token_logprobs(out.logits, ids[:, start:], temp), (start, t - w)), extra


def _scored_forward(model: Any, head: torch.nn.Module, inputs: dict[str, Any], response_mask: torch.Tensor,
                    temp: torch.Tensor | None, entropy: bool, t: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """model_forward with the LM head on the columns that predict a response token only: the
    head's input [B, w, H] becomes [1, N, H] (those columns' hidden states), so the logits are
    [1, N, V]; a model that calls its head on another shape gets it unchanged and the columns
    are taken from its full logits."""
    ids = inputs["input_ids"]
    b, w = ids.shape
    rows, cols = response_mask[:, 1:].bool().nonzero(as_tuple=True)  # token cols + 1 is predicted at cols
    gathered: list[bool] = []

    def take(_module: torch.nn.Module, args: tuple) -> tuple | None:
        h = args[0] if args else None
        if not gathered and isinstance(h, torch.Tensor) and h.dim() == 3 and tuple(h.shape[:2]) == (b, w):
            gathered.append(True)
            return (h[rows, cols].unsqueeze(0), *args[1:])
        return None

    handle = head.register_forward_pre_hook(take)
    try:
        out = model(**inputs, use_cache=False)
    finally:
        handle.remove()
    logits = (out.logits[0] if gathered else out.logits[rows, cols]).float()
    if temp is not None:
        logits = logits / temp.to(logits.device)[rows][:, None]
    lp, ent = scored_logprobs(logits, ids[rows, cols + 1], entropy)
    out_lp = lp.new_zeros(b, t)
    out_lp[rows, cols + 1] = lp
    extra: dict[str, torch.Tensor] = {}
    if ent is not None:
        extra["entropy"] = lp.new_zeros(b, t).index_put((rows, cols + 1), ent)
    return out_lp, extra


def max_micro_batches(n_local: int, device: Any) -> int:
    """Sharded forwards (FSDP, ZeRO-3) are collective: every rank must run as many
    micro-batches as the busiest rank."""
    n = torch.tensor([n_local], device=device)
    dist.all_reduce(n, op=dist.ReduceOp.MAX)
    return int(n.item())

def global_loss_normalizers(batch: Batch, device: Any) -> tuple[float, float]:
    """Loss tokens, and sequences with at least one loss token, of the mini-batch summed over
    every data-parallel rank (see roll.algorithms.aggregation.loss_normalizers)."""
    mask = batch["response_mask"] if "response_mask" in batch.tensors else batch["attention_mask"]
    totals = torch.tensor([float(mask.sum()), float(mask.bool().any(-1).sum())], dtype=torch.float64, device=device)
    dist.all_reduce(totals)
    return float(totals[0]), float(totals[1])


def reduce_step_metrics(metric_sums: dict[str, float], n_micro: int, dp_size: int, device: Any) -> dict[str, float]:
    """The loss_fn's metrics: mean over micro-batches, then over data-parallel ranks."""
    keys = sorted(metric_sums)
    reduced = torch.tensor([metric_sums[k] / n_micro for k in keys], dtype=torch.float64, device=device)
    if len(reduced):
        dist.all_reduce(reduced)
        reduced /= dp_size
    return {k: float(v) for k, v in zip(keys, reduced.tolist())}



def lr_factor(step: int, kind: str, warmup_steps: int, num_training_steps: int | None) -> float:
    """LR multiplier after ``step`` optimizer steps: linear warmup from 0 over ``warmup_steps``,
    then constant, or a linear / cosine decay that reaches 0 at ``num_training_steps`` and stays
    there (a schedule that runs past its length does not restart, as a periodic cosine would)."""
    if step < warmup_steps:
        return step / max(1, warmup_steps)
    if kind == "constant":
        return 1.0
    progress = min(1.0, (step - warmup_steps) / max(1, num_training_steps - warmup_steps))
    if kind == "linear":
        return 1.0 - progress
    if kind == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * progress))
    raise ValueError(f"unknown lr_scheduler_type {kind!r}; choose constant, linear or cosine")


def make_lr_scheduler(optimizer: torch.optim.Optimizer, args: Any, num_training_steps: int | None) -> torch.optim.lr_scheduler.LambdaLR:
    """The role's LR schedule (``training_args.lr_scheduler_type``), stepped once per optimizer step."""
    kind = args.lr_scheduler_type
    if kind != "constant" and not num_training_steps:
        raise ValueError(f"lr_scheduler_type {kind!r} needs training_args.num_training_steps (or the pipeline's max_steps)")
    fn = functools.partial(lr_factor, kind=kind, warmup_steps=args.warmup_steps, num_training_steps=num_training_steps)
    return torch.optim.lr_scheduler.LambdaLR(optimizer, fn)


def init_process_group(rank: int, world_size: int, master_addr: str, master_port: int, timeout_s: float = 600.0) -> None:
    """(Re)create the default process group: NCCL when CUDA is present, else gloo."""
    if dist.is_initialized():
        dist.destroy_process_group()
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(
        backend, init_method=f"tcp://{master_addr}:{master_port}", rank=rank, world_size=world_size,
        timeout=datetime.timedelta(seconds=timeout_s),
    )


def bucket_tensors(named: Iterable[tuple[str, torch.Tensor]], bucket_size_mb: int) -> Iterator[list[tuple[str, torch.Tensor]]]:
    """Group (name, tensor) pairs in order into buckets of about ``bucket_size_mb`` (a tensor
    larger than the limit is a bucket of its own). Pulls lazily: a collective gather behind
    ``named`` runs only as the consumer drains the buckets."""
    limit = max(1, int(bucket_size_mb)) * 1024 * 1024
    bucket: list[tuple[str, torch.Tensor]] = []
    size = 0
    for name, t in named:
        nbytes = t.numel() * t.element_size()
        if bucket and size + nbytes > limit:
            yield bucket
            bucket, size = [], 0
        bucket.append((name, t))
        size += nbytes
    if bucket:
        yield bucket


class HFTrainStrategy:
    """Trainer of a HF causal LM (or its value-head critic) on a torch.distributed group; see
    the module docstring for what a backend overrides."""

    name = "hf_train"
    """The backend's name in error messages."""

    def __init__(self, worker_config: Any, model_path: str | None = None, *, critic: bool = False,
                 seed: int = 42, num_training_steps: int | None = None, device: str | None = None):
        self._configure(dict(worker_config.strategy_args.strategy_config))
        self.cfg = worker_config
        self.args = worker_config.training_args
        self.model_path = model_path or worker_config.model_name_or_path
        if not self.model_path:
            raise ValueError(f"{self.name}: no model path (set model_name_or_path or the pipeline's pretrain)")
        self.critic = critic
        self.seed = seed
        self.num_training_steps = self.args.num_training_steps or num_training_steps
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.model: Any = None
        self.optimizer: Any = None
        self.scheduler: Any = None
        self.step = 0
        self.nonfinite_grad_steps = 0
        self.lora = getattr(worker_config, "lora", None)
        """LoRA settings (roll/models/lora.py) or None for full fine-tuning."""
        self.peft_model: Any = None
        if self.lora is not None:
            from roll.models.lora import LoraError, validate_role

            problems = validate_role(self.lora, self.name, "this role", critic)
            if problems:
                raise LoraError("; ".join(problems))

    # ---- hooks --------------------------------------------------------------------------------
    def _configure(self, opts: dict[str, Any]) -> None:
        """Read ``strategy_args.strategy_config`` (unknown keys are errors)."""
        if opts:
            raise ValueError(f"{self.name}: unknown strategy_config keys {sorted(opts)}")

    def _wrap(self, model: torch.nn.Module) -> None:
        """Set ``self.model`` (the module forwards run on), ``self.optimizer``, ``self.scheduler``."""
        raise NotImplementedError

    @property
    def hf_model(self) -> torch.nn.Module:
        """The bare HF model under the wrapper (parameter names in HF naming)."""
        raise NotImplementedError

    def _backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def _set_grad_sync(self, enabled: bool) -> None:
        """Reduce gradients across ranks on this micro-batch's backward or not."""

    def _zero_grad(self) -> None:
        """Clear gradients before a step's first micro-batch."""

    def _optimizer_step(self) -> float:
        """Clip, step the optimizer and the LR schedule; returns the gradient norm."""
        raise NotImplementedError

    def _full_parameters(self) -> Iterator[tuple[str, torch.Tensor]]:
        """(HF name, full tensor) one at a time; collective where parameters are sharded."""
        raise NotImplementedError

    # ---- setup ------------------------------------------------------------------------------
    @property
    def rank(self) -> int:
        return dist.get_rank() if dist.is_initialized() else 0

    @property
    def dp_size(self) -> int:
        return dist.get_world_size() if dist.is_initialized() else 1

    def setup(self) -> None:
        """Load the HF model and wrap it (optimizer and LR schedule included). Needs the process group."""
        if not dist.is_initialized():
            raise RuntimeError(f"{self.name}: call init_process_group before setup (the worker does it)")
        self._wrap(self._load_hf())

    def _load_hf(self) -> torch.nn.Module:
        from transformers import AutoModelForCausalLM, AutoModelForTokenClassification

        dtype = DTYPES[self.cfg.dtype]
        torch.manual_seed(self.seed)  # a freshly initialised value head is identical on every rank
        if self.critic:
            model = AutoModelForTokenClassification.from_pretrained(self.model_path, num_labels=1, dtype=dtype)
        else:
            model = AutoModelForCausalLM.from_pretrained(self.model_path, dtype=dtype)
        if self.args.gradient_checkpointing:
            model.gradient_checkpointing_enable()
        if self.lora is not None:
            from roll.models.lora import apply_lora

            # right after the seeded load: every rank draws the same adapter initialisation
            self.peft_model = apply_lora(model, self.lora, self.model_path)
            if self.args.gradient_checkpointing:  # frozen embeddings: checkpointed blocks still need a grad path
                model.enable_input_require_grads()
        return model.to(self.device)

    def _make_optimizer(self, params: Iterable[torch.nn.Parameter]) -> tuple[torch.optim.Optimizer, Any]:
        a = self.args
        params = [p for p in params if p.requires_grad]  # LoRA: the adapters only
        optimizer = torch.optim.AdamW(params, lr=a.lr, betas=tuple(a.adam_betas), eps=a.adam_eps, weight_decay=a.weight_decay)
        return optimizer, make_lr_scheduler(optimizer, a, self.num_training_steps)

    def _restore_config_optimizer_settings(self) -> list[str]:
        """After a checkpoint load: this run's ``training_args`` (lr, adam_betas, adam_eps,
        weight_decay) again, where the loaded optimizer and LR-schedule state brought back the
        checkpoint run's values (an optimizer's state holds its hyperparameters, the schedule its
        base lr). Adam's moments and the schedule's position stay the checkpoint's. Returns what
        changed, e.g. ``["lr 0.0005 -> 0.0002"]``, so lowering the lr of a diverging run on resume
        takes effect instead of being overwritten by the checkpoint."""
        a = self.args
        want = {"lr": float(a.lr), "betas": tuple(float(b) for b in a.adam_betas), "eps": float(a.adam_eps),
                "weight_decay": float(a.weight_decay)}
        sched, groups = self.scheduler, self.optimizer.param_groups
        old = {"lr": float(sched.base_lrs[0]), "betas": tuple(float(b) for b in groups[0]["betas"]),
               "eps": float(groups[0]["eps"]), "weight_decay": float(groups[0]["weight_decay"])}
        sched.base_lrs = [want["lr"]] * len(groups)
        for group, factor in zip(groups, sched.lr_lambdas):
            group.update(betas=want["betas"], eps=want["eps"], weight_decay=want["weight_decay"], initial_lr=want["lr"])
            group["lr"] = want["lr"] * factor(sched.last_epoch)
        sched._last_lr = [g["lr"] for g in groups]
        changed = [f"{k} {old[k]} -> {want[k]}" for k in want if old[k] != want[k]]
        if changed:
            logger.info("%s: optimizer settings from this run's config, not the checkpoint's: %s", self.name, ", ".join(changed))
        return changed

    # ---- forward ----------------------------------------------------------------------------
    def _forward(self, batch: Batch, entropy: bool = False) -> tuple[torch.Tensor | None, dict[str, torch.Tensor]]:
        if not self.args.max_tokens_per_micro_batch:
            return model_forward(self.model, batch, self.critic, entropy)
        return packed_forward(self.model, batch["input_ids"], batch["attention_mask"],
                              loss_mask=batch["response_mask"] if "response_mask" in batch.tensors else None,
                              temperature=sampling_temperatures(batch), critic=self.critic, entropy=entropy,
                              keep_logits=accepts_logits_to_keep(self.model))

    def _plan(self, batch: Batch, size: int) -> list[list[int]]:
        """Row indices of each micro-batch: ``size`` rows of similar lengths (rows in order of
        length, so each micro-batch is cut to its own longest row, see model_forward), or packed
        to the token budget (a row longer than the budget is a micro-batch of its own)."""
        lengths = batch["attention_mask"].sum(-1).tolist()
        if self.args.max_tokens_per_micro_batch:
            return plan_packing(lengths, self.args.max_tokens_per_micro_batch, oversize="alone")
        order = sorted(range(len(batch)), key=lambda i: (lengths[i], i))
        return [sorted(order[i:i + size]) for i in range(0, len(order), size)]

    def _dummy_batch(self) -> Batch:
        one = torch.zeros((1, 2), dtype=torch.long, device=self.device)
        return Batch({"input_ids": one, "attention_mask": torch.ones_like(one)})

    @torch.no_grad()
    def _forward_only(self, batch: Batch, key: str) -> torch.Tensor:
        self.model.eval()
        batch = batch.to(self.device)
        plan = self._plan(batch, max(1, self.cfg.infer_batch_size))
        result = torch.zeros(batch["input_ids"].shape, dtype=torch.float32)
        for i in range(max_micro_batches(len(plan), self.device)):
            # a rank with fewer micro-batches (or no rows) runs throw-away ones to keep collectives in step
            lp, extra = self._forward(batch.select(plan[i]) if i < len(plan) else self._dummy_batch())
            if i < len(plan):
                result[plan[i]] = (extra["values"] if key == "values" else lp).float().cpu()
        self.model.train()
        return result

    def logprobs(self, batch: Batch) -> torch.Tensor:
        if self.critic:
            raise RuntimeError("logprobs() on a critic; use values()")
        return self._forward_only(batch, "logprobs")

    def values(self, batch: Batch) -> torch.Tensor:
        if not self.critic:
            raise RuntimeError("values() needs the critic variant (critic=True)")
        return self._forward_only(batch, "values")

    # ---- training -----------------------------------------------------------------------------
    def train_step(self, batch: Batch, loss_fn: Any) -> dict[str, float]:
        if len(batch) == 0:
            raise ValueError("train_step on an empty batch")
        batch = batch.to(self.device)
        plan = self._plan(batch, max(1, self.args.per_device_train_batch_size))
        n_micro = max_micro_batches(len(plan), self.device)
        global_tokens, global_seqs = global_loss_normalizers(batch, self.device)
        need_entropy = bool(getattr(loss_fn, "needs_entropy", False))
        self.model.train()
        self._zero_grad()
        loss_sum = torch.zeros((), dtype=torch.float64, device=self.device)
        metric_sums: dict[str, float] = {}
        for i in range(n_micro):
            self._set_grad_sync(i == n_micro - 1)  # reduce gradients once, on the last micro-batch
            if i >= len(plan):  # fewer micro-batches than the busiest rank: a throw-away one keeps collectives in step
                logprobs, extra = self._forward(self._dummy_batch())
                self._backward((extra["values"] if self.critic else logprobs).sum() * 0.0)
                continue
            mb = batch.select(plan[i])
            mb.meta.update(global_num_tokens=global_tokens, global_num_seqs=global_seqs, dp_size=self.dp_size,
                           micro_batch_index=i, num_micro_batches=len(plan))
            logprobs, extra = self._forward(mb, entropy=need_entropy)
            loss, metrics = loss_fn(mb, extra["values"] if self.critic else logprobs, extra)
            # The loss is this rank's share of the mini-batch loss (global normalisers); the
            # backends average gradients over ranks, so scale by dp_size to get their sum.
            self._backward(loss * self.dp_size)
            loss_sum += loss.detach().double()
            for k, v in (metrics or {}).items():
                metric_sums[k] = metric_sums.get(k, 0.0) + float(v)
        lr = self.scheduler.get_last_lr()[0]
        grad_norm = self._optimizer_step()
        if not math.isfinite(grad_norm):
            self.nonfinite_grad_steps += 1
            logger.warning("%s: non-finite grad norm %s at step %d", self.name, grad_norm, self.step)
        self.step += 1
        dist.all_reduce(loss_sum)  # the ranks' shares add up to the mini-batch loss
        out = reduce_step_metrics(metric_sums, len(plan), self.dp_size, self.device)
        out.update(loss=float(loss_sum), grad_norm=grad_norm, lr=lr, nonfinite_grad_steps=float(self.nonfinite_grad_steps))
        return out

    # ---- weight sync ----------------------------------------------------------------------------
    def named_parameters_for_sync(self, bucket_size_mb: int) -> Iterator[list[tuple[str, torch.Tensor]]]:
        with torch.no_grad():
            yield from bucket_tensors(self._sync_parameters(), bucket_size_mb)

    def _sync_parameters(self) -> Iterator[tuple[str, torch.Tensor]]:
        """What the inference engines load: the full parameters, or with LoRA the base model's
        names and shapes with the adapters merged in (engines load full models)."""
        if self.lora is None:
            return self._full_parameters()
        from roll.models.lora import merged_parameters

        return merged_parameters(self.hf_model, self._full_parameters())

    # ---- LoRA checkpoint files (the backends' save/load call these) --------------------------------
    def _save_lora_files(self, path: str, full: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Rank 0: the adapters under ``path/adapter`` and, with ``lora.save_merged``, the merged
        model in Hugging Face format at ``path`` (``from_pretrained`` loads it without peft)."""
        import os

        from roll.models.lora import ADAPTER_DIR, adapter_tensors, merged_parameters, save_adapter

        full = dict(full)
        save_adapter(os.path.join(path, ADAPTER_DIR), self.peft_model, adapter_tensors(full.items()))
        if self.lora.save_merged:
            merged = {n: t.detach().cpu() for n, t in merged_parameters(self.hf_model, full.items())}
            self._save_merged_hf(path, merged)

    def _save_merged_hf(self, path: str, state_dict: dict[str, torch.Tensor]) -> None:
        # the adapted model's save_pretrained would see LoRA modules; a base-architecture model
        # built on the meta device takes the merged state dict with its own names and tying
        from transformers import AutoModelForCausalLM

        config = self.hf_model.config
        with torch.device("meta"):
            base = AutoModelForCausalLM.from_config(config)
        base.generation_config = self.hf_model.generation_config
        base.save_pretrained(path, state_dict=state_dict)

    def _load_lora_adapters(self, path: str) -> dict[str, torch.Tensor]:
        import os

        from roll.models.lora import ADAPTER_DIR, load_adapter

        return load_adapter(os.path.join(path, ADAPTER_DIR), self.hf_model, self.peft_model)
