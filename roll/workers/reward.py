"""Reward workers: one Ray actor role per reward domain (``reward.<name>``), and the client
the RLVR pipeline routes samples through.

:class:`RewardWorker` (a Ray async actor, built by a Cluster like every role) holds one
registered reward function (``rewards.<name>.reward_fn``) and scores one sample per
``compute`` call (``compute_batch``: several in one call), each in its own thread so a slow
verifier does not block the others, with
``timeout_s`` per sample. A function that raises, or runs past the timeout, gives a
:class:`RewardResult` with ``failed`` set ("error" or "timeout") and the exception type;
never a silent 0. A timed-out call's thread cannot be stopped; the worker counts such hung
calls and the client restarts a worker that holds ``max_hung_calls`` of them. A failure that
does not depend on the sample (broken code, a wrong signature, a result that is not a
RewardOutput) is marked ``permanent`` and carries its traceback; the pipeline stops the run.

:class:`RewardClient` (driver side) routes a sample to its domain's workers by tag (least
outstanding calls first), adds a backstop timeout around the Ray call, turns a dead actor
into a failed result (and has the Cluster restart it), and keeps the per-domain counts the
pipeline logs under ``reward/<tag>/``.

For ``llm_judge`` the worker is given the judge role's inference workers and passes a
:class:`roll.rewards.llm_judge.JudgeClient` to the function as its ``judge`` field.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import importlib
import math
import time
import traceback
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from roll.errors import WorkerUnavailableError
from roll.registry import REWARDS
from roll.rewards.base import RewardOutput
from roll.utils.logging import get_logger
from roll.workers.base import Worker

logger = get_logger(__name__)


@dataclass
class RewardResult:
    """What a reward worker returns for one sample."""

    score: float = 0.0
    success: bool = False
    failed: str | None = None
    """None, "error" (the function raised), "timeout", or "worker_died"."""
    error: str = ""
    """Exception type and message when failed."""
    components: dict[str, float] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)
    elapsed_s: float = 0.0
    permanent: bool = False
    """The failure does not depend on the sample, so every sample will fail the same way (see
    :func:`is_permanent_reward_error`): the pipeline stops the run."""
    traceback: str = ""
    """Where the reward function raised (file and line), for the run's reward_errors.log."""


_BROKEN_CODE_ERRORS = (ImportError, NameError, SyntaxError, NotImplementedError)
_NOT_CALLED = object()


def is_permanent_reward_error(exc: BaseException, contract: bool = False) -> bool:
    """Whether a reward error is a property of the function rather than of the sample: its code
    cannot run (an import, name or syntax error, a stub), it broke the RewardOutput contract
    (``contract``), or the call itself did not fit its signature (a TypeError raised at the
    call, before any line of the function ran). Errors about the sample (a reply without a
    score, a record without a field) fail that sample only, counted."""
    if contract or isinstance(exc, _BROKEN_CODE_ERRORS):
        return True
    if isinstance(exc, TypeError):
        tb = exc.__traceback__
        while tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
        return tb is not None and tb.tb_frame.f_code is score_sample.__code__
    return False


def _plain(value: Any) -> Any:
    """Keep info JSON-like (a reward may put arbitrary objects there)."""
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return repr(value)


def score_sample(fn: Any, sample: dict, fields: dict) -> RewardResult:
    """Call the reward function (in the calling thread) and convert its output or exception."""
    t0 = time.perf_counter()
    out: Any = _NOT_CALLED
    try:
        out = fn(sample, **fields)
        if not isinstance(out, RewardOutput):
            raise TypeError(f"reward function returned {type(out).__name__}, expected RewardOutput")
        score = float(out.score)
        if not math.isfinite(score):  # NaN or inf would poison group statistics
            raise ValueError(f"reward function returned a score of {score}, expected a finite number")
    except Exception as e:  # noqa: BLE001  (any reward error is counted and surfaced by the caller, never scored)
        contract = out is not _NOT_CALLED and not isinstance(out, RewardOutput)
        return RewardResult(failed="error", error=f"{type(e).__name__}: {str(e)[:300]}",
                            elapsed_s=time.perf_counter() - t0, permanent=is_permanent_reward_error(e, contract),
                            traceback="".join(traceback.format_exception(e)))
    return RewardResult(score=score, success=bool(out.success),
                        components={k: float(v) for k, v in out.components.items()},
                        info=_plain(out.info), elapsed_s=time.perf_counter() - t0)


class RewardWorker(Worker):
    """One domain's reward actor (see the module docstring)."""

    collective = False

    def __init__(self, role: str, rank: int, world_size: int, worker_config: Any, *, reward_config: Any,
                 imports: Sequence[str] = (), judge_workers: list | bytes | None = None,
                 judge_model_path: str | None = None, reward_fn: Any | None = None, **kwargs: Any):
        super().__init__(role, rank, world_size, worker_config, **kwargs)
        self.reward_config = reward_config
        self.override_fn = reward_fn  # a callable instead of the registry id (programmatic use, tests)
        self.imports = list(imports)
        if isinstance(judge_workers, bytes):  # the handles, pickled by the driver (pipelines/rlvr.py)
            from ray import cloudpickle

            judge_workers = cloudpickle.loads(judge_workers)
        self.judge_workers = judge_workers
        self.judge_model_path = judge_model_path
        self.fn = None
        self.fields: dict[str, Any] = {}
        self.executor: concurrent.futures.ThreadPoolExecutor | None = None
        self.hung = 0
        self.calls = 0

    async def setup(self, master_addr: str, master_port: int) -> None:
        for module in self.imports:  # user modules that register their own reward functions
            importlib.import_module(module)
        self.fn = self.override_fn or REWARDS.get(self.reward_config.reward_fn)
        self.fields = dict(self.reward_config.reward_fn_args)
        # hung threads are abandoned, so leave room for them beyond the concurrency
        n = max(1, int(self.reward_config.max_concurrency)) + max(0, int(self.reward_config.max_hung_calls))
        self.executor = concurrent.futures.ThreadPoolExecutor(max_workers=n, thread_name_prefix=f"{self.role}-{self.rank}")
        self.sem = asyncio.Semaphore(max(1, int(self.reward_config.max_concurrency)))
        if self.judge_workers:
            from transformers import AutoTokenizer

            from roll.rewards.llm_judge import JudgeClient

            tok = await asyncio.to_thread(AutoTokenizer.from_pretrained, self.judge_model_path)
            self.fields["judge"] = JudgeClient.from_workers(
                self.judge_workers, tok, max_new_tokens=int(self.fields.get("max_new_tokens", 32)), seed=self.seed)

    def _device(self) -> str:
        # reward workers are planned without devices; Worker._device would import torch (about
        # 150 MB and seconds of start-up per process) only to say "cpu"
        return "cpu"

    async def ping(self) -> dict[str, Any]:
        return Worker.ping(self)

    async def compute(self, sample: dict) -> RewardResult:
        """Score one sample: the record's fields plus ``response`` (and ``prompt_text``)."""
        if self.fn is None:  # restarted by Ray after a crash and not set up yet
            raise WorkerUnavailableError(f"{self.role} rank {self.rank} restarted: waiting for setup")
        loop = asyncio.get_running_loop()
        timeout = float(self.reward_config.timeout_s)
        async with self.sem:
            self.calls += 1
            t0 = time.perf_counter()
            fut = loop.run_in_executor(self.executor, score_sample, self.fn, sample, self.fields)
            try:
                return await asyncio.wait_for(asyncio.shield(fut), timeout)
            except TimeoutError:
                self.hung += 1
                fut.add_done_callback(self._unhang)
                self.logger.warning("%s: reward of sample %s timed out after %.1fs", self.role, sample.get("id"), timeout)
                return RewardResult(failed="timeout", error=f"TimeoutError: no reward within {timeout:g}s",
                                    elapsed_s=time.perf_counter() - t0)

    async def compute_batch(self, samples: list[dict]) -> list[RewardResult]:
        """Several samples in one call (one Ray round trip), each scored as by :meth:`compute`:
        its own thread and its own ``timeout_s``; results in sample order."""
        return list(await asyncio.gather(*(self.compute(s) for s in samples)))

    def _unhang(self, _fut: Any) -> None:
        self.hung -= 1

    async def stats(self) -> dict[str, int]:
        return {"hung": self.hung, "calls": self.calls}


class RewardClient:
    """Driver-side routing of samples to reward workers by domain tag (module docstring)."""

    def __init__(self, clusters: dict[str, Any], tag_to_reward: dict[str, str], reward_configs: dict[str, Any]):
        self.clusters = clusters
        self.tag_to_reward = tag_to_reward
        self.reward_configs = reward_configs
        self.outstanding: dict[str, list[int]] = {name: [0] * c.world_size for name, c in clusters.items()}
        self._locks: dict[str, asyncio.Lock] = {}
        self.restarts: Counter = Counter()  # crashed workers set up again, per reward
        self.reset_counts()

    def reset_counts(self) -> None:
        self.counts: dict[str, Counter] = defaultdict(Counter)

    def _pick(self, name: str) -> int:
        out = self.outstanding[name]
        return min(range(len(out)), key=lambda i: (out[i], i))

    async def score(self, tag: str, sample: dict) -> RewardResult:
        name = self.tag_to_reward.get(tag)
        if name is None:
            raise KeyError(f"no reward configured for domain {tag!r}")
        cluster = self.clusters[name]
        # backstop for a worker that cannot even answer (its own timeout handles the rest)
        backstop = float(self.reward_configs[name].timeout_s) + 30.0
        for attempt in range(2):
            rank = self._pick(name)
            self.outstanding[name][rank] += 1
            try:
                result = await asyncio.wait_for(cluster.workers[rank].compute.remote(sample), backstop)
                break
            except TimeoutError:
                result = RewardResult(failed="timeout", error=f"TimeoutError: reward worker {name}/{rank} did not answer in {backstop:g}s")
                break
            except Exception as e:  # noqa: BLE001  (the actor died or its call failed: the sample fails, counted)
                import ray

                result = RewardResult(failed="worker_died", error=f"{type(e).__name__}: {str(e)[:300]}")
                if not isinstance(e, (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError,
                                      WorkerUnavailableError)):
                    break
                # the worker crashed (Ray restarts it): set it up again and score the sample once more
                cluster.report_dead(rank)
                if attempt == 0 and not await self._recover(name):
                    break
            finally:
                self.outstanding[name][rank] -= 1
        self._count(tag, result)
        return result

    def _count(self, tag: str, result: RewardResult) -> None:
        c = self.counts[tag]
        c["samples"] += 1
        if result.failed:
            c["failed"] += 1
            c[f"failed_{result.failed}"] += 1
            c[f"errors/{result.error.split(':', 1)[0]}"] += 1

    async def score_batch(self, tag: str, samples: list[dict]) -> list[RewardResult]:
        """Score several samples of one domain with ONE call to one worker (``compute_batch``);
        when that worker dies or cannot answer, each sample is scored again through
        :meth:`score` (its recovery), so the batch path loses nothing the single path keeps."""
        name = self.tag_to_reward.get(tag)
        if name is None:
            raise KeyError(f"no reward configured for domain {tag!r}")
        if len(samples) <= 1:
            return [await self.score(tag, s) for s in samples]
        backstop = float(self.reward_configs[name].timeout_s) + 30.0
        rank = self._pick(name)
        self.outstanding[name][rank] += len(samples)
        try:
            results = await asyncio.wait_for(self.clusters[name].workers[rank].compute_batch.remote(samples), backstop)
        except Exception as e:  # noqa: BLE001  (a dead or stuck worker: the single path recovers it, per sample)
            logger.warning("reward.%s rank %d: batch of %d failed (%s: %s); scoring one by one",
                           name, rank, len(samples), type(e).__name__, str(e)[:200])
            results = None
        finally:
            self.outstanding[name][rank] -= len(samples)
        if results is None:
            return list(await asyncio.gather(*(self.score(tag, s) for s in samples)))
        for result in results:
            self._count(tag, result)
        return results

    async def _recover(self, name: str) -> bool:
        """Wait for a crashed worker of reward ``name`` to restart and set it up again (one
        recovery at a time per reward; samples that saw the same death wait for it)."""
        lock = self._locks.setdefault(name, asyncio.Lock())
        cluster = self.clusters[name]
        async with lock:
            before = cluster.restarts
            try:
                await asyncio.to_thread(cluster.ensure_ready)
            except Exception as e:  # noqa: BLE001  (out of restarts: the samples fail, counted)
                logger.error("reward.%s: a crashed worker could not be restarted: %s", name, e)
                return False
            self.restarts[name] += cluster.restarts - before
        return True

    def restart_hung_workers(self) -> dict[str, float]:
        """Restart workers holding too many hung calls; call between steps (blocking)."""
        import ray

        metrics: dict[str, float] = {}
        for name, cluster in self.clusters.items():
            limit = int(self.reward_configs[name].max_hung_calls)
            cluster.ensure_ready()
            stats = ray.get([w.stats.remote() for w in cluster.workers], timeout=60)
            hung = [s["hung"] for s in stats]
            metrics[f"reward/{name}/hung_calls"] = float(sum(hung))
            metrics[f"reward/{name}/crash_recoveries"] = float(self.restarts[name])
            for rank, h in enumerate(hung):
                if limit > 0 and h >= limit:
                    logger.warning("reward.%s rank %d holds %d hung calls: restarting it", name, rank, h)
                    ray.kill(cluster.workers[rank], no_restart=False)
                    cluster.report_dead(rank)
                    metrics[f"reward/{name}/worker_restarts"] = metrics.get(f"reward/{name}/worker_restarts", 0.0) + 1
            cluster.ensure_ready()
        return metrics

    def metrics(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for tag, c in self.counts.items():
            n = max(1, c["samples"])
            out[f"reward/{tag}/failed"] = float(c["failed"])
            out[f"reward/{tag}/failed_rate"] = c["failed"] / n
            for k, v in c.items():
                if k.startswith(("failed_", "errors/")):
                    out[f"reward/{tag}/{k}"] = float(v)
        return out
