"""Loader for the original WebShop files, on a tiny fixture written in their schema."""
from __future__ import annotations

import json

import pytest

from roll.envs.webshop import original as data
from roll.envs.webshop.env import WebShopEnv
from roll.envs.webshop.reward import compute_reward

COLORS = ["black", "navy blue", "white"]


def _raw_product(i: int) -> dict:
    kind = ["sandal", "hair extension", "deodorant"][i % 3]
    return {
        "asin": f"B0TEST{i:04d}",
        "name": f"Brand{i} Comfortable {kind.title()} for Women",
        "category": "fashion" if i % 3 == 0 else "beauty",
        "query": f"  {kind}s ",
        "product_category": "Clothing, Shoes & Jewelry › Women › Shoes" if i % 3 == 0
        else "Beauty & Personal Care › Hair Care › Extensions",
        "full_description": f"A {kind} that is easy to use.",
        "small_description": [f"Good {kind}", "Ships fast"] if i % 2 else f"Single bullet {kind}",
        "pricing": "$12.99" if i % 4 else "$10.00$25.50",
        "images": ["https://example.invalid/img.jpg"],
        "customization_options": {
            "Color": [{"value": c, "image": None} for c in COLORS],
            "Size": [{"value": s, "image": None} for s in ["7", "8/9"]],
        } if i % 5 else None,
    }


@pytest.fixture
def original_files(tmp_path):
    products = [_raw_product(i) for i in range(12)] + [{"asin": "nan"}, _raw_product(0)]  # skipped, duplicate
    attributes = {
        p["asin"]: {"attributes": ["easy to use", "comfortable"], "instruction": f"i want a {p['query'].strip()[:-1]} that is easy to use.",
                    "instruction_attributes": ["easy to use"]}
        for p in products[:12]
    }
    reviews = [{"asin": "B0TEST0001", "average_rating": 4.5,
                "reviews": [{"title": "nice", "stars": "5", "review": "works"}]}]
    humans = {"B0TEST0001": [{"asin": "B0TEST0001", "instruction": "i need comfy hair extension in navy blue",
                              "instruction_attributes": ["comfortable"], "instruction_options": ["navy blue"]}]}
    paths = {}
    for name, obj in [("items_shuffle.json", products), ("items_ins_v2.json", attributes),
                      ("reviews.json", reviews), ("items_human_ins.json", humans)]:
        paths[name] = tmp_path / name
        paths[name].write_text(json.dumps(obj))
    return paths


def test_converts_products_in_the_original_schema(original_files):
    products, splits = data.load_original(original_files["items_shuffle.json"], original_files["items_ins_v2.json"],
                                          original_files["reviews.json"])
    assert len(products) == 12  # "nan" and the duplicate are skipped, as the original does
    by = {p["asin"]: p for p in products}
    p0, p1 = by["B0TEST0000"], by["B0TEST0001"]
    assert p0["pricing"] == [10.0, 25.5] and p0["price"] == 10.0 and p0["options"] == {}
    assert p1["pricing"] == [12.99] and p1["query"] == "hair extensions"
    assert p1["options"] == {"color": COLORS, "size": ["7", "8 | 9"]}  # "/" -> " | ", as the original
    assert p1["bullet_points"] == ["Good hair extension", "Ships fast"]
    assert p0["bullet_points"] == ["Single bullet sandal"]
    assert p1["reviews"] == [{"title": "nice", "score": "5", "body": "works"}] and p1["rating"] == 4.5
    goals = [g for s in splits.values() for g in s]
    assert goals and all(g["instruction"].startswith("i want a") for g in goals)
    for g in goals:  # every synthetic goal is solvable on its own product
        assert compute_reward(by[g["asin"]], g, g["options"]).score == 1.0


def test_human_goals_and_env_on_the_converted_catalog(original_files, tmp_path):
    out = tmp_path / "catalog"
    cat = data.convert(out, products_path=original_files["items_shuffle.json"],
                       attributes_path=original_files["items_ins_v2.json"],
                       human_goals_path=original_files["items_human_ins.json"])
    goals = [g for s in cat.splits.values() for g in s]
    assert len(goals) == 1 and goals[0]["options"] == {"color": "navy blue"}
    # The converted catalog drives the env end to end, expert included.
    split = next(name for name, gs in cat.splits.items() if gs)
    env = WebShopEnv(split=split, catalog_path=str(out))
    obs, info = env.reset(seed=0)
    assert "i need comfy hair extension in navy blue" in obs
    for a in env.expert_plan():
        *_, term, _, info = env.step(f"<answer>{a}</answer>")
    assert term and info["success"]


def test_cli(original_files, tmp_path, capsys):
    assert data.main(["--products", str(original_files["items_shuffle.json"]), "--attributes",
                      str(original_files["items_ins_v2.json"]), "--out", str(tmp_path / "c")]) == 0
    assert "12 products" in capsys.readouterr().out


def test_rejects_a_non_list_products_file(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    with pytest.raises(ValueError, match="list of products"):
        data.load_original(bad)
