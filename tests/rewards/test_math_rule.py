"""math_rule: extraction of the final answer and equivalence, with adversarial samples."""
import pytest

from roll.registry import REWARDS
from roll.rewards.math_rule import answers_equal, extract_answer, math_rule_reward


def score(response, gold, **kw):
    return math_rule_reward({"response": response, "ground_truth": gold}, **kw)


@pytest.mark.parametrize("gold,pred", [
    ("1/2", "0.5"), ("0.5", "\\frac{1}{2}"), ("\\frac{1}{2}", "1/2"), ("\\dfrac{1}{2}", "0.5"),
    ("1000", "1,000"), ("3", "x = 3"), ("50%", "0.5"), ("-2", "-2.0"), ("\\frac{\\sqrt{2}}{2}", "\\sqrt{2}/2"),
    ("2\\pi", "2 \\pi"), ("0.333333333", "1/3"),
])
def test_equivalent_forms(gold, pred):
    assert answers_equal(gold, pred, rel_tol=1e-6)


@pytest.mark.parametrize("gold,pred", [("1/2", "0.51"), ("3", "-3"), ("10", "100"), ("\\sqrt{2}", "2"), ("5", "")])
def test_different_values(gold, pred):
    assert not answers_equal(gold, pred)


def test_numeric_tolerance_is_configurable():
    assert not answers_equal("3.14159", "3.14")
    assert answers_equal("3.14159", "3.14", rel_tol=1e-2)


@pytest.mark.parametrize("text,expected,how", [
    ("so the result is \\boxed{\\frac{1}{2}}.", "\\frac{1}{2}", "boxed"),
    ("\\boxed{1} first try, then \\boxed{{2}+1}", "{2}+1", "boxed"),
    ("<answer>12</answer>", "12", "tag"),
    ("The answer is 42.", "42", "phrase"),
    ("Final answer: -7", "-7", "phrase"),
    ("we get 3 and then 8", "8", "last_number"),
    ("<think>maybe \\boxed{9}</think> The answer is 4", "4", "phrase"),
    ("no numbers here", None, "none"),
])
def test_extraction(text, expected, how):
    assert extract_answer(text) == (expected, how)


def test_boxed_and_plain_both_score():
    for response in ("\\boxed{0.5}", "The answer is 1/2", "<answer>\\frac{1}{2}</answer>", "half, so 0.5"):
        out = score(response, "\\frac{1}{2}")
        assert out.score == 1.0 and out.success, response


def test_right_number_elsewhere_is_still_wrong():
    # the ground truth appears in the working, but the final answer is different
    assert score("5 apples plus 2 is 7, so \\boxed{8}", "5").score == 0.0
    assert score("2 + 3 = 5. The answer is 6.", "5").score == 0.0
    assert score("The answer is 6, not 5", "5").score == 0.0
    assert score("I am unsure, maybe 15", "5").score == 0.0  # 15 contains 5 as a substring


def test_hedging_with_several_boxes_uses_the_last():
    assert score("\\boxed{5} or \\boxed{6}", "5").score == 0.0
    assert score("\\boxed{6} no wait \\boxed{5}", "5").score == 1.0


def test_adversarial_inputs_do_not_crash():
    for response in ("\\boxed{", "\\boxed{{{", "}" * 50, "", None, "9" * 5000, "\\boxed{" + "x" * 500 + "}"):
        out = math_rule_reward({"response": response, "ground_truth": "5"})
        assert out.score == 0.0


def test_last_number_fallback_can_be_disabled():
    assert score("we get 5", "5").score == 1.0
    assert score("we get 5", "5", allow_last_number=False).score == 0.0


def test_missing_ground_truth_raises():
    with pytest.raises(ValueError, match="ground_truth"):
        math_rule_reward({"response": "5"})


def test_registered():
    assert REWARDS.get("math_rule") is math_rule_reward


def test_countdown_checks_the_expression():
    sample = {"ground_truth": "24", "countdown_numbers": [3, 8, 2]}
    good = ["\\boxed{3 * 8}", "\\boxed{(2 + 8 - 2) * 3}", "The answer is 3 \\times 8 = 24"]
    assert math_rule_reward({**sample, "response": good[0]}).score == 1.0
    assert math_rule_reward({**sample, "response": good[2]}).score == 1.0
    # 2 used twice, a number not given, the bare target, code instead of arithmetic, wrong value
    for bad in (good[1], "\\boxed{4 * 6}", "\\boxed{24}", "\\boxed{__import__('os')}", "\\boxed{3 + 8 + 2}", "\\boxed{8 / 0}"):
        assert math_rule_reward({**sample, "response": bad}).score == 0.0, bad
