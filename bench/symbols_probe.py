"""Can a model tell the different-symbol Sokoban's pieces apart? A probe of the multi-env chain.

The multi-env learning run (bench/learning.py --envs multi) trains on simple Sokoban
(``# _ O X P``: wall, floor, target, box, player) and FrozenLake, and validates on
roll/SokobanXSB-v0, the same rooms in the XSB symbols (``# - . $ @``). A pretrained LLM has met
XSB in its pretraining text; the tiny model starts from random weights, so the only thing it
knows of a symbol is its embedding row. Its embeddings are tied to the LM head: a token never
produced as a target has its row pushed down by every softmax (it is never the answer), the same
direction for every such token.

For each model this prints the cosine similarity between the input embeddings of the two
symbol sets: at initialisation all pairs are near 0; if after training the four XSB symbols
that differ from the training rendering are nearly parallel to each other, the model's input
cannot tell the box from the target, the player or the floor in that rendering, whatever RL does.

    python bench/symbols_probe.py                  # the chain's SFT and GRPO models next to the untrained one
    python bench/symbols_probe.py --models output/learning/bench/full/multi/sft/final_model

Prints only (the finding is written up in docs/benchmarks.md, Learning). Ends with
``RESULT xsb_cos_mean=... trained_cos_mean=...`` for the last model: the mean pairwise cosine
among the XSB symbols that differ from the training ones, and among the training ones.
"""
from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parent.parent
TRAINED = {"floor": "_", "target": "O", "box": "X", "player": "P"}
XSB = {"floor": "-", "target": ".", "box": "$", "player": "@"}
CHAIN = ROOT / "output/learning/bench/full/multi"


def mean_cos(emb, ids: list[int]) -> float:
    import torch

    e = torch.nn.functional.normalize(emb[ids], dim=-1)
    return float(sum((e[i] @ e[j]) for i, j in itertools.combinations(range(len(ids)), 2)) / (len(ids) * (len(ids) - 1) / 2))


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", nargs="+", default=None,
                   help="model directories or roll-tiny:// names (default: untrained, then the multi chain's sft and grpo)")
    args = p.parse_args(argv)
    import torch
    from roll.workers.base import resolve_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    models = args.models or ["roll-tiny://tiny", *(str(CHAIN / s / "final_model") for s in ("sft", "grpo")
                                                   if (CHAIN / s / "final_model").exists())]
    syms = [*TRAINED.values(), *XSB.values()]
    width = max(len(m) for m in models)
    print(f"{'model':<{width}}  xsb pairs  trained pairs  " + "  ".join(f"{k}: {TRAINED[k]}~{XSB[k]}" for k in TRAINED))
    for name in models:
        path = resolve_model(name) if name.startswith("roll-tiny://") else name
        tok = AutoTokenizer.from_pretrained(path)
        ids = []
        for s in syms:
            t = tok.encode(s, add_special_tokens=False)
            if len(t) != 1:
                raise SystemExit(f"{name}: symbol {s!r} is {len(t)} tokens; the probe compares single-token symbols")
            ids.append(t[0])
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
        emb = model.get_input_embeddings().weight.detach()
        n = len(TRAINED)
        xsb, trained = mean_cos(emb, ids[n:]), mean_cos(emb, ids[:n])
        e = torch.nn.functional.normalize(emb[ids], dim=-1)
        same_piece = "  ".join(f"{float(e[i] @ e[i + n]):+.2f}" for i in range(n))
        print(f"{name:<{width}}  {xsb:+9.2f}  {trained:+13.2f}  {same_piece}", flush=True)
    print(f"RESULT xsb_cos_mean={xsb:.3f} trained_cos_mean={trained:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
