"""One-GPU check of the production backends (driven by bench/gpu_check.sh).

Builds a random-initialised Qwen2-style model of about 0.5B parameters from a config (no
download), then in one process on one GPU:

1. starts vLLM through :class:`roll.strategies.vllm.VLLMStrategy` and measures generation
   throughput;
2. sets up an FSDP2 trainer (:class:`TorchTrainStrategy`), takes one optimizer step and syncs
   the new weights to vLLM in buckets (CUDA tensors travel as CUDA IPC handles), timing GB/s;
3. checks train/infer logprob parity on sampled tokens (:mod:`roll.distributed.parity`);
4. runs one DeepSpeed ZeRO-3 and one Megatron-Core train step on the same model;

and prints a results table plus a ``RESULT`` line. Each phase fails on its own (the table
says why) so one broken backend does not hide the others; the exit code is 1 if any failed.

CPU-checkable without a GPU: ``--dry-run`` prints the model config and its parameter count
(built on the meta device) and the plan.
"""
from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import socket
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from typing import Any

MODEL_PRESETS: dict[str, dict[str, Any]] = {
    # Qwen2.5-0.5B's shape (about 494M parameters with tied embeddings)
    "0.5b": {"vocab_size": 151936, "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
                 "num_attention_heads": 14, "num_key_value_heads": 2, "tie_word_embeddings": True},
    # a few-million-parameter model with the same head layout, for a fast smoke run
    "smoke": {"vocab_size": 4096, "hidden_size": 256, "intermediate_size": 704, "num_hidden_layers": 4,
                  "num_attention_heads": 4, "num_key_value_heads": 2, "tie_word_embeddings": True},
}
PHASES = ("vllm", "fsdp2_sync", "parity", "deepspeed", "megatron")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="single-GPU check of vLLM, FSDP2 weight sync, parity, DeepSpeed, Megatron")
    p.add_argument("--model", choices=sorted(MODEL_PRESETS), default="0.5b", help="model preset (random init)")
    p.add_argument("--dtype", choices=["bfloat16", "float32"], default="bfloat16")
    p.add_argument("--num-prompts", type=int, default=64, help="concurrent generation requests")
    p.add_argument("--prompt-len", type=int, default=128)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--bucket-mb", type=int, default=256, help="weight sync bucket size")
    p.add_argument("--gpu-memory-utilization", type=float, default=0.3, help="vLLM's share of the GPU")
    p.add_argument("--skip", nargs="*", default=[], choices=PHASES, help="phases to skip")
    p.add_argument("--quick", action="store_true", help="smaller run: 16 prompts x 32 tokens, eager vLLM")
    p.add_argument("--dry-run", action="store_true", help="print the model config, its size and the plan; no GPU needed")
    p.add_argument("--markdown", default=None, help="also write the results table as markdown to this file")
    args = p.parse_args(argv)
    for name in ("num_prompts", "prompt_len", "max_new_tokens", "bucket_mb"):
        if getattr(args, name) <= 0:
            p.error(f"--{name.replace('_', '-')} must be positive")
    if not 0 < args.gpu_memory_utilization < 1:
        p.error("--gpu-memory-utilization must be in (0, 1)")
    if args.quick:
        args.num_prompts, args.max_new_tokens = min(args.num_prompts, 16), min(args.max_new_tokens, 32)
    return args


def model_config(preset: str, dtype: str):
    """The HF Qwen2 config of a preset (max length 4096, rope theta 1e6 as in Qwen2.5)."""
    from transformers import Qwen2Config

    return Qwen2Config(**MODEL_PRESETS[preset], max_position_embeddings=4096, rope_theta=1_000_000.0, rms_norm_eps=1e-6,
                       bos_token_id=1, eos_token_id=2, pad_token_id=0, dtype=dtype)


def count_parameters(config) -> int:
    """Parameters of the model the config describes, counted on the meta device (no memory)."""
    import torch
    from transformers import Qwen2ForCausalLM

    with torch.device("meta"):
        model = Qwen2ForCausalLM(config)
    return sum(p.numel() for p in model.parameters())  # tied weights are counted once


def build_model_dir(config, out_dir: str, dtype: str, seed: int = 0) -> str:
    import torch
    from transformers import Qwen2ForCausalLM

    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config).to(dtype=getattr(torch, dtype))
    model.save_pretrained(out_dir)
    return out_dir


# ---- phases --------------------------------------------------------------------------------------
class Check:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.rows: list[tuple[str, str, str]] = []  # (phase, status, numbers)
        self.results: dict[str, Any] = {}
        self.infer = self.train = None

    def phase(self, name: str, fn: Callable[[], str]) -> None:
        if name in self.args.skip:
            self.rows.append((name, "skipped", ""))
            return
        t0 = time.perf_counter()
        try:
            detail = fn()
            self.rows.append((name, "ok", f"{detail} ({time.perf_counter() - t0:.1f}s)"))
        except Exception as e:  # noqa: BLE001 - each phase reports its own failure; the others still run
            traceback.print_exc()
            self.rows.append((name, "FAIL", f"{type(e).__name__}: {str(e)[:160]}"))

    def worker_config(self, name: str, strategy_config: dict, **train) -> Any:
        from roll.config.roles import StrategyArgs, TrainingArgs, WorkerConfig

        return WorkerConfig(model_name_or_path=self.model_dir, strategy_args=StrategyArgs(name, strategy_config),
                            dtype=self.args.dtype, max_concurrency=max(8, self.args.num_prompts),
                            training_args=TrainingArgs(lr=1e-5, per_device_train_batch_size=2, **train))

    def prompts(self) -> list[list[int]]:
        import torch

        g = torch.Generator().manual_seed(0)
        vocab = MODEL_PRESETS[self.args.model]["vocab_size"]
        return [torch.randint(3, vocab, (self.args.prompt_len,), generator=g).tolist() for _ in range(self.args.num_prompts)]

    def train_batch(self):
        import torch

        from roll.data.batch import Batch

        g = torch.Generator().manual_seed(1)
        ids = torch.randint(3, MODEL_PRESETS[self.args.model]["vocab_size"], (4, 256), generator=g)
        resp = torch.ones_like(ids)
        resp[:, :128] = 0
        return Batch(tensors={"input_ids": ids, "attention_mask": torch.ones_like(ids), "response_mask": resp})

    @staticmethod
    def loss_fn(mb, logprobs, extra):
        mask = mb["response_mask"].to(logprobs.dtype)
        return -(logprobs * mask).sum() / mb.meta["global_num_tokens"] * mb.meta["dp_size"], {}

    def run_vllm(self) -> str:
        from roll.strategies.base import GenerationRequest
        from roll.strategies.vllm import VLLMStrategy

        sc = {"skip_tokenizer_init": True, "gpu_memory_utilization": self.args.gpu_memory_utilization,
              "max_model_len": 2048, "enforce_eager": self.args.quick}
        self.infer = VLLMStrategy(self.worker_config("vllm", sc), seed=0)
        t0 = time.perf_counter()
        self.infer.start_sync()
        start_s = time.perf_counter() - t0
        reqs = [GenerationRequest(f"r{i}", p, max_new_tokens=self.args.max_new_tokens, temperature=1.0, seed=i)
                for i, p in enumerate(self.prompts())]

        async def go():
            return await asyncio.gather(*(self.infer.generate(r) for r in reqs))

        t0 = time.perf_counter()
        results = asyncio.run(go())
        dt = time.perf_counter() - t0
        tokens = sum(len(r.output_ids) for r in results)
        self.results.update(vllm_start_s=round(start_s, 1), gen_tokens_per_s=round(tokens / dt, 1))
        return f"engine start {start_s:.1f}s; {len(reqs)} requests, {tokens} tokens, {tokens / dt:.0f} tok/s"

    def run_fsdp2_sync(self) -> str:
        import torch

        from roll.distributed.parity import sync_weights
        from roll.strategies.torch_train import TorchTrainStrategy

        if self.infer is None:
            raise RuntimeError("needs the vllm phase")
        self.train = TorchTrainStrategy(self.worker_config("torch_train", {"parallel": "fsdp2"}), seed=0)
        self.train.setup()
        m = self.train.train_step(self.train_batch(), self.loss_fn)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        nbytes = sync_weights(self.train, self.infer, version=1, bucket_size_mb=self.args.bucket_mb)
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        gbps = nbytes / dt / 1e9
        self.results.update(sync_s=round(dt, 3), sync_gb=round(nbytes / 1e9, 3), sync_gbps=round(gbps, 2),
                            fsdp2_loss=round(m["loss"], 4))
        return f"train step loss {m['loss']:.4f}; sync {nbytes / 1e9:.2f} GB in {dt:.2f}s = {gbps:.2f} GB/s (CUDA IPC)"

    def run_parity(self) -> str:
        from roll.distributed.parity import TOLERANCE, compare_pair

        if self.infer is None or self.train is None:
            raise RuntimeError("needs the vllm and fsdp2_sync phases")
        prompts = self.prompts()[:16]
        p = compare_pair(self.train, self.infer, prompts, max_new_tokens=min(64, self.args.max_new_tokens))
        self.results.update(parity_mean=p["mean_abs_diff"], parity_max=p["max_abs_diff"], parity_kl=p["kl_k3"])
        ok = p["mean_abs_diff"] <= TOLERANCE[self.args.dtype]
        if not ok:
            raise AssertionError(f"mean |diff| {p['mean_abs_diff']:.3e} over tolerance {TOLERANCE[self.args.dtype]}")
        return f"mean |diff| {p['mean_abs_diff']:.2e}, max {p['max_abs_diff']:.2e}, KL(k3) {p['kl_k3']:.2e} on {p['num_tokens']} tokens"

    def _free_trainer(self) -> None:
        import gc

        import torch

        self.train = None
        gc.collect()
        torch.cuda.empty_cache()

    def _one_step(self, name: str, strategy_config: dict) -> str:
        from roll.registry import STRATEGIES

        self._free_trainer()
        strat = STRATEGIES.get(name)(self.worker_config(name, strategy_config), seed=0)
        strat.setup()
        t0 = time.perf_counter()
        m = strat.train_step(self.train_batch(), self.loss_fn)
        dt = time.perf_counter() - t0
        tokens = 4 * 256
        self.results[f"{name}_tokens_per_s"] = round(tokens / dt, 1)
        return f"loss {m['loss']:.4f}, grad norm {m['grad_norm']:.3f}, {tokens / dt:.0f} train tok/s"

    def run_deepspeed(self) -> str:
        return self._one_step("deepspeed", {"zero_stage": 3})

    def run_megatron(self) -> str:
        return self._one_step("megatron", {"tensor_model_parallel_size": 1})


def table(rows: list[tuple[str, str, str]]) -> str:
    w0 = max(len(r[0]) for r in rows)
    w1 = max(len(r[1]) for r in rows)
    lines = [f"| {'phase'.ljust(w0)} | {'status'.ljust(w1)} | result |", f"|{'-' * (w0 + 2)}|{'-' * (w1 + 2)}|--------|"]
    lines += [f"| {a.ljust(w0)} | {b.ljust(w1)} | {c} |" for a, b, c in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    config = model_config(args.model, args.dtype)
    n_params = count_parameters(config)
    print(f"model: Qwen2 preset {args.model}, {n_params / 1e6:.1f}M parameters, {args.dtype}")
    print(f"plan: {', '.join(p for p in PHASES if p not in args.skip)}; {args.num_prompts} prompts x "
          f"{args.max_new_tokens} new tokens; sync buckets {args.bucket_mb} MB")
    if args.dry_run:
        print(f"RESULT dry_run=1 params={n_params} layers={config.num_hidden_layers} hidden={config.hidden_size}")
        return 0
    import torch

    if not torch.cuda.is_available():
        print("gpu_check: no CUDA device; use --dry-run on CPU machines", file=sys.stderr)
        return 2
    os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "1")  # Megatron's requirement for overlapped TP comms
    from roll.strategies.torch_train import init_process_group

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    init_process_group(0, 1, "127.0.0.1", port)
    check = Check(args)
    with tempfile.TemporaryDirectory(prefix="roll-gpu-check-") as tmp:
        t0 = time.perf_counter()
        check.model_dir = build_model_dir(config, tmp, args.dtype)
        check.rows.append(("build model", "ok", f"{n_params / 1e6:.0f}M params ({time.perf_counter() - t0:.1f}s)"))
        for name in PHASES:
            check.phase(name, getattr(check, f"run_{name}"))
        if check.infer is not None:
            check.infer.shutdown()
    md = table(check.rows)
    print(f"\nGPU check, {datetime.date.today().isoformat()}, {torch.cuda.get_device_name(0)}\n" + md)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(f"GPU check, {datetime.date.today().isoformat()}, {torch.cuda.get_device_name(0)}\n\n{md}\n")
    failed = [r[0] for r in check.rows if r[1] == "FAIL"]
    print("RESULT " + " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in check.results.items())
          + f" failed={len(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
