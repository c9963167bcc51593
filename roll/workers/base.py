"""Worker: the base of every role's Ray actor class (one level of inheritance, per house style).

A :class:`roll.distributed.cluster.Cluster` constructs ``worker_cls(role, rank, world_size,
worker_config, **worker_kwargs)`` in each actor, asks rank 0 for ``master_address()``, then
calls ``setup(master_addr, master_port)`` on every rank at once; heavy work (process group,
model load) belongs in ``setup`` so that a restarted actor is set up again the same way.
``ping()`` reports pid, node and device (the cluster uses the pid to see a restart).
"""
from __future__ import annotations

import os
import socket
from typing import Any

from roll.utils.logging import get_logger, setup_logging


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def resolve_model(path: str | None) -> str | None:
    """``roll-tiny://...`` -> the cached local directory; anything else unchanged."""
    if path and path.startswith("roll-tiny://"):
        from roll.models.tiny import resolve_model_path

        return resolve_model_path(path)
    return path


class Worker:
    """Common plumbing: identity, addresses, liveness, colocation hooks."""

    collective = False
    """True for roles whose ranks form one torch.distributed group (restart together)."""

    def __init__(self, role: str, rank: int, world_size: int, worker_config: Any, *, model_path: str | None = None,
                 seed: int = 42, **kwargs: Any):
        setup_logging()
        self.role, self.rank, self.world_size = role, rank, world_size
        self.worker_config = worker_config
        self.model_path = resolve_model(model_path or worker_config.model_name_or_path)
        self.seed = seed
        self.kwargs = kwargs
        self.logger = get_logger(f"roll.workers.{role}.{rank}")

    def _device(self) -> str:
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"

    def master_address(self) -> tuple[str, int]:
        import ray

        return ray.util.get_node_ip_address(), free_port()

    def ping(self) -> dict[str, Any]:
        import ray

        return {"role": self.role, "rank": self.rank, "pid": os.getpid(), "device": self._device(),
                "node_id": ray.get_runtime_context().get_node_id()}

    def setup(self, master_addr: str, master_port: int) -> None:
        """Build the strategy (subclasses). Called again after a restart."""

    def offload(self) -> None:
        """Free devices for a colocated role (strategy.offload)."""
        strategy = getattr(self, "strategy", None)
        if strategy is not None:
            strategy.offload()

    def reload(self) -> None:
        strategy = getattr(self, "strategy", None)
        if strategy is not None:
            strategy.reload()
