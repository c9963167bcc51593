"""BM25 product search: WebShop's search engine without Java.

The original indexes products with Lucene (pyserini) and returns the top 50 hits. We score
with Lucene's BM25 variant (idf = ln(1 + (N - df + 0.5) / (df + 0.5)), term weight
tf / (tf + k1 * (1 - b + b * dl / avgdl)), pyserini's defaults k1=0.9, b=0.4) over an inverted
index of precomputed per-document term weights held in numpy arrays. A query then costs a
few array additions, several times faster than bm25s' per-query path on this catalog (see
docs/benchmarks.md), and tests/envs/test_webshop_search.py checks the scores equal bm25s'
``method="lucene"`` on the same tokens.
"""
from __future__ import annotations

import math
import re
from collections import Counter
from functools import lru_cache
from typing import Iterable, Sequence

import numpy as np

TOP_K = 50
_TOKEN_RE = re.compile(r"[a-z0-9]+")
# A short English stop list (Lucene's classic analyzer list plus a few shopping fillers).
STOPWORDS = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their then there "
    "these they this to was will with i im i'm me my we you your need want looking find buy get please "
    "show can would like some".split()
)
MAX_QUERY_CHARS = 1000


def _stem(token: str) -> str:
    # Light plural folding so "shoes"/"shoe" and "pens"/"pen" meet; Lucene's English analyzer
    # would stem harder, this keeps tokens readable and deterministic.
    if len(token) > 3 and token.endswith("s") and not token.endswith(("ss", "us", "is")):
        return token[:-1]
    return token


def tokenize(text: str) -> list[str]:
    return [_stem(t) for t in _TOKEN_RE.findall(text.lower()) if t not in STOPWORDS]


class BM25Index:
    """An inverted BM25 index over ``docs`` (each a list of tokens); ids are positions."""

    def __init__(self, docs: Sequence[Sequence[str]], k1: float = 0.9, b: float = 0.4):
        self.k1, self.b = k1, b
        self.n_docs = len(docs)
        lengths = np.array([len(d) for d in docs], dtype=np.float64)
        avgdl = float(lengths.mean()) if len(docs) else 1.0
        postings: dict[str, tuple[list[int], list[float]]] = {}
        for doc_id, doc in enumerate(docs):
            norm = k1 * (1.0 - b + b * lengths[doc_id] / avgdl)
            for term, tf in Counter(doc).items():
                ids, tfs = postings.setdefault(term, ([], []))
                ids.append(doc_id)
                tfs.append(tf / (tf + norm))
        self._postings: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for term, (ids, weights) in postings.items():
            df = len(ids)
            idf = math.log(1.0 + (self.n_docs - df + 0.5) / (df + 0.5))
            self._postings[term] = (np.asarray(ids, dtype=np.int32), np.asarray(weights, dtype=np.float64) * idf)

    def scores(self, query_tokens: Iterable[str]) -> np.ndarray:
        """BM25 score of every document for the (deduplicated) query tokens, shape [n_docs]."""
        out = np.zeros(self.n_docs, dtype=np.float64)
        for term in dict.fromkeys(query_tokens):
            hit = self._postings.get(term)
            if hit is not None:
                out[hit[0]] += hit[1]
        return out

    def top(self, query_tokens: Iterable[str], k: int = TOP_K) -> list[int]:
        """Ids of the best ``k`` documents with a positive score, best first, ties by id."""
        s = self.scores(query_tokens)
        cand = np.flatnonzero(s > 0)
        if cand.size > k:
            # Partition on score first, then sort the survivors exactly (ties: lower id first).
            kth = np.partition(s[cand], cand.size - k)[cand.size - k]
            cand = cand[s[cand] >= kth]
        order = np.lexsort((cand, -s[cand]))
        return cand[order][:k].tolist()


class ProductSearch:
    """Search over a product list; results are asins, cached per normalised query."""

    def __init__(self, products: Sequence[dict], k1: float = 0.9, b: float = 0.4, top_k: int = TOP_K):
        self.asins = [p["asin"] for p in products]
        self.top_k = top_k
        self.index = BM25Index([tokenize(document_text(p)) for p in products], k1=k1, b=b)
        self._cached = lru_cache(maxsize=8192)(self._search_tokens)

    def _search_tokens(self, tokens: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(self.asins[i] for i in self.index.top(tokens, self.top_k))

    def search(self, keywords: str) -> list[str]:
        return list(self._cached(tuple(tokenize(keywords[:MAX_QUERY_CHARS]))))


def document_text(product: dict) -> str:
    """What a product is indexed by: title, category path, bullet points and description."""
    return " ".join([product["title"], product["product_category"].replace("›", " "),
                     " ".join(product["bullet_points"]), product["description"]])
