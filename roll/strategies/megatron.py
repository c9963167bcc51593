"""MegatronStrategy: Megatron-Core training (tensor / pipeline / data parallel) behind
:class:`roll.strategies.base.TrainingStrategy`. Needs CUDA and the ``megatron`` extra.

``strategy_args.strategy_config``:

- ``tensor_model_parallel_size`` (tp), ``pipeline_model_parallel_size`` (pp); the data
  parallel size is ``world_size / (tp * pp)``;
- ``sequence_parallel`` (default false), ``padded_vocab_size`` (default: vocab rounded up to
  a multiple of ``128 * tp``);
- ``transformer_config``: extra ``TransformerConfig`` fields, passed through (override the
  ones roll derives from the HF config, see :func:`transformer_config_kwargs`).

Weights come from the HF checkpoint through :mod:`roll.strategies.megatron_convert` (each
rank converts and keeps its own (pp, tp) shard) and go back the same way for weight sync:
``named_parameters_for_sync`` all-gathers each tensor over the TP group, converts it to HF
names and layout, and broadcasts each pipeline stage's tensors to every rank (a generator
all ranks drain, like torch_train's). Same ``train_step``/``logprobs`` contracts as
torch_train: per-token logprobs come from Megatron's vocab-parallel cross entropy (no
logits gather), micro-batches go through Megatron's pipeline schedule, and the loss returned
to the schedule is multiplied by the number of micro-batches to cancel the schedule's own
averaging (roll's loss already carries the global normalisation). Entropy and the critic
variant are not provided by this backend (clear errors).

Status: the layout conversion and the config derivation are tested on CPU; the forward,
backward and sync paths need a GPU and run in ``bench/gpu_check.sh``.
"""
from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F

from roll.data.batch import Batch
from roll.strategies.base import import_backend
from roll.strategies.hf_train import bucket_tensors, lr_factor, position_ids_for, sampling_temperatures
from roll.strategies.megatron_convert import (
    DecoderLayout,
    gather_from_tp,
    gathered_shape,
    hf_to_megatron,
    local_to_global,
    megatron_full_to_hf,
)
from roll.utils.logging import get_logger

logger = get_logger(__name__)

ROLL_OPTIONS = ("tensor_model_parallel_size", "pipeline_model_parallel_size", "sequence_parallel",
                "padded_vocab_size", "transformer_config")


def _import_megatron():
    return import_backend("megatron.core", "megatron", "megatron",
                          "on a GPU machine (pip install -e '.[megatron]'); on CPU use torch_train or deepspeed")


def parallel_sizes(strategy_config: dict[str, Any], world_size: int) -> tuple[int, int, int]:
    """(tp, pp, dp) from the config; errors name what does not divide."""
    tp = int(strategy_config.get("tensor_model_parallel_size", 1))
    pp = int(strategy_config.get("pipeline_model_parallel_size", 1))
    if tp < 1 or pp < 1 or world_size % (tp * pp):
        raise ValueError(f"megatron: world size {world_size} is not a multiple of tensor_model_parallel_size {tp} x "
                         f"pipeline_model_parallel_size {pp}")
    return tp, pp, world_size // (tp * pp)


def transformer_config_kwargs(hf_config: Any, tp: int, pp: int, dtype: str, overrides: dict | None = None) -> dict[str, Any]:
    """``TransformerConfig`` fields for a Qwen2/Llama-style HF config (pure data, CPU-testable)."""
    heads = hf_config.num_attention_heads
    torch_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
    kw = {
        "num_layers": hf_config.num_hidden_layers, "hidden_size": hf_config.hidden_size, "num_attention_heads": heads,
        "num_query_groups": getattr(hf_config, "num_key_value_heads", None) or heads,
        "kv_channels": getattr(hf_config, "head_dim", None) or hf_config.hidden_size // heads,
        "ffn_hidden_size": hf_config.intermediate_size, "normalization": "RMSNorm", "layernorm_epsilon": hf_config.rms_norm_eps,
        "gated_linear_unit": True, "activation_func": F.silu, "add_bias_linear": False,
        "add_qkv_bias": getattr(hf_config, "model_type", "") == "qwen2" or bool(getattr(hf_config, "attention_bias", False)),
        "hidden_dropout": 0.0, "attention_dropout": 0.0, "tensor_model_parallel_size": tp, "pipeline_model_parallel_size": pp,
        "params_dtype": torch_dtype, "pipeline_dtype": torch_dtype, "bf16": dtype == "bfloat16", "fp16": dtype == "float16",
        "persist_layer_norm": True, "bias_activation_fusion": False, "bias_dropout_fusion": False,
    }
    kw.update(overrides or {})
    return kw


def default_padded_vocab(vocab_size: int, tp: int, multiple: int = 128) -> int:
    step = multiple * tp
    return int(math.ceil(vocab_size / step) * step)


class MegatronStrategy:
    """Megatron-Core GPT trainer initialised from / synced to a HF Qwen2/Llama checkpoint."""

    def __init__(self, worker_config: Any, model_path: str | None = None, *, critic: bool = False,
                 seed: int = 42, num_training_steps: int | None = None, device: str | None = None):
        if critic:
            raise NotImplementedError("megatron: the critic (value head) variant is not provided; use torch_train or deepspeed for the critic")
        opts = dict(worker_config.strategy_args.strategy_config)
        unknown = sorted(set(opts) - set(ROLL_OPTIONS))
        if unknown:
            raise ValueError(f"megatron: unknown strategy_config keys {unknown}; valid: {list(ROLL_OPTIONS)} "
                             "(TransformerConfig fields go under transformer_config)")
        self.opts = opts
        self.cfg = worker_config
        self.args = worker_config.training_args
        self.model_path = model_path or worker_config.model_name_or_path
        if not self.model_path:
            raise ValueError("megatron: no model path (set model_name_or_path or the pipeline's pretrain)")
        self.seed = seed
        self.num_training_steps = self.args.num_training_steps or num_training_steps
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.step = 0
        self.nonfinite_grad_steps = 0
        self.model = None

    # ---- setup ------------------------------------------------------------------------------
    def setup(self) -> None:
        if self.device != "cuda":
            raise RuntimeError("megatron: Megatron-Core's forward needs CUDA; on CPU use torch_train or deepspeed")
        if not dist.is_initialized():
            raise RuntimeError("megatron: call init_process_group before setup (the worker does it)")
        _import_megatron()
        from megatron.core import parallel_state as ps
        from megatron.core import tensor_parallel
        from megatron.core.distributed import (
            DistributedDataParallel,
            DistributedDataParallelConfig,
        )
        from megatron.core.models.gpt import GPTModel
        from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
        from megatron.core.transformer import TransformerConfig
        from transformers import AutoConfig, AutoModelForCausalLM

        self.tp, self.pp, self.dp = parallel_sizes(self.opts, dist.get_world_size())
        ps.initialize_model_parallel(tensor_model_parallel_size=self.tp, pipeline_model_parallel_size=self.pp)
        tensor_parallel.model_parallel_cuda_manual_seed(self.seed)
        self.ps = ps
        hf_config = AutoConfig.from_pretrained(self.model_path)
        padded = int(self.opts.get("padded_vocab_size") or default_padded_vocab(hf_config.vocab_size, self.tp))
        self.layout = DecoderLayout.from_hf_config(hf_config, padded_vocab_size=padded)
        self.layout.check(self.tp, self.pp)
        tc_kwargs = transformer_config_kwargs(hf_config, self.tp, self.pp, self.cfg.dtype, self.opts.get("transformer_config"))
        tc_kwargs["sequence_parallel"] = bool(self.opts.get("sequence_parallel", False))
        self.tconfig = TransformerConfig(**tc_kwargs)
        try:
            from megatron.core.models.gpt.gpt_layer_specs import (
                get_gpt_layer_with_transformer_engine_spec as layer_spec,
            )
        except ImportError:  # no transformer-engine: the local spec (separate norm modules)
            from megatron.core.models.gpt.gpt_layer_specs import (
                get_gpt_layer_local_spec as layer_spec,
            )
        rope = getattr(hf_config, "rope_parameters", None) or {}
        model = GPTModel(
            config=self.tconfig, transformer_layer_spec=layer_spec(), vocab_size=padded,
            max_sequence_length=hf_config.max_position_embeddings, pre_process=ps.is_pipeline_first_stage(),
            post_process=ps.is_pipeline_last_stage(), share_embeddings_and_output_weights=self.layout.tie_word_embeddings,
            position_embedding_type="rope", rotary_base=int(rope.get("rope_theta", getattr(hf_config, "rope_theta", 10000))),
        ).cuda()
        hf_state = AutoModelForCausalLM.from_pretrained(self.model_path, dtype=torch.float32).state_dict()
        shard = hf_to_megatron(hf_state, self.layout, self.tp, self.pp)[(ps.get_pipeline_model_parallel_rank(),
                                                                          ps.get_tensor_model_parallel_rank())]
        self._load_shard(model, shard)
        ddp_config = DistributedDataParallelConfig(grad_reduce_in_fp32=True, use_distributed_optimizer=True)
        self.model = DistributedDataParallel(config=self.tconfig, ddp_config=ddp_config, module=model)
        a = self.args
        self.optimizer = get_megatron_optimizer(
            OptimizerConfig(optimizer="adam", lr=a.lr, weight_decay=a.weight_decay, adam_beta1=a.adam_betas[0],
                            adam_beta2=a.adam_betas[1], adam_eps=a.adam_eps, clip_grad=a.max_grad_norm,
                            bf16=self.cfg.dtype == "bfloat16", fp16=self.cfg.dtype == "float16",
                            params_dtype=self.tconfig.params_dtype, use_distributed_optimizer=True),
            [self.model])

    @staticmethod
    def _local_spec_name(name: str) -> str:
        return (name.replace("self_attention.linear_qkv.layer_norm_weight", "input_layernorm.weight")
                .replace("mlp.linear_fc1.layer_norm_weight", "pre_mlp_layernorm.weight"))

    def _load_shard(self, model: torch.nn.Module, shard: dict[str, torch.Tensor]) -> None:
        own = {k for k in model.state_dict() if not k.endswith("_extra_state")}
        self._names = {}  # model name -> converter (TE-spec) name
        state = {}
        for name, t in shard.items():
            target = name if name in own else self._local_spec_name(name)
            if target not in own:
                raise KeyError(f"megatron: converted tensor {name} has no place in the model")
            state[target] = t
            self._names[target] = name
        missing = own - set(state) - {k for k in own if k.startswith("output_layer") and self.layout.tie_word_embeddings}
        if missing:
            raise KeyError(f"megatron: the HF checkpoint did not provide {sorted(missing)[:5]}")
        model.load_state_dict(state, strict=False)

    # ---- forward ----------------------------------------------------------------------------
    def _lr(self) -> float:
        """The same schedule as the torch_train / deepspeed strategies (roll.strategies.hf_train.lr_factor)."""
        a = self.args
        if a.lr_scheduler_type != "constant" and not self.num_training_steps:
            raise ValueError(f"lr_scheduler_type {a.lr_scheduler_type!r} needs training_args.num_training_steps")
        return a.lr * lr_factor(self.step, a.lr_scheduler_type, a.warmup_steps, self.num_training_steps)

    def _run(self, micro: list[Batch], loss_fn: Any, forward_only: bool) -> list:
        from megatron.core.pipeline_parallel import get_forward_backward_func

        if getattr(loss_fn, "needs_entropy", False):
            raise NotImplementedError("megatron: entropy is not computed by this backend (vocab-parallel logits are not gathered)")
        n = len(micro)
        it = iter(micro)
        collected: list[torch.Tensor] = []

        def forward_step(data_iterator, model):
            mb = next(data_iterator)
            ids = mb["input_ids"].cuda()
            labels = F.pad(ids[:, 1:], (0, 1))  # position t predicts t+1 (last position: dummy, dropped)
            temp = sampling_temperatures(mb)
            if temp is None:
                ce = model(input_ids=ids, position_ids=position_ids_for(mb).cuda(), attention_mask=None, labels=labels)
            else:  # score the sampling distribution: vocab-parallel CE of logits / temperature
                from megatron.core.tensor_parallel import vocab_parallel_cross_entropy

                logits = model(input_ids=ids, position_ids=position_ids_for(mb).cuda(), attention_mask=None)
                ce = vocab_parallel_cross_entropy(logits.float() / temp.cuda()[:, None, None], labels)
            logprobs = F.pad(-ce[:, :-1].float(), (1, 0))  # [b, T], column 0 is 0 like torch_train

            def loss_func(_out):
                if forward_only:
                    collected.append(logprobs.detach())
                    return logprobs.sum() * 0, {}
                loss, metrics = loss_fn(mb, logprobs, {})
                return loss * n, {k: torch.as_tensor(float(v)) for k, v in (metrics or {}).items()} | {"loss": loss.detach()}
            return ce, loss_func

        seq = max(b["input_ids"].shape[1] for b in micro)
        out = get_forward_backward_func()(forward_step_func=forward_step, data_iterator=it, model=[self.model],
                                          num_microbatches=n, seq_length=seq, micro_batch_size=len(micro[0]),
                                          forward_only=forward_only)
        return collected if forward_only else out

    @torch.no_grad()
    def logprobs(self, batch: Batch) -> torch.Tensor:
        self.model.eval()
        micro = batch.split(max(1, self.cfg.infer_batch_size))
        parts = self._run(micro, None, forward_only=True)
        width = batch["input_ids"].shape[1]
        out = torch.zeros((len(batch), width), dtype=torch.float32, device="cuda")
        if self.ps.is_pipeline_last_stage():
            out = torch.cat([F.pad(p, (0, width - p.shape[1])) for p in parts])
        # every stage returns the same tensor: broadcast from the last stage over the pipeline group
        dist.broadcast(out, src=self.ps.get_pipeline_model_parallel_last_rank(), group=self.ps.get_pipeline_model_parallel_group())
        self.model.train()
        return out.cpu()

    def train_step(self, batch: Batch, loss_fn: Any) -> dict[str, float]:
        micro = batch.split(max(1, self.args.per_device_train_batch_size))
        mask = batch["response_mask"] if "response_mask" in batch.tensors else batch["attention_mask"]
        totals = torch.tensor([float(mask.sum()), float(mask.bool().any(-1).sum())], dtype=torch.float64, device="cuda")
        dist.all_reduce(totals, group=self.ps.get_data_parallel_group())
        for i, mb in enumerate(micro):
            mb.meta.update(global_num_tokens=float(totals[0]), global_num_seqs=float(totals[1]), dp_size=self.dp,
                           micro_batch_index=i, num_micro_batches=len(micro))
        lr = self._lr()
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.model.train()
        self.model.zero_grad_buffer()
        self.optimizer.zero_grad()
        losses = self._run(micro, loss_fn, forward_only=False)
        ok, grad_norm, _ = self.optimizer.step()
        self.step += 1
        self.nonfinite_grad_steps += int(not ok)  # Megatron's optimizer skips a step with inf/nan gradients
        metrics: dict[str, float] = {}
        if losses:  # last pipeline stage
            for key in losses[0]:
                metrics[key] = float(sum(float(d[key]) for d in losses)) / (1 if key == "loss" else len(losses))
        if "loss" in metrics:
            metrics["loss"] /= self.dp
        metrics.update(grad_norm=float(grad_norm) if grad_norm is not None else float("nan"), lr=lr,
                       nonfinite_grad_steps=float(self.nonfinite_grad_steps))
        return metrics

    # ---- weight sync ----------------------------------------------------------------------------
    def named_parameters_for_sync(self, bucket_size_mb: int) -> Iterator[list[tuple[str, torch.Tensor]]]:
        """HF-named full tensors in buckets, on every rank (collective: all ranks must drain it)."""
        return bucket_tensors(self._full_parameters(), bucket_size_mb)

    def _full_parameters(self) -> Iterator[tuple[str, torch.Tensor]]:
        ps = self.ps
        tp_group = ps.get_tensor_model_parallel_group()
        module = self.model.module
        for stage in range(self.pp):
            # every rank learns the stage's tensor names and shapes, then receives each gathered tensor
            if ps.get_pipeline_model_parallel_rank() == stage:
                local = [(self._names.get(n, n), p) for n, p in module.named_parameters()]
                meta = [(n, tuple(p.shape), p.dtype) for n, p in local]
            else:
                local, meta = [], None
            box = [meta]
            src = dist.get_global_rank(ps.get_pipeline_model_parallel_group(), stage) if self.pp > 1 else dist.get_rank()
            if self.pp > 1:
                dist.broadcast_object_list(box, src=src, group=ps.get_pipeline_model_parallel_group())
            for j, (name, shape, dtype) in enumerate(box[0]):
                if local:
                    shards = [torch.empty_like(local[j][1]) for _ in range(self.tp)]
                    dist.all_gather(shards, local[j][1].detach().contiguous(), group=tp_group)
                    full = gather_from_tp(name, shards, self.layout)
                else:
                    full = None
                if self.pp > 1:
                    if full is None:
                        full = torch.empty(gathered_shape(name, shape, self.tp, self.layout), dtype=dtype, device="cuda")
                    dist.broadcast(full, src=src, group=ps.get_pipeline_model_parallel_group())
                yield from megatron_full_to_hf(local_to_global(name, stage, self.pp, self.layout), full, self.layout)

    # ---- checkpoints / colocation ----------------------------------------------------------------
    def save(self, path: str) -> None:
        """HF-format model (rank 0) from the sync path; the optimizer state is not saved yet."""
        full = {n: t.cpu() for b in self.named_parameters_for_sync(1024) for n, t in b}
        if dist.get_rank() == 0:
            from transformers import AutoModelForCausalLM

            os.makedirs(path, exist_ok=True)
            model = AutoModelForCausalLM.from_pretrained(self.model_path, dtype=torch.float32)
            model.load_state_dict(full, strict=False)
            model.save_pretrained(path)
            with open(os.path.join(path, "trainer_state.json"), "w") as f:  # JSON: loading it runs no code
                json.dump({"step": self.step}, f)
        dist.barrier()

    def load(self, path: str) -> None:
        from roll.errors import CheckpointError

        raise CheckpointError(f"megatron: resuming optimizer state is not implemented; start a fresh run from the "
                              f"saved HF model ({path}) with model_name_or_path instead")

    def offload(self) -> None:
        logger.warning("megatron: offload is not implemented; the trainer stays resident")

    def reload(self) -> None:
        pass
