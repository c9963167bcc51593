"""Typed configs: dataclass schemas, YAML composition, overrides and strict validation."""
from roll.config.loader import load_config, load_raw, parse_overrides
from roll.config.schema import *  # noqa: F401,F403
from roll.config.schema import PipelineConfig
from roll.config.validate import ConfigError, build_dataclass, field_docs, to_dict

__all__ = ["load_config", "load_raw", "parse_overrides", "ConfigError", "build_dataclass",
           "field_docs", "to_dict", "PipelineConfig"]
