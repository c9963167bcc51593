"""RLVR data: loading jsonl/parquet, record validation, domain-interleaved sampling."""
import json
from collections import Counter

import pytest

from roll.data.rlvr import (
    DataError,
    DomainSampler,
    PromptSample,
    load_prompts,
    normalize_probs,
    prompts_seen_in_training,
)
from roll.data.rlvr_gen import generate


def _samples(counts):
    return [PromptSample(f"{t}-{i}", t, [{"role": "user", "content": f"{t} {i}"}]) for t, n in counts.items() for i in range(n)]


@pytest.mark.parametrize("probs", [{"math": 0.5, "code": 0.2, "ifeval": 0.2, "mcq": 0.1},
                                   {"math": 0.05, "code": 0.9, "ifeval": 0.05, "mcq": 0}, {"math": 3, "code": 1, "ifeval": 0, "mcq": 0}])
def test_proportions_over_10000_draws(probs):
    sampler = DomainSampler(_samples({"math": 50, "code": 7, "ifeval": 30, "mcq": 11}), probs, seed=1)
    counts = Counter(s.tag for s in sampler.sample(10_000))
    total = sum(probs.values())
    for tag, p in probs.items():
        assert abs(counts[tag] / 10_000 - p / total) < 0.02, (tag, counts)
    assert set(counts) == {t for t, p in probs.items() if p > 0}


def test_every_window_is_close_to_the_proportions():
    sampler = DomainSampler(_samples({"a": 5, "b": 5}), {"a": 0.75, "b": 0.25})
    batch = sampler.sample(8)
    assert Counter(s.tag for s in batch) == {"a": 6, "b": 2}


def test_each_pass_covers_every_prompt_then_reshuffles():
    sampler = DomainSampler(_samples({"a": 10}), {"a": 1.0}, seed=3)
    first, second = sampler.sample(10), sampler.sample(10)
    assert sorted(s.id for s in first) == sorted(s.id for s in second) == sorted(f"a-{i}" for i in range(10))
    assert [s.id for s in first] != [s.id for s in second]


def test_state_dict_resumes_the_same_stream():
    a = DomainSampler(_samples({"a": 7, "b": 5}), {"a": 0.6, "b": 0.4}, seed=5)
    a.sample(13)
    state = json.loads(json.dumps(a.state_dict()))
    b = DomainSampler(_samples({"a": 7, "b": 5}), {"a": 0.6, "b": 0.4}, seed=5)
    b.load_state_dict(state)
    assert [s.id for s in a.sample(20)] == [s.id for s in b.sample(20)]


def test_probs_validation():
    assert normalize_probs({}, ["x", "y"]) == {"x": 0.5, "y": 0.5}
    assert normalize_probs({"x": 1, "y": 0}, ["x", "y"]) == {"x": 1.0}
    with pytest.raises(DataError, match=r"gives no probability to domains with data: \['y'\]"):
        normalize_probs({"x": 1}, ["x", "y"])  # y's data would never be sampled
    with pytest.raises(DataError, match="without data"):
        normalize_probs({"z": 1}, ["x"])
    with pytest.raises(DataError, match="non-negative"):
        normalize_probs({"x": -1}, ["x"])


def test_load_jsonl_and_parquet(tmp_path):
    recs = [{"tag": "math", "prompt": "1+1?", "ground_truth": "2"},
            {"domain": "qa", "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]}]
    (tmp_path / "a.jsonl").write_text("\n".join(json.dumps(r) for r in recs) + "\n\n")
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist([{"tag": "mcq", "prompt": "A or B?", "ground_truth": "A"}]), tmp_path / "b.parquet")
    out = load_prompts([str(tmp_path / "a.jsonl"), str(tmp_path / "b.parquet")])
    assert [s.tag for s in out] == ["math", "qa", "mcq"]
    assert out[0].messages == [{"role": "user", "content": "1+1?"}] and out[0].fields["ground_truth"] == "2"
    assert out[1].prompt_text == "hi"


@pytest.mark.parametrize("line,match", [("{not json", "not valid JSON"), ('{"prompt": "x"}', "domain"),
                                        ('{"tag": "t"}', "messages"), ('{"tag": "t", "messages": [{"role": "user"}]}', "messages")])
def test_bad_records_name_file_and_line(tmp_path, line, match):
    f = tmp_path / "bad.jsonl"
    f.write_text('{"tag": "t", "prompt": "ok"}\n' + line + "\n")
    with pytest.raises(DataError, match=match) as e:
        load_prompts([str(f)])
    assert "bad.jsonl:2" in str(e.value)


def test_shipped_data_is_what_the_generator_writes(tmp_path):
    from pathlib import Path

    generate(str(tmp_path))
    shipped = Path(__file__).resolve().parents[2] / "data" / "rlvr"
    for f in sorted(tmp_path.iterdir()):
        assert f.read_text() == (shipped / f.name).read_text(), f"{f.name}: rerun python -m roll.data.rlvr_gen --out data/rlvr"
    tags = {s.tag for s in load_prompts([str(p) for p in shipped.glob("*_train.jsonl")])}
    assert tags == {"math", "code", "ifeval", "mcq", "qa"}


def test_learning_bench_data_and_docs_section(tmp_path):
    from bench_loader import load_bench

    bench = load_bench("rlvr_learning")
    sizes = bench.make_data(tmp_path, seed=0, noise=0.3)
    rows = {name: [json.loads(line) for line in (tmp_path / f"{name}.jsonl").read_text().splitlines()]
            for name in ("sft", "rl", "val")}
    assert len(rows["sft"]) == bench.DEMOS_PER_PROBLEM * sizes["sft"] and len(rows["rl"]) == sizes["rl"]
    assert sizes["val"] >= 100  # 10 points must not be noise

    def operands(prompt):
        return [int(x) for x in prompt.split("?")[0].removeprefix("What is ").split(" + ")]

    wrong = [r for r in rows["sft"] if r["messages"][1]["content"] != "\\boxed{%d}" % sum(operands(r["messages"][0]["content"]))]
    assert 0.15 < len(wrong) / len(rows["sft"]) < 0.45  # the requested share of noisy demonstrations
    val_prompts = {r["prompt"] for r in rows["val"]}
    assert not val_prompts & {r["prompt"] for r in rows["rl"]}  # held-out problems are never trained on
    assert not val_prompts & {r["messages"][0]["content"] for r in rows["sft"]}
    for r in rows["val"] + rows["rl"]:  # the skill held-out shares with RL: two-digit columns, no carry
        a, b = operands(r["prompt"])
        assert 10 <= a <= 99 and 10 <= b <= 99 and a % 10 + b % 10 <= 9 and a // 10 + b // 10 <= 9
        assert r["ground_truth"] == str(a + b)
    # every one-digit fact a held-out problem uses is demonstrated in SFT
    sft_prompts = {r["messages"][0]["content"] for r in rows["sft"]}
    assert all(bench.PROMPT.format(a=x, b=y) in sft_prompts for x in range(10) for y in range(10))
    doc = tmp_path / "benchmarks.md"
    doc.write_text("# Benchmarks\n\n## RLVR\n\nold\n\n## Other\n\nkept\n")
    bench.write_section("## RLVR\n\nnew\n", quick=False, doc=doc)
    assert doc.read_text() == "# Benchmarks\n\n## RLVR\n\nnew\n\n## Other\n\nkept\n"
    assert not bench.write_section("## RLVR\n\nquick\n", quick=True, doc=doc)  # a --quick run prints only
    assert "quick" not in doc.read_text()


def test_validation_prompts_that_are_training_prompts_are_counted_per_domain():
    train = _samples({"math": 3, "code": 2})
    val = [PromptSample("v0", "math", [{"role": "user", "content": "math  1 "}]),  # math 1, spaced otherwise
           PromptSample("v1", "math", [{"role": "user", "content": "math 9"}]),
           PromptSample("v2", "code", [{"role": "system", "content": "be brief"}, {"role": "user", "content": "code 0"}]),
           PromptSample("v3", "code", [{"role": "user", "content": "code 1"}])]
    # the same question with another system prompt is another prompt
    assert prompts_seen_in_training(train, val) == Counter({"math": 1, "code": 1})
    assert not prompts_seen_in_training(train, [])
