"""bench/common.py: one section writer for docs/benchmarks.md that a --quick run never calls
through to the file, the RESULT line, and every bench using them."""
import ast
import re
import sys
from pathlib import Path

import pytest
from bench_loader import load_bench

ROOT = Path(__file__).resolve().parent.parent
# *_probe.py: diagnostics that print what a model learnt, not benchmarks (no docs section)
BENCHES = sorted(p for p in (ROOT / "bench").glob("*.py")
                 if p.name not in ("common.py", "__main__.py", "gpu_check.py") and not p.stem.endswith("_probe"))


@pytest.fixture(scope="module")
def common():
    return load_bench("common")


def test_write_section_replaces_only_its_own(common, tmp_path):
    doc = tmp_path / "benchmarks.md"
    doc.write_text("# Benchmarks\n\n## A\n\na text\n\n## Learning\n\nold\n\n## B\n\nb text\n")
    assert common.write_section("## Learning\n\nnew numbers\n", quick=False, doc=doc)
    text = doc.read_text()
    assert "old" not in text and "new numbers" in text and "a text" in text and "b text" in text
    assert text.index("## A") < text.index("## Learning") < text.index("## B")
    fresh = tmp_path / "none.md"
    common.write_section("## Learning\n\nx\n", quick=False, doc=fresh)
    assert fresh.read_text().startswith("# Benchmarks") and "## Learning" in fresh.read_text()
    common.write_section("## B\n\nnew b\n", quick=False, doc=doc)
    text = doc.read_text()
    assert "new numbers" in text and "new b" in text and "b text" not in text
    with pytest.raises(ValueError):
        common.write_section("no header\n", quick=False, doc=doc)


def test_quick_and_no_docs_runs_never_write(common, tmp_path):
    doc = tmp_path / "benchmarks.md"
    doc.write_text("# Benchmarks\n\n## Rollout\n\nfull-run table\n")
    assert not common.write_section("## Rollout\n\nsmall numbers\n", quick=True, doc=doc)
    assert not common.write_section("## Rollout\n\nsmall numbers\n", quick=False, no_docs=True, doc=doc)
    assert doc.read_text() == "# Benchmarks\n\n## Rollout\n\nfull-run table\n"


def test_result_line(common):
    assert common.result_line({"a": 1, "b": 0.123456, "c": "x"}) == "RESULT a=1 b=0.1235 c=x"
    with pytest.raises(ValueError):
        common.result_line({"bad key": 1})


@pytest.mark.parametrize("path", BENCHES, ids=lambda p: p.stem)
def test_every_bench_writes_docs_only_through_the_shared_writer(path):
    src = path.read_text()
    tree = ast.parse(src)
    # no bench opens docs/benchmarks.md itself
    assert not re.search(r"DOCS?\.write_text|benchmarks\.md\"\)\.write_text", src), path.name
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "write_section"]
    assert calls, f"{path.name} never writes its docs section"
    for call in calls:
        kw = {k.arg for k in call.keywords}
        assert "quick" in kw, f"{path.name}:{call.lineno}: write_section without quick="
    # --quick is an option of every bench (the chain benches get it from common.chain_arg_parser)
    assert '"--quick"' in src or "chain_arg_parser(" in src, path.name


def test_chain_arg_parser_and_cells(common):
    p = common.chain_arg_parser("a chain bench", "output/bench/x", [42, 43])
    args = p.parse_args(["--quick", "--note", "busy"])
    assert (args.quick, args.seeds, args.default_seeds, args.out, args.note) == (True, None, [42, 43], "output/bench/x", "busy")
    r = {"base_episodes": 4, **{f"{k}_{m}": 50.0 for k in ("untrained", "start", "end") for m in ("greedy", "sampled")}}
    r["end_sampled"] = 100.0
    # untrained over base_episodes=4 (se 25), the others over n=16 (se 12.5; 0 at 100 %)
    assert common.chain_cells(r, 16) == ["50.0 ± 25.0 / 50.0 ± 25.0", "50.0 ± 12.5 / 50.0 ± 12.5", "50.0 ± 12.5 / 100.0 ± 0.0"]


def test_chain_figures_reads_untrained_sft_start_and_rl_end(common):
    point = lambda step, stage, n, g, s: {"step": step, "stage": stage, "episodes": n, "label": f"{stage}@{step}",
                                          "success": {"Lake": {"greedy": g, "sampled": s}}}
    summary = {"points": [point(None, "baseline", 4, 0.0, 0.25), point(0, "grpo", 8, 0.5, 0.25),
                          point(2, "grpo", 8, 0.75, 0.375)]}
    f = common.chain_figures(summary, "Lake")
    assert (f["untrained_sampled"], f["start_greedy"], f["end_sampled"]) == (25.0, 50.0, 37.5)
    assert (f["gain_greedy"], f["gain_sampled"], f["gain"], f["end_step"]) == (25.0, 12.5, 12.5, 2)
    with pytest.raises(ValueError, match="first and last validation rounds"):
        common.chain_figures({"points": summary["points"][:2]}, "Lake")
    assert common.rate_se(50, 100) == pytest.approx(5.0) and common.rate_se(0, 0) == 0.0


def test_run_logged_times_a_command_and_raises_with_the_log_tail(common, tmp_path):
    log = tmp_path / "ok.log"
    assert common.run_logged([sys.executable, "-c", "print('hello')"], log, "ok") >= 0
    assert log.read_text() == "hello\n"
    with pytest.raises(RuntimeError, match=r"(?s)broken failed \(exit 3, log .*bad\.log\):\nlast words"):
        common.run_logged([sys.executable, "-c", "print('last words'); raise SystemExit(3)"], tmp_path / "bad.log", "broken")



def test_pad_rows_and_response_loss_equal_the_masked_full_loss(common):
    import torch
    from roll.workers.base import resolve_model
    from transformers import AutoModelForCausalLM

    rows = [([5, 6, 7, 8, 9], [0, 0, 1, 1, 1]), ([5, 6, 7], [0, 1, 1])]
    ids, mask, att = common.pad_rows(rows, pad=0)
    assert ids.tolist() == [[5, 6, 7, 8, 9], [5, 6, 7, 0, 0]]
    assert mask.tolist() == [[False, False, True, True, True], [False, True, True, False, False]]
    assert att.tolist() == [[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]]
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(resolve_model("roll-tiny://tiny"), dtype=torch.float32)
    loss = common.response_loss(model, ids, mask, att)
    logits = model(input_ids=ids, attention_mask=att).logits[:, :-1]
    sel = mask[:, 1:]
    full = torch.nn.functional.cross_entropy(logits[sel], ids[:, 1:][sel])
    assert sel.sum() == 5 and torch.allclose(loss, full, atol=1e-5)
