"""The shipped WebShop catalog: reproducible from its seed, small, varied, with distractors."""
from __future__ import annotations

import fnmatch
import json
import re
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from roll.envs.webshop import generate
from roll.envs.webshop.catalog import Catalog, CatalogError, load_catalog
from roll.envs.webshop.reward import compute_reward

DATA = generate.DATA_DIR
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


def test_regenerating_reproduces_the_committed_files():
    files = generate.generated_files(generate.DEFAULT_SEED)
    for name, text in files.items():
        committed = (DATA / name).read_text("utf-8")
        assert generate.sha256_of(text) == generate.sha256_of(committed), f"{name} is stale: run python -m roll.envs.webshop.generate"
    # A different seed gives a different catalog (the seed really drives it).
    other = generate.serialize(*generate.generate(seed=7, products_per_type=2, goals_per_product=1), seed=7)
    assert other[generate.PRODUCTS_FILE] != files[generate.PRODUCTS_FILE]


def test_size_and_coverage(catalog):
    total = sum((DATA / n).stat().st_size for n in (generate.PRODUCTS_FILE, generate.GOALS_FILE))
    assert total < 3_000_000  # "well under 5 MB"
    assert 500 <= len(catalog.products) <= 2000
    assert len({p["category"] for p in catalog.products}) >= 15
    assert {k: len(v) for k, v in catalog.splits.items()} == {"train": 1160, "validation": 500, "test": 500}
    ids = [g["id"] for goals in catalog.splits.values() for g in goals]
    assert len(ids) == len(set(ids))
    for p in catalog.products[:50]:
        assert re.fullmatch(r"B0[A-Z0-9]{8}", p["asin"])
        assert p["title"] and p["description"] and p["bullet_points"] and p["attributes"]
        assert " › " in p["product_category"] and p["price"] == p["pricing"][0]


def test_every_goal_is_solved_by_its_target(catalog):
    for split in ("train", "validation", "test"):
        for g in catalog.goals(split):
            product = catalog.by_asin[g["asin"]]
            assert compute_reward(product, g, g["options"]).score == 1.0
            assert g["instruction"].endswith(f"price lower than {g['price_upper']:.2f} dollars")


def test_distractors_make_reading_pages_matter(catalog):
    # For most goals, another product of the same type misses an attribute, an option or the price.
    by_query = defaultdict(list)
    for p in catalog.products:
        by_query[p["query"]].append(p)
    partial = 0
    goals = catalog.goals("test")
    for g in goals:
        scores = [compute_reward(p, g, {n: v for n, v in g["options"].items() if v in p["options"].get(n, [])}).score
                  for p in by_query[g["query"]] if p["asin"] != g["asin"]]
        partial += any(0 < s < 1 for s in scores)
    assert partial / len(goals) > 0.95


def test_rare_attributes_weigh_more(catalog):
    train = catalog.goals("train")
    count = Counter(a for g in train for a in g["attributes"])
    rare = min(train, key=lambda g: min(count[a] for a in g["attributes"]))
    common = max(train, key=lambda g: min(count[a] for a in g["attributes"]))
    assert rare["weight"] > common["weight"]
    assert abs(catalog.weights["train"].sum() - 1.0) < 1e-9


def test_template_pools_have_no_self_matches():
    assert generate.check_templates() == []


def test_check_mode_of_the_generator(tmp_path, capsys, monkeypatch):
    # Generation itself is covered above; here only the CLI's write / check logic, on cached output.
    files = {n: (DATA / n).read_text("utf-8") for n in (generate.PRODUCTS_FILE, generate.GOALS_FILE)}
    monkeypatch.setattr(generate, "generated_files", lambda seed: files)
    assert generate.main(["--out", str(tmp_path), "--check"]) == 1  # nothing there yet
    assert generate.main(["--out", str(tmp_path)]) == 0
    assert generate.main(["--out", str(tmp_path), "--check"]) == 0
    assert "up to date" in capsys.readouterr().out
    (tmp_path / generate.GOALS_FILE).write_text("{}")
    assert generate.main(["--out", str(tmp_path), "--check"]) == 1
    assert "stale: goals.json" in capsys.readouterr().out


def test_bad_catalogs_are_refused_with_clear_errors(tmp_path):
    with pytest.raises(CatalogError, match="not found"):
        Catalog.from_dir(tmp_path)
    products = json.loads((DATA / generate.PRODUCTS_FILE).read_text())["products"][:3]
    with pytest.raises(CatalogError, match="lacks"):
        Catalog([{"asin": "B0X"}], {})
    with pytest.raises(CatalogError, match="not in the catalog"):
        Catalog(products, {"test": [dict(load_catalog().goals("test")[0], asin="B0NOPE")]})
    with pytest.raises(CatalogError, match="unknown split"):
        Catalog(products, {}).goals("dev")


def test_setup_ships_the_catalog_json():
    # setup.py's package_data globs for roll.envs must cover the data files (see docs/envs/webshop.md).
    setup_text = (REPO / "setup.py").read_text()
    patterns = re.search(r'"roll\.envs":\s*\[([^\]]*)\]', setup_text).group(1)
    globs = [s.strip().strip('"') for s in patterns.split(",") if s.strip()]
    for name in (generate.PRODUCTS_FILE, generate.GOALS_FILE):
        rel = f"webshop/data/{name}"
        assert any(fnmatch.fnmatch(rel, g) for g in globs), (rel, globs)


def test_envs_built_on_many_threads_at_once_share_one_catalog(tmp_path, monkeypatch):
    """An env worker builds its envs on one thread each: a catalog asked for by 8 threads at once
    is loaded once (each thread loading its own copy made 128 WebShop envs time out together)."""
    import threading
    import time

    from roll.envs.webshop import catalog as catalog_module

    for name in ("products.json", "goals.json"):
        (tmp_path / name).write_text((DATA / name).read_text("utf-8"), "utf-8")
    loads, real = [], Catalog.from_dir.__func__

    def slow_from_dir(cls, path):
        loads.append(path)
        time.sleep(0.2)  # long enough for every thread to arrive while the first loads
        return real(cls, path)

    monkeypatch.setattr(Catalog, "from_dir", classmethod(slow_from_dir))
    got: list[Catalog] = []
    threads = [threading.Thread(target=lambda: got.append(catalog_module.load_catalog(str(tmp_path)))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(loads) == 1 and len(got) == 8 and all(c is got[0] for c in got)
