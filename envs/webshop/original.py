"""Optional loader for the original WebShop data files (the user downloads them; we never do).

    python -m roll.envs.webshop.original --products items_shuffle_1000.json \
        --attributes items_ins_v2_1000.json [--reviews items_reviews.json] \
        [--human-goals items_human_ins.json] --out ./webshop_original
    gym.make("roll/WebShop-v0", catalog_path="./webshop_original", split="test")

It reads the original's schema (products: asin, name, query, category, product_category,
full_description, small_description, pricing such as "$12.99" or "$10.00$20.00",
customization_options {name: [{"value": ...}]}; attributes: {asin: {attributes, instruction,
instruction_attributes}}; reviews: [{asin, reviews, average_rating}]; human goals:
{asin: [{instruction, instruction_attributes, instruction_options}]}) and writes a catalog in
ours. Goals are the original's synthetic goals (its instruction plus options and a price
limit) or, with --human-goals, the human-written ones.
"""
from __future__ import annotations

import argparse
import itertools
import json
import random
import re
import sys
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Optional

from roll.envs.webshop.catalog import Catalog
from roll.envs.webshop.generate import serialize
from roll.envs.webshop.goals import price_upper_for, set_weights, split_goals
from roll.envs.webshop.reward import normalize
from roll.envs.webshop.search import STOPWORDS

ORIGINAL_SHUFFLE_SEED = 233  # the original shuffles its goals with random.seed(233)


def _parse_pricing(raw: Any) -> list[float]:
    if isinstance(raw, (int, float)):
        return [float(raw)]
    if isinstance(raw, list):
        return [float(x) for x in raw][:2] or [100.0]
    prices = []
    for part in str(raw or "").split("$")[1:]:
        try:
            prices.append(float(Decimal(re.sub(r"[^\d.]", "", part))))
        except InvalidOperation:
            continue
    return prices[:2] or [100.0]  # the original's default for products without a price


def convert_product(raw: dict[str, Any], attributes: dict[str, Any], reviews: dict[str, Any]) -> Optional[dict[str, Any]]:
    """One original product in our schema, or None for the records the original also skips."""
    asin = str(raw.get("asin", ""))
    if not asin or asin == "nan" or len(asin) > 10:
        return None
    bullets = raw.get("small_description") or []
    bullets = [str(b) for b in bullets] if isinstance(bullets, list) else [str(bullets)]
    options: dict[str, list[str]] = {}
    seen: set[str] = set()
    for name, contents in (raw.get("customization_options") or {}).items():
        values = []
        for c in contents or []:
            v = str(c.get("value", "") if isinstance(c, dict) else c).strip().replace("/", " | ").lower()
            # A click names a value: keep the first option that offers it, as a page would show it once.
            if v and v not in seen:
                seen.add(v)
                values.append(v)
        if values:
            options[str(name).lower()] = values
    pricing = _parse_pricing(raw.get("pricing"))
    review_rec = reviews.get(asin, {})
    product_reviews = []
    for r in review_rec.get("reviews", []) or []:
        product_reviews.append({"title": str(r.get("title", "")), "score": r.get("score", r.get("stars", "")),
                                "body": str(r.get("body", r.get("review", "")))})
    return {
        "asin": asin,
        "title": str(raw.get("name") or raw.get("Title") or ""),
        "category": str(raw.get("category", "")),
        "query": str(raw.get("query", "")).lower().strip(),
        "product_category": str(raw.get("product_category", "")),
        "description": str(raw.get("full_description") or raw.get("Description") or ""),
        "bullet_points": bullets,
        "attributes": list(attributes.get(asin, {}).get("attributes", [])),
        "options": options,
        "pricing": pricing,
        "price": pricing[0],
        "rating": review_rec.get("average_rating", "N.A."),
        "reviews": product_reviews,
    }


def title_type_words(title: str) -> list[str]:
    """Content words of a title: our stand-in for the original's spaCy nouns of the goal title."""
    words = [w for w in normalize(title).split() if w not in STOPWORDS and not w.isdigit()]
    return list(dict.fromkeys(words))


def _goal(product: dict[str, Any], text: str, attributes: list[str], options: dict[str, str],
          price_upper: float) -> dict[str, Any]:
    price_text = f", and price lower than {price_upper:.2f} dollars" if price_upper > 0 else ""
    return {
        "asin": product["asin"], "query": product["query"], "category": product["category"],
        "product_category": product["product_category"], "type_words": title_type_words(product["title"]),
        "attributes": list(attributes), "options": options, "price_upper": price_upper,
        "instruction": text.strip().rstrip(".") + price_text, "weight": 1.0,
    }


def synthetic_goals(product: dict[str, Any], info: dict[str, Any], rng: random.Random,
                    max_per_product: int) -> list[dict[str, Any]]:
    text, attrs = info.get("instruction"), info.get("instruction_attributes") or []
    if not text or not attrs:
        return []
    names = sorted(product["options"])
    combos = list(itertools.islice(itertools.product(*(product["options"][n] for n in names)), 10_000))
    if len(combos) > max_per_product:
        combos = rng.sample(combos, max_per_product)
    goals = []
    for combo in combos or [()]:
        options = dict(zip(names, combo))
        option_text = (" with " + ", and ".join(f"{k}: {v}" for k, v in options.items())) if options else ""
        goals.append(_goal(product, text.strip().rstrip(".") + option_text, attrs, options,
                           price_upper_for(product["price"], rng)))
    return goals


def human_goals(product: dict[str, Any], records: list[dict[str, Any]], rng: random.Random) -> list[dict[str, Any]]:
    goals = []
    for rec in records:
        attrs = rec.get("instruction_attributes") or []
        if not attrs or not rec.get("instruction"):
            continue  # the original skips goals without attributes too
        raw_opts = rec.get("instruction_options") or {}
        if isinstance(raw_opts, dict):
            options = {str(k).lower(): str(v).lower() for k, v in raw_opts.items()}
        else:
            # A bare list of values: name each by the product option that offers it.
            options = {}
            for i, v in enumerate(raw_opts):
                v = str(v).lower()
                name = next((n for n, vals in product["options"].items() if v in vals), f"option {i + 1}")
                options[name] = v
        goals.append(_goal(product, rec["instruction"], attrs, options, price_upper_for(product["price"], rng)))
    return goals


def load_original(products_path: str | Path, attributes_path: str | Path | None = None,
                  reviews_path: str | Path | None = None, human_goals_path: str | Path | None = None,
                  num_products: Optional[int] = None, seed: int = ORIGINAL_SHUFFLE_SEED,
                  max_goals_per_product: int = 4, n_test: int = 500,
                  n_validation: int = 500) -> tuple[list[dict], dict[str, list[dict]]]:
    """Products and goal splits from the original files (see the module docstring)."""
    raw_products = json.loads(Path(products_path).read_text("utf-8"))
    if not isinstance(raw_products, list):
        raise ValueError(f"{products_path}: expected a JSON list of products")
    attributes = json.loads(Path(attributes_path).read_text("utf-8")) if attributes_path else {}
    reviews = {}
    if reviews_path:
        reviews = {r["asin"]: r for r in json.loads(Path(reviews_path).read_text("utf-8"))}
    humans = json.loads(Path(human_goals_path).read_text("utf-8")) if human_goals_path else None
    rng = random.Random(seed)
    products, asins = [], set()
    for raw in raw_products[:num_products] if num_products else raw_products:
        p = convert_product(raw, attributes, reviews)
        if p is not None and p["asin"] not in asins:
            asins.add(p["asin"])
            products.append(p)
    goals = []
    for p in products:
        if humans is not None:
            goals += human_goals(p, humans.get(p["asin"], []), rng)
        else:
            goals += synthetic_goals(p, attributes.get(p["asin"], {}), rng, max_goals_per_product)
    if humans is None:
        set_weights(goals)
    return products, split_goals(goals, rng, n_test=n_test, n_validation=n_validation)


def convert(out_dir: str | Path, seed: int = ORIGINAL_SHUFFLE_SEED, **kwargs: Any) -> Catalog:
    """Write the converted catalog to ``out_dir`` (products.json, goals.json) and load it."""
    products, splits = load_original(seed=seed, **kwargs)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for name, text in serialize(products, splits, seed).items():
        (out / name).write_text(text, encoding="utf-8")
    return Catalog.from_dir(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Convert the original WebShop data files to a roll catalog.")
    ap.add_argument("--products", required=True, help="items_shuffle*.json")
    ap.add_argument("--attributes", help="items_ins_v2*.json (attributes and synthetic instructions)")
    ap.add_argument("--reviews", help="reviews file (list of {asin, reviews, average_rating})")
    ap.add_argument("--human-goals", help="items_human_ins.json: use the human instructions as goals")
    ap.add_argument("--num-products", type=int)
    ap.add_argument("--seed", type=int, default=ORIGINAL_SHUFFLE_SEED)
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    cat = convert(a.out, seed=a.seed, products_path=a.products, attributes_path=a.attributes,
                  reviews_path=a.reviews, human_goals_path=a.human_goals, num_products=a.num_products)
    sizes = ", ".join(f"{k}: {len(v)}" for k, v in cat.splits.items())
    print(f"wrote {a.out}: {len(cat.products)} products; goals {sizes}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
