"""YAML loading: `defaults:` composition, `${...}` interpolation, dotted overrides.

A config file may start with ``defaults: [path, ...]``: each path (relative to the file,
``.yaml`` optional) is loaded first, recursively, and merged in order; the file's own keys
override them. Interpolation (``${exp_name}``, ``${oc.env:HOME}``) is resolved by OmegaConf
after every merge and override, so an override of ``exp_name`` reaches every use of it.
"""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, Iterable

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from roll.config.validate import ConfigError, build_dataclass


def _read_yaml(path: Path) -> dict:
    try:
        with open(path) as f:
            data = yaml.safe_load(f)
    except FileNotFoundError:
        raise ConfigError([f"config file not found: {path}"]) from None
    except yaml.YAMLError as e:
        raise ConfigError([f"{path}: not valid YAML: {e}"]) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError([f"{path}: the top level must be a mapping, got {type(data).__name__}"])
    return data


def _resolve_default(base: Path, name: str) -> Path:
    candidate = (base.parent / name).resolve()
    if candidate.suffix not in (".yaml", ".yml"):
        candidate = candidate.with_suffix(".yaml")
    return candidate


def _compose(path: Path, chain: tuple[Path, ...] = ()) -> DictConfig:
    path = path.resolve()
    if path in chain:
        cycle = " -> ".join(str(p) for p in chain + (path,))
        raise ConfigError([f"defaults cycle: {cycle}"])
    data = _read_yaml(path)
    defaults = data.pop("defaults", []) or []
    if isinstance(defaults, str):
        defaults = [defaults]
    if not isinstance(defaults, list) or not all(isinstance(d, str) for d in defaults):
        raise ConfigError([f"{path}: 'defaults' must be a list of file paths, got {defaults!r}"])
    merged = OmegaConf.create({})
    for name in defaults:
        merged = OmegaConf.merge(merged, _compose(_resolve_default(path, name), chain + (path,)))
    try:
        return OmegaConf.merge(merged, OmegaConf.create(data))
    except OmegaConfBaseException as e:
        raise ConfigError([f"{path}: {e}"]) from None


def parse_overrides(overrides: Iterable[str]) -> DictConfig:
    """``a.b=1`` strings -> a config; values are parsed as YAML (``lr=1e-5`` is a float)."""
    items = []
    for o in overrides:
        if "=" not in o:
            raise ConfigError([f"override {o!r} must look like dotted.key=value"])
        key, value = o.split("=", 1)
        key = key.lstrip("+")
        if not key:
            raise ConfigError([f"override {o!r} has an empty key"])
        items.append(f"{key}={value}")
    try:
        return OmegaConf.from_dotlist(items)
    except OmegaConfBaseException as e:
        raise ConfigError([f"bad override: {e}"]) from None


def load_raw(path: str | os.PathLike, overrides: Iterable[str] = (), base: dict | None = None) -> dict[str, Any]:
    """Compose, override and resolve a config file into plain data (not yet validated);
    ``base`` holds values the file and overrides sit on top of."""
    cfg = _compose(Path(path))
    if base:
        try:
            cfg = OmegaConf.merge(OmegaConf.create(base), cfg)
        except (OmegaConfBaseException, TypeError, ValueError) as e:
            raise ConfigError([f"{path}: {e}"]) from None
    for o in overrides:  # one at a time, so a conflict names its override
        try:
            cfg = OmegaConf.merge(cfg, parse_overrides([o]))
        except (OmegaConfBaseException, TypeError, ValueError) as e:
            # e.g. a mapping given where the file has a list: OmegaConf raises a bare TypeError
            raise ConfigError([f"override {o!r} does not fit the config's value there: {e}"]) from None
    try:
        data = OmegaConf.to_container(cfg, resolve=True)
    except OmegaConfBaseException as e:
        raise ConfigError([f"interpolation failed: {e}"]) from None
    assert isinstance(data, dict)
    return data


def load_config(path: str | os.PathLike, overrides: Iterable[str] = (), schema: type | None = None):
    """Load, compose, override, resolve and validate a pipeline config."""
    if schema is None:
        from roll.config.schema import PipelineConfig

        schema = PipelineConfig
    # Top-level scalar defaults join the resolution, so a default that interpolates
    # (output_dir: ./output/${exp_name}) and a file using ${pretrain} both resolve.
    base = {f.name: f.default for f in dataclasses.fields(schema) if isinstance(f.default, (str, int, float, bool))}
    data = load_raw(path, overrides, base)
    cfg = build_dataclass(schema, data)
    if hasattr(cfg, "source_path"):
        cfg.source_path = str(Path(path).resolve())
    return cfg
