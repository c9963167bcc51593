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
