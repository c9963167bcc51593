"""Strict config loading: composition, interpolation, overrides and error messages."""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from roll.config import (
    ConfigError,
    EnvConfig,
    PipelineConfig,
    TrainingArgs,
    WorkerConfig,
    build_dataclass,
    load_config,
    load_raw,
    parse_overrides,
    to_dict,
)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip())
    return path


def errors_of(fn, *args, **kwargs) -> list[str]:
    with pytest.raises(ConfigError) as info:
        fn(*args, **kwargs)
    return info.value.errors


@pytest.fixture
def base(tmp_path) -> Path:
    return write(tmp_path / "base.yaml", """
        exp_name: base_run
        pretrain: roll-tiny://tiny
        max_steps: 3
        actor_train:
          training_args:
            lr: 1.0e-5
            per_device_train_batch_size: 2
          strategy_args:
            strategy_name: torch_train
            strategy_config:
              parallel: ddp
        actor_infer:
          model_name_or_path: ${pretrain}
          generating_args:
            max_new_tokens: 32
        custom_envs:
          sokoban:
            env_id: roll/Sokoban-v0
            max_turns: 5
        train_env_manager:
          tags: [sokoban]
          group_size: 4
    """)


def test_minimal_file_validates_with_defaults(tmp_path):
    cfg = load_config(write(tmp_path / "empty.yaml", "{}"))
    assert isinstance(cfg, PipelineConfig)
    assert cfg.output_dir == "./output/roll"  # default interpolation resolved
    assert cfg.source_path == str((tmp_path / "empty.yaml").resolve())


def test_unknown_key_names_full_path_and_suggests(base):
    errors = errors_of(load_config, base, ["actor_train.trainig_args.lr=1"])
    assert errors == ["actor_train.trainig_args: unknown key; did you mean 'training_args'?"]


def test_unknown_nested_key_in_yaml(tmp_path):
    path = write(tmp_path / "c.yaml", """
        custom_envs:
          sokoban:
            env_id: roll/Sokoban-v0
            max_turn: 5
        algorithm:
          adv_estimater: gae
    """)
    errors = errors_of(load_config, path)
    assert "custom_envs.sokoban.max_turn: unknown key; did you mean 'max_turns'?" in errors
    assert "algorithm.adv_estimater: unknown key; did you mean 'adv_estimator'?" in errors
    assert len(errors) == 2  # every problem at once


def test_unknown_key_without_close_match_lists_valid_keys(tmp_path):
    errors = errors_of(load_config, write(tmp_path / "c.yaml", "ray:\n  zzzzzz: 1\n"))
    assert errors[0].startswith("ray.zzzzzz: unknown key; valid keys: address, num_cpus")


def test_wrong_type_names_path_expected_and_given(base):
    errors = errors_of(load_config, base, ["actor_train.training_args.lr=fast", "max_steps=true"])
    assert "actor_train.training_args.lr: expected float, got 'fast' (str)" in errors
    assert "max_steps: expected int, got True (bool)" in errors


def test_wrong_type_in_list_and_literal(base):
    errors = errors_of(load_config, base, ["tracking.track_with=[stdout,3]", "rollout.mode=asyn"])
    assert "tracking.track_with[1]: expected str, got 3 (int)" in errors
    assert any(e.startswith("rollout.mode: expected one of 'sync' | 'async', got 'asyn'; did you mean 'async'?") for e in errors)


def test_int_is_accepted_for_float(base):
    cfg = load_config(base, ["actor_train.training_args.lr=1"])
    assert cfg.actor_train.training_args.lr == 1.0 and isinstance(cfg.actor_train.training_args.lr, float)


def test_missing_required_field(tmp_path):
    path = write(tmp_path / "c.yaml", """
        custom_envs:
          lake:
            max_turns: 3
        rewards:
          math: {}
    """)
    errors = errors_of(load_config, path)
    assert "custom_envs.lake.env_id: required field is missing (str)" in errors
    assert "rewards.math.reward_fn: required field is missing (str)" in errors


def test_mapping_expected(tmp_path):
    errors = errors_of(load_config, write(tmp_path / "c.yaml", "actor_train: 3\n"))
    assert errors == ["actor_train: expected a mapping (WorkerConfig), got 3"]


def test_error_message_format():
    err = ConfigError(["a: one", "b: two"])
    assert str(err) == "invalid config (2 problems):\n  - a: one\n  - b: two"
    assert str(ConfigError(["x"])).startswith("invalid config (1 problem):")


def test_defaults_composition_across_files(tmp_path, base):
    write(tmp_path / "fragments" / "tracking.yaml", """
        tracking:
          track_with: [jsonl, tensorboard]
          project: composed
    """)
    child = write(tmp_path / "exps" / "child.yaml", """
        defaults:
          - ../base
          - ../fragments/tracking.yaml
        exp_name: child_run
        actor_train:
          training_args:
            lr: 2.0e-6
    """)
    cfg = load_config(child)
    assert cfg.exp_name == "child_run"
    assert cfg.actor_train.training_args.lr == 2e-6
    # Siblings of an overridden key survive the deep merge.
    assert cfg.actor_train.training_args.per_device_train_batch_size == 2
    assert cfg.actor_train.strategy_args.strategy_name == "torch_train"
    assert cfg.tracking.track_with == ["jsonl", "tensorboard"] and cfg.tracking.project == "composed"
    assert cfg.custom_envs["sokoban"].env_id == "roll/Sokoban-v0"
    assert cfg.output_dir == "./output/child_run"


def test_defaults_chain_and_order(tmp_path):
    write(tmp_path / "a.yaml", "max_steps: 1\nseed: 1\n")
    write(tmp_path / "b.yaml", "defaults: [a]\nmax_steps: 2\n")
    write(tmp_path / "c.yaml", "seed: 3\n")
    top = write(tmp_path / "top.yaml", "defaults: [b, c]\n")
    cfg = load_config(top)
    assert (cfg.max_steps, cfg.seed) == (2, 3)  # later defaults override earlier ones


def test_defaults_errors(tmp_path):
    missing = write(tmp_path / "m.yaml", "defaults: [nope]\n")
    assert any("config file not found" in e and "nope.yaml" in e for e in errors_of(load_config, missing))
    write(tmp_path / "x.yaml", "defaults: [y]\n")
    write(tmp_path / "y.yaml", "defaults: [x]\n")
    assert any("defaults cycle" in e for e in errors_of(load_config, tmp_path / "x.yaml"))
    bad = write(tmp_path / "bad.yaml", "defaults: {a: 1}\n")
    assert any("'defaults' must be a list" in e for e in errors_of(load_config, bad))


def test_not_yaml_and_not_mapping(tmp_path):
    assert any("not valid YAML" in e for e in errors_of(load_config, write(tmp_path / "a.yaml", "a: [1, 2\n")))
    assert any("top level must be a mapping" in e for e in errors_of(load_config, write(tmp_path / "b.yaml", "- 1\n")))


def test_interpolation_and_override_of_its_source(base):
    cfg = load_config(base)
    assert cfg.actor_infer.model_name_or_path == "roll-tiny://tiny"
    assert cfg.output_dir == "./output/base_run"
    cfg = load_config(base, ["pretrain=/models/other", "exp_name=renamed"])
    # Overriding the source reaches every use of it: interpolation resolves after overrides.
    assert cfg.actor_infer.model_name_or_path == "/models/other"
    assert cfg.output_dir == "./output/renamed"


def test_interpolation_errors_are_config_errors(tmp_path):
    path = write(tmp_path / "c.yaml", "exp_name: ${does_not_exist}\n")
    assert any("interpolation failed" in e for e in errors_of(load_config, path))


def test_dotted_overrides(base):
    cfg = load_config(base, [
        "actor_train.training_args.lr=1e-5",
        "tracking.track_with=[stdout]",
        "custom_envs.sokoban.env_kwargs.dim_room=[6,6]",
        "+val_env_manager.tags=[sokoban]",
        "reference.model_name_or_path=roll-tiny://small",
    ])
    assert cfg.actor_train.training_args.lr == 1e-5
    assert cfg.tracking.track_with == ["stdout"]
    assert cfg.custom_envs["sokoban"].env_kwargs == {"dim_room": [6, 6]}
    assert cfg.val_env_manager.tags == ["sokoban"]
    assert isinstance(cfg.reference, WorkerConfig) and cfg.reference.model_name_or_path == "roll-tiny://small"


def test_override_of_another_container_type_is_a_config_error(base):
    # OmegaConf raises a bare TypeError when a mapping meets a list (found by tests/faults fuzzing)
    errors = errors_of(load_config, base, ["tracking.track_with=[stdout]", "tracking.track_with={}"])
    assert errors and errors[0].startswith("override 'tracking.track_with={}' does not fit")


def test_override_syntax_errors():
    assert any("dotted.key=value" in e for e in errors_of(parse_overrides, ["no_equals_sign"]))
    assert any("empty key" in e for e in errors_of(parse_overrides, ["=3"]))


def test_strategy_config_passes_through_untouched(base):
    cfg = load_config(base, [
        "actor_infer.strategy_args.strategy_name=vllm",
        "actor_infer.strategy_args.strategy_config.gpu_memory_utilizaton=0.6",  # a typo is the backend's business
        "actor_infer.strategy_args.strategy_config.compilation_config.cudagraph_capture_sizes=[1,2,4]",
    ])
    sc = cfg.actor_infer.strategy_args.strategy_config
    assert sc == {"gpu_memory_utilizaton": 0.6, "compilation_config": {"cudagraph_capture_sizes": [1, 2, 4]}}
    assert cfg.actor_train.strategy_args.strategy_config == {"parallel": "ddp"}


def test_optional_sections(base):
    cfg = load_config(base, ["reference=null"])
    assert cfg.reference is None and cfg.critic is None
    cfg = load_config(base, ["critic.training_args.lr=1e-4"])
    assert cfg.critic.training_args.lr == 1e-4


def test_build_dataclass_directly_and_round_trip():
    args = build_dataclass(TrainingArgs, {"lr": 3e-4, "adam_betas": [0.9, 0.95]})
    assert args.lr == 3e-4 and args.adam_betas == [0.9, 0.95]
    env = build_dataclass(EnvConfig, {"env_id": "roll/Sokoban-v0"}, path="custom_envs.s")
    assert env.max_turns == 10
    errors = errors_of(build_dataclass, EnvConfig, {"max_turns": "many"})
    assert "max_turns: expected int, got 'many' (str)" in errors and "env_id: required field is missing (str)" in errors


def test_resolved_config_round_trips(base, tmp_path):
    import yaml

    cfg = load_config(base, ["exp_name=rt"])
    dumped = write(tmp_path / "resolved.yaml", yaml.safe_dump(to_dict(cfg)))
    again = load_config(dumped)
    again.source_path = cfg.source_path
    assert to_dict(again) == to_dict(cfg)


def test_load_raw_keeps_unvalidated_data(base):
    raw = load_raw(base, ["anything.goes=1"])
    assert raw["anything"] == {"goes": 1} and raw["actor_infer"]["model_name_or_path"] == "roll-tiny://tiny"
