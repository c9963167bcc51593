"""A tiny Qwen2-style causal LM and a locally trained tokenizer, built from a seed.

Tests, demos and CPU runs need a real model directory loaded by the ordinary
``AutoModelForCausalLM.from_pretrained`` / ``AutoTokenizer.from_pretrained`` path, without
downloading anything. This module builds one:

* the tokenizer is a byte-level BPE trained with the ``tokenizers`` library on text generated
  in :mod:`roll.models.tiny_corpus` (always seed 0, so every size shares one tokenizer);
* the model is ``Qwen2ForCausalLM`` with random weights from ``seed``.

Tokenizer design. On a ``qwen2`` model directory, transformers 5 ``AutoTokenizer`` always
instantiates ``Qwen2Tokenizer``, which rebuilds the normalizer (NFC) and pre-tokenizer (Qwen's
split regex + byte-level) from scratch and keeps only vocab and merges. So the tokenizer uses
exactly that pipeline, and tokenizes identically whichever class loads it
(``Qwen2Tokenizer``, ``Qwen2TokenizerFast`` in transformers 4, ``PreTrainedTokenizerFast``,
vLLM). Grid predictability comes from the merges instead: no merge joins two env grid
symbols (``# _ O √ X P S G``, the XSB set ``@ + $ * . -``, and newline), so every grid cell
is exactly one token and a tiny model sees a fixed token per cell.
"""
from __future__ import annotations

import fcntl
import functools
import json
import os
import re
import shutil
import tempfile
from pathlib import Path

TINY_VERSION = "v2"
"""Bump when the tokenizer corpus, the chat template or the architecture changes, so caches are rebuilt."""

SCHEME = "roll-tiny://"

SIZES: dict[str, dict[str, int]] = {
    # ~1.2M parameters: the unit-test model.
    "tiny": dict(hidden_size=128, intermediate_size=384, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2),
    # ~10M parameters: integration tests and CPU demos that should learn something.
    "small": dict(hidden_size=384, intermediate_size=1024, num_hidden_layers=6, num_attention_heads=6, num_key_value_heads=2),
    # ~50M parameters: benchmarks.
    "medium": dict(hidden_size=640, intermediate_size=1920, num_hidden_layers=10, num_attention_heads=10, num_key_value_heads=2),
}

PAD_TOKEN = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS = [PAD_TOKEN, IM_START, IM_END]
TAG_TOKENS = ["<think>", "</think>", "<answer>", "</answer>"]
"""Single added tokens that decode back as text (not special)."""

GRID_SYMBOLS = ["#", "_", "O", "√", "X", "P", "S", "G"]
"""Cell symbols of the shipped grid envs (Sokoban and FrozenLake); each is one token."""
XSB_SYMBOLS = ["@", "+", "$", "*", ".", "-"]
"""Cell symbols of the standard Sokoban text format (XSB), also kept one token per cell."""

TOKENIZER_VOCAB_SIZE = 3072
MAX_POSITION_EMBEDDINGS = 8192

# Qwen2's pre-tokenizer split pattern (a fact of the Qwen2 tokenizer format, which
# Qwen2Tokenizer re-creates on load): letters with one leading non-letter, single digits,
# punctuation runs with trailing newlines, whitespace.
QWEN2_SPLIT = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)

_GRID_CHARS = "".join(GRID_SYMBOLS + XSB_SYMBOLS) + "\n"
_ALWAYS_SPLIT = "#_√\n"  # symbols that separate cells wherever they appear
_CONTEXT_SPLIT = "OXPSG@+$*.-"  # split only next to other cell symbols: they occur in words and code
# Used only while training: cut grid symbols apart so no merge across cells is learned,
# while letters O X P S G still merge inside ordinary words ("Sokoban", "Output").


def _char_class(chars: str) -> str:
    return "".join("\\" + c if c in "-]\\^[" else c for c in chars)


_TRAIN_ISOLATE = (
    rf"[{_char_class(_ALWAYS_SPLIT)}]|(?<![^{_char_class(_GRID_CHARS)}])"
    rf"[{_char_class(_CONTEXT_SPLIT)}](?![^{_char_class(_GRID_CHARS)}])"
)

# ChatML, plus tools the Qwen2.5 / Hermes way (``tools=`` in a system block, assistant
# ``tool_calls`` as <tool_call> JSON, runs of ``tool`` messages in one user turn of
# <tool_response> blocks). Conversations without tools render exactly as before.
CHAT_TEMPLATE = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages and messages[0]['role'] == 'system' %}{{- messages[0]['content'] + '\\n\\n' }}{%- endif %}"
    "{{- '# Tools\\n\\nYou may call these functions:\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' + (tool | tojson) }}{%- endfor %}"
    "{{- '\\n</tools>\\n\\nTo call a function, write a JSON object with its name and arguments inside "
    "<tool_call></tool_call> tags:\\n<tool_call>\\n{\"name\": <function-name>, \"arguments\": <args-json-object>}"
    "\\n</tool_call><|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if tools and loop.first and message['role'] == 'system' %}"
    "{%- elif message['role'] == 'tool' %}"
    "{%- if loop.first or messages[loop.index0 - 1]['role'] != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + message['content'] + '\\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1]['role'] != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- elif message['role'] == 'assistant' and message['tool_calls'] is defined and message['tool_calls'] %}"
    "{{- '<|im_start|>assistant' }}"
    "{%- if message['content'] %}{{- '\\n' + message['content'] }}{%- endif %}"
    "{%- for call in message['tool_calls'] %}"
    "{%- set fn = call['function'] if call['function'] is defined else call %}"
    "{%- set args = fn['arguments'] if fn['arguments'] is string else (fn['arguments'] | tojson) %}"
    "{{- '\\n<tool_call>\\n{\"name\": \"' + fn['name'] + '\", \"arguments\": ' + args + '}\\n</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


class TinyModelError(ValueError):
    """Unknown size or unusable cache."""


def _byte_level_str(text: str) -> str:
    """``text`` in the byte-level alphabet that BPE tokens are written in."""
    from tokenizers import pre_tokenizers

    pieces = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False).pre_tokenize_str(text)
    return "".join(p for p, _ in pieces)


def _filter_merges(merges: list, vocab: dict[str, int], keep: set[str]) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """Drop every merge that joins two cell symbols or touches a cell separator, then every
    merge built on a dropped token; renumber the vocabulary densely in its original order."""
    separators = {_byte_level_str(c) for c in _ALWAYS_SPLIT}
    grid_pieces = {_byte_level_str(c) for c in _GRID_CHARS}

    def grid_only(token: str) -> bool:
        rest = token
        while rest:
            for piece in grid_pieces:
                if rest.startswith(piece):
                    rest = rest[len(piece):]
                    break
            else:
                return False
        return True

    produced = {a + b for a, b in (m if isinstance(m, (list, tuple)) else m.split(" ") for m in merges)}
    available = {t for t in vocab if t not in produced or t in keep}  # bytes alphabet, added tokens
    kept: list[tuple[str, str]] = []
    for m in merges:
        a, b = m if isinstance(m, (list, tuple)) else m.split(" ")
        if a not in available or b not in available or a + b in keep:
            continue
        if a in separators or b in separators or (grid_only(a) and grid_only(b)):
            continue
        kept.append((a, b))
        available.add(a + b)
    ordered = sorted((t for t in available), key=lambda t: vocab[t])
    return {t: i for i, t in enumerate(ordered)}, kept


@functools.lru_cache(maxsize=1)
def _tokenizer_json() -> str:
    """Train the tokenizer (deterministic) and return its tokenizer.json text."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    from roll.models.tiny_corpus import corpus

    trainer_tok = Tokenizer(models.BPE())
    trainer_tok.normalizer = normalizers.NFC()
    trainer_tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(_TRAIN_ISOLATE), behavior="isolated"),
        pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    trainer = trainers.BpeTrainer(
        vocab_size=TOKENIZER_VOCAB_SIZE,
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS + TAG_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    # Added tokens are cut out of the text before counting, as they are at encode time (the
    # trainer would otherwise count them as words and spend merges spelling them).
    added = re.compile("|".join(re.escape(t) for t in SPECIAL_TOKENS + TAG_TOKENS))
    pieces = (p for doc in corpus(seed=0) for p in added.split(doc) if p)
    trainer_tok.train_from_iterator(pieces, trainer)
    trained = json.loads(trainer_tok.to_str())["model"]
    vocab, merges = _filter_merges(trained["merges"], trained["vocab"], set(SPECIAL_TOKENS + TAG_TOKENS))

    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in TAG_TOKENS])
    return tok.to_str()


def build_tokenizer():
    """The tiny tokenizer as a transformers tokenizer (not yet saved)."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(_tokenizer_json()),
        eos_token=IM_END,
        pad_token=PAD_TOKEN,
        unk_token=None,
        bos_token=None,
        chat_template=CHAT_TEMPLATE,
        clean_up_tokenization_spaces=False,
        model_max_length=MAX_POSITION_EMBEDDINGS,
    )


def build_model(size: str = "tiny", seed: int = 0, vocab_size: int | None = None, pad_id: int = 0, eos_id: int = 2):
    """A randomly initialised float32 Qwen2ForCausalLM of ``size``; same seed, same weights."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    if size not in SIZES:
        raise TinyModelError(f"unknown tiny model size {size!r}; choose one of {', '.join(SIZES)}")
    config = Qwen2Config(
        vocab_size=vocab_size or TOKENIZER_VOCAB_SIZE,
        max_position_embeddings=MAX_POSITION_EMBEDDINGS,
        tie_word_embeddings=True,
        use_sliding_window=False,
        rms_norm_eps=1e-6,
        bos_token_id=pad_id,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        dtype="float32",
        **SIZES[size],
    )
    state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
    finally:  # do not disturb the caller's random stream
        torch.random.set_rng_state(state)
    model.generation_config.eos_token_id = [eos_id, pad_id]
    model.generation_config.pad_token_id = pad_id
    model.generation_config.bos_token_id = pad_id
    return model.float().eval()


def build_tiny(size: str = "tiny", seed: int = 0):
    """``(model, tokenizer)`` in memory: what :func:`save_tiny_model` writes."""
    if size not in SIZES:
        raise TinyModelError(f"unknown tiny model size {size!r}; choose one of {', '.join(SIZES)}")
    tokenizer = build_tokenizer()
    model = build_model(
        size, seed, vocab_size=len(tokenizer),
        pad_id=tokenizer.convert_tokens_to_ids(PAD_TOKEN), eos_id=tokenizer.convert_tokens_to_ids(IM_END),
    )
    return model, tokenizer


def write_tiny_model(model, tokenizer, out_dir: str | os.PathLike, **info) -> str:
    """Save a model and the tiny tokenizer as one ``from_pretrained`` directory."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    _patch_tokenizer_config(out)
    (out / "roll_tiny.json").write_text(json.dumps({"version": TINY_VERSION, **info}) + "\n")
    return str(out)


def save_tiny_model(out_dir: str | os.PathLike, size: str = "tiny", seed: int = 0) -> str:
    """Build the tokenizer and a ``size`` model from ``seed`` and save both to ``out_dir``."""
    model, tokenizer = build_tiny(size, seed)
    return write_tiny_model(model, tokenizer, out_dir, size=size, seed=seed)


def _patch_tokenizer_config(out: Path) -> None:
    """Name the class AutoTokenizer picks for qwen2 anyway, so every transformers version
    agrees on it, and keep decoding byte-exact (no space clean-up)."""
    path = out / "tokenizer_config.json"
    cfg = json.loads(path.read_text())
    cfg["tokenizer_class"] = "Qwen2Tokenizer"
    cfg["clean_up_tokenization_spaces"] = False
    cfg["add_prefix_space"] = False
    cfg.setdefault("chat_template", CHAT_TEMPLATE)
    path.write_text(json.dumps(cfg, indent=2, ensure_ascii=False) + "\n")


def cache_dir() -> Path:
    """``$ROLL_CACHE_DIR`` or ``~/.cache/roll``."""
    root = os.environ.get("ROLL_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "roll")
    return Path(root)


def tiny_model_path(size: str = "tiny") -> str:
    """Path of the cached tiny model of ``size`` (seed 0), built on first use.

    Built in a temporary directory next to the target and renamed into place, under a file
    lock, so concurrent test processes and Ray workers never see a half-written model.
    """
    if size not in SIZES:
        raise TinyModelError(f"unknown tiny model size {size!r}; choose one of {', '.join(SIZES)}")
    parent = cache_dir() / "models"
    target = parent / f"{size}-{TINY_VERSION}"
    if (target / "config.json").exists():
        return str(target)
    parent.mkdir(parents=True, exist_ok=True)
    with open(parent / f".{size}-{TINY_VERSION}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not (target / "config.json").exists():
                tmp = Path(tempfile.mkdtemp(prefix=f".{size}-build-", dir=parent))
                try:
                    save_tiny_model(tmp, size=size, seed=0)
                    os.chmod(tmp, 0o755)  # mkdtemp makes it private; the cache is shared
                    if target.exists():  # a broken leftover without config.json
                        shutil.rmtree(target)
                    os.rename(tmp, target)
                finally:
                    if tmp.exists():
                        shutil.rmtree(tmp, ignore_errors=True)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return str(target)


def resolve_model_path(name_or_path: str) -> str:
    """``roll-tiny://tiny|small|medium`` -> the cached directory; anything else unchanged."""
    if isinstance(name_or_path, str) and name_or_path.startswith(SCHEME):
        size = name_or_path[len(SCHEME):].strip("/")
        if size not in SIZES:
            raise TinyModelError(
                f"unknown tiny model {name_or_path!r}; choose one of "
                + ", ".join(SCHEME + s for s in SIZES)
            )
        return tiny_model_path(size)
    return name_or_path
