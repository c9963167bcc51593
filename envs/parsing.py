"""The action parser shared by every text environment.

Model text looks like ``<think>...</think><answer>Up, Left</answer>``. The parser pulls the
answer out, splits it into actions, matches them case-insensitively against the env's action
words, and reports what was wrong. It never raises, whatever the input, and its running time is
linear in the length of the text (no backtracking regex over model text).
"""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

# Tags are found with a token scan rather than one `<answer>(.*?)</answer>` search: that regex is
# quadratic on text with many unclosed `<answer>` tags, and model text is adversarial by nature.
_ANSWER_TAG_RE = re.compile(r"<(/?)answer>", re.IGNORECASE)
_THINK_OPEN_RE = re.compile(r"\s*<think>", re.IGNORECASE)
_THINK_CLOSE_RE = re.compile(r"</think>", re.IGNORECASE)
# Separators between several actions in one answer. No `\s*` around them (that backtracks on
# long whitespace runs); parts are stripped afterwards instead.
_SPLIT_RE = re.compile(r",|;|\n|\|\||\band then\b|\bthen\b", re.IGNORECASE)
_PUNCT = ".!\"'`*"
# The common well-formed turn, `<think>plain text</think><answer>word</answer>`, with no tags
# or separators inside: the general algorithm gives exactly these groups for such text, so
# envs take this shortcut on every step (parsing dominates a grid env's step time).
_FAST_RE = re.compile(r"\s*(?:<think>([^<]*)</think>)?\s*<answer>([^<,;\n|]*)</answer>\s*", re.IGNORECASE)


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
    think: str | None = None
    """Content of the <think> block, if any."""
    answer: str | None = None
    """Raw text inside <answer>, if any."""
    error: str = ""
    """Why the text was invalid (empty when valid)."""


def _as_text(text: object) -> tuple[str | None, str]:
    if isinstance(text, str):
        return text, ""
    if isinstance(text, bytes):
        return text.decode("utf-8", errors="replace"), ""
    try:
        return str(text), ""
    except Exception as e:  # any object may reach an env from user code; report, never raise
        return None, f"action is not text ({type(text).__name__}: {e})"


def _last_answer(text: str) -> tuple[str | None, bool]:
    """Content of the last ``<answer>...</answer>`` pair and whether that pair had nested tags.

    Pairs are matched left to right like a non-greedy regex: an opening tag starts a pair,
    further opening tags inside it are content (and mark it as nested), the next closing tag
    ends it, and stray closing tags outside a pair are ignored.
    """
    start = -1
    nested = False
    last: str | None = None
    last_nested = False
    for m in _ANSWER_TAG_RE.finditer(text):
        if m.group(1):  # closing tag
            if start >= 0:
                last, last_nested = text[start : m.start()], nested
                start, nested = -1, False
        elif start < 0:
            start = m.end()
        else:
            nested = True
    return last, last_nested


def extract_answer(text: object, config: ParserConfig | None = None) -> ParsedAction:
    """Find the think and answer parts of ``text`` without interpreting the answer."""
    config = config or ParserConfig()
    text, err = _as_text(text)
    if text is None:
        return ParsedAction(error=err)
    text = text[: config.max_text_chars]
    think = None
    body_start = 0
    m = _THINK_OPEN_RE.match(text)
    if m:
        close = _THINK_CLOSE_RE.search(text, m.end())
        if close:
            think = text[m.end() : close.start()].strip()
            body_start = close.end()
    if think is not None and not config.allow_think:
        return ParsedAction(think=think, error="a <think> block is not allowed")
    if think is None and config.require_think:
        return ParsedAction(error="missing <think>...</think>")
    answer, nested = _last_answer(text)
    if answer is not None:
        if nested:
            return ParsedAction(think=think, error="nested <answer> tags")
        answer = answer.strip()
    elif config.require_answer_tag:
        return ParsedAction(think=think, error="missing <answer>...</answer>")
    else:
        answer = text[body_start:].strip()
    if not answer:
        return ParsedAction(think=think, answer=answer, error="empty answer")
    return ParsedAction(think=think, answer=answer, valid=True)


def _normalise_words(action_words: Sequence[str] | Mapping[str, object]) -> dict[str, object]:
    if isinstance(action_words, Mapping):
        return {str(k).strip().lower(): v for k, v in action_words.items()}
    return {str(w).strip().lower(): w for w in action_words}


class ActionParser:
    """``parse_actions`` with the action-word lookup built once (envs call it every step)."""

    def __init__(self, action_words: Sequence[str] | Mapping[str, object], config: ParserConfig | None = None):
        self.config = config or ParserConfig()
        self.lookup = _normalise_words(action_words)
        # The shortcut is exact only when no accepted spelling could itself be split.
        self._fast = (
            self.config.require_answer_tag
            and self.config.allow_think
            and not self.config.require_think
            and not any(_SPLIT_RE.search(k) for k in self.lookup)
        )

    def __call__(self, text: object) -> ParsedAction:
        config = self.config
        if self._fast and type(text) is str and len(text) <= config.max_text_chars:
            m = _FAST_RE.fullmatch(text)
            if m:
                answer = m.group(2).strip()
                action = self.lookup.get(answer.strip(_PUNCT).strip().lower())
                if action is not None:
                    think = m.group(1)
                    return ParsedAction(
                        actions=[action], valid=True, think=None if think is None else think.strip(), answer=answer
                    )
        parsed = extract_answer(text, config)
        if not parsed.valid:
            return parsed
        parts = [p for p in (s.strip() for s in _SPLIT_RE.split(parsed.answer or "")) if p]
        if not parts:
            parsed.valid = False
            parsed.error = "empty answer"
            return parsed
        if len(parts) > config.max_actions_per_turn:
            parsed.valid = False
            parsed.error = f"{len(parts)} actions given, at most {config.max_actions_per_turn} allowed"
            return parsed
        actions = []
        lookup = self.lookup
        for part in parts:
            key = part.strip(_PUNCT).strip().lower()
            action = lookup.get(key)
            if action is None:
                parsed.valid = False
                parsed.error = f"unknown action {part[:40]!r}"
                return parsed
            actions.append(action)
        parsed.actions = actions
        return parsed


def parse_actions(
    text: object,
    action_words: Sequence[str] | Mapping[str, object],
    config: ParserConfig | None = None,
) -> ParsedAction:
    """Parse ``text`` into canonical action words.

    ``action_words`` is a sequence of canonical words, or a mapping from each accepted
    spelling (any case) to the canonical action (e.g. ``{"up": "Up", "1": "Up"}``).
    """
    return ActionParser(action_words, config)(text)
