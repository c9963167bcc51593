"""The coding problem set of roll/CodeSandbox-v0, written for this project.

Each problem has a statement, tests in the code_sandbox reward's format (stdin/stdout pairs
or assert statements) and a reference solution. ``load_problems()`` returns them in a fixed
order; the tests of a problem are all hidden tests, the first ``n_examples`` are also shown in
the statement.
"""
from __future__ import annotations

import json
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

DIFFICULTIES = ("easy", "medium", "hard")


@dataclass(frozen=True)
class Problem:
    id: str
    title: str
    difficulty: str
    kind: str
    """"stdio" (read stdin, write stdout) or "function" (define a function)."""
    statement: str
    tests: tuple[Any, ...]
    """(stdin, stdout) pairs for stdio problems, assert statements for function problems."""
    solution: str
    """The reference solution (Python 3)."""
    n_examples: int = 2

    def reward_tests(self) -> list[Any]:
        """The tests in the code_sandbox reward's format."""
        if self.kind == "stdio":
            return [{"input": i, "output": o} for i, o in self.tests]
        return list(self.tests)

    def render(self) -> str:
        """The statement with its examples, as shown to the model."""
        lines = [f"# {self.title} ({self.difficulty})", "", self.statement.strip(), ""]
        if self.kind == "stdio":
            lines.append("Read the input from standard input and print the answer to standard output.")
            for k, (i, o) in enumerate(self.tests[: self.n_examples], 1):
                lines += ["", f"Example {k} input:", i.rstrip("\n"), f"Example {k} output:", o.rstrip("\n")]
        else:
            lines.append("Define the function; do not read input or print. Your code is imported and the function called.")
            lines += ["", "Examples:"] + [f"    {t}" for t in self.tests[: self.n_examples]]
        return "\n".join(lines)

    def to_sample(self) -> dict[str, Any]:
        """One RLVR sample (prompt + tests) for the `code` domain."""
        return {"id": self.id, "tag": "code", "prompt": self.render(), "tests": self.reward_tests(),
                "difficulty": self.difficulty}


def stdio(id: str, difficulty: str, title: str, statement: str, tests: Sequence[tuple[str, str]], solution: str,
          n_examples: int = 2) -> Problem:
    return Problem(id, title, difficulty, "stdio", textwrap.dedent(statement).strip(), tuple(tests),
                   textwrap.dedent(solution).strip() + "\n", n_examples)


def function(id: str, difficulty: str, title: str, statement: str, tests: Sequence[str], solution: str,
             n_examples: int = 2) -> Problem:
    return Problem(id, title, difficulty, "function", textwrap.dedent(statement).strip(), tuple(tests),
                   textwrap.dedent(solution).strip() + "\n", n_examples)


def load_problems(difficulty: str | Sequence[str] | None = None, ids: Sequence[str] | None = None) -> list[Problem]:
    """Every shipped problem, optionally only some difficulties or ids (in the given order)."""
    from roll.envs.code.problems import easy, hard, medium

    problems = list(easy.PROBLEMS) + list(medium.PROBLEMS) + list(hard.PROBLEMS)
    if difficulty is not None:
        wanted = {difficulty} if isinstance(difficulty, str) else set(difficulty)
        unknown = wanted - set(DIFFICULTIES)
        if unknown:
            raise ValueError(f"unknown difficulty {sorted(unknown)}; choose from {DIFFICULTIES}")
        problems = [p for p in problems if p.difficulty in wanted]
    if ids is not None:
        by_id = {p.id: p for p in problems}
        missing = [i for i in ids if i not in by_id]
        if missing:
            raise ValueError(f"unknown problem id(s) {missing}")
        problems = [by_id[i] for i in ids]
    if not problems:
        raise ValueError("the problem selection is empty")
    return problems


def export_jsonl(path: str, difficulty: str | None = None) -> int:
    """Write the problems as RLVR samples (one JSON object per line); returns the count."""
    problems = load_problems(difficulty)
    with open(path, "w") as f:
        f.writelines(json.dumps(p.to_sample()) + "\n" for p in problems)
    return len(problems)


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m roll.envs.code.problems OUT.jsonl [--difficulty D]`."""
    import argparse

    ap = argparse.ArgumentParser(description="Export the coding problems as RLVR jsonl samples")
    ap.add_argument("path")
    ap.add_argument("--difficulty", choices=DIFFICULTIES)
    a = ap.parse_args(argv)
    print(f"wrote {export_jsonl(a.path, a.difficulty)} problems to {a.path}")
    return 0
