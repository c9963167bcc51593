"""Instruction-following reward: verifiable constraints, each a small checker written here.

A sample carries ``constraints``: a list of ``{"type": <checker>, ...arguments}``. The score
is the fraction of constraints the response satisfies (``strict: true``: 1 only when all
hold). An unknown type or a missing argument raises ValueError (the reward worker counts the
sample as failed; it is never scored 0 silently).

Checkers (``CHECKERS``; arguments in brackets):

- ``word_count`` [min, max]: words (whitespace-separated tokens with a letter or digit);
- ``sentence_count`` [min, max]: sentences ending in . ! or ?;
- ``paragraph_count`` [n]: paragraphs separated by blank lines or a ``***`` line;
- ``keywords_present`` [keywords]: every keyword appears as a whole word (case-insensitive);
- ``keywords_absent`` [keywords]: none appears;
- ``keyword_frequency`` [keyword, min, max]: occurrences as a whole word;
- ``bullet_count`` [n]: exactly n markdown bullets (lines starting with ``*`` or ``-``);
- ``json_format``: the response (optionally in one ```json fence) parses as JSON;
- ``lowercase`` / ``uppercase``: no upper-case (lower-case) letters, and at least one letter;
- ``starts_with`` / ``ends_with`` [phrase]: ignoring surrounding whitespace and case;
- ``no_commas``: no comma anywhere;
- ``quotation``: wrapped in double quotes;
- ``title``: has a title in double angle brackets, ``<<like this>>``;
- ``placeholder_count`` [min]: at least min ``[placeholders]``;
- ``postscript`` [marker="P.S."]: a line starting with the marker;
- ``highlight_count`` [min]: at least min ``*highlighted*`` spans;
- ``capital_words`` [min, max]: words in all capitals.
"""
from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from roll.registry import REWARDS
from roll.rewards.base import RewardOutput, reads

CHECKERS: dict[str, Callable[..., bool]] = {}


def checker(name: str) -> Callable[[Callable[..., bool]], Callable[..., bool]]:
    def deco(fn: Callable[..., bool]) -> Callable[..., bool]:
        if name in CHECKERS:
            raise ValueError(f"duplicate ifeval checker {name!r}")
        CHECKERS[name] = fn
        return fn
    return deco


def _in_range(n: int, min: int | None = None, max: int | None = None) -> bool:
    if min is None and max is None:
        raise ValueError("a count constraint needs 'min' and/or 'max'")
    return (min is None or n >= int(min)) and (max is None or n <= int(max))


def words(text: str) -> list[str]:
    return [w for w in text.split() if re.search(r"[A-Za-z0-9]", w)]


def _word_re(word: str) -> re.Pattern:
    return re.compile(rf"(?<![\w]){re.escape(word)}(?![\w])", re.IGNORECASE)


def _keywords(keywords: Any) -> list[str]:
    if isinstance(keywords, str):
        keywords = [keywords]
    if not keywords or not all(isinstance(k, str) and k.strip() for k in keywords):
        raise ValueError(f"keywords must be a non-empty list of strings, got {keywords!r}")
    return list(keywords)


@checker("word_count")
def word_count(text: str, min: int | None = None, max: int | None = None) -> bool:
    return _in_range(len(words(text)), min, max)


@checker("sentence_count")
def sentence_count(text: str, min: int | None = None, max: int | None = None) -> bool:
    # a sentence is a run of text with a word, closed by . ! ? (or the end of the text)
    parts = [p for p in re.split(r"(?<=[.!?])\s+", text.strip()) if re.search(r"[A-Za-z0-9]", p)]
    return _in_range(len(parts), min, max)


@checker("paragraph_count")
def paragraph_count(text: str, n: int) -> bool:
    parts = re.split(r"\n\s*\n|\n\s*\*\*\*\s*\n", text.strip())
    return len([p for p in parts if p.strip()]) == int(n)


@checker("keywords_present")
def keywords_present(text: str, keywords: Any) -> bool:
    return all(_word_re(k).search(text) for k in _keywords(keywords))


@checker("keywords_absent")
def keywords_absent(text: str, keywords: Any) -> bool:
    return not any(_word_re(k).search(text) for k in _keywords(keywords))


@checker("keyword_frequency")
def keyword_frequency(text: str, keyword: str, min: int | None = None, max: int | None = None) -> bool:
    return _in_range(len(_word_re(_keywords(keyword)[0]).findall(text)), min, max)


@checker("bullet_count")
def bullet_count(text: str, n: int) -> bool:
    bullets = [line for line in text.splitlines() if re.match(r"^\s*[*-]\s+\S", line)]
    return len(bullets) == int(n)


@checker("json_format")
def json_format(text: str) -> bool:
    body = text.strip()
    m = re.fullmatch(r"```(?:json)?\s*\n(.*)\n\s*```", body, re.DOTALL | re.IGNORECASE)
    if m:
        body = m.group(1)
    try:
        json.loads(body)
    except (json.JSONDecodeError, RecursionError):
        return False
    return True


@checker("lowercase")
def lowercase(text: str) -> bool:
    return any(c.isalpha() for c in text) and text == text.lower()


@checker("uppercase")
def uppercase(text: str) -> bool:
    return any(c.isalpha() for c in text) and text == text.upper()


@checker("starts_with")
def starts_with(text: str, phrase: str) -> bool:
    if not phrase.strip():
        raise ValueError("starts_with needs a non-empty phrase")
    return text.strip().lower().startswith(phrase.strip().lower())


@checker("ends_with")
def ends_with(text: str, phrase: str) -> bool:
    if not phrase.strip():
        raise ValueError("ends_with needs a non-empty phrase")
    return text.strip().lower().endswith(phrase.strip().lower())


@checker("no_commas")
def no_commas(text: str) -> bool:
    return "," not in text and "\uff0c" not in text


@checker("quotation")
def quotation(text: str) -> bool:
    t = text.strip()
    return len(t) >= 2 and t[0] == '"' and t[-1] == '"'


@checker("title")
def title(text: str) -> bool:
    return re.search(r"<<[^<>\n]*\S[^<>\n]*>>", text) is not None


@checker("placeholder_count")
def placeholder_count(text: str, min: int) -> bool:
    return len(re.findall(r"\[[^\[\]\n]+\]", text)) >= int(min)


@checker("postscript")
def postscript(text: str, marker: str = "P.S.") -> bool:
    return re.search(rf"^\s*{re.escape(marker)}", text, re.MULTILINE | re.IGNORECASE) is not None


@checker("highlight_count")
def highlight_count(text: str, min: int) -> bool:
    return len(re.findall(r"(?<!\*)\*[^*\n]+\*(?!\*)", text)) >= int(min)


@checker("capital_words")
def capital_words(text: str, min: int | None = None, max: int | None = None) -> bool:
    caps = [w for w in re.findall(r"\b[A-Za-z]+\b", text) if len(w) > 1 and w.isupper()]
    return _in_range(len(caps), min, max)


def check_constraint(text: str, constraint: dict) -> bool:
    """One constraint (``{"type": ..., **arguments}``) on the response text."""
    if not isinstance(constraint, dict) or "type" not in constraint:
        raise ValueError(f"a constraint must be a dict with a 'type', got {constraint!r}")
    kind = constraint["type"]
    fn = CHECKERS.get(kind)
    if fn is None:
        raise ValueError(f"unknown ifeval constraint {kind!r}; known: {', '.join(sorted(CHECKERS))}")
    args = {k: v for k, v in constraint.items() if k != "type"}
    try:
        return bool(fn(text, **args))
    except TypeError as e:  # wrong or missing arguments: a data error, not a model error
        raise ValueError(f"constraint {kind!r}: {e}") from None


@REWARDS.register("ifeval")
@reads("constraints", "strict")
def ifeval_reward(sample: dict, **fields: Any) -> RewardOutput:
    """Fraction of the sample's ``constraints`` the response satisfies (``strict``: all or
    nothing). Components: one 0/1 per constraint type, and ``all``. A leading <think> block
    is not judged."""
    merged = {**sample, **fields}
    constraints = merged.get("constraints")
    if isinstance(constraints, str):
        constraints = json.loads(constraints)
    if not constraints:
        raise ValueError("ifeval needs a non-empty 'constraints' list")
    text = str(merged.get("response", ""))
    end = text.lower().rfind("</think>")
    if end >= 0:
        text = text[end + len("</think>"):]
    results = [check_constraint(text, c) for c in constraints]
    frac = sum(results) / len(results)
    ok = all(results)
    score = float(ok) if merged.get("strict", False) else frac
    comps = {f"{c['type']}": float(r) for c, r in zip(constraints, results)}
    comps["all"] = float(ok)
    return RewardOutput(score, ok, comps, {"passed": [c["type"] for c, r in zip(constraints, results) if r],
                                           "failed": [c["type"] for c, r in zip(constraints, results) if not r]})
