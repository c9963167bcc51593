"""The shared action parser: examples, then properties over arbitrary text (hypothesis)."""
from __future__ import annotations

import time

import gymnasium as gym
import pytest
import roll.envs  # noqa: F401
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from roll.envs.parsing import ActionParser, ParserConfig, extract_answer, parse_actions

WORDS = ("Up", "Down", "Left", "Right")


@pytest.mark.parametrize(
    "text, actions",
    [
        ("<answer>Up</answer>", ["Up"]),
        ("<think>box is above</think><answer>up</answer>", ["Up"]),
        ("  <THINK>x</THINK>\n<ANSWER> LEFT. </ANSWER>", ["Left"]),
        ("<answer>Right</answer> trailing talk", ["Right"]),
        ("<answer>Up</answer> changed my mind <answer>Down</answer>", ["Down"]),
        ("<answer>Up</answer></answer>", ["Up"]),
    ],
)
def test_valid_single_actions(text, actions):
    parsed = parse_actions(text, WORDS)
    assert parsed.valid, parsed.error
    assert parsed.actions == actions


@pytest.mark.parametrize(
    "text, error",
    [
        ("Up", "missing <answer>"),
        ("<answer></answer>", "empty answer"),
        ("<answer>Jump</answer>", "unknown action"),
        ("<answer><answer>Up</answer></answer>", "nested"),
        ("<answer>Up", "missing <answer>"),
        ("<answer>Up, Left</answer>", "at most 1"),
    ],
)
def test_invalid_texts_say_why(text, error):
    parsed = parse_actions(text, WORDS)
    assert not parsed.valid
    assert error in parsed.error


def test_several_actions_per_turn_up_to_the_limit():
    cfg = ParserConfig(max_actions_per_turn=3)
    assert parse_actions("<answer>Up, left; DOWN</answer>", WORDS, cfg).actions == ["Up", "Left", "Down"]
    assert parse_actions("<answer>Up then Left</answer>", WORDS, cfg).actions == ["Up", "Left"]
    assert not parse_actions("<answer>Up, Up, Up, Up</answer>", WORDS, cfg).valid


def test_mapping_vocabulary_and_think_options():
    words = {"up": "Up", "north": "Up", "1": "Up"}
    assert parse_actions("<answer>NORTH</answer>", words).actions == ["Up"]
    assert parse_actions("<answer>1</answer>", words).actions == ["Up"]
    assert not parse_actions("<think>a</think><answer>up</answer>", words, ParserConfig(allow_think=False)).valid
    assert not parse_actions("<answer>up</answer>", words, ParserConfig(require_think=True)).valid
    bare = ParserConfig(require_answer_tag=False)
    assert parse_actions("<think>hm</think> up", words, bare).actions == ["Up"]


def test_non_string_input_is_reported_not_raised():
    class Unprintable:
        def __str__(self):
            raise RuntimeError("no")

    assert not extract_answer(Unprintable()).valid
    assert not extract_answer(None).valid
    assert parse_actions(b"<answer>Up</answer>", WORDS).actions == ["Up"]


def test_adversarial_tag_floods_parse_in_linear_time():
    # Many unclosed tags made the old regex quadratic; this must stay well under a second.
    for text in ("<answer>" * 200_000, "<think>" + " " * 200_000, "<answer>" + " ," * 100_000 + "</answer>"):
        t = time.perf_counter()
        parse_actions(text, WORDS, ParserConfig(max_text_chars=10**7))
        assert time.perf_counter() - t < 1.0


# ----- properties ---------------------------------------------------------------------------
_TAGS = st.sampled_from(["<answer>", "</answer>", "<think>", "</think>", "<ANSWER>", "</Answer>", "<", ">", ",", "\n"])
_WORDS = st.sampled_from(list(WORDS) + ["up", "LEFT", "jump", ""])
_TAGGY = st.lists(st.one_of(_TAGS, _WORDS, st.text(max_size=5)), max_size=40).map("".join)
_ANY_TEXT = st.one_of(st.text(), _TAGGY, st.text(min_size=1, max_size=3).map(lambda s: s * 3000))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=_ANY_TEXT, n=st.integers(1, 4), need_tag=st.booleans())
def test_parser_never_raises_and_is_consistent(text, n, need_tag):
    cfg = ParserConfig(max_actions_per_turn=n, require_answer_tag=need_tag)
    parsed = ActionParser(WORDS, cfg)(text)
    if parsed.valid:
        assert 1 <= len(parsed.actions) <= n
        assert all(a in WORDS for a in parsed.actions)
        assert parsed.error == ""
    else:
        assert parsed.actions == []
        assert parsed.error


_TURNS = st.builds(
    lambda pre, think, mid, ans, post: f"{pre}<think>{think}</think>{mid}<answer>{ans}</answer>{post}",
    st.sampled_from(["", " ", "\n", "x"]),
    st.one_of(st.text(max_size=20), _TAGGY),
    st.sampled_from(["", " ", "\n", "<answer>", "hm"]),
    st.one_of(_WORDS, st.sampled_from(["Up, Left", "up then down", " LEFT. ", "Right!", "<answer>Up"])),
    st.sampled_from(["", " ", "\n\n", "</answer>", " bye"]),
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.one_of(_TURNS, _ANY_TEXT), n=st.integers(1, 3))
def test_fast_path_agrees_with_the_general_algorithm(text, n):
    fast = ActionParser(WORDS, ParserConfig(max_actions_per_turn=n))
    slow = ActionParser(WORDS, ParserConfig(max_actions_per_turn=n))
    slow._fast = False
    a, b = fast(text), slow(text)
    assert (a.valid, a.actions, a.think, a.answer) == (b.valid, b.actions, b.think, b.answer)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(inner=st.text(max_size=50), depth=st.integers(2, 5))
def test_nested_answer_tags_are_invalid(inner, depth):
    text = "<answer>" * depth + inner + "</answer>" * depth
    assert not parse_actions(text, WORDS).valid


@pytest.fixture(scope="module")
def sokoban():
    env = gym.make("roll/Sokoban-v0", format_penalty=-0.5)
    env.reset(seed=0)
    return env


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(text=_ANY_TEXT)
def test_env_step_gives_the_format_penalty_for_invalid_text(sokoban, text):
    before, _ = sokoban.reset(seed=0)
    valid = parse_actions(text, WORDS).valid
    obs, reward, terminated, truncated, info = sokoban.step(text)
    assert info["action_is_valid"] is valid
    if not valid:
        assert reward == -0.5
        assert obs == before  # a no-op
        assert info["action_is_effective"] is False
        assert info["steps"] == 1
