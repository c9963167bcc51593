"""The tiny model kit: deterministic build, from_pretrained round trip, tokenizer behaviour."""
from __future__ import annotations

import itertools
import json
import random
import threading
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from roll.models import tiny
from roll.models.tiny_corpus import (
    english_text,
    frozen_lake_grid,
    grid_episode,
    math_problem,
    python_snippet,
    sokoban_grid,
    webshop_episode,
)


@pytest.fixture(scope="module")
def built():
    """The in-memory tokenizer (before any save) and the reloaded one from the cached dir."""
    from roll.models.tiny import tiny_model_path

    path = tiny_model_path("tiny")
    return tiny.build_tokenizer(), AutoTokenizer.from_pretrained(path), path


def _samples() -> list[str]:
    rng = random.Random(1234)  # not the training seed: unseen texts
    gens = [sokoban_grid, frozen_lake_grid, grid_episode, webshop_episode, python_snippet, math_problem, english_text]
    texts = [g(rng) for g in gens for _ in range(15)]
    texts += [
        "", " ", "\n\n", "#######\n#@ $.*#\n#+---##\n#######", "  leading and trailing  ", "tab\tseparated\tvalues", "√√√", "#_O√XPSG",
        "<think>reason</think><answer>Left</answer>", "<answer> Up, Right </answer>",
        "search[noise cancelling headphones] click[< prev] click[buy now]",
        "Unicode: naïve café – “quotes” 日本語 😀", "x = 3.14159e-10; y = -42 // 7",
    ]
    return texts


def test_tokenizer_training_is_deterministic():
    again = tiny._tokenizer_json.__wrapped__()
    assert again == tiny._tokenizer_json()


def test_model_build_is_deterministic_and_seeded():
    a = tiny.build_model("tiny", seed=7, vocab_size=300)
    b = tiny.build_model("tiny", seed=7, vocab_size=300)
    c = tiny.build_model("tiny", seed=8, vocab_size=300)
    for (name, pa), (_, pb), (_, pc) in zip(a.state_dict().items(), b.state_dict().items(), c.state_dict().items()):
        assert torch.equal(pa, pb), name
    assert any(not torch.equal(pa, pc) for pa, pc in zip(a.state_dict().values(), c.state_dict().values()))


def test_sizes_and_dtype():
    path = tiny.tiny_model_path("tiny")
    model = AutoModelForCausalLM.from_pretrained(path)
    n = sum(p.numel() for p in model.parameters())
    assert 0.8e6 < n < 2e6
    assert model.dtype == torch.float32
    assert model.config.model_type == "qwen2"
    assert model.config.tie_word_embeddings
    small = tiny.build_model("small", vocab_size=model.config.vocab_size)
    assert 7e6 < sum(p.numel() for p in small.parameters()) < 14e6


def test_greedy_continuation_identical_after_reload(tmp_path):
    model, tokenizer = tiny.build_tiny("tiny", seed=3)
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "State:\n#####\n#P_X#\n#__O#\n#####\nDecide the next action:"}],
        tokenize=False, add_generation_prompt=True,
    )
    ids = torch.tensor([tokenizer.encode(prompt)])
    with torch.no_grad():
        before = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=24, do_sample=False)
        logits_before = model(ids).logits
    path = tiny.write_tiny_model(model, tokenizer, tmp_path / "m", size="tiny", seed=3)
    reloaded = AutoModelForCausalLM.from_pretrained(path)
    tok2 = AutoTokenizer.from_pretrained(path)
    ids2 = torch.tensor([tok2.encode(prompt)])
    assert torch.equal(ids, ids2)
    with torch.no_grad():
        after = reloaded.generate(ids2, attention_mask=torch.ones_like(ids2), max_new_tokens=24, do_sample=False)
        logits_after = reloaded(ids2).logits
    assert before.shape[1] > ids.shape[1]
    assert torch.equal(before, after)
    assert torch.allclose(logits_before, logits_after, atol=0, rtol=0)


def test_token_ids_round_trip(built):
    in_memory, reloaded, _ = built
    assert len(in_memory) == len(reloaded)
    for text in _samples():
        ids = in_memory.encode(text)
        assert reloaded.encode(text) == ids, text
        assert reloaded.decode(ids) == text, text
        assert in_memory.decode(ids) == text, text


def test_vocab_matches_model(built):
    _, tok, path = built
    config = json.loads((Path(path) / "config.json").read_text())
    assert config["vocab_size"] == len(tok)
    assert 2000 <= len(tok) <= 4096
    assert config["eos_token_id"] == tok.convert_tokens_to_ids("<|im_end|>") == tok.eos_token_id
    assert config["pad_token_id"] == tok.pad_token_id == tok.convert_tokens_to_ids("<|endoftext|>")
    gen = json.loads((Path(path) / "generation_config.json").read_text())
    assert tok.eos_token_id in gen["eos_token_id"]


def test_grid_symbols_are_one_token_each(built):
    _, tok, _ = built
    cells = tiny.GRID_SYMBOLS + tiny.XSB_SYMBOLS + ["\n"]
    ids = {c: tok.encode(c) for c in cells}
    assert all(len(v) == 1 for v in ids.values()), ids
    for combo in itertools.product(cells, repeat=3):
        text = "".join(combo)
        assert tok.encode(text) == [ids[c][0] for c in combo], repr(text)
    rng = random.Random(5)
    for grid in [sokoban_grid(rng) for _ in range(20)] + [frozen_lake_grid(rng) for _ in range(20)]:
        assert tok.encode(grid) == [ids[c][0] for c in grid]


def test_tags_are_single_non_special_tokens(built):
    _, tok, _ = built
    text = "<think>the box is left</think><answer>Left</answer>"
    for tag in tiny.TAG_TOKENS:
        assert len(tok.encode(tag)) == 1
    ids = tok.encode(text + "<|im_end|>")
    assert tok.decode(ids, skip_special_tokens=True) == text
    assert tok.decode(ids) == text + "<|im_end|>"
    for special in tiny.SPECIAL_TOKENS:
        assert len(tok.encode(special)) == 1


def test_chat_template(built):
    _, tok, _ = built
    messages = [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Push the box."},
        {"role": "assistant", "content": "<answer>Up</answer>"},
        {"role": "user", "content": "Again."},
    ]
    expected = (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\nPush the box.<|im_end|>\n"
        "<|im_start|>assistant\n<answer>Up</answer><|im_end|>\n"
        "<|im_start|>user\nAgain.<|im_end|>\n"
    )
    assert tok.apply_chat_template(messages, tokenize=False) == expected
    with_prompt = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert with_prompt == expected + "<|im_start|>assistant\n"
    ids = tok.encode(with_prompt)
    tail = tok.encode("<|im_start|>assistant\n")
    assert tail[0] == tok.convert_tokens_to_ids("<|im_start|>") and ids[-len(tail):] == tail
    assert tok.decode(ids) == with_prompt
    assert ids.count(tok.convert_tokens_to_ids("<|im_start|>")) == 5


def _roll_env_ids() -> list[str]:
    import gymnasium

    try:
        import roll.envs  # noqa: F401  (tests may import envs; roll/ itself must not)
    except ImportError:
        return []
    return sorted(i for i, spec in gymnasium.registry.items() if spec.namespace == "roll")


@pytest.mark.parametrize("env_id", _roll_env_ids())
def test_env_observations_round_trip(env_id, built):
    import gymnasium

    in_memory, reloaded, _ = built
    env = gymnasium.make(env_id, disable_env_checker=True)
    try:
        texts = []
        for seed in range(3):
            obs, info = env.reset(seed=seed)
            texts += [obs, info.get("instruction", "")]
            plan = getattr(env.unwrapped, "expert_plan", None)
            for action in (plan() if callable(plan) else [])[:2]:
                obs, *_ = env.step(f"<answer>{action}</answer>")
                texts.append(obs)
    finally:
        env.close()
    assert texts and all(isinstance(t, str) for t in texts)
    cells = set(tiny.GRID_SYMBOLS + tiny.XSB_SYMBOLS)
    for text in texts:
        ids = in_memory.encode(text)
        assert reloaded.encode(text) == ids
        assert reloaded.decode(ids) == text
        for line in text.split("\n"):  # grid rows: one token per cell
            if len(line) > 2 and set(line) <= cells:
                assert len(reloaded.encode(line)) == len(line), line


def test_cached_path_builds_once_under_concurrency(tmp_path, monkeypatch):
    monkeypatch.setenv("ROLL_CACHE_DIR", str(tmp_path))
    calls = []
    real = tiny.save_tiny_model

    def counting(out_dir, size="tiny", seed=0):
        calls.append(out_dir)
        return real(out_dir, size=size, seed=seed)

    monkeypatch.setattr(tiny, "save_tiny_model", counting)
    results: list[str] = []
    threads = [threading.Thread(target=lambda: results.append(tiny.tiny_model_path("tiny"))) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1
    assert len(set(results)) == 1 and results[0] == str(tmp_path / "models" / f"tiny-{tiny.TINY_VERSION}")
    assert sorted(p.name for p in (tmp_path / "models").iterdir() if not p.name.startswith(".")) == [f"tiny-{tiny.TINY_VERSION}"]
    assert tiny.resolve_model_path("roll-tiny://tiny") == results[0]
    assert len(calls) == 1


def test_resolve_model_path():
    assert tiny.resolve_model_path("/some/dir") == "/some/dir"
    assert tiny.resolve_model_path("Qwen/Qwen2.5-0.5B-Instruct") == "Qwen/Qwen2.5-0.5B-Instruct"
    with pytest.raises(tiny.TinyModelError, match="roll-tiny://small"):
        tiny.resolve_model_path("roll-tiny://huge")
    with pytest.raises(tiny.TinyModelError):
        tiny.save_tiny_model("/tmp/unused", size="huge")
