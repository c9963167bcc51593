"""ifeval: each checker's edge cases, and the reward's scoring and error handling."""
import pytest

from roll.registry import REWARDS
from roll.rewards.ifeval import CHECKERS, check_constraint, ifeval_reward


def ok(text, **c):
    return check_constraint(text, c)


def test_word_count():
    assert ok("one two three", type="word_count", min=3, max=3)
    assert not ok("one two", type="word_count", min=3)
    assert ok("one - two -- three", type="word_count", max=3)  # bare punctuation is not a word
    assert ok("", type="word_count", max=0)
    with pytest.raises(ValueError, match="min"):
        ok("x", type="word_count")


def test_sentence_count():
    assert ok("Hi. How are you? Great!", type="sentence_count", min=3, max=3)
    assert ok("No final punctuation", type="sentence_count", min=1, max=1)
    assert not ok("One. Two.", type="sentence_count", max=1)
    assert ok("...", type="sentence_count", max=0)


def test_paragraph_count():
    assert ok("a\n\nb\n\n\nc", type="paragraph_count", n=3)
    assert ok("a\n***\nb", type="paragraph_count", n=2)
    assert not ok("a\nb", type="paragraph_count", n=2)


def test_keywords_whole_word_case_insensitive():
    assert ok("The Cat sat.", type="keywords_present", keywords=["cat", "sat"])
    assert not ok("concatenate", type="keywords_present", keywords=["cat"])
    assert ok("concatenate", type="keywords_absent", keywords=["cat"])
    assert not ok("a CAT", type="keywords_absent", keywords=["cat"])
    with pytest.raises(ValueError, match="keywords"):
        ok("x", type="keywords_present", keywords=[])


def test_keyword_frequency():
    assert ok("go go go", type="keyword_frequency", keyword="go", min=3)
    assert not ok("go go going", type="keyword_frequency", keyword="go", min=3)
    assert not ok("go go go", type="keyword_frequency", keyword="go", max=2)


def test_bullet_count():
    assert ok("* a\n* b\n- c", type="bullet_count", n=3)
    assert not ok("* a\n*b\n-", type="bullet_count", n=3)  # no space / empty bullets do not count
    assert ok("intro\n  - indented", type="bullet_count", n=1)


def test_json_format():
    assert ok('{"a": 1}', type="json_format")
    assert ok('```json\n{"a": [1, 2]}\n```', type="json_format")
    assert not ok("{'a': 1}", type="json_format")
    assert not ok('Here: {"a": 1}', type="json_format")
    assert not ok("[" * 100000, type="json_format")


def test_case():
    assert ok("all lower 123", type="lowercase")
    assert not ok("Not lower", type="lowercase")
    assert not ok("123 !!", type="lowercase")  # no letters at all
    assert ok("ALL UPPER 1", type="uppercase")
    assert not ok("ALL UPPEr", type="uppercase")


def test_start_end_phrases():
    assert ok("  Dear team, hello", type="starts_with", phrase="dear team")
    assert not ok("Hello dear team", type="starts_with", phrase="dear team")
    assert ok("bye. Is there anything else?  \n", type="ends_with", phrase="Is there anything else?")
    with pytest.raises(ValueError):
        ok("x", type="ends_with", phrase=" ")


def test_misc_checkers():
    assert ok("no commas here", type="no_commas")
    assert not ok("a, b", type="no_commas")
    assert ok('"quoted"', type="quotation") and not ok('"', type="quotation")
    assert ok("<<My Title>>\nbody", type="title") and not ok("<<>>", type="title")
    assert ok("[name] at [address]", type="placeholder_count", min=2)
    assert not ok("[name]", type="placeholder_count", min=2)
    assert ok("text\nP.S. bye", type="postscript") and not ok("text P.S. bye", type="postscript")
    assert ok("*one* and *two*", type="highlight_count", min=2)
    assert not ok("**bold** only", type="highlight_count", min=1)
    assert ok("WOW this is BIG", type="capital_words", min=2, max=2)
    assert not ok("I am", type="capital_words", min=1)  # one-letter words do not count


def test_every_checker_is_exercised():
    exercised = {"word_count", "sentence_count", "paragraph_count", "keywords_present", "keywords_absent",
                 "keyword_frequency", "bullet_count", "json_format", "lowercase", "uppercase", "starts_with",
                 "ends_with", "no_commas", "quotation", "title", "placeholder_count", "postscript",
                 "highlight_count", "capital_words"}
    assert set(CHECKERS) == exercised


def test_reward_fraction_and_strict():
    sample = {"response": "hello world", "constraints": [
        {"type": "lowercase"}, {"type": "word_count", "max": 1}]}
    out = ifeval_reward(sample)
    assert out.score == 0.5 and not out.success
    assert out.components == {"lowercase": 1.0, "word_count": 0.0, "all": 0.0}
    assert ifeval_reward(sample, strict=True).score == 0.0
    assert ifeval_reward({**sample, "response": "hello"}).success


def test_reward_ignores_think_and_reads_json_constraints():
    sample = {"response": "<think>Thinking, with commas</think>no commas", "constraints": '[{"type": "no_commas"}]'}
    assert ifeval_reward(sample).score == 1.0


def test_bad_constraints_raise():
    with pytest.raises(ValueError, match="unknown ifeval constraint"):
        ifeval_reward({"response": "x", "constraints": [{"type": "rhymes"}]})
    with pytest.raises(ValueError, match="unexpected keyword|bullet_count"):
        ifeval_reward({"response": "x", "constraints": [{"type": "bullet_count", "count": 2}]})
    with pytest.raises(ValueError, match="constraints"):
        ifeval_reward({"response": "x"})
    assert REWARDS.get("ifeval") is ifeval_reward
