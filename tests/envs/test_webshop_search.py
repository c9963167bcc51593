"""WebShop search: our BM25 equals bm25s' Lucene variant, and returns the top 50, best first."""
from __future__ import annotations

import bm25s
import numpy as np
import pytest

from roll.envs.webshop.catalog import load_catalog
from roll.envs.webshop.search import TOP_K, BM25Index, ProductSearch, document_text, tokenize


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


def test_tokenize_lowercases_drops_stopwords_and_folds_plurals():
    assert tokenize("I need Running SHOES for the gym, size 9") == ["running", "shoe", "gym", "size", "9"]
    assert tokenize("glass") == ["glass"] and tokenize("") == []


def test_scores_equal_bm25s_lucene(catalog):
    docs = [tokenize(document_text(p)) for p in catalog.products]
    ours = BM25Index(docs, k1=0.9, b=0.4)
    ref = bm25s.BM25(k1=0.9, b=0.4, method="lucene")
    ref.index(docs, show_progress=False)
    for g in catalog.goals("test")[:40]:
        q = list(dict.fromkeys(tokenize(g["instruction"])))
        np.testing.assert_allclose(ours.scores(q), ref.get_scores(q), rtol=1e-5, atol=1e-6)


def test_top_k_is_sorted_with_ties_broken_by_position():
    docs = [["red", "shoe"], ["red"], ["blue"], ["red", "shoe"], ["shoe"]]
    idx = BM25Index(docs)
    assert idx.top(["red", "shoe"], k=3) == [0, 3, 1]  # 0 and 3 tie; lower id first
    assert idx.top(["green"]) == []  # no positive score, no results
    s = idx.scores(["red", "shoe"])
    assert s[0] == s[3] > s[1] > 0 and s[2] == 0


def test_product_search_returns_top_50_and_finds_the_goal_product(catalog):
    search = catalog.search
    hits = search.search("running shoes lightweight")
    assert len(hits) == TOP_K and len(set(hits)) == TOP_K
    assert all(catalog.by_asin[a]["query"] == "running shoes" for a in hits[:10])
    found = sum(g["asin"] in search.search(" ".join([g["query"], *g["attributes"]])) for g in catalog.goals("test"))
    assert found == len(catalog.goals("test"))
    # Over-long queries are cut, not refused.
    assert isinstance(search.search("shoes " * 50_000), list)
    assert search.search("zzzz qqqq") == []


def test_product_search_is_deterministic_across_instances(catalog):
    a = ProductSearch(catalog.products)
    for q in ["yoga mat", "red", "gift box for dad", "usb c charger 65 watt"]:
        assert a.search(q) == catalog.search.search(q)
