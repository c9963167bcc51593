"""InferenceWorker: the generation role (``actor_infer``, also LLM judges), a Ray async actor.

Holds an inference strategy (``strategy_args.strategy_name``: hf_infer, vllm, sglang; the
constructor contract is ``cls(worker_config, model_path, seed=)``). Many ``generate`` calls
run concurrently (``worker_config.max_concurrency``); the rollout scheduler calls
``worker.generate.remote(request)`` directly on ``cluster.workers``.

Methods: ``generate(GenerationRequest) -> GenerationResult``, ``generate_batch(requests)``,
``abort(ids)``, ``policy_version()``, ``compute_logprobs(batch, key)`` (train/infer parity checks; strategies
that can score), ``update_weights(named_tensors, version, last_bucket)``, ``offload``/``reload``,
and the receiving side of roll/distributed/model_update.py (``begin_weight_update``,
``finish_weight_update``, ``shared_weight_layout``, ``init_weight_broadcast``,
``recv_weight_bucket``, ``update_weights_ipc``).
"""
from __future__ import annotations

import asyncio
import os
from typing import Any

from roll.data.batch import Batch
from roll.distributed.model_update import WeightReceiver
from roll.errors import WorkerUnavailableError
from roll.registry import STRATEGIES
from roll.strategies.base import GenerationRequest, GenerationResult
from roll.workers.base import Worker


def _reconstructed() -> bool:
    """Whether this actor process is a restart of one that died (False outside Ray)."""
    try:
        import warnings

        import ray

        with warnings.catch_warnings():  # Ray's property reads a deprecated field internally
            warnings.simplefilter("ignore", DeprecationWarning)
            return bool(ray.is_initialized() and ray.get_runtime_context().was_current_actor_reconstructed)
    except Exception:  # not inside an actor
        return False


class InferenceWorker(Worker):
    collective = False

    def __init__(self, role: str, rank: int, world_size: int, worker_config: Any, **kwargs: Any):
        super().__init__(role, rank, world_size, worker_config, **kwargs)
        self.strategy = None
        self.receivers: dict[str, WeightReceiver] = {}  # one per ModelUpdateGroup
        # A worker Ray restarted after a crash loads the pretrained weights in setup; it must not
        # generate until the driver has pushed the current policy (finish_weight_update).
        self.serving = not _reconstructed()

    async def setup(self, master_addr: str, master_port: int) -> None:
        cls = STRATEGIES.get(self.worker_config.strategy_args.strategy_name)
        # model loading blocks: keep the event loop free for pings meanwhile
        self.strategy = await asyncio.to_thread(cls, self.worker_config, self.model_path, seed=self.seed + self.rank)
        await self.strategy.start()

    async def ping(self) -> dict[str, Any]:
        return Worker.ping(self)

    # ---- generation ---------------------------------------------------------------------------
    async def generate(self, request: GenerationRequest) -> GenerationResult:
        if self.strategy is None or not self.serving:
            raise WorkerUnavailableError(f"{self.role} rank {self.rank} restarted: waiting for "
                                         f"{'setup' if self.strategy is None else 'the current weights'}")
        return await self.strategy.generate(request)

    async def generate_batch(self, requests: list[GenerationRequest]) -> list[GenerationResult]:
        """Several requests in one call (the RLVR pipeline sends a prompt's whole group): one Ray
        round trip instead of one per request; the strategy still batches across calls."""
        if self.strategy is None or not self.serving:
            raise WorkerUnavailableError(f"{self.role} rank {self.rank} restarted: waiting for "
                                         f"{'setup' if self.strategy is None else 'the current weights'}")
        batch = getattr(self.strategy, "generate_batch", None)
        if batch is not None:
            return await batch(requests)
        return list(await asyncio.gather(*(self.strategy.generate(r) for r in requests)))

    async def abort(self, request_ids: list[str]) -> None:
        if self.strategy is None:  # restarted and not set up: the requests died with the old process
            return
        await self.strategy.abort(request_ids)

    def _ready(self) -> Any:
        """The strategy, or WorkerUnavailableError for a process Ray restarted that is not set up
        (a typed, transient error for the caller instead of an AttributeError)."""
        if self.strategy is None:
            raise WorkerUnavailableError(f"{self.role} rank {self.rank} restarted: waiting for setup")
        return self.strategy

    async def policy_version(self) -> int:
        return self._ready().policy_version()

    async def compute_logprobs(self, batch: Batch, key: str = "infer_logprobs") -> Batch:
        return Batch({key: await asyncio.to_thread(self._ready().logprobs, batch)})

    async def offload(self) -> None:
        await asyncio.to_thread(self._ready().offload)

    async def reload(self) -> None:
        await asyncio.to_thread(self._ready().reload)

    # ---- weights ----------------------------------------------------------------------------
    async def update_weights(self, named_tensors: list, version: int, last_bucket: bool = True) -> None:
        await asyncio.to_thread(self._ready().update_weights, named_tensors, version, last_bucket)

    async def begin_weight_update(self, timeout_s: float = 600.0) -> dict[str, Any]:
        """Pause generation for an update; returns this process's ``pid`` (restart detection) and
        ``ready`` (False: restarted and not set up yet, nothing to pause)."""
        if hasattr(self.strategy, "pause"):
            await self.strategy.pause(timeout_s)
        return {"pid": os.getpid(), "ready": self.strategy is not None}

    async def finish_weight_update(self, version: int | None) -> int:
        """Publish ``version`` (None: the update failed, keep the old one) and resume generation."""
        try:
            if version is not None:
                # an empty last bucket publishes the version through the protocol method (no
                # tensors to copy, and generation is paused: no need to leave the event loop)
                self.strategy.update_weights([], version, True)
                self.serving = True
        finally:
            if hasattr(self.strategy, "resume"):
                self.strategy.resume()
        return self._ready().policy_version()

    async def shared_weight_layout(self) -> dict:
        return await asyncio.to_thread(self._ready().shared_weight_layout)

    async def init_weight_broadcast(self, group: str, master_addr: str, master_port: int, world_size: int, rank: int,
                                    timeout_s: float) -> None:
        self.receivers[group] = WeightReceiver()
        await asyncio.to_thread(self.receivers[group].init, master_addr, master_port, world_size, rank, timeout_s)

    async def recv_weight_bucket(self, group: str, meta: list, version: int) -> None:
        named = await asyncio.to_thread(self.receivers[group].recv, meta, self._device())
        await asyncio.to_thread(self._ready().update_weights, named, version, False)

    async def update_weights_ipc(self, handles: list, version: int, last_bucket: bool = False) -> None:
        named = [(name, func(*args)) for name, (func, args) in handles]  # CUDA IPC: rebuild the trainer's tensors
        await asyncio.to_thread(self._ready().update_weights, named, version, last_bucket)
