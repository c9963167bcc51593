"""HFInferStrategy: the CPU-default inference backend on a Hugging Face causal LM.

Implements :class:`roll.strategies.base.InferenceStrategy`.

Requests arrive one at a time (``await generate(request)``, many concurrently, e.g. one per
env episode); a background loop collects whatever is queued (up to
``strategy_config.max_batch_size``, waiting ``batch_wait_ms`` for stragglers) and decodes
it as ONE left-padded batch with a KV cache (rows with the same prompt, e.g. a GRPO group's
samples, share one prompt forward and copy its cache). The decode loop is our own (a few lines around
the model's forward) rather than ``model.generate`` because RL needs per-row control that
``generate`` does not give in one batch:

- per-request sampling parameters (temperature, top_k, top_p, max_new_tokens, stop strings,
  stop token ids) in the same batch;
- per-request seeds: a row's random number at each decode step is a counter-based hash of
  (``request.seed``, step) (:func:`seeded_uniform`), drawn for the whole batch in one
  vectorised call and turned into a token by inverting the row's CDF, so a request's tokens
  do not depend on which other requests shared its batch (up to float rounding of batched
  vs. unbatched matmuls), and the decode step runs no per-row torch call;
- ``abort(ids)``: an aborted row stops at the next decode step and returns its partial output
  with ``finish_reason="abort"`` (the rollout scheduler resumes it under new weights).

Logprobs (``GenerationResult.logprobs``) are those of the distribution each token was
actually sampled from: logits / temperature, then top-k and top-p truncation, renormalised.
With temperature 1 and no truncation they equal the model's log-softmax, i.e. what the
trainer's ``logprobs(batch)`` computes. Greedy requests (temperature 0) report the model's
temperature-1 log-softmax of the chosen token (the degenerate greedy distribution would
give 0 everywhere, which is useless as a behaviour logprob).

``request.meta["ignore_eos"] = True`` keeps decoding past EOS (benchmarks, long-generation
tests), like vLLM's ``ignore_eos``. Output ids include the EOS / stop token that ended the row (the model produced it, so the
trainer trains on it); a matched stop string is kept in the output (``finish_reason="stop"``).

Weights: ``update_weights(named_tensors, version, last_bucket)`` copies HF-named tensors into
the model between decode batches (a lock keeps a batch from seeing half-updated weights);
the version becomes visible after the last bucket. ``pause()`` / ``resume()`` bracket a
multi-bucket update so no batch decodes on a mix of versions. ``shared_weight_layout()`` exposes the
parameters as views of one shared-memory block so a colocated trainer on the same node can
write them directly (see roll/distributed/model_update.py).

The block starts with a 64-byte header of int64 slots (``SHM_SLOTS``): ``version`` (the
version the bytes in the block are), ``pause_requested`` (0, or the pid of a writer waiting
for the block) and ``pid`` (this process, so a writer can tell that it died). A writer in
another process takes ``fcntl.flock(LOCK_EX)`` on the block's file; every decode batch and
``logprobs`` call holds ``LOCK_SH`` and reads the version right after taking it, so a batch
sees one version's weights and reports that version. Before taking the shared lock, a batch
yields to a waiting writer (briefly, and never to a dead one), so a writer is not starved.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from roll.data.batch import Batch
from roll.models.forward import accepts_logits_to_keep
from roll.strategies.base import GenerationRequest, GenerationResult
from roll.utils.logging import get_logger

logger = get_logger(__name__)

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}

SHM_HEADER_BYTES = 64  # parameters start here, keeping their 64-byte alignment
SHM_SLOTS = {"version": 0, "pause_requested": 1, "pid": 2}  # int64 indices into the header
YIELD_SLEEP_S = 0.0003  # how long a batch sleeps between looks at a waiting writer's flag
YIELD_MAX_S = 2.0  # a batch yields at most this long (the flag is a courtesy, the flock is the guard)
YIELD_CHECK_S = 0.05  # how often a yielding batch checks that the waiting writer is alive


def process_alive(pid: int) -> bool:
    """Whether ``pid`` runs on this node (a zombie, killed but not yet reaped, counts as dead)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True  # no procfs: os.kill said it exists


@dataclass
class _Pending:
    request: GenerationRequest
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop = field(repr=False, default=None)


def load_causal_lm(model_path: str, dtype: str = "float32", device: str = "cpu"):
    """``from_pretrained`` for a causal LM and its tokenizer (the tokenizer may be absent)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=_DTYPES[dtype]).to(device)
    model.eval()
    try:
        tokenizer = AutoTokenizer.from_pretrained(model_path)
    except (OSError, ValueError) as e:  # a bare weights dir: generation still works, stop strings do not
        logger.warning("no tokenizer in %s (%s); stop strings are unavailable", model_path, e)
        tokenizer = None
    return model, tokenizer


def filter_logits(logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Per-row sampling distribution as masked logits. logits [B, V] float; temperature, top_p
    [B] float (temperature > 0); top_k [B] long (<= 0 disables). Returns [B, V] with -inf outside
    each row's top-k / nucleus."""
    logits = logits / temperature[:, None]
    vocab = logits.shape[-1]
    k = torch.where(top_k > 0, top_k.clamp(max=vocab), torch.full_like(top_k, vocab))
    if bool((k < vocab).any()):
        kth = torch.sort(logits, dim=-1, descending=True).values.gather(-1, (k - 1)[:, None])
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if bool((top_p < 1.0).any()):
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        probs = sorted_logits.softmax(-1)
        # drop a token when the mass before it already reaches top_p (the first token always stays)
        drop_sorted = (probs.cumsum(-1) - probs) >= top_p[:, None]
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


_SPLITMIX = (-7046029254386353131, -4658895280553007687, -7723592293110705685)
"""splitmix64's increment and multipliers (0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9,
0x94D049BB133111EB) as int64: torch's int64 multiply wraps like uint64."""


def _shr(x: torch.Tensor, k: int) -> torch.Tensor:
    """Logical right shift of int64 (torch's ``>>`` is arithmetic)."""
    return (x >> k) & ((1 << (64 - k)) - 1)


def seeded_uniform(seeds: torch.Tensor, step: int) -> torch.Tensor:
    """One uniform number in (0, 1) per row, [B] float64, from splitmix64 of (row seed, step):
    ``seeds`` [B] int64. Row i's value depends only on ``seeds[i]`` and ``step``, never on the
    other rows, so batching does not change a request's samples."""
    inc = ((step + 1) * _SPLITMIX[0]) % 2**64  # the step's counter, wrapped to a signed int64
    x = seeds + (inc - 2**64 if inc >= 2**63 else inc)
    x = (x ^ _shr(x, 30)) * _SPLITMIX[1]
    x = (x ^ _shr(x, 27)) * _SPLITMIX[2]
    x = x ^ _shr(x, 31)
    return (_shr(x, 11).double() + 0.5) * (1.0 / 2**53)


def sample_rows(samp_lp: torch.Tensor, seeds: torch.Tensor, step: int) -> torch.Tensor:
    """One token per row from ``softmax(samp_lp)`` by inverting its CDF at the row's
    :func:`seeded_uniform` number: samp_lp [B, V] float (-inf outside the row's support),
    seeds [B] int64 -> [B] long. A token of probability 0 is never drawn (its CDF step is empty)."""
    cdf = samp_lp.double().exp().cumsum(-1)
    target = seeded_uniform(seeds, step) * cdf[:, -1]
    return torch.searchsorted(cdf, target[:, None], right=True)[:, 0].clamp(max=samp_lp.shape[-1] - 1)


class HFInferStrategy:
    """Batched, per-request-seeded generation on a Hugging Face model (see module docstring)."""

    def __init__(self, worker_config: Any, model_path: str | None = None, *, device: str | None = None, seed: int = 0):
        opts = dict(worker_config.strategy_args.strategy_config)
        # a whole RLVR step (e.g. 8 prompts x 8) fits one decode batch: on CPU one batch of 64
        # costs about 0.6x the CPU of two batches of 32 (tiny model, bench/trl_compare.py)
        self.max_batch_size = int(opts.pop("max_batch_size", 128))
        self.batch_wait_s = float(opts.pop("batch_wait_ms", 5.0)) / 1000.0
        if opts:
            raise ValueError(f"hf_infer: unknown strategy_config keys {sorted(opts)}; valid: max_batch_size, batch_wait_ms")
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        path = model_path or worker_config.model_name_or_path
        if not path:
            raise ValueError("hf_infer: no model path (set model_name_or_path or the pipeline's pretrain)")
        self.model, self.tokenizer = load_causal_lm(path, worker_config.dtype, self.device)
        self.pad_id = self._pad_id()
        self.eos_ids = self._eos_ids()
        self._params = dict(self.model.named_parameters())
        self._version = 0
        self._rng = random.Random(seed)
        self._lock = threading.Lock()  # one user of the weights at a time: a decode batch or an update
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="hf-decode")
        self._queue: asyncio.Queue | None = None
        self._loop_task: asyncio.Task | None = None
        self._aborted: set[str] = set()
        self._running: set[str] = set()
        self._shm = None  # shared-memory block backing the parameters (colocated weight sync)
        self._header: memoryview | None = None  # int64 view of the block's header (SHM_SLOTS)
        self._flock_ok = False  # False: no usable flock on the block (writers then rely on pause())
        self.writer_yields = 0  # batches that waited for a writer's pause_requested flag
        self.stale_pause_flags = 0  # flags left by a writer that died, cleared here
        self._resume: asyncio.Event | None = None  # cleared while a weight update is in progress
        self._pause_timer: asyncio.TimerHandle | None = None
        self.num_batches = 0
        self.shared_prefill_rows = 0  # rows whose prompt forward was another row's (same prompt)
        self._cache_reorders: bool | None = None  # whether the model's KV cache has reorder_cache (None: not seen)
        self.pause_timeouts = 0

    # ---- setup -------------------------------------------------------------------------
    def _pad_id(self) -> int:
        for src in (self.tokenizer, self.model.config):
            pid = getattr(src, "pad_token_id", None) if src is not None else None
            if pid is not None:
                return int(pid)
        return 0

    def _eos_ids(self) -> set[int]:
        ids: set[int] = set()
        for src in (self.model.generation_config, self.model.config, self.tokenizer):
            eos = getattr(src, "eos_token_id", None) if src is not None else None
            if eos is None:
                continue
            ids.update(int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos]))
        return ids

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        if getattr(self, "_event_loop", None) is not loop:  # first start, or a new event loop (tests)
            self._event_loop = loop
            self._resume = asyncio.Event()
            self._resume.set()
            self._loop_task = None
        if self._loop_task is None or self._loop_task.done():
            self._queue = asyncio.Queue()
            self._loop_task = asyncio.get_running_loop().create_task(self._batch_loop())

    async def stop(self) -> None:
        if self._loop_task is not None and not self._loop_task.done():
            await self._queue.put(None)
            await self._loop_task
        self._executor.shutdown(wait=True)

    # ---- generation ----------------------------------------------------------------------
    def _validate(self, r: GenerationRequest) -> None:
        vocab = self.model.config.vocab_size
        if not r.prompt_ids:
            raise ValueError(f"request {r.request_id}: empty prompt_ids")
        bad = [t for t in r.prompt_ids if not 0 <= int(t) < vocab]
        if bad:
            raise ValueError(f"request {r.request_id}: prompt token ids outside the vocabulary [0, {vocab}): {bad[:5]}")
        if r.temperature < 0 or not 0 < r.top_p <= 1:
            raise ValueError(f"request {r.request_id}: need temperature >= 0 and 0 < top_p <= 1, got {r.temperature}, {r.top_p}")
        if r.stop_strings and self.tokenizer is None:
            raise ValueError(f"request {r.request_id}: stop strings need a tokenizer in the model directory")

    async def generate(self, request: GenerationRequest) -> GenerationResult:
        self._validate(request)
        if request.max_new_tokens <= 0:
            return GenerationResult(request.request_id, [], [], "length", self.policy_version())
        if request.request_id in self._aborted:  # aborted before it was even submitted
            self._aborted.discard(request.request_id)
            return GenerationResult(request.request_id, [], [], "abort", self.policy_version())
        await self.start()
        fut = asyncio.get_running_loop().create_future()
        await self._queue.put(_Pending(request, fut))
        return await fut

    async def generate_batch(self, requests: list[GenerationRequest]) -> list[GenerationResult]:
        """Several requests at once (one call from a worker instead of one each): all are queued
        together, so they share decode batches; results in request order."""
        for r in requests:
            self._validate(r)
        return list(await asyncio.gather(*(self.generate(r) for r in requests)))

    async def abort(self, request_ids: list[str]) -> None:
        """Running or queued requests finish with their partial output and finish_reason "abort"."""
        self._aborted.update(request_ids)

    async def _batch_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            first = await self._queue.get()
            if first is None:
                return
            await self._resume.wait()  # no batch starts while weights are being replaced
            await asyncio.sleep(self.batch_wait_s)  # let concurrent requests join this batch
            items = [first]
            stop_after = False
            while len(items) < self.max_batch_size and not self._queue.empty():
                nxt = self._queue.get_nowait()
                if nxt is None:
                    stop_after = True
                    break
                items.append(nxt)
            for it in items:
                self._running.add(it.request.request_id)
            try:
                results = await loop.run_in_executor(self._executor, self._decode_batch, [it.request for it in items])
            except Exception as e:  # a failing batch fails its requests loudly, the loop keeps serving
                logger.exception("decode batch of %d requests failed", len(items))
                for it in items:
                    if not it.future.done():
                        it.future.set_exception(RuntimeError(f"generation failed: {e!r}"))
            else:
                for it, res in zip(items, results):
                    if not it.future.done():
                        it.future.set_result(res)
            finally:
                for it in items:
                    self._running.discard(it.request.request_id)
                    self._aborted.discard(it.request.request_id)
            if stop_after:
                return

    def _decode_batch(self, requests: list[GenerationRequest]) -> list[GenerationResult]:
        with self._lock, self._weights_in_use() as version:
            self.num_batches += 1
            return self._decode_locked(requests, version)

    @torch.inference_mode()
    def _decode_locked(self, requests: list[GenerationRequest], version: int) -> list[GenerationResult]:
        dev = self.device
        n = len(requests)
        width = max(len(r.prompt_ids) for r in requests)
        input_ids = torch.full((n, width), self.pad_id, dtype=torch.long)
        attn = torch.zeros((n, width), dtype=torch.long)
        for i, r in enumerate(requests):  # left padding: every row's next token is at column -1
            input_ids[i, width - len(r.prompt_ids):] = torch.tensor(r.prompt_ids, dtype=torch.long)
            attn[i, width - len(r.prompt_ids):] = 1
        input_ids, attn = input_ids.to(dev), attn.to(dev)
        positions = (attn.cumsum(-1) - 1).clamp(min=0)
        temps = torch.tensor([max(r.temperature, 1e-6) for r in requests], device=dev)
        greedy = [r.temperature == 0 for r in requests]
        top_k = torch.tensor([r.top_k for r in requests], dtype=torch.long, device=dev)
        top_p = torch.tensor([r.top_p for r in requests], device=dev)
        seeds = torch.tensor([int(r.seed) % 2**63 if r.seed is not None else self._rng.getrandbits(63) for r in requests],
                             dtype=torch.long, device=dev)
        greedy_rows = torch.tensor(greedy, device=dev)
        any_sampled = not all(greedy)
        stop_ids = [(set() if r.meta.get("ignore_eos") else self.eos_ids) | set(r.stop_token_ids) for r in requests]
        stop_tail = [max((len(s) for s in r.stop_strings), default=0) + 2 for r in requests]
        out_ids: list[list[int]] = [[] for _ in requests]
        out_lps: list[list[float]] = [[] for _ in requests]
        reason: list[str | None] = [None] * n
        past = None
        step_ids, step_pos = input_ids, positions
        # the LM head on the last column only: the prompt's other columns' logits are never read
        keep = {"logits_to_keep": 1} if accepts_logits_to_keep(self.model) else {}
        for step in range(max(r.max_new_tokens for r in requests)):
            for i, r in enumerate(requests):
                if reason[i] is None and r.request_id in self._aborted:
                    reason[i] = "abort"
            if all(x is not None for x in reason):
                break
            if step == 0:
                logits, past = self._prefill(step_ids, attn, step_pos, [r.prompt_ids for r in requests], keep)
            else:
                out = self.model(input_ids=step_ids, attention_mask=attn, position_ids=step_pos, past_key_values=past,
                                 use_cache=True, **keep)
                past = out.past_key_values
                logits = out.logits[:, -1, :].float()
            raw_lp = logits.log_softmax(-1)
            tok = raw_lp.argmax(-1)
            lp = raw_lp.gather(-1, tok[:, None])[:, 0]
            if any_sampled:
                samp_lp = filter_logits(logits, temps, top_k, top_p).log_softmax(-1)
                drawn = sample_rows(samp_lp, seeds, step)
                tok = torch.where(greedy_rows, tok, drawn)
                lp = torch.where(greedy_rows, lp, samp_lp.gather(-1, drawn[:, None])[:, 0])
            done = torch.tensor([x is not None for x in reason], device=dev)
            nxt = tok.masked_fill(done, self.pad_id)
            toks, lps = tok.tolist(), lp.tolist()
            for i, r in enumerate(requests):
                if reason[i] is not None:
                    continue
                tok_i = toks[i]
                out_ids[i].append(tok_i)
                out_lps[i].append(lps[i])
                if tok_i in stop_ids[i] or r.stop_strings and self._hits_stop_string(out_ids[i], r.stop_strings, stop_tail[i]):
                    reason[i] = "stop"
                elif len(out_ids[i]) >= r.max_new_tokens:
                    reason[i] = "length"
            step_ids = nxt[:, None]
            step_pos = step_pos[:, -1:] + 1
            attn = torch.cat([attn, torch.ones((n, 1), dtype=attn.dtype, device=dev)], dim=1)
        return [
            GenerationResult(r.request_id, out_ids[i], out_lps[i], reason[i] or "length", version)
            for i, r in enumerate(requests)
        ]

    def _prefill(self, ids: torch.Tensor, attn: torch.Tensor, pos: torch.Tensor, prompts: list[list[int]],
                 keep: dict[str, Any]) -> tuple[torch.Tensor, Any]:
        """The prompts' forward: last-column logits [n, V] and the KV cache of every row. Rows with
        the same prompt (a group's samples) share one forward; the cache is then copied out to
        every row (``reorder_cache``), which costs a copy instead of a forward per row."""
        first: dict[tuple[int, ...], int] = {}
        row_of, unique_rows = [], []
        for i, prompt in enumerate(prompts):
            u = first.setdefault(tuple(prompt), len(first))
            if u == len(unique_rows):
                unique_rows.append(i)
            row_of.append(u)
        # a model whose cache cannot be reordered (found at its first shared forward) decodes every row
        if len(unique_rows) < len(prompts) and self._cache_reorders is not False:
            unique = torch.tensor(unique_rows, device=ids.device)
            out = self.model(input_ids=ids[unique], attention_mask=attn[unique], position_ids=pos[unique],
                             use_cache=True, **keep)
            self._cache_reorders = callable(getattr(out.past_key_values, "reorder_cache", None))
            if self._cache_reorders:
                expand = torch.tensor(row_of, device=ids.device)
                out.past_key_values.reorder_cache(expand)
                self.shared_prefill_rows += len(prompts) - len(unique_rows)
                return out.logits[:, -1, :].float()[expand], out.past_key_values
        out = self.model(input_ids=ids, attention_mask=attn, position_ids=pos, use_cache=True, **keep)
        return out.logits[:, -1, :].float(), out.past_key_values

    def _hits_stop_string(self, ids: list[int], stops: list[str], tail_tokens: int) -> bool:
        # a stop string ends in the newest token, so decoding a short tail is enough
        text = self.tokenizer.decode(ids[-tail_tokens:], skip_special_tokens=False)
        return any(s in text for s in stops)

    # ---- scoring (train/infer parity) ------------------------------------------------------
    def logprobs(self, batch: Batch) -> torch.Tensor:
        """[B, T] logprobs of ``input_ids`` under the served weights, aligned like the trainer's."""
        from roll.strategies.hf_train import forward_logprobs

        with self._lock, self._weights_in_use(), torch.inference_mode():
            return forward_logprobs(self.model, batch.to(self.device)).cpu()

    @contextlib.contextmanager
    def _weights_in_use(self):
        """Hold the shared-memory block's shared lock (when there is one) and yield the version
        of the weights in it. Called with ``self._lock`` held, so one thread of this process at
        a time uses the block's file description."""
        if self._header is None or not self._flock_ok:
            yield self.policy_version()
            return
        import fcntl

        self._yield_to_writer()
        fd = self._shm._fd
        fcntl.flock(fd, fcntl.LOCK_SH)  # blocks while a writer holds LOCK_EX
        try:
            yield int(self._header[SHM_SLOTS["version"]])
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)

    def _yield_to_writer(self) -> None:
        """Sleep while a writer waits for the block (``pause_requested``), so that back-to-back
        batches do not starve it; bounded, and a flag left by a dead writer is cleared."""
        slot = SHM_SLOTS["pause_requested"]
        writer = int(self._header[slot])
        if not writer:
            return
        self.writer_yields += 1
        start = time.monotonic()
        next_check = start + YIELD_CHECK_S
        while writer:
            now = time.monotonic()
            if now >= next_check:
                if not process_alive(writer):
                    self.stale_pause_flags += 1
                    logger.warning("weight block: pause flag of writer pid %d, which is gone; cleared", writer)
                    if int(self._header[slot]) == writer:
                        self._header[slot] = 0
                    return
                if now - start > YIELD_MAX_S:
                    return  # the writer still gets the block: it polls for the exclusive lock
                next_check = now + YIELD_CHECK_S
            time.sleep(YIELD_SLEEP_S)
            writer = int(self._header[slot])

    # ---- weights ----------------------------------------------------------------------------
    def update_weights(self, named_tensors: list[tuple[str, torch.Tensor]], version: int, last_bucket: bool = True) -> None:
        with self._lock, torch.no_grad():
            for name, tensor in named_tensors:
                param = self._params.get(name)
                if param is None:
                    raise KeyError(f"update_weights: {name!r} is not a parameter of the served model")
                if param.shape != tensor.shape:
                    raise ValueError(f"update_weights: {name} has shape {tuple(tensor.shape)}, model expects {tuple(param.shape)}")
                param.copy_(tensor)
            if last_bucket:
                self._set_version_locked(int(version))

    def _set_version_locked(self, version: int) -> None:
        self._version = version
        if self._header is not None:  # both sync paths agree on what the block holds
            self._header[SHM_SLOTS["version"]] = version

    async def pause(self, timeout_s: float = 600.0) -> None:
        """Stop starting decode batches and wait for the running one: the weights are then free
        to be rewritten (in place, by a colocated trainer) until :meth:`resume`. If resume does
        not come within ``timeout_s`` (the updater died), generation resumes and it is logged."""
        await self.start()
        self._resume.clear()
        if not self._lock.acquire(blocking=False):  # a batch is decoding: wait for it off the event loop
            await asyncio.to_thread(self._lock.acquire)
        self._lock.release()
        loop = asyncio.get_running_loop()
        if self._pause_timer is not None:
            self._pause_timer.cancel()
        self._pause_timer = loop.call_later(timeout_s, self._pause_expired, timeout_s)

    def _pause_expired(self, timeout_s: float) -> None:
        self.pause_timeouts += 1
        logger.error("weight update did not finish within %gs: generation resumes on possibly mixed weights "
                     "(version stays %d)", timeout_s, self.policy_version())
        self._resume.set()

    def resume(self) -> None:
        if self._pause_timer is not None:
            self._pause_timer.cancel()
            self._pause_timer = None
        if self._resume is not None:
            self._resume.set()

    def set_version(self, version: int) -> None:
        """Mark an update as complete whose bytes were written directly into shared memory."""
        with self._lock:
            self._set_version_locked(int(version))

    def policy_version(self) -> int:
        """The served version: with a shared-memory block, what its header says (a colocated
        trainer may have published a new one there)."""
        header = self._header
        return int(header[SHM_SLOTS["version"]]) if header is not None else self._version

    def shared_weight_layout(self) -> dict[str, Any]:
        """Move every parameter into ONE named shared-memory block (once) and return its layout:
        ``{"shm_name", "nbytes", "header", "header_slots", "params": {name: (offset, shape,
        dtype_str)}}`` (``header``: bytes before the first parameter; ``header_slots``: int64
        index of each header field, see the module docstring). A process on the same node can
        map the block and write new weights in place with one copy."""
        if self.device != "cpu":
            raise RuntimeError("shared-memory weight layout is the CPU colocated path; GPU uses CUDA IPC")
        from multiprocessing import shared_memory

        with self._lock:
            if self._shm is None:
                total = SHM_HEADER_BYTES
                offsets = {}
                for name, p in self._params.items():
                    total = (total + 63) // 64 * 64  # keep every view 64-byte aligned
                    offsets[name] = total
                    total += p.numel() * p.element_size()
                shm = shared_memory.SharedMemory(create=True, size=max(total, 1))
                with torch.no_grad():
                    for name, p in self._params.items():
                        view = torch.frombuffer(shm.buf, dtype=p.dtype, count=p.numel(), offset=offsets[name]).view(p.shape)
                        view.copy_(p.data)
                        p.data = view
                header = shm.buf[:SHM_HEADER_BYTES].cast("q")
                header[SHM_SLOTS["version"]] = self._version
                header[SHM_SLOTS["pause_requested"]] = 0
                header[SHM_SLOTS["pid"]] = os.getpid()
                self._shm, self._shm_offsets, self._shm_size, self._header = shm, offsets, total, header
                self._flock_ok = self._probe_flock()
            return {
                "shm_name": self._shm.name,
                "nbytes": self._shm_size,
                "header": SHM_HEADER_BYTES,
                "header_slots": dict(SHM_SLOTS),
                "params": {n: (self._shm_offsets[n], tuple(p.shape), str(p.dtype).removeprefix("torch.")) for n, p in self._params.items()},
            }

    def _probe_flock(self) -> bool:
        try:
            import fcntl

            fcntl.flock(self._shm._fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            fcntl.flock(self._shm._fd, fcntl.LOCK_UN)
            return True
        except (ImportError, AttributeError, OSError) as e:  # writers see the same and keep pausing this worker
            logger.warning("weight block %s: flock unavailable (%r); colocated updates pause generation instead",
                           self._shm.name, e)
            return False

    def offload(self) -> None:
        """Free device memory while a colocated role runs (no-op on CPU)."""
        if self.device != "cpu":
            with self._lock:
                self.model.to("cpu")
                torch.cuda.empty_cache()

    def reload(self) -> None:
        if self.device != "cpu":
            with self._lock:
                self.model.to(self.device)

    def close(self) -> None:
        if self._shm is not None:
            with self._lock:
                self._version = self.policy_version()
                header, self._header = self._header, None
                header.release()
                shm, self._shm = self._shm, None
            for p in self._params.values():  # detach params from the block before it goes away
                p.data = p.data.clone()
            shm.close()
            shm.unlink()
