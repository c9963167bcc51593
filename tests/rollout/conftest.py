"""Fixtures of the rollout tests: the tiny tokenizer, test envs, and builders."""
from __future__ import annotations

import pytest
from rollout_fakes import register_test_envs


@pytest.fixture(scope="session")
def tok(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture(scope="session", autouse=True)
def _test_envs():
    register_test_envs()
