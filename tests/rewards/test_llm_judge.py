"""llm_judge: score parsing, counted parse failures, and a real tiny judge model."""
import asyncio
import threading

import pytest

from roll.config.roles import WorkerConfig
from roll.registry import REWARDS
from roll.rewards.llm_judge import (
    DEFAULT_PROMPT,
    JudgeClient,
    JudgeParseError,
    llm_judge_reward,
    parse_score,
)
from roll.strategies.base import GenerationResult


@pytest.mark.parametrize("reply,expected", [
    ("Score: 7", 0.7), ("score=10", 1.0), ("The answer is fine.\nScore: 3.5", 0.35),
    ("Score: 2 ... on reflection, Score: 8", 0.8),  # the last verdict counts
    ("SCORE 0", 0.0),
])
def test_parse_score(reply, expected):
    assert parse_score(reply) == pytest.approx(expected)


@pytest.mark.parametrize("reply", ["", "great answer", "Score: eleven", "Score: 42", "Score: -1"])
def test_unparseable_or_out_of_range_raises(reply):
    with pytest.raises(JudgeParseError):
        parse_score(reply)


def test_custom_pattern_and_scale():
    assert parse_score("[[4]]", r"\[\[(\d+)\]\]", max_score=5) == pytest.approx(0.8)


class _Tok:
    """Enough of a tokenizer for JudgeClient: the prompt text is kept to check the template."""

    def __init__(self):
        self.seen = []

    def apply_chat_template(self, messages, tokenize, add_generation_prompt):
        self.seen.append(messages[-1]["content"])
        return [1, 2, 3]

    def decode(self, ids, skip_special_tokens):
        return self.reply


def _client(reply):
    tok = _Tok()
    tok.reply = reply
    return JudgeClient(lambda req: GenerationResult(req.request_id, [5, 6], [0.0, 0.0]), tok), tok


def test_reward_fills_the_prompt_and_scores():
    judge, tok = _client("Score: 9")
    out = llm_judge_reward({"prompt_text": "Capital of France?", "response": "Paris", "ground_truth": "Paris"}, judge=judge)
    assert out.score == pytest.approx(0.9) and out.success
    assert "Capital of France?" in tok.seen[0] and "Paris" in tok.seen[0] and "0 to 10" in tok.seen[0]


def test_parse_failure_raises_so_the_worker_counts_it():
    judge, _ = _client("I like it")
    with pytest.raises(JudgeParseError):
        llm_judge_reward({"prompt_text": "q", "response": "r"}, judge=judge)
    with pytest.raises(ValueError, match="judge"):
        llm_judge_reward({"prompt_text": "q", "response": "r"})
    assert REWARDS.get("llm_judge") is llm_judge_reward


@pytest.mark.integration
def test_tiny_model_judge_end_to_end(tiny_model_dir):
    """The real tiny model serves as judge through the HF inference strategy: its replies are
    decoded text, parsed or counted as parse failures, never silently 0."""
    from transformers import AutoTokenizer

    from roll.strategies.hf_infer import HFInferStrategy

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        strategy = HFInferStrategy(WorkerConfig(), tiny_model_dir, seed=0)
        asyncio.run_coroutine_threadsafe(strategy.start(), loop).result(60)
        judge = JudgeClient(lambda req: asyncio.run_coroutine_threadsafe(strategy.generate(req), loop).result(60),
                            AutoTokenizer.from_pretrained(tiny_model_dir), max_new_tokens=12)
        reply = judge.ask(DEFAULT_PROMPT.format(question="2+2?", reference="4", response="4", max_score=10))
        assert isinstance(reply, str) and reply
        outcomes = []
        for response in ("4", "five", "I do not know"):
            try:
                outcomes.append(llm_judge_reward({"prompt_text": "2+2?", "response": response}, judge=judge,
                                                 score_pattern=r"(\d)", max_score=9).score)
            except JudgeParseError:
                outcomes.append("parse_failure")
        assert all(o == "parse_failure" or 0.0 <= o <= 1.0 for o in outcomes)
        asyncio.run_coroutine_threadsafe(strategy.stop(), loop).result(30)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
