"""The BM25 search tool over the shipped corpus and over a user's JSONL file."""
import json

import pytest

from roll.tools import ToolConfigError, ToolError
from roll.tools.search import SearchTool


def test_finds_the_relevant_passage_first():
    tool = SearchTool()
    out = tool({"query": "at what temperature does water boil"})
    assert out.splitlines()[0].startswith("[Boiling point of water]")
    assert tool({"query": "height of Mount Everest summit", "k": 1}).startswith("[Mount Everest]")
    assert len(tool({"query": "planet sun", "k": 3}).splitlines()) == 3


def test_scores_rank_by_term_rarity_and_frequency():
    tool = SearchTool(passages=[("a", "cat cat cat dog"), ("b", "cat dog"), ("c", "fish")])
    s = tool.scores("cat")
    assert s[0] > s[1] > 0 and s[2] == 0


def test_no_results_and_bad_queries():
    tool = SearchTool()
    assert tool({"query": "zzzqqq xylophonist"}) == "no results"
    with pytest.raises(ToolError, match="no words"):
        tool({"query": "?!"})
    with pytest.raises(ToolError, match="longer than"):
        tool({"query": "a " * 1000})


def test_jsonl_corpus(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text("\n".join(json.dumps(d) for d in [{"title": "Roll", "text": "roll trains agents"},
                                                        {"title": "Other", "text": "unrelated words"}]) + "\n")
    assert SearchTool(corpus_path=str(path))({"query": "agents"}).startswith("[Roll]")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"title": "x"}\n')
    with pytest.raises(ToolConfigError, match="bad.jsonl:1"):
        SearchTool(corpus_path=str(bad))
