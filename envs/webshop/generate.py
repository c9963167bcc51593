"""Deterministic, seeded generator of the shipped WebShop catalog and goal splits.

    python -m roll.envs.webshop.generate            # rewrite envs/webshop/data/*.json
    python -m roll.envs.webshop.generate --check    # exit 1 if the committed files differ

Products follow WebShop's schema (asin, title, description, bullet points, category path,
attributes, options, pricing, rating, reviews), written from our own templates (templates.py).
Only ``random.Random(seed)`` draws are used, so the output is byte-identical for a given seed.
"""
from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import random
import sys
from pathlib import Path
from typing import Any

from roll.envs.webshop import templates as T
from roll.envs.webshop.goals import make_goals, split_goals
from roll.envs.webshop.reward import contains_phrase, normalize, option_matches

DATA_DIR = Path(__file__).parent / "data"
PRODUCTS_FILE = "products.json"
GOALS_FILE = "goals.json"
DEFAULT_SEED = 20220701
FORMAT_VERSION = 1
ASIN_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


def _title_case(phrase: str) -> str:
    return " ".join(w if any(c.isdigit() for c in w) else w[:1].upper() + w[1:] for w in phrase.split())


def _brands(rng: random.Random, n: int, taken: set[str]) -> list[str]:
    out: list[str] = []
    while len(out) < n:
        name = "".join(rng.sample(T.BRAND_SYLLABLES, rng.choice([2, 3]))).capitalize()
        if name not in taken:
            taken.add(name)
            out.append(name)
    return out


def _asin(rng: random.Random, taken: set[str]) -> str:
    while True:
        asin = "B0" + "".join(rng.choice(ASIN_CHARS) for _ in range(8))
        if asin not in taken:
            taken.add(asin)
            return asin


def _price(rng: random.Random, lo: float, hi: float) -> float:
    whole = int(rng.uniform(lo, hi))
    return round(whole + rng.choice([0.99, 0.49, 0.95, 0.0]), 2)


def _title(rng: random.Random, brand: str, type_name: str, attrs: list[str], use: str) -> str:
    shown = attrs[: rng.choice([1, 2, 2, 3])]
    typ = _title_case(type_name)
    style = rng.randrange(4)
    if style == 0:
        return f"{brand} {_title_case(shown[0])} {typ}" + "".join(f", {_title_case(a)}" for a in shown[1:])
    if style == 1:
        return f"{brand} {typ} - " + " and ".join(_title_case(a) for a in shown)
    if style == 2:
        return f"{brand} {typ} {_title_case(use)}, " + ", ".join(_title_case(a) for a in shown)
    return f"{typ} by {brand} | " + " | ".join(_title_case(a) for a in shown)


def _description(rng: random.Random, brand: str, type_name: str, attrs: list[str], use: str) -> str:
    listed = attrs[:]
    rng.shuffle(listed)
    joined = listed[0] if len(listed) == 1 else ", ".join(listed[:-1]) + " and " + listed[-1]
    lead = rng.choice([
        f"The {brand} {type_name} is made {use}.",
        f"Meet the {brand} {type_name}, made {use}.",
        f"Looking for a {type_name} {use}? The {brand} one is a great choice.",
    ])
    return " ".join([lead, f"Key features: {joined}.", *rng.sample(T.FILLERS, 2)])


def _bullets(rng: random.Random, type_name: str, attrs: list[str], use: str) -> list[str]:
    out = [f"{a.upper()}: {rng.choice(T.BULLET_TAILS).format(type=type_name)}" for a in attrs]
    out.append(f"MADE {use.upper()}: a dependable {type_name} for everyday life")
    return out


def _reviews(rng: random.Random) -> tuple[list[dict[str, Any]], Any]:
    picks = rng.sample(T.REVIEW_BODIES, rng.choice([0, 1, 2, 3]))
    reviews = [{"title": t, "score": s, "body": b} for t, s, b in picks]
    rating = round(sum(s for _, s, _ in picks) / len(picks), 1) if picks else "N.A."
    return reviews, rating


def _product(rng: random.Random, spec: dict, root: str, category: str, brand: str, asin: str) -> dict[str, Any]:
    attrs = rng.sample(spec["attrs"], rng.choice([2, 3, 3, 4]))
    options = {}
    for name, pool in spec["options"].items():
        k = min(len(pool), rng.randint(2, 5))
        options[name] = [pool[i] for i in sorted(rng.sample(range(len(pool)), k))]
    price = _price(rng, *spec["price"])
    pricing = [price] if rng.random() > 0.15 else [price, round(price * rng.uniform(1.1, 1.6), 2)]
    use = rng.choice(spec["uses"])
    reviews, rating = _reviews(rng)
    return {
        "asin": asin,
        "title": _title(rng, brand, spec["name"], attrs, use),
        "category": category,
        "query": spec["name"],
        "product_category": " › ".join([root, *spec["path"]]),
        "description": _description(rng, brand, spec["name"], attrs, use),
        "bullet_points": _bullets(rng, spec["name"], attrs, use),
        "attributes": attrs,
        "options": options,
        # A range is shown as "$lo to $hi"; the purchase price is its low end (see docs).
        "pricing": pricing,
        "price": price,
        "rating": rating,
        "reviews": reviews,
    }


def check_templates() -> list[str]:
    """Pool problems that would make a wrong pick score as right (empty list when fine)."""
    problems = []
    for cat in T.CATEGORIES.values():
        for spec in cat["types"]:
            for a, b in itertools.combinations(spec["attrs"], 2):
                if option_matches("", a, b) or contains_phrase(normalize(a), b) or contains_phrase(normalize(b), a):
                    problems.append(f"{spec['name']}: attributes {a!r} and {b!r} match each other")
            for name, pool in spec["options"].items():
                for a, b in itertools.combinations(pool, 2):
                    if option_matches(name, a, b):
                        problems.append(f"{spec['name']}: {name} values {a!r} and {b!r} match each other")
    return problems


def check_product_text(product: dict[str, Any], spec: dict) -> list[str]:
    """A product's text must not mention attributes or option values it does not have."""
    text = normalize(" ".join([product["title"], " ".join(product["bullet_points"]), product["description"]]))
    problems = [f"{product['asin']} mentions attribute {a!r}" for a in spec["attrs"]
                if a not in product["attributes"] and contains_phrase(text, a)]
    problems += [f"{product['asin']} mentions option {v!r}" for pool in spec["options"].values() for v in pool
                 if contains_phrase(text, v)]
    return problems


def generate(seed: int = DEFAULT_SEED, products_per_type: int = 20, goals_per_product: int = 2,
             n_test: int = 500, n_validation: int = 500) -> tuple[list[dict], dict[str, list[dict]]]:
    problems = check_templates()
    rng = random.Random(seed)
    products: list[dict[str, Any]] = []
    brands_taken: set[str] = set()
    asins: set[str] = set()
    plural_of: dict[str, bool] = {}
    for category, cat in T.CATEGORIES.items():
        brands = _brands(rng, 8, brands_taken)
        for spec in cat["types"]:
            plural_of[spec["name"]] = spec["plural"]
            for _ in range(products_per_type):
                p = _product(rng, spec, cat["root"], category, rng.choice(brands), _asin(rng, asins))
                problems += check_product_text(p, spec)
                products.append(p)
    if problems:
        raise ValueError("catalog templates are inconsistent:\n  " + "\n  ".join(problems[:30]))
    rng.shuffle(products)
    goals = make_goals(products, rng, per_product=goals_per_product, plural_of=plural_of)
    return products, split_goals(goals, rng, n_test=n_test, n_validation=n_validation)


def _lines(items: list[dict[str, Any]]) -> str:
    # One record per line keeps diffs readable; sorted keys and ASCII keep bytes reproducible.
    return "[\n" + ",\n".join(json.dumps(x, sort_keys=True, separators=(",", ":")) for x in items) + "\n]"


def serialize(products: list[dict], splits: dict[str, list[dict]], seed: int) -> dict[str, str]:
    head = f'"format_version":{FORMAT_VERSION},"seed":{seed}'
    products_text = "{" + head + ',"products":' + _lines(products) + "}\n"
    goals_text = "{" + head + ',"splits":{' + ",".join(
        f'"{name}":' + _lines(splits[name]) for name in ("train", "validation", "test")) + "}}\n"
    return {PRODUCTS_FILE: products_text, GOALS_FILE: goals_text}


def generated_files(seed: int = DEFAULT_SEED) -> dict[str, str]:
    products, splits = generate(seed)
    return serialize(products, splits, seed)


def sha256_of(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED)
    ap.add_argument("--out", type=Path, default=DATA_DIR)
    ap.add_argument("--check", action="store_true", help="compare with the files in --out instead of writing")
    args = ap.parse_args(argv)
    files = generated_files(args.seed)
    if args.check:
        stale = [n for n, text in files.items()
                 if not (args.out / n).exists() or (args.out / n).read_text("utf-8") != text]
        print("stale: " + ", ".join(stale) if stale else "catalog files are up to date")
        return 1 if stale else 0
    args.out.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (args.out / name).write_text(text, encoding="utf-8")
        print(f"wrote {args.out / name} ({len(text.encode()) / 1e6:.2f} MB, sha256 {sha256_of(text)[:12]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
