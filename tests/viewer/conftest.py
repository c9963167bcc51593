"""A real 2-step agentic run on the tiny model, shared by the viewer's integration tests."""
from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def agentic_run(tmp_path_factory, ray_cluster) -> Path:
    """multi_env_cpu (two training env tags, three validation tags) for 2 steps with validation
    at steps 0 and 2, cut to one group of 4 episodes per training tag so it takes seconds."""
    from roll.cli import main as roll_main

    out = tmp_path_factory.mktemp("viewer") / "run"
    rc = roll_main(["run", str(REPO / "configs/agentic/multi_env_cpu.yaml"), "max_steps=2", "eval_steps=2",
                    "save_steps=0", "show_progress=false", "rollout_batch_size=8", "val_batch_size=3",
                    "train_env_manager.num_groups_partition=[1,1]", f"output_dir={out}"])
    assert rc == 0
    return out
