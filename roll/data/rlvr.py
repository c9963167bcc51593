"""RLVR prompt data: load jsonl/parquet records, and sample batches interleaved by domain.

A record is one prompt with what its reward needs. Fields (names configurable in
``DataConfig``): ``messages`` (chat messages) or ``prompt`` (plain text, becomes one user
message), ``tag`` (the domain; ``domain`` is accepted too), and any reward fields
(``ground_truth``, ``tests``, ``constraints``, ``choices``, ...), kept untouched in
``PromptSample.fields`` and handed to the domain's reward function.

:class:`DomainSampler` draws prompts so that domain proportions follow
``domain_interleave_probs`` exactly in the long run (a deterministic deficit counter, not a
coin per draw: over any window of n draws each domain's count is within one of p * n), and
shuffles each domain's prompts anew every pass over them.
"""
from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from roll.errors import RollError


class DataError(RollError, ValueError):
    """A data file or record the loader cannot use (names file and line)."""


@dataclass
class PromptSample:
    """One RLVR prompt."""

    id: str
    tag: str
    messages: list[dict[str, str]]
    fields: dict[str, Any] = field(default_factory=dict)
    """The whole record (reward fields such as ground_truth, tests, constraints)."""

    @property
    def prompt_text(self) -> str:
        """The last user message (what a judge is shown as the question)."""
        users = [m["content"] for m in self.messages if m.get("role") == "user"]
        return users[-1] if users else self.messages[-1]["content"]


def _read_records(path: Path) -> Iterable[tuple[int, dict]]:
    suffix = "".join(path.suffixes[-2:]) if path.suffix == ".gz" else path.suffix
    if suffix in (".jsonl", ".json"):
        with path.open(encoding="utf-8") as f:
            if suffix == ".json":
                data = json.load(f)
                if not isinstance(data, list):
                    raise DataError(f"{path}: a .json data file must hold a list of records")
                yield from enumerate(data, 1)
                return
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    yield n, json.loads(line)
                except json.JSONDecodeError as e:
                    raise DataError(f"{path}:{n}: not valid JSON ({e})") from None
    elif suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError as e:
            raise DataError(f"{path}: reading parquet needs pyarrow (pip install pyarrow)") from e
        for n, rec in enumerate(pq.read_table(path).to_pylist(), 1):
            yield n, rec
    else:
        raise DataError(f"{path}: unsupported data file type {path.suffix!r} (use .jsonl, .json or .parquet)")


def record_to_sample(rec: dict, where: str, messages_key: str = "messages", prompt_key: str = "prompt",
                     tag_key: str = "tag") -> PromptSample:
    if not isinstance(rec, dict):
        raise DataError(f"{where}: a record must be an object, got {type(rec).__name__}")
    tag = rec.get(tag_key, rec.get("domain"))
    if not tag:
        raise DataError(f"{where}: record has no {tag_key!r} (domain) field")
    messages = rec.get(messages_key)
    if messages is None:
        prompt = rec.get(prompt_key)
        if not isinstance(prompt, str) or not prompt.strip():
            raise DataError(f"{where}: record needs {messages_key!r} or a non-empty {prompt_key!r}")
        messages = [{"role": "user", "content": prompt}]
    if not isinstance(messages, list) or not messages or not all(
            isinstance(m, dict) and "role" in m and isinstance(m.get("content"), str) for m in messages):
        raise DataError(f"{where}: {messages_key!r} must be a non-empty list of {{role, content}} messages")
    sid = str(rec.get("id", where))
    return PromptSample(sid, str(tag), [{"role": m["role"], "content": m["content"]} for m in messages], dict(rec))


def load_prompts(files: Sequence[str], messages_key: str = "messages", prompt_key: str = "prompt",
                 tag_key: str = "tag", base_dir: str | None = None) -> list[PromptSample]:
    """Every record of ``files`` (relative paths resolve against ``base_dir`` then the cwd)."""
    out: list[PromptSample] = []
    for name in files:
        path = Path(name)
        if not path.is_absolute() and base_dir is not None and (Path(base_dir) / path).exists():
            path = Path(base_dir) / path
        if not path.exists():
            raise DataError(f"data file {name} not found (cwd {Path.cwd()})")
        for n, rec in _read_records(path):
            out.append(record_to_sample(rec, f"{path}:{n}", messages_key, prompt_key, tag_key))
    return out


def _prompt_key(sample: PromptSample) -> tuple[tuple[str, str], ...]:
    """A prompt's messages with whitespace runs collapsed: what makes two prompts the same question."""
    return tuple((str(m.get("role", "")), " ".join(str(m.get("content", "")).split())) for m in sample.messages)


def prompts_seen_in_training(train: Iterable[PromptSample], val: Iterable[PromptSample]) -> Counter:
    """Per domain tag, how many validation prompts are also training prompts (the same messages up
    to whitespace): validating on them measures recall of the training data, not generalisation."""
    seen = {_prompt_key(s) for s in train}
    return Counter(s.tag for s in val if _prompt_key(s) in seen)


def normalize_probs(probs: dict[str, float], tags: Iterable[str]) -> dict[str, float]:
    """Probabilities over the domains to sample: ``probs`` normalised (empty: uniform over the
    tags present). Every domain with a positive probability must have data, and every domain
    with data must be listed (0 leaves it out)."""
    tags = sorted(set(tags))
    if not probs:
        if not tags:
            raise DataError("no prompts loaded")
        return {t: 1.0 / len(tags) for t in tags}
    bad = {k: v for k, v in probs.items() if not isinstance(v, (int, float)) or v < 0}
    if bad:
        raise DataError(f"domain_interleave_probs must be non-negative numbers, got {bad}")
    missing = [k for k, v in probs.items() if v > 0 and k not in tags]
    if missing:
        raise DataError(f"domain_interleave_probs names domains without data: {missing} (data has {tags})")
    unlisted = [t for t in tags if t not in probs]
    if unlisted:  # they would never be sampled: say so rather than drop their data unseen
        raise DataError(f"domain_interleave_probs gives no probability to domains with data: {unlisted} "
                        f"(list every domain; 0 leaves one out)")
    total = float(sum(probs.values()))
    if total <= 0:
        raise DataError("domain_interleave_probs sum to 0")
    return {k: v / total for k, v in probs.items() if v > 0}


class DomainSampler:
    """Draws prompts domain by domain in the configured proportions (see the module docstring)."""

    def __init__(self, samples: Sequence[PromptSample], probs: dict[str, float], seed: int = 0):
        by_tag: dict[str, list[PromptSample]] = {}
        for s in samples:
            by_tag.setdefault(s.tag, []).append(s)
        self.probs = normalize_probs(probs, by_tag)
        self.by_tag = {t: by_tag[t] for t in self.probs}
        self.seed = seed
        self.draws = 0
        self.counts = {t: 0 for t in self.probs}
        self._order: dict[str, list[int]] = {}
        self._pos = {t: 0 for t in self.probs}
        self._epoch = {t: 0 for t in self.probs}
        for t in self.probs:
            self._reshuffle(t)

    def _reshuffle(self, tag: str) -> None:
        order = list(range(len(self.by_tag[tag])))
        random.Random(f"{self.seed}-{tag}-{self._epoch[tag]}").shuffle(order)
        self._order[tag] = order
        self._pos[tag] = 0

    def next_domain(self) -> str:
        # the domain furthest behind its share; ties go to the larger share, then the name
        self.draws += 1
        tag = max(self.probs, key=lambda t: (self.probs[t] * self.draws - self.counts[t], self.probs[t], t))
        self.counts[tag] += 1
        return tag

    def next_from(self, tag: str) -> PromptSample:
        if self._pos[tag] >= len(self._order[tag]):
            self._epoch[tag] += 1
            self._reshuffle(tag)
        idx = self._order[tag][self._pos[tag]]
        self._pos[tag] += 1
        return self.by_tag[tag][idx]

    def sample(self, n: int) -> list[PromptSample]:
        """The next ``n`` prompts, domains interleaved."""
        return [self.next_from(self.next_domain()) for _ in range(n)]

    def state_dict(self) -> dict[str, Any]:
        return {"draws": self.draws, "counts": dict(self.counts), "pos": dict(self._pos), "epoch": dict(self._epoch)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.draws = int(state["draws"])
        self.counts.update(state["counts"])
        self._epoch.update(state["epoch"])
        for t in self.probs:
            self._reshuffle(t)
        self._pos.update(state["pos"])
