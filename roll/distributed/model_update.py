"""ModelUpdateGroup: move fresh weights from a training cluster to inference clusters.

``ModelUpdateGroup(train_cluster, infer_clusters, bucket_size_mb)``; ``update(version)`` per
pipeline step. Every trainer rank iterates ``named_parameters_for_sync`` (FSDP gathers are
collective); trainer rank 0 sends, in buckets of about ``bucket_size_mb``, over one of two
paths chosen per inference worker:

- colocated (the worker shares device slots, hence the node, with trainer rank 0):
  on CPU the inference worker's parameters live in one shared-memory block
  (``HFInferStrategy.shared_weight_layout``) that trainer rank 0 maps once and then writes in
  place: one memory copy per byte, no serialisation. On GPU the tensors are handed over by
  CUDA IPC handles (``torch.multiprocessing.reductions.reduce_tensor``), the receiver copies
  them into its weights.
- disaggregated (different slots or nodes): a dedicated torch.distributed group (gloo on CPU,
  NCCL on GPU) of trainer rank 0 + every such inference worker, built from its own TCPStore so
  it is independent of the trainer's data-parallel group; each bucket is flattened into one
  byte buffer and broadcast, the receivers unflatten and ``update_weights``.

Colocated fast path (CPU, every receiver a shared-memory one, flock usable): one driver call.
The synchronisation lives in each block's header (``HFInferStrategy.shared_weight_layout``):
trainer rank 0 sets ``pause_requested`` on every block, takes ``fcntl.flock(LOCK_EX)`` on each
(the receivers hold ``LOCK_SH`` for every decode batch and ``logprobs`` call, so the writer
waits for a running batch and a batch never sees two versions), checks that each receiver
process is alive (the header holds its pid), copies the buckets in, writes ``version`` into
the header, unlocks and returns the versions it reads back. No receiver is called during an
update. A receiver that holds its lock past the lock timeout (hung in a decode) is named by
role and rank, its block is left untouched, and it is restarted by the next call; a dead
receiver (or a restarted trainer) makes the trainer answer ``linked: False`` and the update
falls back to the staged path below, which relinks restarted workers.

Staged path (broadcast, CUDA IPC, mixed topologies, fallback): inference workers are paused
(no decode batch starts) for the whole update, the version becomes visible at the end, and
``update`` checks that every worker reports it. A restarted inference worker is detected (its
pid changed) and the links are rebuilt before the next update (one that Ray restarted while
idle, unseen by its cluster, is first set up again). An update is three driver round trips in
sequence (pause every receiver, send, publish-and-resume every receiver); a receiver that
dies, hangs or raises in a stage is named by role and rank, and the others are resumed on
their old version before the error is raised. Submitting the three stages at once as a chain
of ObjectRef dependencies, or having the trainer publish to waiting receivers, measured no
faster (Ray relays each result through the owner of its ref; docs/benchmarks.md, Model
update), hence the fast path moves the synchronisation out of Ray altogether.

Worker methods used (roll/workers/): trainer ``weight_sync_*``; inference
``begin_weight_update``, ``finish_weight_update``, ``shared_weight_layout``,
``init_weight_broadcast``, ``recv_weight_bucket``, ``update_weights_ipc``, ``policy_version``,
``ping``.
"""
from __future__ import annotations

import datetime
import os
import time
import uuid
from collections.abc import Sequence
from typing import Any

import torch

from roll.utils.logging import get_logger

logger = get_logger(__name__)

BROADCAST_PREFIX = "roll-weight-sync"
LOCK_POLL_S = 0.0002  # between non-blocking tries for a receiver block's exclusive lock
LOCK_TIMEOUT_FRACTION = 0.8  # of the call timeout: the rest is left for the copy and the answer

try:
    import fcntl
except ImportError:  # not POSIX: shared-memory receivers are updated by the staged path only
    fcntl = None


# ---- tensor packing for the broadcast path ------------------------------------------------------
def bucket_meta(bucket: Sequence[tuple[str, torch.Tensor]]) -> list[tuple[str, tuple, str, int]]:
    """(name, shape, dtype, nbytes) of each tensor, in order."""
    return [(n, tuple(t.shape), str(t.dtype).removeprefix("torch."), t.numel() * t.element_size()) for n, t in bucket]


def flatten_bucket(bucket: Sequence[tuple[str, torch.Tensor]], out: torch.Tensor | None = None) -> torch.Tensor:
    """One uint8 buffer holding the bucket's bytes (written into ``out`` when it is large enough)."""
    parts = [t.detach().contiguous().view(-1).view(torch.uint8) for _, t in bucket]
    total = sum(p.numel() for p in parts)
    if out is None or out.numel() < total:
        return torch.cat(parts)
    return torch.cat(parts, out=out[:total])


def _reusable(buf: torch.Tensor | None, nbytes: int, device: Any) -> torch.Tensor:
    """A persistent byte buffer: re-allocating ~100 MB per bucket costs a page fault per 4 KB."""
    if buf is None or buf.numel() < nbytes or str(buf.device) != str(torch.device(device)):
        buf = torch.empty(nbytes, dtype=torch.uint8, device=device)
    return buf


def unflatten_bucket(buffer: torch.Tensor, meta: Sequence[tuple[str, tuple, str, int]]) -> list[tuple[str, torch.Tensor]]:
    out, offset = [], 0
    for name, shape, dtype, nbytes in meta:
        out.append((name, buffer[offset:offset + nbytes].view(getattr(torch, dtype)).view(shape)))
        offset += nbytes
    return out


def new_broadcast_group(master_addr: str, master_port: int, world_size: int, rank: int, timeout_s: float):
    """A process group of its own (not the default one): gloo on CPU, NCCL on GPU."""
    import torch.distributed as dist

    timeout = datetime.timedelta(seconds=timeout_s)
    store = dist.TCPStore(master_addr, master_port, world_size, rank == 0, timeout=timeout)
    prefixed = dist.PrefixStore(BROADCAST_PREFIX, store)
    if torch.cuda.is_available():
        group = dist.ProcessGroupNCCL(prefixed, rank, world_size)
    else:
        group = dist.ProcessGroupGloo(prefixed, rank, world_size, timeout)
    return group, store


class WeightReceiver:
    """Inference side of the broadcast path (lives in the inference worker)."""

    def __init__(self) -> None:
        self.group = None
        self.store = None

    def init(self, master_addr: str, master_port: int, world_size: int, rank: int, timeout_s: float) -> None:
        self.group, self.store = new_broadcast_group(master_addr, master_port, world_size, rank, timeout_s)

    def recv(self, meta: Sequence[tuple[str, tuple, str, int]], device: str) -> list[tuple[str, torch.Tensor]]:
        if self.group is None:
            raise RuntimeError("weight broadcast group is not initialised on this inference worker")
        nbytes = sum(m[3] for m in meta)
        self._buf = _reusable(getattr(self, "_buf", None), nbytes, device)
        buffer = self._buf[:nbytes]
        self.group.broadcast(buffer, 0).wait()
        # views into the reused buffer: the caller copies them into the weights before the next bucket
        return unflatten_bucket(buffer, meta)


class SharedBlock:
    """An inference worker's shared-memory weight block as mapped by trainer rank 0: parameter
    views, the int64 header and this process's own file description of the block (for flock)."""

    def __init__(self, layout: dict):
        from multiprocessing import resource_tracker, shared_memory

        self.shm = shared_memory.SharedMemory(name=layout["shm_name"])
        # the block belongs to the inference worker: this process must not unlink it at exit
        resource_tracker.unregister(self.shm._name, "shared_memory")
        self.views = {name: torch.frombuffer(self.shm.buf, dtype=getattr(torch, dt), count=int(torch.Size(shape).numel()),
                                             offset=off).view(shape)
                      for name, (off, shape, dt) in layout["params"].items()}
        self.slots: dict[str, int] = dict(layout.get("header_slots") or {})
        self.header = self.shm.buf[:int(layout["header"])].cast("q") if layout.get("header") and self.slots else None
        self.fd: int | None = getattr(self.shm, "_fd", None)  # opened by name here: not the receiver's description
        self.locked = False

    def __getitem__(self, slot: str) -> int:
        return int(self.header[self.slots[slot]])

    def __setitem__(self, slot: str, value: int) -> None:
        self.header[self.slots[slot]] = int(value)

    def lock_problem(self) -> str:
        """Why this block cannot be updated under its lock ('' when it can)."""
        from roll.strategies.hf_infer import process_alive

        if fcntl is None or self.fd is None:
            return "no fcntl.flock on this platform"
        if self.header is None or not {"version", "pause_requested", "pid"} <= set(self.slots):
            return "the receiver's block has no version/lock header"
        try:  # shared mode: compatible with a receiver's running batch
            fcntl.flock(self.fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            fcntl.flock(self.fd, fcntl.LOCK_UN)
        except BlockingIOError:
            pass  # someone holds it exclusively: locking works
        except OSError as e:
            return f"flock failed on the weight block: {e!r}"
        if not process_alive(self["pid"]):
            return f"receiver pid {self['pid']} is not visible from the trainer (another pid namespace?)"
        return ""

    def try_lock(self) -> bool:
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        self.locked = True
        return True

    def unlock(self) -> None:
        if self.locked:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            self.locked = False

    def close(self) -> None:
        self.unlock()
        self.views = {}  # drop the views before closing the mapping
        if self.header is not None:
            self.header.release()
            self.header = None
        try:
            self.shm.close()
        except BufferError:  # a view is still referenced somewhere: the mapping dies with the process
            logger.warning("shared weight block %s still referenced; left mapped", self.shm.name)


class WeightSender:
    """Trainer side (lives in every trainer rank; only rank 0 sends)."""

    def __init__(self) -> None:
        self.blocks: list[SharedBlock] = []  # receivers' shared-memory blocks (colocated, CPU)
        self.ipc_receivers: list[Any] = []
        self.bcast_receivers: list[Any] = []
        self.group = None
        self.store = None
        self.name = ""
        self._buf: torch.Tensor | None = None

    def attach_shared(self, layouts: Sequence[dict]) -> dict[str, Any]:
        """Map the blocks; ``lockable`` says whether the one-call locked update can serve them
        (``why`` names the first reason it cannot)."""
        self.detach_shared()
        self.blocks = [SharedBlock(layout) for layout in layouts]
        problems = [p for p in (b.lock_problem() for b in self.blocks) if p]
        return {"lockable": not problems, "why": problems[0] if problems else ""}

    def detach_shared(self) -> None:
        for block in self.blocks:
            block.close()
        self.blocks = []

    def init_broadcast(self, name: str, master_addr: str, master_port: int, world_size: int, receivers: list[Any], timeout_s: float) -> None:
        self.name = name
        self.group, self.store = new_broadcast_group(master_addr, master_port, world_size, 0, timeout_s)
        self.bcast_receivers = list(receivers)

    def send(self, buckets, version: int, is_sender: bool, timeout_s: float, publish: bool = False,
             lock_timeout_s: float | None = None) -> dict[str, Any]:
        """Send every bucket. ``publish`` (the fast path; shared-memory receivers only): lock the
        receivers' blocks, write, set their version (see module docstring)."""
        import ray

        if publish and is_sender:
            return self._send_locked(buckets, version, timeout_s if lock_timeout_s is None else lock_timeout_s)

        nbytes, n_buckets = 0, 0
        flatten_s = bcast_s = 0.0
        t0 = time.perf_counter()
        pending: list[Any] = []
        for bucket in buckets:  # every rank drains the generator (FSDP gathers are collective)
            if not is_sender:
                continue
            n_buckets += 1
            nbytes += sum(t.numel() * t.element_size() for _, t in bucket)
            self._copy_shared(bucket)
            if self.ipc_receivers:
                from torch.multiprocessing.reductions import reduce_tensor

                handles = [(n, reduce_tensor(t.detach().contiguous())) for n, t in bucket]
                # the tensors must stay alive until the receivers have copied them
                ray.get([r.update_weights_ipc.remote(handles, version, False) for r in self.ipc_receivers], timeout=timeout_s)
            if self.bcast_receivers:
                ray.get(pending, timeout=timeout_s)  # previous bucket fully received before reusing the group
                meta = bucket_meta(bucket)
                pending = [r.recv_weight_bucket.remote(self.name, meta, version) for r in self.bcast_receivers]
                t_flat = time.perf_counter()
                self._buf = _reusable(self._buf, sum(m[3] for m in meta), bucket[0][1].device)
                flat = flatten_bucket(bucket, self._buf)
                t_bcast = time.perf_counter()
                self.group.broadcast(flat, 0).wait()
                flatten_s += t_bcast - t_flat
                bcast_s += time.perf_counter() - t_bcast
        if pending:
            ray.get(pending, timeout=timeout_s)
        return {"bytes": float(nbytes), "buckets": float(n_buckets), "send_s": time.perf_counter() - t0,
                "flatten_s": flatten_s, "broadcast_s": bcast_s}

    def _copy_shared(self, bucket: Sequence[tuple[str, torch.Tensor]]) -> None:
        with torch.no_grad():
            for block in self.blocks:
                for name, t in bucket:
                    dst = block.views.get(name)
                    if dst is None:
                        raise KeyError(f"weight sync: {name!r} is not a parameter of the colocated inference model")
                    dst.copy_(t)

    def _lock_all(self, timeout_s: float) -> list[int]:
        """Exclusive locks on every block, polling (a receiver's batch may hold its shared
        lock); indices of the blocks still busy at the deadline ([] = all locked)."""
        deadline = time.monotonic() + timeout_s
        pending = list(range(len(self.blocks)))
        while True:
            pending = [i for i in pending if not self.blocks[i].try_lock()]
            if not pending or time.monotonic() >= deadline:
                return pending
            time.sleep(LOCK_POLL_S)

    def _send_locked(self, buckets, version: int, lock_timeout_s: float) -> dict[str, Any]:
        """The fast path: ``{"linked": False, "dead": [i]}`` when a receiver process is gone,
        ``{"busy": [i]}`` when a receiver held its lock past ``lock_timeout_s`` (nothing was
        written), else the stats and ``versions`` read back from the headers."""
        t0 = time.perf_counter()
        me = os.getpid()
        outcome: dict[str, Any] = {}
        nbytes, n_buckets = 0, 0
        try:
            for block in self.blocks:
                block["pause_requested"] = me  # receivers' next batches wait for us
            busy = self._lock_all(lock_timeout_s)
            dead = [i for i, b in enumerate(self.blocks) if not busy and not self._receiver_alive(b)]
            t_locked = time.perf_counter()
            if busy:
                outcome = {"linked": True, "busy": busy}
            elif dead:
                outcome = {"linked": False, "dead": dead}
            else:
                for bucket in buckets:
                    n_buckets += 1
                    nbytes += sum(t.numel() * t.element_size() for _, t in bucket)
                    self._copy_shared(bucket)
                for block in self.blocks:
                    block["version"] = version
                outcome = {"linked": True, "versions": [b["version"] for b in self.blocks]}
        finally:
            for block in self.blocks:
                block.unlock()
                if block["pause_requested"] == me:
                    block["pause_requested"] = 0
        if "versions" not in outcome:
            for _ in buckets:  # other ranks may be in collective gathers for these buckets
                pass
            return outcome
        return {**outcome, "bytes": float(nbytes), "buckets": float(n_buckets), "send_s": time.perf_counter() - t0,
                "lock_wait_s": t_locked - t0, "flatten_s": 0.0, "broadcast_s": 0.0}

    @staticmethod
    def _receiver_alive(block: SharedBlock) -> bool:
        from roll.strategies.hf_infer import process_alive

        return process_alive(block["pid"])


class ModelUpdateGroup:
    """Trainer -> inference weight sync (see module docstring)."""

    def __init__(self, train_cluster: Any, infer_clusters: Any, bucket_size_mb: int = 256, *,
                 mode: str = "auto", timeout_s: float | None = None):
        import ray

        if mode not in ("auto", "colocated", "broadcast"):
            raise ValueError(f"ModelUpdateGroup mode must be auto, colocated or broadcast, got {mode!r}")
        self.train = train_cluster
        self.infers = list(infer_clusters) if isinstance(infer_clusters, (list, tuple)) else [infer_clusters]
        self.bucket_size_mb = int(bucket_size_mb)
        self.mode = mode
        self.timeout_s = float(timeout_s or train_cluster.call_timeout_s)
        self.version = 0
        self.name = f"mug-{uuid.uuid4().hex[:8]}"  # trainer and inference workers keep per-group link state
        self._ray = ray
        self.lock_timeout_s = LOCK_TIMEOUT_FRACTION * self.timeout_s
        self._links_pids: dict[tuple[int, int], int] = {}
        self.paths: dict[tuple[int, int], str] = {}
        self.fast_path = False
        """Every receiver is a lockable shared-memory block: an update is one trainer call."""
        self._block_owners: list[tuple[int, int]] = []  # (cluster, rank) of each block, in the trainer's order
        self._build_links()

    # ---- topology -------------------------------------------------------------------------------
    def _receivers(self) -> list[tuple[int, int, Any]]:
        return [(c, r, w) for c, cl in enumerate(self.infers) for r, w in enumerate(cl.workers)]

    def _choose_path(self, c: int, r: int, info: dict, trainer_info: dict) -> str:
        if self.mode == "broadcast":
            return "broadcast"
        same_node = info["node_id"] == trainer_info["node_id"]
        if self.mode == "colocated":
            if not same_node:
                raise ValueError(f"{self.infers[c].role} rank {r} is on another node than {self.train.role} rank 0; "
                                 "the colocated path needs one node")
            return "colocated"
        shares = set(self.infers[c].devices[r]) & set(self.train.devices[0])
        return "colocated" if same_node and shares else "broadcast"

    def _build_links(self) -> None:
        ray = self._ray
        self.train.ensure_ready()
        for cl in self.infers:
            cl.ensure_ready()
        trainer_info = self.train.call("ping", mode="rank0")
        receivers = self._receivers()
        infos = ray.get([w.ping.remote() for _, _, w in receivers], timeout=self.timeout_s)
        self.paths = {(c, r): self._choose_path(c, r, info, trainer_info) for (c, r, _), info in zip(receivers, infos)}
        self._links_pids = {(c, r): info["pid"] for (c, r, _), info in zip(receivers, infos)}
        self.train.call("weight_sync_reset", self.name)
        colocated = [(c, r, w) for c, r, w in receivers if self.paths[(c, r)] == "colocated"]
        bcast = [w for c, r, w in receivers if self.paths[(c, r)] == "broadcast"]
        on_gpu = trainer_info.get("device") == "cuda"
        self.fast_path = False
        self._block_owners = []
        if colocated and not on_gpu:
            layouts = ray.get([w.shared_weight_layout.remote() for _, _, w in colocated], timeout=self.timeout_s)
            check = self.train.call("weight_sync_attach_shared", self.name, layouts, mode="rank0")
            self._block_owners = [(c, r) for c, r, _ in colocated]
            if len(colocated) == len(receivers):
                self.fast_path = bool(check["lockable"])
                if not self.fast_path:
                    logger.warning("model update: one-call locked path unavailable (%s); using the staged path", check["why"])
        elif colocated:
            self.train.call("weight_sync_set_ipc_receivers", self.name, [w for _, _, w in colocated], mode="rank0")
        if bcast:
            addr, port = self.train.call("master_address", mode="rank0")
            world = 1 + len(bcast)
            refs = [w.init_weight_broadcast.remote(self.name, addr, port, world, i + 1, self.timeout_s) for i, w in enumerate(bcast)]
            self.train.call("weight_sync_init_broadcast", self.name, addr, port, world, bcast, self.timeout_s, mode="rank0")
            ray.get(refs, timeout=self.timeout_s)
        logger.info("model update links: %s%s", {f"{self.infers[c].role}[{r}]": p for (c, r), p in self.paths.items()},
                    " (one-call locked path)" if self.fast_path else "")

    # ---- update -----------------------------------------------------------------------------------
    def update(self, version: int | None = None) -> dict[str, float]:
        """Send the trainer's current weights as ``version`` (default: previous + 1); returns
        ``model_update/*`` metrics. Raises if any inference worker does not serve it afterwards.

        One trainer call on the fast path; the staged path otherwise, and whenever the trainer
        reports that a worker on either side restarted since the links were built."""
        version = self.version + 1 if version is None else int(version)
        if self.fast_path:
            metrics = self._update_locked(version)
            if metrics is not None:
                return metrics
            logger.warning("a trainer or inference worker restarted since the last update: staged update and relink")
        return self._update_staged(version)

    def _update_locked(self, version: int) -> dict[str, float] | None:
        """The fast path (module docstring); None when the links are stale."""
        from roll.distributed.cluster import CallTimeoutError

        self.train.ensure_ready()
        for cl in self.infers:
            cl.ensure_ready()
        t0 = time.perf_counter()
        stats = self.train.call("weight_sync_send", self.name, version, self.bucket_size_mb, True, self.lock_timeout_s,
                                timeout_s=self.timeout_s)[0]
        if not stats.get("linked", True):
            return None
        if stats.get("busy"):
            owners = [self._block_owners[i] for i in stats["busy"]]
            for c, r in owners:  # hung in a decode: restarted by the next call, like a stage timeout
                self.infers[c]._mark_broken([r], died=False)
            c0 = owners[0][0]
            others = [f"{self.infers[c].role} rank {r}" for c, r in owners if c != c0]
            raise CallTimeoutError(self.infers[c0].role, [r for c, r in owners if c == c0],
                                   f"held its weight block (a decode or logprobs call) for more than {self.lock_timeout_s:g}s; "
                                   f"update to version {version} not applied, old weights kept"
                                   + (f" (also {', '.join(others)})" if others else ""))
        wrong = [f"{self.infers[c].role} rank {r} holds {v}" for (c, r), v in zip(self._block_owners, stats["versions"]) if v != version]
        if wrong:
            raise RuntimeError(f"weight update to version {version} incomplete: {'; '.join(wrong)}")
        self.version = version
        return {"model_update/time_s": time.perf_counter() - t0, "model_update/send_s": stats["send_s"],
                "model_update/flatten_s": 0.0, "model_update/broadcast_s": 0.0, "model_update/bytes": stats["bytes"],
                "model_update/buckets": stats["buckets"], "model_update/version": float(version),
                "model_update/receivers": float(len(stats["versions"])), "model_update/fast_path": 1.0}

    def _update_staged(self, version: int) -> dict[str, float]:
        """Three sequential Ray round trips: pause the receivers (they answer with their pid, so a
        restarted worker is noticed, and whether they are set up), send (trainer rank 0 answers
        ``linked: False`` when it restarted and lost its links), publish the version and resume
        (answers the version). A receiver that dies or hangs in a stage is named (role and rank)
        and restarted by the next call; the others are resumed on their old version first."""
        for attempt in range(2):
            self.train.ensure_ready()
            for cl in self.infers:
                cl.ensure_ready()
            t0 = time.perf_counter()
            receivers = self._receivers()
            try:
                paused = self._gather("begin_weight_update", receivers,
                                      [w.begin_weight_update.remote(self.timeout_s) for *_, w in receivers])
            except BaseException:
                self._resume(receivers)
                raise
            for (c, r, _), info in zip(receivers, paused):
                if not info["ready"]:  # restarted by Ray while idle: its cluster sets it up again first
                    self.infers[c].report_dead(r)
            active = [rec for rec, info in zip(receivers, paused) if info["ready"]]
            stale = any(self._links_pids.get((c, r)) != info["pid"] for (c, r, _), info in zip(receivers, paused))
            stats, sent = {}, False
            try:
                if not stale:
                    stats = self.train.call("weight_sync_send", self.name, version, self.bucket_size_mb, timeout_s=self.timeout_s)[0]
                    sent = bool(stats.get("linked", True))
            except BaseException:
                self._resume(active)
                raise
            # resume generation in any case; only a complete send publishes the version
            served = self._gather("finish_weight_update", active,
                                  [w.finish_weight_update.remote(version if sent else None) for *_, w in active])
            if sent:
                break
            if attempt == 1:
                raise RuntimeError("weight-sync links could not be re-established after a restart")
            logger.warning("a trainer or inference worker restarted since the last update: rebuilding weight-sync links")
            self._build_links()
        wrong = [f"{self.infers[c].role} rank {r} serves {v}" for (c, r, _), v in zip(active, served) if v != version]
        if wrong:
            raise RuntimeError(f"weight update to version {version} incomplete: {'; '.join(wrong)}")
        self.version = version
        elapsed = time.perf_counter() - t0
        return {"model_update/time_s": elapsed, "model_update/send_s": stats["send_s"],
                "model_update/flatten_s": stats["flatten_s"], "model_update/broadcast_s": stats["broadcast_s"],
                "model_update/bytes": stats["bytes"],
                "model_update/buckets": stats["buckets"], "model_update/version": float(version),
                "model_update/receivers": float(len(served)), "model_update/fast_path": 0.0}

    def _gather(self, method: str, receivers: list[tuple[int, int, Any]], refs: list[Any]) -> list[Any]:
        """Results of one call per receiver, in order. A death or timeout raises the cluster's
        WorkerDiedError / CallTimeoutError naming role and rank, and marks the rank so that the
        next ``ensure_ready`` restarts it."""
        from roll.distributed.cluster import ClusterFuture

        results: dict[tuple[int, int], Any] = {}
        for c, cl in enumerate(self.infers):
            mine = [(r, ref) for (cc, r, _), ref in zip(receivers, refs) if cc == c]
            if mine:
                got = ClusterFuture(cl, method, [ref for _, ref in mine], [r for r, _ in mine], "all", self.timeout_s).get()
                results.update({(c, r): v for (r, _), v in zip(mine, got)})
        return [results[(c, r)] for c, r, _ in receivers]

    def _resume(self, receivers: list[tuple[int, int, Any]], wait_s: float = 30.0) -> None:
        """After a failed stage: resume every receiver on its old version. The wait is short and
        bounded: a dead or hung receiver is left to the error being raised (its own pause timer
        resumes it if it comes back)."""
        refs = [w.finish_weight_update.remote(None) for *_, w in receivers]
        self._ray.wait(refs, num_returns=len(refs), timeout=min(self.timeout_s, wait_s))
