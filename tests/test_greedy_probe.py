"""bench/greedy_probe.py on the untrained tiny model: its text is never a valid move, so every
move leaves the room unchanged and every episode ends stuck; a prompt setting the probe cannot
render is refused."""
import pytest
from bench_loader import load_bench


def test_an_untrained_model_is_stuck_in_every_episode(capsys):
    probe = load_bench("greedy_probe")
    assert probe.main(["roll-tiny://tiny", "--episodes", "3"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert "success 0, stuck 3, some_noops 0, all_effective 0" in out[-2]
    assert out[-1] == "RESULT success=0.000 stuck=1.000 noop_share=1.000"


def test_prompts_other_than_observation_only_are_refused(tmp_path):
    probe = load_bench("greedy_probe")
    cfg = tmp_path / "c.yaml"
    cfg.write_text("custom_envs:\n  S:\n    env_id: roll/Sokoban-v0\n    include_instruction: true\n")
    with pytest.raises(SystemExit):
        probe.main(["roll-tiny://tiny", "--config", str(cfg), "--tag", "S"])


def test_first_move_scores_the_one_move_answers(capsys):
    probe = load_bench("greedy_probe")
    assert probe.main(["roll-tiny://tiny", "--episodes", "3", "--first-move"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    fields = dict(kv.split("=") for kv in out[-1].split()[1:])
    assert set(fields) == {"success", "stuck", "noop_share", "top_prob", "entropy", "top_optimal", "p_optimal"}
    # a distribution over the four moves: its top is at least uniform's, its entropy at most
    assert 0.25 <= float(fields["top_prob"]) <= 1.0 and 0.0 <= float(fields["entropy"]) <= 1.387
    assert fields["top_optimal"] in ("0.000", "0.333", "0.667", "1.000")  # a share of 3 rooms
    assert 0.0 < float(fields["p_optimal"]) < 1.0  # every room has an optimal move, and not every move is


def test_optimal_moves_follow_the_solver():
    import gymnasium as gym

    import envs  # noqa: F401  (registers the roll/ envs)
    from envs.agents import format_answer

    probe = load_bench("greedy_probe")
    for seed in range(5):
        env = gym.make("roll/Sokoban-v0", search_depth=6, min_solution_length=2, max_steps=8)
        env.reset(seed=seed)
        words = list(env.unwrapped.action_words)
        first = env.unwrapped.expert_plan()[0]
        marks = probe.optimal_moves(env, [format_answer([w]) for w in words])
        assert marks[words.index(first)]  # the solver's own first move
        assert not all(marks)  # the rooms need 2+ moves: some move does not shorten the plan
        # the copies left the env untouched: its plan is unchanged
        assert env.unwrapped.expert_plan()[0] == first


def test_feedback_templates_render_the_env_managers_feedback_line(capsys, monkeypatch):
    """multi_env_grpo.yaml's tags show `{feedback}`: the probe accepts them and renders the line the
    env manager would (the untrained model's answers are no moves, so from turn 2 on every prompt
    says so)."""
    import roll.rollout.env_manager as em

    shown = []
    real = em.format_turn

    def recording(template, **fields):
        shown.append(fields.get("feedback", ""))
        return real(template, **fields)

    monkeypatch.setattr(em, "format_turn", recording)
    probe = load_bench("greedy_probe")
    assert probe.main(["roll-tiny://tiny", "--config", "configs/agentic/learning/multi_env_grpo.yaml",
                       "--tag", "LargerSokoban", "--episodes", "2"]) == 0
    assert "success 0, stuck 2" in capsys.readouterr().out
    assert len(shown) == 2 * 8  # two episodes, eight turns each
    assert shown[:2] == ["", ""]  # the first turn follows reset
    assert all(f.startswith("\nYour last answer was not an action here:") for f in shown[2:])
