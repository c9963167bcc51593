"""roll/CodeSandbox-v0: solve a programming problem in up to N attempts with test feedback.

The observation is the problem statement, then after each attempt the test report (how many
tests passed and the first failing case: its input and verdict, with the program's own output or
a truncated error). The expected output is shown only with ``show_expected=True``: over several
turns a model shown expected outputs collects the hidden answers. The agent answers with a complete program in a ```python block or inside
<answer>...</answer>. Success when every test passes.

Reward per turn (all configurable):
  pass_rate_weight * (improvement of the best pass rate so far)   [summed over an episode this
                                                                   is the best pass rate reached]
  + full_pass_bonus on the turn that passes every test
  - turn_cost every turn
  + format_penalty for a turn without code.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import gymnasium as gym
from roll.envs.base import MAX_TEXT_LENGTH, UnicodeText, check_render_mode
from roll.envs.code.problems import Problem, load_problems
from roll.envs.parsing import ParserConfig

from roll.rewards.code import TestReport, extract_code, normalize_tests, run_tests
from roll.sandbox import SandboxConfig, get_pool

INSTRUCTION = """You are solving a programming problem in Python 3 (standard library only).
Reply with the complete program in a ```python code block, or inside <answer>...</answer>.
Stdin/stdout problems: read the input from standard input and print the answer.
Function problems: define the requested function; it is imported and called by the tests.
Your program runs in a sandbox against hidden tests (time limit {timeout:g} s per run). After each
attempt you see how many tests passed and the first failing test. You have {turns} attempt(s);
the episode ends when all tests pass."""

# Defaults for running model code from the env: short, because a rollout waits on them.
DEFAULT_SANDBOX = {"timeout_s": 5.0, "cpu_time_s": 4.0, "memory_mb": 512}


class CodeSandboxEnv(gym.Env[str, str]):
    """Multi-turn coding env on the shipped problem set (or problems passed in)."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"], "render_fps": 4}

    def __init__(
        self,
        max_turns: int = 3,
        difficulty: str | Sequence[str] | None = None,
        problem_ids: Sequence[str] | None = None,
        pass_rate_weight: float = 1.0,
        full_pass_bonus: float = 0.0,
        turn_cost: float = 0.0,
        format_penalty: float = -0.1,
        feedback_chars: int = 1200,
        show_expected: bool = False,
        sandbox: SandboxConfig | Mapping[str, Any] | None = None,
        max_concurrency: int = 2,
        problems: Sequence[Problem] | None = None,
        render_mode: str | None = None,
    ):
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        check_render_mode(self, render_mode)
        self.problems = list(problems) if problems is not None else load_problems(difficulty, problem_ids)
        if not self.problems:
            raise ValueError("CodeSandboxEnv needs at least one problem")
        self._tests = {p.id: normalize_tests(p.reward_tests()) for p in self.problems}
        self.max_turns = int(max_turns)
        self.pass_rate_weight = float(pass_rate_weight)
        self.full_pass_bonus = float(full_pass_bonus)
        self.turn_cost = float(turn_cost)
        self.feedback_chars = int(feedback_chars)
        self.show_expected = bool(show_expected)
        if isinstance(sandbox, SandboxConfig):
            sandbox_config = sandbox
        else:
            sandbox_config = {**DEFAULT_SANDBOX, **dict(sandbox or {})}
        self.pool = get_pool(sandbox_config, max_concurrency)
        # The shared parser settings this env follows: answers need no <answer> tag (a fenced
        # block is enough), one program per turn, and the format penalty above.
        self.parser_config = ParserConfig(require_answer_tag=False, max_actions_per_turn=1, format_penalty=float(format_penalty))
        self.render_mode = render_mode
        self.observation_space = UnicodeText(MAX_TEXT_LENGTH)
        self.action_space = UnicodeText(MAX_TEXT_LENGTH)
        self.problem: Problem = self.problems[0]
        self._turn = 0
        self._best = 0.0
        self._solved = False
        self._done = False
        self._last_code: str | None = None
        self._obs = ""

    # ------------------------------------------------------------------------------ gym API
    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        options = options or {}
        if "problem_id" in options:
            matches = [p for p in self.problems if p.id == options["problem_id"]]
            if not matches:
                raise ValueError(f"unknown problem_id {options['problem_id']!r}")
            self.problem = matches[0]
        elif "problem_index" in options:
            self.problem = self.problems[int(options["problem_index"]) % len(self.problems)]
        else:
            self.problem = self.problems[int(self.np_random.integers(len(self.problems)))]
        self._turn = 0
        self._best = 0.0
        self._solved = False
        self._done = False
        self._last_code = None
        self._obs = self.problem.render()
        return self._obs, {
            "instruction": self.instruction(),
            "success": False,
            "problem_id": self.problem.id,
            "difficulty": self.problem.difficulty,
            "turns_left": self.max_turns,
        }

    def instruction(self) -> str:
        return INSTRUCTION.format(timeout=self.pool.config.timeout_s, turns=self.max_turns)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        info: dict[str, Any] = {"problem_id": self.problem.id, "difficulty": self.problem.difficulty}
        if self._done:
            # Stepping a finished episode is a caller bug; answer with an invalid no-op.
            info.update(success=self._solved, action_is_valid=False, action_is_effective=False,
                        parse_error="episode already finished; call reset()", pass_rate=self._best)
            return self._obs, 0.0, self._solved, not self._solved, info
        self._turn += 1
        code, error = extract_code(action)
        reward = -self.turn_cost
        effective = False
        if code is None:
            reward += self.parser_config.format_penalty
            self._obs = f"Your answer was not accepted: {error}. Reply with a complete Python program in a ```python block."
            pass_rate, passed, total = 0.0, 0, len(self._tests[self.problem.id])
        else:
            effective = code != self._last_code
            self._last_code = code
            report: TestReport = run_tests(code, self._tests[self.problem.id], self.pool)
            pass_rate, passed, total = report.pass_rate, report.passed, report.total
            reward += self.pass_rate_weight * max(0.0, pass_rate - self._best)
            self._best = max(self._best, pass_rate)
            if report.all_passed:
                self._solved = True
                reward += self.full_pass_bonus
            self._obs = report.feedback(self.feedback_chars, show_expected=self.show_expected)
        terminated = self._solved
        truncated = not terminated and self._turn >= self.max_turns
        self._done = terminated or truncated
        if not self._done:
            self._obs += f"\nAttempts left: {self.max_turns - self._turn}."
        self._obs = self._obs[:MAX_TEXT_LENGTH]
        info.update(
            success=self._solved, action_is_valid=code is not None, action_is_effective=effective,
            parse_error=error, pass_rate=pass_rate, passed=passed, total=total, best_pass_rate=self._best,
            turns_left=self.max_turns - self._turn,
        )
        return self._obs, float(reward), terminated, truncated, info

    def expert_plan(self) -> list[str]:
        """The reference solution as one answer, until the problem is solved."""
        if self._solved:
            return []
        return [f"```python\n{self.problem.solution}```"]

    def render(self) -> str | None:
        if self.render_mode == "ansi":
            return self._obs
        return None
