"""The action parser shared by every text environment.

Model text looks like ``<think>...</think><answer>Up, Left</answer>``. The parser pulls the
answer out, splits it into actions, matches them case-insensitively against the env's action
words, and reports what was wrong. It never raises, whatever the input.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional, Sequence

_ANSWER_RE = re.compile(r"<answer>(.*?)</answer>", re.IGNORECASE | re.DOTALL)
_THINK_RE = re.compile(r"^\s*<think>(.*?)</think>", re.IGNORECASE | re.DOTALL)
_SPLIT_RE = re.compile(r"\s*(?:,|;|\n|\|\||\band then\b|\bthen\b)\s*", re.IGNORECASE)


@dataclass
class ParserConfig:
    """Per-env parsing options."""

    require_answer_tag: bool = True
    """Only text inside <answer>...</answer> counts; false also accepts bare text."""
    allow_think: bool = True
    """An optional leading <think>...</think> block is allowed (and returned)."""
    require_think: bool = False
    """The <think> block is mandatory."""
    max_actions_per_turn: int = 1
    """Several actions per turn (comma/semicolon/newline separated) up to this limit."""
    format_penalty: float = -0.1
    """Reward added by the env when the text cannot be parsed."""
    max_text_chars: int = 20000
    """Text longer than this is judged on its first max_text_chars characters only."""


@dataclass
class ParsedAction:
    """What the parser found in one model turn."""

    actions: list[str] = field(default_factory=list)
    """Canonical action words (or raw action strings for free-form envs), in order."""
    valid: bool = False
    """The text had the required format and every action was recognised."""
    think: Optional[str] = None
    """Content of the <think> block, if any."""
    answer: Optional[str] = None
    """Raw text inside <answer>, if any."""
    error: str = ""
    """Why the text was invalid (empty when valid)."""


def extract_answer(text: object, config: ParserConfig | None = None) -> ParsedAction:
    """Find the think and answer parts of ``text`` without interpreting the answer."""
    config = config or ParserConfig()
    if not isinstance(text, str):
        try:
            text = str(text)
        except Exception as e:  # any object may reach an env from user code
            return ParsedAction(error=f"action is not text ({type(text).__name__}: {e})")
    text = text[: config.max_text_chars]
    think = None
    m = _THINK_RE.match(text)
    if m:
        think = m.group(1).strip()
        if not config.allow_think:
            return ParsedAction(think=think, error="a <think> block is not allowed")
    elif config.require_think:
        return ParsedAction(error="missing <think>...</think>")
    answers = _ANSWER_RE.findall(text)
    if answers:
        answer = answers[-1].strip()
        if "<answer>" in answer.lower():
            return ParsedAction(think=think, error="nested <answer> tags")
    elif config.require_answer_tag:
        return ParsedAction(think=think, error="missing <answer>...</answer>")
    else:
        answer = _THINK_RE.sub("", text).strip()
    if not answer:
        return ParsedAction(think=think, answer=answer, error="empty answer")
    return ParsedAction(think=think, answer=answer, valid=True)


def parse_actions(
    text: object,
    action_words: Sequence[str] | dict[str, object],
    config: ParserConfig | None = None,
) -> ParsedAction:
    """Parse ``text`` into canonical action words.

    ``action_words`` is a sequence of canonical words, or a mapping from each accepted
    spelling (any case) to the canonical action (e.g. ``{"up": "Up", "1": "Up"}``).
    """
    config = config or ParserConfig()
    parsed = extract_answer(text, config)
    if not parsed.valid:
        return parsed
    if isinstance(action_words, dict):
        lookup = {str(k).strip().lower(): v for k, v in action_words.items()}
    else:
        lookup = {w.lower(): w for w in action_words}
    parts = [p for p in _SPLIT_RE.split(parsed.answer or "") if p.strip()]
    if not parts:
        parsed.valid = False
        parsed.error = "empty answer"
        return parsed
    if len(parts) > config.max_actions_per_turn:
        parsed.valid = False
        parsed.error = f"{len(parts)} actions given, at most {config.max_actions_per_turn} allowed"
        return parsed
    actions = []
    for part in parts:
        key = part.strip().strip(".!\"'`*").strip().lower()
        if key not in lookup:
            parsed.valid = False
            parsed.error = f"unknown action {part.strip()[:40]!r}"
            return parsed
        actions.append(lookup[key])
    parsed.actions = actions
    return parsed
