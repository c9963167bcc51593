"""The shipped problem set: size, shape, and every reference solution scores 1.0 in the sandbox."""
from __future__ import annotations

import json

import pytest
from roll.envs.code.problems import DIFFICULTIES, export_jsonl, load_problems

from roll.rewards.code import code_sandbox_reward, normalize_tests

PROBLEMS = load_problems()
# Generous limits: this checks correctness of the reference solutions, not their speed on a
# busy test machine (the env's own limits are checked in test_code_env.py).
LIMITS = {"timeout_s": 30.0, "cpu_time_s": 20.0}


def test_problem_set_shape():
    assert len(PROBLEMS) >= 40
    assert len({p.id for p in PROBLEMS}) == len(PROBLEMS)
    for d in DIFFICULTIES:
        assert sum(p.difficulty == d for p in PROBLEMS) >= 8
    assert {p.kind for p in PROBLEMS} == {"stdio", "function"}
    for p in PROBLEMS:
        assert len(p.tests) >= 3, p.id
        assert normalize_tests(p.reward_tests())
        assert p.statement and p.title in p.render()


@pytest.mark.parametrize("problem", PROBLEMS, ids=[p.id for p in PROBLEMS])
def test_reference_solution_scores_one(problem):
    out = code_sandbox_reward({"response": f"```python\n{problem.solution}```"}, tests=problem.reward_tests(), sandbox=LIMITS)
    assert out.score == 1.0 and out.success, out.info


def test_a_trivial_answer_fails_every_problem():
    for p in PROBLEMS[:: max(1, len(PROBLEMS) // 6)]:
        out = code_sandbox_reward({"response": "```python\nprint('ALL TESTS PASSED')\n```"}, tests=p.reward_tests(), sandbox=LIMITS)
        assert out.score == 0.0, p.id


def test_selection_and_export(tmp_path):
    assert {p.difficulty for p in load_problems("hard")} == {"hard"}
    assert [p.id for p in load_problems(ids=["gcd", "lis"])] == ["gcd", "lis"]
    with pytest.raises(ValueError, match="unknown difficulty"):
        load_problems("impossible")
    with pytest.raises(ValueError, match="unknown problem id"):
        load_problems(ids=["nope"])
    path = tmp_path / "code.jsonl"
    assert export_jsonl(str(path), "easy") == len(load_problems("easy"))
    first = json.loads(path.read_text().splitlines()[0])
    assert first["tag"] == "code" and first["tests"] and first["prompt"]
