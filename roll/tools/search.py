"""A search tool over a small text corpus, ranked with BM25.

The shipped corpus is roll/tools/corpus.py; a task passes its own passages, or a JSONL file of
``{"title": ..., "text": ...}`` lines. Tokens are lower-cased runs of letters and digits.
"""
from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

from roll.tools.base import BaseTool, ToolConfigError, ToolError, object_parameters

_WORD = re.compile(r"[a-z0-9]+")


def tokenize(text: str) -> list[str]:
    return _WORD.findall(text.lower())


class SearchTool(BaseTool):
    """Search a text corpus and return the best matching passages."""

    name = "search"
    description = "Search a reference corpus; returns the best matching passages with their titles."
    parameters: ClassVar[dict[str, Any]] = object_parameters(
        {"query": {"type": "string", "description": "keywords to look for"}},
        {"k": {"type": "integer", "description": "number of passages to return (1-5)", "minimum": 1, "maximum": 5}})

    def __init__(self, passages: Sequence[tuple[str, str]] | Sequence[dict] | None = None, corpus_path: str | None = None,
                 k: int = 2, k1: float = 1.5, b: float = 0.75, timeout_s: float = 5.0, max_query_chars: int = 500):
        if passages is not None and corpus_path is not None:
            raise ToolConfigError("search tool: give passages or corpus_path, not both")
        if corpus_path is not None:
            passages = _read_jsonl(corpus_path)
        elif passages is None:
            from roll.tools.corpus import PASSAGES

            passages = PASSAGES
        self.docs: list[tuple[str, str]] = [
            (str(p["title"]), str(p["text"])) if isinstance(p, dict) else (str(p[0]), str(p[1])) for p in passages]
        if not self.docs:
            raise ToolConfigError("search tool: the corpus is empty")
        self.default_k, self.k1, self.b = int(k), float(k1), float(b)
        self.timeout_s = float(timeout_s)
        self.max_query_chars = int(max_query_chars)
        self._tf = [Counter(tokenize(f"{title} {text}")) for title, text in self.docs]
        self._len = [sum(tf.values()) for tf in self._tf]
        self._avg_len = sum(self._len) / len(self._len) or 1.0
        df = Counter(term for tf in self._tf for term in tf)
        n = len(self.docs)
        self._idf = {term: math.log(1 + (n - d + 0.5) / (d + 0.5)) for term, d in df.items()}

    def scores(self, query: str) -> list[float]:
        """BM25 score of every passage for ``query``."""
        terms = set(tokenize(query))
        out = []
        for tf, length in zip(self._tf, self._len):
            s = 0.0
            for term in terms:
                f = tf.get(term, 0)
                if f:
                    s += self._idf[term] * f * (self.k1 + 1) / (f + self.k1 * (1 - self.b + self.b * length / self._avg_len))
            out.append(s)
        return out

    def run(self, query: str, k: int | None = None) -> str:
        if len(query) > self.max_query_chars:
            raise ToolError(f"query longer than {self.max_query_chars} characters")
        if not tokenize(query):
            raise ToolError("the query has no words")
        k = self.default_k if k is None else int(k)
        scores = self.scores(query)
        ranked = sorted((i for i, s in enumerate(scores) if s > 0), key=lambda i: (-scores[i], i))[:k]
        if not ranked:
            return "no results"
        return "\n".join(f"[{self.docs[i][0]}] {self.docs[i][1]}" for i in ranked)


def _read_jsonl(path: str) -> list[dict]:
    docs = []
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            doc = json.loads(line)
        except ValueError as e:
            raise ToolConfigError(f"{path}:{n}: not JSON ({e})") from None
        if not isinstance(doc, dict) or "title" not in doc or "text" not in doc:
            raise ToolConfigError(f'{path}:{n}: each line must be an object with "title" and "text"')
        docs.append(doc)
    return docs
