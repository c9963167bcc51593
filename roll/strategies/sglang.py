"""SGLangStrategy: the SGLang offline engine behind :class:`roll.strategies.base.InferenceStrategy`.

GPU only (SGLang has no CPU build we can install); the import is guarded so the package and
every other strategy work without it, and a config selecting ``sglang`` fails with an error
naming the ``sglang`` extra.

``strategy_args.strategy_config`` passes through to ``sglang.Engine`` (any server argument:
``tp_size``, ``mem_fraction_static``, ...); roll sets ``model_path``, ``dtype``,
``random_seed`` and ``skip_tokenizer_init`` where unset. Generation is per request through
``Engine.async_generate`` with token ids in and ``return_logprob=True`` (per-token logprobs of
the sampled tokens); ``abort`` goes to the tokenizer manager by request id; weight updates
use ``update_weights_from_tensor`` per bucket (same node; CUDA tensors travel by IPC handle)
and the version becomes visible after the last bucket; ``offload``/``reload`` map to
``release_memory_occupation``/``resume_memory_occupation`` (needs ``enable_memory_saver``).
"""
from __future__ import annotations

from typing import Any

import torch

from roll.strategies.base import GenerationRequest, GenerationResult, import_backend
from roll.utils.logging import get_logger

logger = get_logger(__name__)


def _import_sglang():
    return import_backend("sglang", "sglang", "sglang", "on a GPU machine (pip install -e '.[sglang]'); on CPU use hf_infer or vllm")


class SGLangStrategy:
    """SGLang Engine serving per-request generation (see module docstring)."""

    def __init__(self, worker_config: Any, model_path: str | None = None, *, device: str | None = None, seed: int = 0):
        if (device or ("cuda" if torch.cuda.is_available() else "cpu")) != "cuda":
            raise RuntimeError("sglang: SGLang needs a CUDA GPU; on CPU use the hf_infer or vllm strategy")
        self._sgl = _import_sglang()
        path = model_path or worker_config.model_name_or_path
        if not path:
            raise ValueError("sglang: no model path (set model_name_or_path or the pipeline's pretrain)")
        self.engine_kwargs = {"model_path": path, "dtype": worker_config.dtype, "random_seed": seed}
        self.engine_kwargs.update(worker_config.strategy_args.strategy_config)
        self.engine = None
        self._version = 0
        self._inflight: set[str] = set()
        self._aborted: set[str] = set()

    async def start(self) -> None:
        if self.engine is None:
            self.engine = self._sgl.Engine(**self.engine_kwargs)

    def shutdown(self) -> None:
        if self.engine is not None:
            self.engine.shutdown()
            self.engine = None

    async def generate(self, request: GenerationRequest) -> GenerationResult:
        if request.request_id in self._aborted:
            self._aborted.discard(request.request_id)
            return GenerationResult(request.request_id, [], [], "abort", self._version)
        await self.start()
        version = self._version
        params = {"max_new_tokens": request.max_new_tokens, "temperature": request.temperature, "top_p": request.top_p,
                      "top_k": request.top_k if request.top_k > 0 else -1, "stop": list(request.stop_strings) or None,
                      "stop_token_ids": list(request.stop_token_ids) or None, "no_stop_trim": True}
        if request.seed is not None:
            params["sampling_seed"] = int(request.seed)
        self._inflight.add(request.request_id)
        try:
            out = await self.engine.async_generate(input_ids=list(request.prompt_ids), sampling_params=params,
                                                   return_logprob=True, rid=request.request_id)
        finally:
            self._inflight.discard(request.request_id)
        meta = out["meta_info"]
        triples = meta.get("output_token_logprobs") or []  # [(logprob, token_id, text), ...]
        ids = [int(t[1]) for t in triples] if triples else list(out.get("output_ids", []))
        lps = [float(t[0]) for t in triples]
        kind = (meta.get("finish_reason") or {}).get("type", "stop")
        reason = "abort" if kind == "abort" or request.request_id in self._aborted else ("length" if kind == "length" else "stop")
        self._aborted.discard(request.request_id)
        return GenerationResult(request.request_id, ids, lps, reason, version)

    async def abort(self, request_ids: list[str]) -> None:
        self._aborted.update(request_ids)
        for rid in request_ids:
            if rid in self._inflight and self.engine is not None:
                self.engine.tokenizer_manager.abort_request(rid)

    def update_weights(self, named_tensors: list[tuple[str, torch.Tensor]], version: int, last_bucket: bool = True) -> None:
        if self.engine is None:
            raise RuntimeError("sglang: engine not started (await start() first)")
        if named_tensors:
            self.engine.update_weights_from_tensor(list(named_tensors), flush_cache=last_bucket)
        if last_bucket:
            self._version = int(version)

    def policy_version(self) -> int:
        return self._version

    def offload(self) -> None:
        if self.engine is not None and self.engine_kwargs.get("enable_memory_saver"):
            self.engine.release_memory_occupation()
        elif self.engine is not None:
            logger.warning("sglang: offload() without enable_memory_saver keeps the engine resident")

    def reload(self) -> None:
        if self.engine is not None and self.engine_kwargs.get("enable_memory_saver"):
            self.engine.resume_memory_occupation()
