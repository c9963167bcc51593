"""Every YAML under configs/ loads, validates and names only things that exist; the config
reference in docs/config.md is fresh; every config field is documented."""
from __future__ import annotations

import dataclasses
import importlib
import inspect
import subprocess
import sys
import textwrap
import typing
import warnings
from pathlib import Path

import pytest

import roll.config.algorithm
import roll.config.roles
import roll.config.rollout
import roll.config.schema
from roll.config import PipelineConfig, field_docs, load_config
from roll.registry import ADVANTAGES, FILTERS, PIPELINES, POLICY_LOSSES, REWARDS, STRATEGIES, TRACKERS, Registry

REPO = Path(__file__).resolve().parents[1]
CONFIG_FILES = sorted(p for ext in ("*.yaml", "*.yml") for p in (REPO / "configs").rglob(ext))


def _registered(registry: Registry, id: str) -> bool | None:
    """Whether ``id`` is registered; None when the registry's builtin module does not exist yet."""
    try:
        return id in registry
    except ModuleNotFoundError as e:
        if e.name in registry._autoload:
            return None
        raise


def _roles(cfg: PipelineConfig):
    roles = {"actor_train": cfg.actor_train, "actor_infer": cfg.actor_infer, "reference": cfg.reference, "critic": cfg.critic}
    roles.update({f"rewards.{name}.judge": r.judge for name, r in cfg.rewards.items()})
    return {k: v for k, v in roles.items() if v is not None}


def semantic_problems(cfg: PipelineConfig) -> list[str]:
    """What validation by type cannot see: ids that name nothing registered, unknown env tags."""
    import gymnasium

    import roll.envs  # noqa: F401  (tests may import envs; registers the shipped ones)

    for module in cfg.imports:
        importlib.import_module(module)
    checks: list[tuple[str, Registry, str]] = [("pipeline", PIPELINES, cfg.pipeline)]
    checks += [(f"{role}.strategy_args.strategy_name", STRATEGIES, w.strategy_args.strategy_name) for role, w in _roles(cfg).items()]
    checks += [("algorithm.adv_estimator", ADVANTAGES, cfg.algorithm.adv_estimator),
               ("algorithm.policy_loss", POLICY_LOSSES, cfg.algorithm.policy_loss)]
    checks += [(f"rewards.{name}.reward_fn", REWARDS, r.reward_fn) for name, r in cfg.rewards.items()]
    checks += [("tracking.track_with", TRACKERS, t) for t in cfg.tracking.track_with]
    managers = {"train_env_manager": cfg.train_env_manager, "val_env_manager": cfg.val_env_manager}
    checks += [(f"{n}.group_filter", FILTERS, m.group_filter) for n, m in managers.items() if m is not None and m.group_filter]
    problems, unchecked = [], []
    for where, registry, id in checks:
        found = _registered(registry, id)
        if found is None:
            unchecked.append(where)
        elif not found:
            problems.append(f"{where}: {id!r} is not a registered {registry.kind}")
    if unchecked:
        warnings.warn(f"not checked yet (registry module missing): {', '.join(unchecked)}")
    for tag, env in cfg.custom_envs.items():
        if env.env_id not in gymnasium.registry:
            problems.append(f"custom_envs.{tag}.env_id: {env.env_id!r} is not a registered gymnasium env")
    for name, manager in managers.items():
        if manager is None:
            continue
        problems += [f"{name}.tags: {t!r} is not a key of custom_envs" for t in manager.tags if t not in cfg.custom_envs]
        if manager.num_groups_partition and len(manager.num_groups_partition) != len(manager.tags):
            problems.append(f"{name}.num_groups_partition: needs one entry per tag")
    return problems


@pytest.mark.parametrize("path", CONFIG_FILES, ids=[str(p.relative_to(REPO)) for p in CONFIG_FILES])
def test_shipped_config_validates(path):
    from roll.pipelines.chain import is_chain_file, load_chain

    if is_chain_file(path):  # a chain (`stages:`): every stage's resolved config
        _, stages = load_chain(path)
        assert [f"{st.name}: {p}" for st in stages for p in semantic_problems(st.cfg)] == []
        return
    cfg = load_config(path)
    assert semantic_problems(cfg) == []


def _registered_env_id() -> str | None:
    import gymnasium

    import roll.envs  # noqa: F401

    ids = sorted(i for i, s in gymnasium.registry.items() if s.namespace == "roll")
    return ids[0] if ids else None


def test_written_config_validates(tmp_path):
    """A config composed from two files, interpolating and overridden: the shape of every
    shipped config, checked even while configs/ holds none of a kind."""
    env_id = _registered_env_id()
    envs = f"""
        custom_envs:
          main:
            env_id: {env_id}
            max_turns: 3
        train_env_manager:
          tags: [main]
          group_size: 2
    """ if env_id else ""
    (tmp_path / "base.yaml").write_text(textwrap.dedent("""
        pipeline: agentic
        exp_name: written
        pretrain: roll-tiny://tiny
        tracking:
          track_with: [stdout, jsonl]
        actor_train:
          strategy_args:
            strategy_name: torch_train
            strategy_config: {parallel: ddp, anything: {passes: through}}
          training_args: {lr: 1.0e-5}
        actor_infer:
          model_name_or_path: ${pretrain}
          strategy_args: {strategy_name: hf_infer}
        algorithm: {adv_estimator: grpo, policy_loss: ppo_clip}
    """))
    (tmp_path / "run.yaml").write_text("defaults: [base]\nmax_steps: 2\n" + textwrap.dedent(envs))
    cfg = load_config(tmp_path / "run.yaml", ["pretrain=roll-tiny://small"])
    assert cfg.actor_infer.model_name_or_path == "roll-tiny://small"
    assert cfg.output_dir == "./output/written"
    assert cfg.actor_train.strategy_args.strategy_config["anything"] == {"passes": "through"}
    assert semantic_problems(cfg) == []


def test_semantic_check_catches_unknown_names(tmp_path):
    (tmp_path / "bad.yaml").write_text(textwrap.dedent("""
        pipeline: agentc
        actor_infer: {strategy_args: {strategy_name: vlm}}
        algorithm: {adv_estimator: gpro}
        tracking: {track_with: [tensorbord]}
        custom_envs:
          lake: {env_id: roll/NoSuchEnv-v0}
        train_env_manager: {tags: [lake, ocean]}
    """))
    problems = semantic_problems(load_config(tmp_path / "bad.yaml"))
    assert "pipeline: 'agentc' is not a registered pipeline" in problems
    assert "actor_infer.strategy_args.strategy_name: 'vlm' is not a registered strategy" in problems
    assert "algorithm.adv_estimator: 'gpro' is not a registered advantage estimator" in problems
    assert "tracking.track_with: 'tensorbord' is not a registered tracker" in problems
    assert "custom_envs.lake.env_id: 'roll/NoSuchEnv-v0' is not a registered gymnasium env" in problems
    assert "train_env_manager.tags: 'ocean' is not a key of custom_envs" in problems


def test_config_docs_are_fresh():
    result = subprocess.run([sys.executable, "-m", "roll.config.docs", "--check"], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert result.returncode == 0, result.stderr + "\nrun `python -m roll.config.docs` to regenerate docs/config.md"


def _config_dataclasses() -> list[type]:
    """Every dataclass defined in roll/config, plus any reachable from PipelineConfig."""
    found: dict[type, None] = {}
    for module in (roll.config.schema, roll.config.roles, roll.config.rollout, roll.config.algorithm):
        for _, obj in inspect.getmembers(module, dataclasses.is_dataclass):
            if isinstance(obj, type) and obj.__module__.startswith("roll.config"):
                found[obj] = None
    stack = [PipelineConfig]
    while stack:
        cls = stack.pop()
        found[cls] = None
        for tp in typing.get_type_hints(cls).values():
            for arg in (tp, *typing.get_args(tp), *(a for t in typing.get_args(tp) for a in typing.get_args(t))):
                if dataclasses.is_dataclass(arg) and arg not in found:
                    stack.append(arg)
    return sorted(found, key=lambda c: c.__name__)


def test_every_config_field_has_a_docstring():
    classes = _config_dataclasses()
    assert len(classes) >= 10
    missing = []
    for cls in classes:
        if not (cls.__doc__ or "").strip() or (cls.__doc__ or "").startswith(cls.__name__ + "("):
            missing.append(f"{cls.__name__} (class docstring)")
        docs = field_docs(cls)
        missing += [f"{cls.__name__}.{f.name}" for f in dataclasses.fields(cls) if not docs.get(f.name, "").strip()]
    assert not missing, "fields without a docstring (a string literal right under the field):\n" + "\n".join(missing)
