"""Multiple-choice and exact-match rewards for general reasoning QA.

``multiple_choice``: the response's final choice letter must equal the ground truth letter.
The choice is read from (in order) the last ``<answer>`` tag, the last "answer is (X)" /
"Answer: X" phrase, a response that is just a letter ("B", "(B)", "B."), else the last
standalone capital letter among the valid options. A response naming several different
letters in its final answer (e.g. "A or C") is wrong, so hedging never pays.

``exact_match``: the final answer (tag, phrase, or the whole response) equals one of the
accepted answers after case folding, punctuation and article removal.
"""
from __future__ import annotations

import re
import string
from collections.abc import Sequence
from typing import Any

from roll.registry import REWARDS
from roll.rewards.base import RewardOutput, reads

_TAG = re.compile(r"<answer>(.*?)</answer>", re.IGNORECASE | re.DOTALL)
_PHRASE = re.compile(r"(?:final answer|answer)\s*(?:is|:)\s*:?\s*(.+?)\s*(?:$|\n)", re.IGNORECASE)


def _strip_think(text: str) -> str:
    end = text.lower().rfind("</think>")
    return text[end + len("</think>"):] if end >= 0 else text


def _final_span(text: str) -> tuple[str | None, str]:
    tags = _TAG.findall(text)
    if tags:
        return tags[-1], "tag"
    phrases = _PHRASE.findall(text)
    if phrases:
        return phrases[-1], "phrase"
    return None, "none"


def extract_choice(text: Any, options: Sequence[str] = "ABCD") -> tuple[str | None, str]:
    """``(letter, how)``; ``(None, why)`` when there is no single choice among ``options``."""
    if not isinstance(text, str):
        return None, "not text"
    text = _strip_think(text)
    valid = "".join(o.upper() for o in options)
    letter_re = re.compile(rf"(?<![A-Za-z])\(?([{re.escape(valid)}])\)?(?![A-Za-z])")
    span, how = _final_span(text)
    if span is None:
        if re.fullmatch(rf"\s*\(?([{re.escape(valid)}])\)?[.:]?\s*", text):
            span, how = text, "bare"
        else:
            letters = letter_re.findall(text)
            return (letters[-1], "last_letter") if letters else (None, "no choice letter")
    letters = set(letter_re.findall(span))
    if len(letters) == 1:
        return letters.pop(), how
    return None, "several choices" if letters else "no choice letter"


def _letters(n: int) -> str:
    return string.ascii_uppercase[:n]


@REWARDS.register("multiple_choice")
@reads("ground_truth", "answer", "choices")
def multiple_choice_reward(sample: dict, **fields: Any) -> RewardOutput:
    """1 when the chosen letter equals ``ground_truth`` (a letter, or the correct option's
    text when ``choices`` lists the options). Fields: ``ground_truth`` (or ``answer``),
    ``choices`` (option texts; sets the valid letters, default A-D). Raises ValueError for a
    ground truth that is not one of the options."""
    merged = {**sample, **fields}
    gold = merged.get("ground_truth", merged.get("answer"))
    choices = merged.get("choices")
    options = _letters(len(choices)) if choices else "ABCD"
    if gold is None:
        raise ValueError("multiple_choice needs a 'ground_truth' (or 'answer') field")
    gold = str(gold).strip()
    if gold.upper() not in options and choices and gold in [str(c) for c in choices]:
        gold = options[[str(c) for c in choices].index(gold)]
    gold = gold.upper().strip("()")
    if gold not in options:
        raise ValueError(f"multiple_choice ground truth {gold!r} is not one of the options {options}")
    pred, how = extract_choice(merged.get("response", ""), options)
    correct = pred == gold
    return RewardOutput(float(correct), correct, {"correct": float(correct), "extracted": float(pred is not None)},
                        {"extracted": pred, "extraction": how, "ground_truth": gold})


def normalize_text(s: str) -> str:
    s = s.lower().strip()
    s = "".join(c for c in s if c not in string.punctuation)
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


@REWARDS.register("exact_match")
@reads("ground_truth", "answer")
def exact_match_reward(sample: dict, **fields: Any) -> RewardOutput:
    """1 when the final answer equals ``ground_truth`` (a string or a list of accepted
    strings) after case folding and removing punctuation and articles."""
    merged = {**sample, **fields}
    gold = merged.get("ground_truth", merged.get("answer"))
    if gold is None:
        raise ValueError("exact_match needs a 'ground_truth' (or 'answer') field")
    accepted = [gold] if isinstance(gold, str) else list(gold)
    text = _strip_think(str(merged.get("response", "")))
    span, how = _final_span(text)
    pred = span if span is not None else text
    correct = normalize_text(pred) in {normalize_text(str(a)) for a in accepted}
    return RewardOutput(float(correct), correct, {"correct": float(correct)}, {"extracted": pred.strip()[:200], "extraction": how})
