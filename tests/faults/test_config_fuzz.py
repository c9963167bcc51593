"""Fuzzing config values: any value at any config key, given as a CLI override, ends in a
usable plan or a config error listing the problem; never a crash with a traceback."""
from __future__ import annotations

import dataclasses
import typing
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from roll.cli import main as roll_main
from roll.config import load_config

REPO = Path(__file__).resolve().parents[2]
CONFIGS = [REPO / "configs/agentic/sokoban_cpu.yaml", REPO / "configs/rlvr/multi_domain_cpu.yaml"]


def _dotted_keys(obj, prefix: str = "") -> list[str]:
    """Every leaf key of a loaded config, dotted (mappings of user data included)."""
    keys = []
    if dataclasses.is_dataclass(obj):
        items = [(f.name, getattr(obj, f.name)) for f in dataclasses.fields(obj)]
    elif isinstance(obj, dict):
        items = list(obj.items())
    else:
        return [prefix.rstrip(".")]
    for name, value in items:
        if not isinstance(name, str) or not name.isidentifier():
            continue
        sub = _dotted_keys(value, f"{prefix}{name}.")
        keys.extend(sub if sub else [f"{prefix}{name}"])
    return keys


_scalar = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-10**6, max_value=10**6),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(["", "x", "-1", "1e400", "nan", "roll/NoSuchEnv-v0",
                                                                    "/no/such/path", "fsdp9", "gae"]),
)
_value = st.one_of(_scalar, st.lists(_scalar, max_size=3), st.dictionaries(st.sampled_from(["a", "b"]), _scalar, max_size=2))


def _override(key: str, value) -> str:
    return f"{key}={yaml.safe_dump(value, default_flow_style=True, width=10**6).strip().removesuffix('...').strip()}"


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.stem)
def test_any_value_at_any_key_is_a_config_error_or_a_plan(config, capsys):
    keys = _dotted_keys(load_config(str(config), []))
    assert len(keys) > 50  # the walk reached the nested sections

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
    @given(picks=st.lists(st.tuples(st.sampled_from(keys), _value), min_size=1, max_size=3))
    def check(picks):
        overrides = [_override(k, v) for k, v in picks]
        rc = roll_main(["plan", str(config), *overrides])  # an unexpected exception fails the test
        assert rc in (0, 1, 2), (overrides, rc)
        err = capsys.readouterr().err
        if rc == 2:
            assert err.startswith("roll: ") and "Traceback" not in err, err

    check()
