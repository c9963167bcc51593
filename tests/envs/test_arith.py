"""roll/Arith-v0: problems from a seed, disjoint train and held-out problems, exact-answer
reward, and the tool-using expert through the real roll/Tools-v0 with the real calculator."""
from __future__ import annotations


import gymnasium as gym
import numpy as np
import pytest
import roll.envs  # noqa: F401  (registers roll/Arith-v0 and roll/Tools-v0)
from roll.config.rollout import EnvConfig
from roll.envs.agents import ToolExpertAgent, agent_rng, demo_agent, digit_typo, format_answer, tool_call_text
from roll.envs.arith.env import FORMS, ArithEnv
from roll.pipelines.sft_data import episode_messages

TOOL_ENV = {"env": "roll/Arith-v0", "tools": ["calculator"], "max_tool_calls": 2}


def problem(seed: int, **kwargs) -> tuple[str, str, int]:
    env = ArithEnv(**kwargs)
    env.reset(seed=seed)
    return env.problem, env.expression, env.answer


def test_problems_come_from_the_seed_and_the_answer_is_the_expressions_value():
    assert problem(7) == problem(7)
    assert problem(7) != problem(8)
    forms = set()
    for seed in range(200):
        text, expression, answer = problem(seed)
        assert text == f"Compute {expression}."
        # the calculator's value of the expression, independently of the env's own arithmetic
        from roll.tools.calculator import Calculator

        assert Calculator().run(expression) == str(answer)
        numbers = [int(t) for t in expression.split() if t.isdigit()]
        assert all(n >= 12 for n in numbers) and answer >= 1000  # nothing to do in one's head
        forms.add(expression.count("*") * 10 + expression.count("+"))
    assert forms == {10, 11, 2, 3}  # mul, mul_add, sum3, sum4 all drawn


def test_forms_and_word_problems():
    for seed in range(30):
        _, expression, _ = problem(seed, forms=["mul"])
        assert "+" not in expression and expression.count("*") == 1
    text, expression, _ = problem(3, style="words", forms=["mul_add"])
    a, b, c = (t for t in expression.split() if t.isdigit())
    assert text.index(a) < text.index(b) < text.index(c) and text.endswith("?")
    with pytest.raises(ValueError, match="valid forms"):
        ArithEnv(forms=["mul", "div"])
    with pytest.raises(ValueError, match="style"):
        ArithEnv(style="latex")
    with pytest.raises(ValueError, match="max_attempts"):
        ArithEnv(max_attempts=0)


def test_training_and_held_out_seed_ranges_give_disjoint_problems():
    # the chain trains on env seeds from 0 and validates on seeds from 100000 (seed_offset)
    train = {problem(s)[1] for s in range(2000)}
    held_out = {problem(100_000 + s)[1] for s in range(500)}
    assert len(train) == 2000 and len(held_out) == 500
    assert not train & held_out


@pytest.mark.parametrize("text, reward, valid, success", [
    ("<answer>{a}</answer>", 1.0, True, True),
    ("<think>easy</think><answer> {a}. </answer>", 1.0, True, True),
    ("<answer>{a1}</answer>", 0.0, True, False),
    ("<answer>{a_sep}</answer>", -0.1, False, False),   # thousands separators are not one number
    ("<answer>about {a}</answer>", -0.1, False, False),
    ("{a}", -0.1, False, False),                         # no answer tag
    ("<answer></answer>", -0.1, False, False),
])
def test_reward_is_one_for_the_exact_whole_number(text, reward, valid, success):
    env = ArithEnv()
    env.reset(seed=5)
    a = env.answer
    action = text.format(a=a, a1=a + 1, a_sep=f"{a:,}")
    obs, r, terminated, truncated, info = env.step(action)
    assert (r, info["action_is_valid"], info["success"]) == (reward, valid, success)
    # one attempt: any answer ends the episode, as a termination (not a time limit)
    assert terminated and not truncated
    assert env.expert_plan() == [] and env.expert_tool_call() is None
    _, r, terminated, _, info = env.step(action)  # a finished episode: an invalid no-op
    assert r == 0.0 and terminated and not info["action_is_valid"]


def test_several_attempts():
    env = ArithEnv(max_attempts=2)
    env.reset(seed=1)
    obs, r, terminated, _, info = env.step(format_answer([str(env.answer + 10)]))
    assert not terminated and r == 0.0 and info["attempts_left"] == 1 and "wrong" in obs
    _, r, terminated, _, info = env.step(format_answer([str(env.answer)]))
    assert terminated and r == 1.0 and info["success"]


def play(seed: int, epsilon: float, max_turns: int = 3) -> tuple[list[dict], dict]:
    env = gym.make("roll/Tools-v0", **TOOL_ENV)
    cfg = EnvConfig(env_id="roll/Tools-v0", env_kwargs=TOOL_ENV, max_turns=max_turns, turn_template="{observation}",
                    include_instruction=False)
    agent = demo_agent(env, epsilon=epsilon, seed=seed)
    try:
        return episode_messages(cfg, env, agent, seed)
    finally:
        env.close()


def test_head_answers_are_noise_not_a_function_of_the_problem():
    """The demonstrations seed the agent with the episode's seed; its head-or-call choice must
    not reuse the bits the env drew the operands from (it did: correlation -0.86 with the
    second operand, which SFT learnt as a rule, so all 8 episodes of a GRPO group agreed)."""
    env = gym.make("roll/Tools-v0", env="roll/Arith-v0", env_kwargs={"forms": ["mul"]}, tools=["calculator"])
    head, operands = [], []
    for seed in range(400):
        obs, info = env.reset(seed=seed)
        head.append("<tool_call>" not in demo_agent(env, 0.5, seed=seed).act(obs, info))
        operands.append([int(x) for x in obs.split("Compute ")[1].rstrip(".").split(" * ")])
    env.close()
    head, operands = np.array(head, dtype=float), np.array(operands, dtype=float)
    assert 0.4 < head.mean() < 0.6
    for i in range(2):
        assert abs(np.corrcoef(head, operands[:, i])[0, 1]) < 0.15, i
    assert not np.array_equal(agent_rng(7).random(4), np.random.default_rng(7).random(4))


def test_the_expert_solves_every_problem_through_the_real_tool_env():
    env = gym.make("roll/Tools-v0", **TOOL_ENV)
    assert isinstance(demo_agent(env, 0.0), ToolExpertAgent)
    env.close()
    for seed in range(100):
        messages, outcome = play(seed, epsilon=0.0)
        assert outcome["success"], messages
        assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
        _, expression, answer = problem(seed)
        assert messages[1]["content"] == tool_call_text("calculator", {"expression": expression})
        assert messages[2]["content"] == str(answer)  # the calculator's result, not the expert's
        assert messages[3]["content"] == f"<answer>{answer}</answer>"
        assert outcome["turns"] == 2


def test_the_noisy_expert_answers_a_share_of_the_problems_from_its_head():
    wins, head = 0, 0
    n = 300
    for seed in range(n):
        messages, outcome = play(seed, epsilon=0.5)
        wins += outcome["success"]
        _, expression, answer = problem(seed)
        if len(messages) == 2:  # no tool: an answer one digit off
            head += 1
            guess = messages[1]["content"][len("<answer>"):-len("</answer>")]
            assert len(guess) == len(str(answer)) and sum(a != b for a, b in zip(guess, str(answer))) == 1
            assert not outcome["success"]
        else:  # the tool path has no mistakes
            assert outcome["success"] and messages[1]["content"] == tool_call_text("calculator", {"expression": expression})
    # 300 draws of p = 0.5: within 0.5 +- 0.13 with 4.5 sigma
    assert 0.37 < head / n < 0.63 and wins == n - head


def test_a_tool_turn_on_the_last_allowed_turn_ends_the_episode_with_its_results_unseen():
    messages, outcome = play(0, epsilon=0.0, max_turns=1)
    assert [m["role"] for m in messages] == ["user", "assistant"] and not outcome["success"]
    assert outcome["turns"] == 1


def test_digit_typo_changes_exactly_one_digit():
    rng = np.random.default_rng(0)
    for text in ["12345", "347 * 28 + 1593", "7"]:
        for _ in range(20):
            typo = digit_typo(text, rng)
            diff = [(a, b) for a, b in zip(text, typo) if a != b]
            assert len(typo) == len(text) and len(diff) == 1 and diff[0][1].isdigit()
    assert digit_typo("no digits", rng) == "no digits"


def test_the_tool_expert_needs_an_env_that_computes_with_a_tool():
    env = gym.make("roll/FrozenLake-v0")
    with pytest.raises(TypeError, match="expert_tool_call"):
        ToolExpertAgent(env)
    # demonstrations of envs without tools keep the noisy expert
    assert type(demo_agent(env, 0.5)).__name__ == "NoisyExpertAgent"


def test_every_form_is_reachable():
    for form in FORMS:
        _, expression, answer = problem(0, forms=[form])
        assert answer > 0 and expression


def test_max_digits_cuts_every_operand_and_keeps_the_problem_exact():
    from roll.tools.calculator import Calculator

    lengths = set()
    for seed in range(300):
        _, expression, answer = problem(seed, max_digits=2)
        numbers = [t for t in expression.split() if t.isdigit()]
        lengths |= {len(n) for n in numbers}
        assert Calculator().run(expression) == str(answer)
    assert lengths == {2}  # every form's operands, 3-4 digits by default, are 2 digits now
    # 3 digits: the products keep their 2-digit factor, the sums lose their 4-digit numbers
    three = [[len(t) for t in problem(s, max_digits=3)[1].split() if t.isdigit()] for s in range(300)]
    assert {max(n) for n in three} == {3} and any(n == [3, 2] for n in three)
    assert problem(5, max_digits=None) == problem(5)
    for bad in (1, 0, 2.5, "2"):
        with pytest.raises(ValueError, match="max_digits"):
            ArithEnv(max_digits=bad)
