"""Generate the small multi-domain RLVR data set shipped in ``data/rlvr/``.

    python -m roll.data.rlvr_gen --out data/rlvr [--seed 0] [--math 300] ...

Domains (tag: reward):

- ``math`` (math_rule): arithmetic, linear equations (integer solutions) and countdown
  (reach a target with given numbers; the reward checks the expression itself);
- ``code`` (code_sandbox): the problems of roll/CodeSandbox-v0 (envs/code/problems);
- ``ifeval`` (ifeval): writing prompts with 1-3 verifiable constraints;
- ``mcq`` (multiple_choice): procedurally generated multiple-choice reasoning items;
- ``qa`` (llm_judge): short open questions with reference answers, graded by a judge model.

Everything is generated from a seed: the same command writes the same files. Each domain gets
``<tag>_train.jsonl`` and ``<tag>_val.jsonl`` (held-out items, disjoint from train).
"""
from __future__ import annotations

import argparse
import importlib
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

MAX_TEST_CHARS = 4000
BOXED = "Put the final answer in \\boxed{}."


# ---------------------------------------------------------------------------------------- math
def arithmetic(rng: random.Random) -> dict[str, Any]:
    op = rng.choice("+-*")
    a, b = rng.randint(0, 20 if op == "*" else 99), rng.randint(0, 20 if op == "*" else 99)
    value = {"+": a + b, "-": a - b, "*": a * b}[op]
    return {"kind": "arithmetic", "prompt": f"What is {a} {op} {b}? {BOXED}", "ground_truth": str(value)}


def linear_equation(rng: random.Random) -> dict[str, Any]:
    x = rng.randint(-12, 12)
    a = rng.choice([i for i in range(-9, 10) if i not in (0,)])
    b = rng.randint(-30, 30)
    c = a * x + b
    sign = "+" if b >= 0 else "-"
    return {"kind": "linear_equation", "prompt": f"Solve for x: {a}x {sign} {abs(b)} = {c}. {BOXED}",
            "ground_truth": str(x)}


def countdown(rng: random.Random) -> dict[str, Any]:
    # build a reachable target from a random expression over the numbers
    nums = [rng.randint(1, 12) for _ in range(rng.choice([3, 4]))]
    value, expr = nums[0], str(nums[0])
    for n in nums[1:]:
        op = rng.choice("+-*")
        value = {"+": value + n, "-": value - n, "*": value * n}[op]
        expr = f"({expr} {op} {n})"
    return {"kind": "countdown", "prompt": (f"Using the numbers {nums}, each at most once, and + - * / and brackets, "
                                            f"write an expression equal to {value}. {BOXED}"),
            "ground_truth": str(value), "countdown_numbers": nums, "reference_expression": expr}


def gen_math(rng: random.Random, n: int) -> list[dict]:
    makers = [arithmetic, linear_equation, countdown]
    return [dict(makers[i % 3](rng), tag="math") for i in range(n)]


# ---------------------------------------------------------------------------------------- code
def gen_code() -> list[dict]:
    # roll/ never imports roll.envs statically (layout rule); the problem set lives there
    problems = importlib.import_module("roll.envs.code.problems").load_problems()
    out = []
    for p in problems:
        s = p.to_sample()
        # a few problems carry stress tests of megabytes; the shipped file keeps the small ones
        small = [t for t in s["tests"] if len(json.dumps(t)) <= MAX_TEST_CHARS]
        if not small:
            continue
        s["tests"] = small
        s["prompt"] = s["prompt"] + "\n\nAnswer with the complete program in a ```python code block."
        out.append(s)
    return out


# ---------------------------------------------------------------------------------------- ifeval
TOPICS = ["the ocean", "a rainy day", "learning to cook", "the moon", "trains", "a small village", "winter",
          "friendship", "robots", "a library", "the desert", "music", "gardening", "a city at night", "bicycles"]

CONSTRAINTS: list[tuple[Callable[[random.Random], dict], Callable[[dict], str]]] = [
    (lambda r: {"type": "word_count", "max": r.choice([10, 20, 30])}, lambda c: f"Use at most {c['max']} words."),
    (lambda r: {"type": "word_count", "min": r.choice([5, 8])}, lambda c: f"Use at least {c['min']} words."),
    (lambda r: {"type": "sentence_count", "max": r.choice([1, 2])}, lambda c: f"Write at most {c['max']} sentences."),
    (lambda r: {"type": "keywords_present", "keywords": [r.choice(["blue", "quiet", "bright", "old"])]},
     lambda c: f"Include the word \"{c['keywords'][0]}\"."),
    (lambda r: {"type": "keywords_absent", "keywords": [r.choice(["very", "the", "and"])]},
     lambda c: f"Do not use the word \"{c['keywords'][0]}\"."),
    (lambda r: {"type": "bullet_count", "n": r.choice([2, 3])}, lambda c: f"Answer with exactly {c['n']} bullet points (lines starting with \"* \")."),
    (lambda r: {"type": "json_format"}, lambda c: "Wrap the whole answer in JSON."),
    (lambda r: {"type": "lowercase"}, lambda c: "Write only in lowercase letters."),
    (lambda r: {"type": "uppercase"}, lambda c: "Write only in capital letters."),
    (lambda r: {"type": "starts_with", "phrase": r.choice(["Yes", "Once", "Dear reader"])},
     lambda c: f"Start your answer with \"{c['phrase']}\"."),
    (lambda r: {"type": "ends_with", "phrase": r.choice(["The end.", "Thank you."])},
     lambda c: f"End your answer with \"{c['phrase']}\"."),
    (lambda r: {"type": "no_commas"}, lambda c: "Do not use any commas."),
    (lambda r: {"type": "title"}, lambda c: "Give it a title in double angle brackets, like <<title>>."),
    (lambda r: {"type": "postscript"}, lambda c: "End with a postscript starting with P.S."),
]
_EXCLUSIVE = {frozenset({"lowercase", "uppercase"}), frozenset({"json_format", "bullet_count"})}


def gen_ifeval(rng: random.Random, n: int) -> list[dict]:
    out = []
    for i in range(n):
        picks: list[tuple[dict, str]] = []
        for _ in range(rng.choice([1, 2, 3])):
            make, say = rng.choice(CONSTRAINTS)
            c = make(rng)
            kinds = {p[0]["type"] for p in picks}
            if c["type"] in kinds or any(frozenset({c["type"], k}) in _EXCLUSIVE for k in kinds):
                continue
            picks.append((c, say(c)))
        topic = rng.choice(TOPICS)
        prompt = f"Write about {topic}. " + " ".join(s for _, s in picks)
        out.append({"tag": "ifeval", "prompt": prompt, "constraints": [c for c, _ in picks]})
    return out


# ---------------------------------------------------------------------------------------- mcq
def _mc(rng: random.Random, question: str, correct: str, wrong: list[str]) -> dict:
    options = [correct] + wrong[:3]
    rng.shuffle(options)
    letters = "ABCD"
    body = "\n".join(f"{letters[i]}) {o}" for i, o in enumerate(options))
    return {"tag": "mcq", "prompt": f"{question}\n{body}\nAnswer with the letter of the correct option.",
            "choices": options, "ground_truth": letters[options.index(correct)]}


def _distinct_wrong(rng: random.Random, correct: int, spread: int = 5) -> list[str]:
    wrong: set[int] = set()
    while len(wrong) < 3:
        w = correct + rng.choice([d for d in range(-spread, spread + 1) if d])
        wrong.add(w)
    return [str(w) for w in wrong]


def mcq_largest(rng: random.Random) -> dict:
    nums = rng.sample(range(1, 100), 4)
    return _mc(rng, "Which number is the largest?", str(max(nums)), [str(x) for x in nums if x != max(nums)])


def mcq_sequence(rng: random.Random) -> dict:
    start, step = rng.randint(1, 20), rng.randint(2, 9)
    seq = [start + k * step for k in range(4)]
    nxt = start + 4 * step
    return _mc(rng, f"What comes next in the sequence {', '.join(map(str, seq))}, ...?", str(nxt), _distinct_wrong(rng, nxt))


WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]


def mcq_weekday(rng: random.Random) -> dict:
    d, k = rng.randrange(7), rng.randint(2, 20)
    correct = WEEKDAYS[(d + k) % 7]
    wrong = [w for w in WEEKDAYS if w != correct]
    rng.shuffle(wrong)
    return _mc(rng, f"Today is {WEEKDAYS[d]}. What day of the week is it in {k} days?", correct, wrong)


def mcq_parity(rng: random.Random) -> dict:
    evens = [2 * rng.randint(1, 49) for _ in range(3)]
    odd = 2 * rng.randint(1, 49) + 1
    return _mc(rng, "Which number is odd?", str(odd), [str(e) for e in evens])


def gen_mcq(rng: random.Random, n: int) -> list[dict]:
    makers = [mcq_largest, mcq_sequence, mcq_weekday, mcq_parity]
    return [makers[i % len(makers)](rng) for i in range(n)]


# ---------------------------------------------------------------------------------------- qa
QA_FACTS = [
    ("What is the capital of France?", "Paris"), ("What is the capital of Japan?", "Tokyo"),
    ("What is the capital of Italy?", "Rome"), ("What is the capital of Spain?", "Madrid"),
    ("What is the capital of Canada?", "Ottawa"), ("What is the capital of Egypt?", "Cairo"),
    ("How many legs does a spider have?", "8"), ("How many days are in a week?", "7"),
    ("What gas do plants take in from the air?", "Carbon dioxide"), ("What is frozen water called?", "Ice"),
    ("Which planet is closest to the sun?", "Mercury"), ("What color is the sky on a clear day?", "Blue"),
    ("How many minutes are in an hour?", "60"), ("What do bees make?", "Honey"),
    ("Which animal is known as the king of the jungle?", "The lion"), ("What is the largest ocean?", "The Pacific Ocean"),
    ("How many continents are there?", "7"), ("What is the boiling point of water in Celsius at sea level?", "100 degrees"),
    ("Which organ pumps blood through the body?", "The heart"), ("What is the opposite of hot?", "Cold"),
]


def gen_qa() -> list[dict]:
    return [{"tag": "qa", "prompt": q + " Answer briefly.", "ground_truth": a} for q, a in QA_FACTS]


# ---------------------------------------------------------------------------------------- files
def split(items: list[dict], n_val: int, rng: random.Random) -> tuple[list[dict], list[dict]]:
    # held-out prompts must not also appear in train (duplicates from small generators)
    seen: set[str] = set()
    unique = []
    for it in items:
        if it["prompt"] not in seen:
            seen.add(it["prompt"])
            unique.append(it)
    rng.shuffle(unique)
    return unique[n_val:], unique[:n_val]


def write_jsonl(path: Path, items: list[dict]) -> None:
    with path.open("w", encoding="utf-8") as f:
        for it in items:
            f.write(json.dumps(it, ensure_ascii=False, sort_keys=True) + "\n")


def generate(out: str, seed: int = 0, n_math: int = 300, n_ifeval: int = 120, n_mcq: int = 160,
             val_fraction: float = 0.25) -> dict[str, tuple[int, int]]:
    """Write ``<tag>_train.jsonl`` / ``<tag>_val.jsonl`` per domain; returns the sizes."""
    rng = random.Random(seed)
    domains = {"math": gen_math(rng, n_math), "code": gen_code(), "ifeval": gen_ifeval(rng, n_ifeval),
               "mcq": gen_mcq(rng, n_mcq), "qa": gen_qa()}
    root = Path(out)
    root.mkdir(parents=True, exist_ok=True)
    sizes = {}
    for tag, items in domains.items():
        train, val = split(items, max(1, int(len(items) * val_fraction)), rng)
        for i, it in enumerate(train):
            it.setdefault("id", f"{tag}-train-{i}")
        for i, it in enumerate(val):
            it.setdefault("id", f"{tag}-val-{i}")
        write_jsonl(root / f"{tag}_train.jsonl", train)
        write_jsonl(root / f"{tag}_val.jsonl", val)
        sizes[tag] = (len(train), len(val))
    return sizes


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="data/rlvr")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--math", type=int, default=300)
    p.add_argument("--ifeval", type=int, default=120)
    p.add_argument("--mcq", type=int, default=160)
    args = p.parse_args(argv)
    sizes = generate(args.out, args.seed, args.math, args.ifeval, args.mcq)
    for tag, (tr, va) in sizes.items():
        print(f"{tag}: {tr} train, {va} val -> {args.out}/{tag}_train.jsonl, {tag}_val.jsonl")


if __name__ == "__main__":
    main()
