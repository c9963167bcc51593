"""Math reward: extract the final answer of a response and check it against the ground truth.

Extraction looks only at the FINAL answer, never at any number anywhere in the text (a wrong
answer that mentions the right number in its working scores 0). In order of preference:

1. the last ``\\boxed{...}`` (or ``\\fbox{...}``), braces balanced;
2. the last ``<answer>...</answer>``;
3. the last "answer is X" / "Answer: X" / "final answer X" phrase;
4. with ``allow_last_number`` (default on), the last number in the text.

Equivalence: exact string match after normalisation; then numbers (integers, decimals,
fractions, percent, thousands separators) within ``rel_tol`` / ``abs_tol``; then symbolic
equality with ``math-verify`` (LaTeX and plain expressions; ``\\frac{1}{2}``, ``1/2`` and
``0.5`` are equal) or, where it is not installed, with sympy on a light LaTeX rewrite.
"""
from __future__ import annotations

import ast
import logging
import math
import re
from fractions import Fraction
from typing import Any

from roll.registry import REWARDS
from roll.rewards.base import RewardOutput, reads

_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.IGNORECASE | re.DOTALL)
_ANSWER_PHRASE = re.compile(
    r"(?:final answer|answer)\s*(?:is|:|=)?\s*(?::\s*)?(.+?)\s*(?:$|\n|(?<=\S)\.(?:\s|$))", re.IGNORECASE)
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:/\d+)?|-?\.\d+")
_MAX_ANSWER_CHARS = 200  # longer "answers" are prose, and sympy on them can be slow


def _balanced_after(text: str, start: int) -> str | None:
    """Body of the brace group opening at ``text[start] == '{'`` (None if unbalanced)."""
    depth = 0
    for i in range(start, len(text)):
        c = text[i]
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return text[start + 1:i]
    return None


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` / ``\\fbox{...}`` (or ``\\boxed 5``)."""
    best = None
    for macro in ("\\boxed", "\\fbox"):
        pos = text.rfind(macro)
        if pos >= 0 and (best is None or pos > best[0]):
            best = (pos, macro)
    if best is None:
        return None
    pos = best[0] + len(best[1])
    rest = text[pos:]
    stripped = rest.lstrip()
    if stripped.startswith("{"):
        return _balanced_after(text, pos + (len(rest) - len(stripped)))
    m = re.match(r"\s+([^\s$]+)", rest)  # \boxed 5
    return m.group(1) if m else None


def extract_answer(text: Any, allow_last_number: bool = True) -> tuple[str | None, str]:
    """``(answer, how)`` where how is boxed/tag/phrase/last_number, or ``(None, "none")``."""
    if not isinstance(text, str):
        return None, "none"
    end = text.lower().rfind("</think>")
    if end >= 0:
        text = text[end + len("</think>"):]
    boxed = last_boxed(text)
    if boxed is not None and boxed.strip():
        return boxed.strip(), "boxed"
    tags = _ANSWER_TAG.findall(text)
    if tags and tags[-1].strip():
        return tags[-1].strip(), "tag"
    phrases = _ANSWER_PHRASE.findall(text)
    if phrases and phrases[-1].strip():
        return phrases[-1].strip(), "phrase"
    if allow_last_number:
        nums = _NUMBER.findall(text)
        if nums:
            return nums[-1], "last_number"
    return None, "none"


def normalize(ans: str) -> str:
    """Strip what never changes the value: $, \\text{}, units words, spaces, trailing dots."""
    s = ans.strip()
    s = re.sub(r"^\$+|\$+$", "", s).strip()
    s = re.sub(r"\\(?:text|mathrm|textbf|mathbf)\{([^{}]*)\}", r"\1", s)
    s = s.replace("\\left", "").replace("\\right", "").replace("\\!", "").replace("\\,", "").replace("\\ ", "")
    s = s.replace("dfrac", "frac").replace("tfrac", "frac")
    s = re.sub(r"^(?:[a-zA-Z]\s*=\s*)", "", s)  # "x = 3" -> "3"
    s = s.rstrip(".").strip()
    return s.replace(" ", "")


def to_number(s: str) -> float | None:
    """A plain number, fraction (a/b or \\frac{a}{b}), or percent, else None."""
    s = normalize(s)
    percent = s.endswith(("%", "\\%"))
    s = s.rstrip("%").rstrip("\\")
    m = re.fullmatch(r"(-?)\\frac\{(-?\d+)\}\{(-?\d+)\}", s) or re.fullmatch(r"(-?)\\frac(\d)(\d)", s)
    try:
        if m:
            value = float(Fraction(int(m.group(2)), int(m.group(3))))
            value = -value if m.group(1) else value
        elif re.fullmatch(r"-?\d+/\d+", s):
            value = float(Fraction(s))
        elif re.fullmatch(r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|-?\.\d+", s):
            value = float(s.replace(",", ""))
        else:
            return None
    except (ZeroDivisionError, ValueError, OverflowError):
        return None
    return value / 100.0 if percent else value


def _symbolic_equal(a: str, b: str) -> bool:
    try:
        from math_verify import parse, verify
    except ImportError:
        return _sympy_equal(a, b)
    # its "timeout is disabled" warning on every call is expected here (see below)
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    # Timeouts inside math-verify use signals (main thread only); the reward worker enforces
    # its own per-sample timeout instead.
    gold = parse(f"${a}$", parsing_timeout=None)
    pred = parse(f"${b}$", parsing_timeout=None)
    if not gold or not pred:
        return False
    return bool(verify(gold, pred, timeout_seconds=None))


def _sympy_equal(a: str, b: str) -> bool:
    import sympy

    def rewrite(s: str) -> str:
        s = re.sub(r"\\frac\{([^{}]*)\}\{([^{}]*)\}", r"((\1)/(\2))", s)
        s = re.sub(r"\\sqrt\{([^{}]*)\}", r"sqrt(\1)", s)
        return s.replace("\\cdot", "*").replace("\\times", "*").replace("^", "**").replace("\\pi", "pi")

    try:
        ea, eb = sympy.sympify(rewrite(a)), sympy.sympify(rewrite(b))
        return bool(sympy.simplify(ea - eb) == 0)
    except (sympy.SympifyError, TypeError, ValueError, SyntaxError, AttributeError):
        return False


def answers_equal(gold: str, pred: str, rel_tol: float = 1e-6, abs_tol: float = 1e-9, symbolic: bool = True) -> bool:
    """Whether ``pred`` states the same value as ``gold``."""
    g, p = normalize(str(gold)), normalize(str(pred))
    if not p or len(p) > _MAX_ANSWER_CHARS:
        return False
    if g == p:
        return True
    gn, pn = to_number(g), to_number(p)
    if gn is not None and pn is not None:
        return math.isclose(gn, pn, rel_tol=rel_tol, abs_tol=abs_tol)
    if not symbolic:
        return False
    return _symbolic_equal(g, p)


def _eval_arith(node: ast.AST, used: list[int]) -> Fraction:
    """Exact value of an expression of integer literals and + - * / (anything else: ValueError)."""
    if isinstance(node, ast.Expression):
        return _eval_arith(node.body, used)
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        used.append(node.value)
        return Fraction(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_eval_arith(node.operand, used)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.Div)):
        a, b = _eval_arith(node.left, used), _eval_arith(node.right, used)
        if isinstance(node.op, ast.Add):
            return a + b
        if isinstance(node.op, ast.Sub):
            return a - b
        if isinstance(node.op, ast.Mult):
            return a * b
        if b == 0:
            raise ValueError("division by zero")
        return a / b
    raise ValueError(f"not allowed in a countdown expression: {type(node).__name__}")


def countdown_correct(expression: str, numbers: list[int], target: float) -> bool:
    """The expression uses only ``numbers`` (each at most once) and equals ``target``."""
    expr = expression.replace("\\times", "*").replace("\\cdot", "*").replace("\\div", "/").replace("\u00d7", "*")
    expr = re.sub(r"=\s*-?[\d.]+\s*$", "", expr.strip().strip("$"))  # "2*3+1 = 7" -> "2*3+1"
    if len(expr) > _MAX_ANSWER_CHARS:
        return False
    try:
        used: list[int] = []
        value = _eval_arith(ast.parse(expr, mode="eval"), used)
    except (SyntaxError, ValueError, RecursionError):
        return False
    pool = list(numbers)
    for n in used:
        if n not in pool:
            return False
        pool.remove(n)
    return math.isclose(float(value), float(target), abs_tol=1e-9)


@REWARDS.register("math_rule")
@reads("ground_truth", "answer", "rel_tol", "abs_tol", "allow_last_number", "symbolic", "format_score", "countdown_numbers")
def math_rule_reward(sample: dict, **fields: Any) -> RewardOutput:
    """Score 1 when the response's final answer equals ``ground_truth``, else 0 (or ``format_score``).

    Fields (keyword arguments or keys on the sample): ``ground_truth`` (or ``answer``),
    ``rel_tol`` / ``abs_tol`` (numeric tolerance), ``allow_last_number`` (fall back to the last
    number in the text), ``symbolic`` (math-verify / sympy equivalence), ``format_score``
    (score of a wrong answer that was at least extractable, default 0), ``countdown_numbers``
    (countdown: the final answer must be an expression using only these numbers, each at most
    once, that equals the ground truth). Components:
    correct, extracted. Raises ValueError when the sample has no ground truth.
    """
    merged = {**sample, **fields}
    gold = merged.get("ground_truth", merged.get("answer"))
    if gold is None or str(gold).strip() == "":
        raise ValueError("math_rule needs a 'ground_truth' (or 'answer') field")
    response = merged.get("response", "")
    numbers = merged.get("countdown_numbers")
    if numbers:  # countdown: the answer is an expression over the given numbers
        pred, how = extract_answer(response, allow_last_number=False)
        correct = pred is not None and countdown_correct(pred, [int(n) for n in numbers], float(gold))
        return RewardOutput(float(correct), correct, {"correct": float(correct), "extracted": float(pred is not None)},
                            {"extracted": pred, "extraction": how, "ground_truth": str(gold)})
    pred, how = extract_answer(response, bool(merged.get("allow_last_number", True)))
    correct = pred is not None and answers_equal(str(gold), pred, float(merged.get("rel_tol", 1e-6)),
                                                 float(merged.get("abs_tol", 1e-9)), bool(merged.get("symbolic", True)))
    score = 1.0 if correct else (float(merged.get("format_score", 0.0)) if pred is not None else 0.0)
    return RewardOutput(score, correct, {"correct": float(correct), "extracted": float(pred is not None)},
                        {"extracted": pred, "extraction": how, "ground_truth": str(gold)})
