"""Fixtures of the endpoint tests: the tiny tokenizer (tool-aware chat template)."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tok(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)
