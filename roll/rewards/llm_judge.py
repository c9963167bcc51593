"""LLM-as-judge reward: a judge model (served by an inference worker) grades each response.

The judge sees ``prompt_template`` filled with the sample's ``question`` (the prompt text),
``response`` and ``reference`` (``ground_truth``, may be empty), rendered through the judge
tokenizer's chat template. Its reply is parsed by ``score_pattern`` (a regex whose first
group is a number); the score is that number divided by ``max_score`` and clipped to [0, 1].
A reply without a parseable score raises :class:`JudgeParseError`: the reward worker counts
the sample as failed (``reward/<domain>/errors/JudgeParseError``) and the pipeline masks it
out of the loss, so a confused judge never turns into a silent 0.

The judge is reached through a :class:`JudgeClient`, which the reward worker builds from the
judge role's inference workers (``rewards.<name>.judge`` in the config) and passes to the
reward function as the ``judge`` field.
"""
from __future__ import annotations

import itertools
import re
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from roll.registry import REWARDS
from roll.rewards.base import RewardOutput, reads
if TYPE_CHECKING:
    from roll.strategies.base import GenerationRequest, GenerationResult

DEFAULT_PROMPT = (
    "You are grading an answer.\n"
    "Question:\n{question}\n\n"
    "Reference answer (may be empty):\n{reference}\n\n"
    "Answer to grade:\n{response}\n\n"
    "Rate the answer from 0 to {max_score}. Reply with one line: Score: <number>"
)
DEFAULT_SCORE_PATTERN = r"(?i)score\s*[:=]?\s*(-?\d+(?:\.\d+)?)"


class JudgeParseError(ValueError):
    """The judge's reply holds no score the parser can read."""


class JudgeClient:
    """Sends one judge prompt at a time to inference workers and returns the decoded reply.

    ``generate``: a blocking callable ``GenerationRequest -> GenerationResult`` (the reward
    worker wraps Ray inference-worker handles, round robin); ``tokenizer``: the judge model's
    tokenizer (its chat template renders the prompt)."""

    def __init__(self, generate: Callable[[GenerationRequest], GenerationResult], tokenizer: Any,
                 max_new_tokens: int = 32, temperature: float = 0.0, seed: int = 0):
        self._generate = generate
        self.tokenizer = tokenizer
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self._seeds = itertools.count(seed)

    @classmethod
    def from_workers(cls, workers: list[Any], tokenizer: Any, **kwargs: Any) -> JudgeClient:
        import ray

        if not workers:
            raise ValueError("JudgeClient needs at least one judge inference worker")
        cycle = itertools.cycle(workers)

        def generate(request: GenerationRequest) -> GenerationResult:
            return ray.get(next(cycle).generate.remote(request))

        return cls(generate, tokenizer, **kwargs)

    def ask(self, text: str, max_new_tokens: int | None = None) -> str:
        ids = self.tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=True,
                                                 add_generation_prompt=True)
        if isinstance(ids, dict) or hasattr(ids, "input_ids"):
            ids = ids["input_ids"]
        # imported here: roll.strategies.base imports torch, which a reward worker that never
        # asks a judge (every reward process imports this module) should not load
        from roll.strategies.base import GenerationRequest

        request = GenerationRequest(request_id=f"judge-{uuid.uuid4().hex[:12]}", prompt_ids=list(ids),
                                    max_new_tokens=max_new_tokens or self.max_new_tokens,
                                    temperature=self.temperature, seed=next(self._seeds))
        result = self._generate(request)
        if result.finish_reason == "abort":
            raise RuntimeError("the judge request was aborted")
        return self.tokenizer.decode(result.output_ids, skip_special_tokens=True)


def parse_score(reply: str, pattern: str = DEFAULT_SCORE_PATTERN, max_score: float = 10.0) -> float:
    """The judge's score in [0, 1]: the LAST match of ``pattern`` (the verdict comes after any
    reasoning) divided by ``max_score``. Raises JudgeParseError when nothing matches or the
    number lies outside [0, max_score] (a judge that says 'Score: 42/10' is not trusted)."""
    matches = re.findall(pattern, reply)
    if not matches:
        raise JudgeParseError(f"no score in judge reply {reply[:120]!r}")
    last = matches[-1]
    raw = last[0] if isinstance(last, tuple) else last
    try:
        value = float(raw)
    except ValueError:
        raise JudgeParseError(f"judge score {raw!r} is not a number") from None
    if not 0.0 <= value <= max_score:
        raise JudgeParseError(f"judge score {value:g} outside [0, {max_score:g}]")
    return value / max_score


@REWARDS.register("llm_judge")
@reads("prompt_template", "score_pattern", "max_score", "success_threshold", "max_new_tokens", "ground_truth", "reference",
       "prompt_text", "prompt")
def llm_judge_reward(sample: dict, **fields: Any) -> RewardOutput:
    """Score from a judge model. Fields: ``judge`` (a JudgeClient, provided by the reward
    worker), ``prompt_template`` (placeholders {question} {response} {reference}
    {max_score}), ``score_pattern`` (regex, first group the number), ``max_score`` (default
    10), ``success_threshold`` (normalised score counted as success, default 0.5),
    ``max_new_tokens`` (judge reply length)."""
    merged = {**sample, **fields}
    judge = merged.get("judge")
    if judge is None:
        raise ValueError("llm_judge needs a judge: set rewards.<name>.judge to an inference role")
    max_score = float(merged.get("max_score", 10.0))
    template = merged.get("prompt_template") or DEFAULT_PROMPT
    reference = merged.get("ground_truth", merged.get("reference", "")) or ""
    text = template.format(question=merged.get("prompt_text", merged.get("prompt", "")),
                           response=merged.get("response", ""), reference=reference, max_score=f"{max_score:g}")
    reply = judge.ask(text, merged.get("max_new_tokens"))
    score = parse_score(reply, merged.get("score_pattern") or DEFAULT_SCORE_PATTERN, max_score)
    success = score >= float(merged.get("success_threshold", 0.5))
    return RewardOutput(score, success, {"judge_score": score}, {"judge_reply": reply[:500]})
