"""multiple_choice and exact_match rewards."""
import pytest

from roll.registry import REWARDS
from roll.rewards.multiple_choice import (
    exact_match_reward,
    extract_choice,
    multiple_choice_reward,
)


def mc(response, gold="B", **kw):
    return multiple_choice_reward({"response": response, "ground_truth": gold, **kw})


@pytest.mark.parametrize("response", ["B", "(B)", "B.", "The answer is B", "Answer: (B)", "<answer>B</answer>",
                                      "A looks tempting, but the answer is B.", "<think>A? C?</think>B"])
def test_correct(response):
    assert mc(response).score == 1.0


@pytest.mark.parametrize("response", ["A", "The answer is C", "<answer>D</answer>", "The answer is A or B",
                                      "<answer>A B</answer>", "", "I don't know"])
def test_incorrect_or_hedged(response):
    assert mc(response).score == 0.0


def test_words_starting_with_a_letter_are_not_choices():
    # "Because" starts with B and "A" is an article: neither is a standalone choice letter
    assert extract_choice("Because a dog is an animal, the answer is C")[0] == "C"
    assert extract_choice("Before I answer: (D)")[0] == "D"


def test_letters_outside_the_options_are_ignored():
    assert mc("The answer is E", gold="A").score == 0.0
    out = mc("The answer is E", gold="E", choices=["1", "2", "3", "4", "5"])
    assert out.score == 1.0


def test_ground_truth_as_option_text():
    assert mc("C", gold="Paris", choices=["Rome", "Berlin", "Paris", "Oslo"]).score == 1.0


def test_bad_ground_truth_raises():
    with pytest.raises(ValueError, match="not one of the options"):
        mc("A", gold="Z")
    with pytest.raises(ValueError, match="ground_truth"):
        multiple_choice_reward({"response": "A"})


def test_exact_match():
    assert exact_match_reward({"response": "The answer is: The Eiffel Tower!", "ground_truth": "eiffel tower"}).score == 1.0
    assert exact_match_reward({"response": "Paris", "ground_truth": ["paris", "Paris, France"]}).score == 1.0
    assert exact_match_reward({"response": "The Louvre, near the Eiffel Tower", "ground_truth": "eiffel tower"}).score == 0.0


def test_registered():
    assert REWARDS.get("multiple_choice") is multiple_choice_reward
    assert REWARDS.get("exact_match") is exact_match_reward
