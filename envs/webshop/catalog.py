"""Loading a WebShop catalog (products + goal splits) and what the env needs from it.

The shipped catalog lives in ``data/`` (written by generate.py). A catalog is loaded and indexed
once per process and shared by every env instance (read-only after construction).
"""
from __future__ import annotations

import json
import string
import threading
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from roll.envs.webshop.goals import SPLIT_NAMES
from roll.envs.webshop.reward import normalize
from roll.envs.webshop.search import ProductSearch

DATA_DIR = Path(__file__).parent / "data"


class CatalogError(ValueError):
    """A catalog file is missing or not in the expected schema."""


REQUIRED_PRODUCT_KEYS = ("asin", "title", "query", "product_category", "description", "bullet_points",
                         "attributes", "options", "pricing", "price")
REQUIRED_GOAL_KEYS = ("asin", "query", "product_category", "type_words", "attributes", "options",
                      "price_upper", "instruction")


class Catalog:
    """Products, goal splits, the search index and per-split goal sampling weights."""

    def __init__(self, products: list[dict[str, Any]], splits: dict[str, list[dict[str, Any]]], source: str = ""):
        self.source = source
        for i, p in enumerate(products):
            missing = [k for k in REQUIRED_PRODUCT_KEYS if k not in p]
            if missing:
                raise CatalogError(f"{source}: product {i} lacks {missing}")
        self.products = products
        self.by_asin = {p["asin"]: p for p in products}
        self.queries = sorted({p["query"] for p in products})
        self.asin_of = {p["asin"].lower(): p["asin"] for p in products}  # clicks are case-insensitive
        if len(self.by_asin) != len(products):
            raise CatalogError(f"{source}: duplicate asins")
        for p in products:
            # Precomputed once: the attribute / option fallback of the reward reads this text.
            p["_text_norm"] = normalize(" ".join([p["title"], " ".join(p["bullet_points"]), p["description"]]))
        self.splits = {}
        for name in SPLIT_NAMES:
            goals = splits.get(name, [])
            for g in goals:
                missing = [k for k in REQUIRED_GOAL_KEYS if k not in g]
                if missing:
                    raise CatalogError(f"{source}: a {name} goal lacks {missing}")
                if g["asin"] not in self.by_asin:
                    raise CatalogError(f"{source}: goal target {g['asin']} is not in the catalog")
            self.splits[name] = goals
        self.weights = {}
        for name, goals in self.splits.items():
            w = np.array([float(g.get("weight", 1.0)) for g in goals], dtype=np.float64)
            self.weights[name] = w / w.sum() if len(w) and w.sum() > 0 else w
        self.search = ProductSearch(products)
        chars = set(string.printable) | {"›"}
        for p in products:
            chars.update(p["title"], p["description"], p["product_category"], *p["bullet_points"])
            seen_values: set[str] = set()
            for name, values in p["options"].items():
                chars.update(name, *values)
                lowered = {v.lower() for v in values}
                if lowered & seen_values or len(lowered) != len(values):
                    # A click names a value, so values must identify their option on a page.
                    raise CatalogError(f"{source}: product {p['asin']} repeats option value(s) {sorted(lowered & seen_values)}")
                seen_values |= lowered
            for r in p.get("reviews", []):
                chars.update(str(r.get("title", "")), str(r.get("body", "")))
        for goals in self.splits.values():
            for g in goals:
                chars.update(g["instruction"])
        self.charset = "".join(sorted(chars))

    def goals(self, split: str) -> list[dict[str, Any]]:
        if split not in self.splits:
            raise CatalogError(f"unknown split {split!r}; choose from {', '.join(SPLIT_NAMES)}")
        return self.splits[split]

    @classmethod
    def from_dir(cls, path: str | Path) -> "Catalog":
        path = Path(path)
        products_file, goals_file = path / "products.json", path / "goals.json"
        for f in (products_file, goals_file):
            if not f.is_file():
                raise CatalogError(f"catalog file {f} not found (write it with python -m roll.envs.webshop.generate)")
        products = json.loads(products_file.read_text("utf-8"))["products"]
        splits = json.loads(goals_file.read_text("utf-8"))["splits"]
        return cls(products, splits, source=str(path))


_LOAD_LOCK = threading.Lock()


def load_catalog(path: str | None = None) -> Catalog:
    """The catalog in ``path`` (default: the shipped one), loaded once per process, also when
    envs are built on many threads at once (each would otherwise load its own copy)."""
    with _LOAD_LOCK:
        return _load_catalog(path)


@lru_cache(maxsize=8)
def _load_catalog(path: str | None) -> Catalog:
    return Catalog.from_dir(Path(path) if path else DATA_DIR)
