"""roll/Arith-v0: arithmetic problems whose numbers a small model cannot compute in its head.

Each reset draws one problem from the env's generator (seeded by ``reset(seed=...)``, so
train and validation problems are disjoint by seed range, as in every roll env): a 3-digit by
2-digit product, such a product plus a 4-digit number, or a sum of three or four 3-4 digit
numbers, written as plain arithmetic (``Compute 347 * 28 + 1593.``) or as a word problem;
``max_digits`` shortens every operand (2: ``Compute 47 * 36.``). The agent answers one whole number in the usual format, ``<answer>11309</answer>``; reward 1 for
the exact value, 0 for a wrong one, the format penalty for text without a whole-number answer.

The env knows nothing of tools: wrapped in roll/Tools-v0 with the calculator, the model may
compute the value first (docs/tools.md). ``expert_tool_call()`` is the call that computes it,
``expert_plan()`` the answer, for the tool-using expert of roll/envs/agents.py.
"""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import gymnasium as gym
from roll.envs.base import MAX_TEXT_LENGTH, UnicodeText, check_render_mode
from roll.envs.parsing import ParserConfig, extract_answer

#: Problem forms: operand ranges (inclusive) and how the operands make the expression.
FORMS: dict[str, tuple[tuple[tuple[int, int], ...], str]] = {
    "mul": (((100, 999), (12, 99)), "{0} * {1}"),
    "mul_add": (((100, 999), (12, 99), (1000, 9999)), "{0} * {1} + {2}"),
    "sum3": (((100, 9999), (100, 9999), (100, 9999)), "{0} + {1} + {2}"),
    "sum4": (((100, 9999), (100, 9999), (100, 9999), (100, 9999)), "{0} + {1} + {2} + {3}"),
}
#: Word-problem phrasings per form; the operands appear in expression order.
WORDS: dict[str, tuple[str, ...]] = {
    "mul": ("A truck carries {0} boxes of {1} {item} each. How many {item} does it carry?",
            "There are {0} rows of {1} {item}. How many {item} are there?"),
    "mul_add": ("A shop has {0} boxes of {1} {item} each and {2} loose {item}. How many {item} does it have?",
                "There are {0} rows of {1} {item}, plus {2} more {item}. How many {item} are there?"),
    "sum3": ("A farm sold {0}, {1} and {2} {item} on three days. How many {item} did it sell?",
             "Three stores hold {0}, {1} and {2} {item}. How many {item} do they hold together?"),
    "sum4": ("A farm sold {0}, {1}, {2} and {3} {item} on four days. How many {item} did it sell?",
             "Four stores hold {0}, {1}, {2} and {3} {item}. How many {item} do they hold together?"),
}
ITEMS = ("apples", "pens", "eggs", "bottles", "books", "coins", "nails", "cups")
STYLES = ("plain", "words")

INSTRUCTION = "Solve the problem. Reply with one whole number in the format <answer>...</answer>."
_INTEGER_RE = re.compile(r"[+-]?\d{1,64}")


class ArithEnv(gym.Env[str, str]):
    """One arithmetic problem per episode, up to ``max_attempts`` answers."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"], "render_fps": 4}

    def __init__(
        self,
        forms: Sequence[str] = tuple(FORMS),
        style: str = "plain",
        max_attempts: int = 1,
        format_penalty: float = -0.1,
        max_digits: int | None = None,
        render_mode: str | None = None,
    ):
        forms = [forms] if isinstance(forms, str) else list(forms)
        unknown = [f for f in forms if f not in FORMS]
        if not forms or unknown:
            raise ValueError(f"unknown arithmetic form(s) {unknown or forms}; valid forms: {list(FORMS)}")
        if style not in STYLES:
            raise ValueError(f"style must be one of {list(STYLES)}, got {style!r}")
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
        if max_digits is not None and not (isinstance(max_digits, int) and max_digits >= 2):
            raise ValueError(f"max_digits must be a whole number >= 2 (or None), got {max_digits!r}")
        check_render_mode(self, render_mode)
        self.forms = forms
        self.style = style
        self.max_attempts = int(max_attempts)
        self.max_digits = max_digits
        self.parser_config = ParserConfig(require_answer_tag=True, max_actions_per_turn=1,
                                          format_penalty=float(format_penalty))
        self.render_mode = render_mode
        self.observation_space = UnicodeText(MAX_TEXT_LENGTH)
        self.action_space = UnicodeText(MAX_TEXT_LENGTH)
        self.problem = ""
        self.expression = ""
        self.answer = 0
        self._attempts = 0
        self._solved = False
        self._done = False
        self._obs = ""

    # ------------------------------------------------------------------------------ problems
    def _new_problem(self) -> None:
        rng = self.np_random
        form = self.forms[int(rng.integers(len(self.forms)))]
        ranges, template = FORMS[form]
        operands = [int(rng.integers(lo, hi + 1)) for lo, hi in operand_ranges(ranges, self.max_digits)]
        self.expression = template.format(*operands)
        # the operands are whole numbers and the operators + and *: the exact value, no eval
        self.answer = _evaluate(form, operands)
        if self.style == "plain":
            self.problem = f"Compute {self.expression}."
        else:
            phrasings = WORDS[form]
            phrasing = phrasings[int(rng.integers(len(phrasings)))]
            self.problem = phrasing.format(*operands, item=ITEMS[int(rng.integers(len(ITEMS)))])

    # ------------------------------------------------------------------------------ gym API
    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        self._new_problem()
        self._attempts = 0
        self._solved = False
        self._done = False
        self._obs = self.problem
        return self._obs, {"instruction": INSTRUCTION, "success": False, "attempts_left": self.max_attempts}

    def instruction(self) -> str:
        return INSTRUCTION

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self._done:
            # stepping a finished episode is a caller bug; an invalid no-op, never a crash
            return self._obs, 0.0, True, False, {
                "success": self._solved, "action_is_valid": False, "action_is_effective": False,
                "parse_error": "episode already finished; call reset()", "actions": [],
                "attempts_left": 0}
        self._attempts += 1
        value, error = parse_integer_answer(action, self.parser_config)
        if value is None:
            reward = self.parser_config.format_penalty
            self._obs = f"{self.problem}\nYour answer was not accepted: {error}."
        else:
            self._solved = value == self.answer
            reward = 1.0 if self._solved else 0.0
            self._obs = f"{self.problem}\n{value} is {'correct' if self._solved else 'wrong'}."
        # attempts used up is the end of the task (the problem was answered), not a time limit
        terminated = self._solved or self._attempts >= self.max_attempts
        self._done = terminated
        info = {
            "success": self._solved, "action_is_valid": value is not None, "action_is_effective": value is not None,
            "parse_error": error, "actions": [] if value is None else [str(value)],
            "attempts_left": self.max_attempts - self._attempts,
        }
        return self._obs, float(reward), terminated, False, info

    def render(self) -> str | None:
        return self._obs if self.render_mode == "ansi" else None

    # ------------------------------------------------------------------------------ expert
    def expert_plan(self) -> list[str]:
        """The exact answer, until the episode is over."""
        return [] if self._done else [str(self.answer)]

    def expert_tool_call(self) -> Mapping[str, Any] | None:
        """The tool call that computes the answer: the calculator on the problem's expression."""
        return None if self._done else {"name": "calculator", "arguments": {"expression": self.expression}}


def operand_ranges(ranges: Sequence[tuple[int, int]], max_digits: int | None) -> list[tuple[int, int]]:
    """The form's operand ranges with every operand cut to at most ``max_digits`` digits (a
    range that starts above that starts at the smallest such number instead): shorter numbers
    for a model to copy into the tool call, still beyond its head arithmetic."""
    if max_digits is None:
        return list(ranges)
    top, bottom = 10 ** max_digits - 1, 10 ** (max_digits - 1)
    return [(min(lo, bottom), min(hi, top)) for lo, hi in ranges]


def _evaluate(form: str, operands: list[int]) -> int:
    if form.startswith("sum"):
        return sum(operands)
    product = operands[0] * operands[1]
    return product + operands[2] if form == "mul_add" else product


def parse_integer_answer(text: object, config: ParserConfig) -> tuple[int | None, str]:
    """The whole number inside ``<answer>...</answer>`` (thousands separators refused: the
    answer is one exact number), or None and why not."""
    parsed = extract_answer(text, config)
    if not parsed.valid:
        return None, parsed.error
    answer = (parsed.answer or "").strip().rstrip(".")
    if not _INTEGER_RE.fullmatch(answer):
        return None, f"not a whole number: {answer[:40]!r}"
    return int(answer), ""
