"""The text the tiny tokenizer is trained on, generated in code from a seed.

It covers what the shipped environments and RLVR domains show a model: Sokoban and
FrozenLake grids with their legends and action words, WebShop pages and
``search[...]`` / ``click[...]`` actions, Python code, arithmetic and school maths, English
instructions, the ``<think>``/``<answer>`` format and the chat markup. Nothing is read from
disk or the network, so the tokenizer is the same on every machine.
"""
from __future__ import annotations

import random
from typing import Callable, Iterator

ACTIONS = ["Up", "Down", "Left", "Right"]

SOKOBAN_LEGEND = (
    "Symbols: # Wall | _ Floor | O Target | X Box | P You | √ Box on Target | S You on Target"
)
FROZEN_LAKE_LEGEND = (
    "Symbols: P Player | _ Frozen | O Hole | G Goal | X Player in Hole | √ Player on Goal"
)

_NAMES = ["Alice", "Bob", "Carol", "Dan", "Eve", "Frank", "Grace", "Heidi", "Ivan", "Judy",
          "Tom", "Mia", "Leo", "Zoe", "Sam", "Nina", "Omar", "Lucy", "Ravi", "Wen"]
_THINGS = ["apples", "books", "pencils", "marbles", "cookies", "coins", "stickers", "cards",
           "oranges", "tickets", "shells", "stamps", "flowers", "eggs", "bottles", "boxes"]
_WORDS = (
    "the a an of to in and or is are was be for with on at by from this that it as not you "
    "your we they he she his her their our can will would should must may might have has had "
    "do does did make take move push pull go reach find get keep avoid wall box target goal "
    "player hole ice floor grid map puzzle game step turn action answer think reason plan "
    "left right up down next first then after before until when while if only each every all "
    "some many more less most least number value result total sum product difference problem "
    "question solve check test function code return list string input output print file line "
    "search click buy item product price size color page results back instruction option "
    "good better best small large new old long short fast slow high low true false yes no"
).split()

_ADJ = ["red", "blue", "black", "white", "green", "grey", "pink", "navy", "organic", "vegan",
        "gluten free", "long lasting", "waterproof", "wireless", "portable", "lightweight",
        "natural", "sugar free", "stainless steel", "cotton", "leather", "wooden", "soft",
        "heavy duty", "easy to clean", "high power", "non slip", "eco friendly", "slim fit"]
_NOUNS = ["t-shirt", "shoes", "sneakers", "jacket", "dress", "hoodie", "backpack", "wallet",
          "shampoo", "conditioner", "lotion", "deodorant", "toothpaste", "tea", "coffee",
          "snack bars", "cookies", "headphones", "speaker", "charger", "phone case",
          "desk lamp", "pillow", "blanket", "curtains", "water bottle", "yoga mat", "candle",
          "sunglasses", "watch", "hair dryer", "face mask", "protein powder", "dog treats"]
_SIZES = ["small", "medium", "large", "x-large", "xx-large", "6", "7", "8", "9", "10", "11",
          "12 ounce", "16 ounce", "3.4 fl oz", "6.76 fl oz", "pack of 2", "pack of 6"]
_COLORS = ["black", "white", "navy blue", "red", "green", "beige", "brown", "grey", "pink",
           "purple", "gold", "silver", "multicolor"]

_INSTRUCTIONS = [
    "Answer the question and put the final answer in <answer></answer>.",
    "Think step by step inside <think></think>, then give your answer in <answer></answer>.",
    "Write a Python function that solves the task. Return only the code.",
    "Read the problem carefully. Show your reasoning, then state the final answer.",
    "You are a helpful assistant. Follow the user's instructions exactly.",
    "Respond in at most {n} words.",
    "Your response must contain exactly {n} bullet points.",
    "Write your answer in all lowercase letters.",
    "Do not use any commas in your response.",
    "End your response with the phrase \"Is there anything else I can help with?\"",
    "Wrap your entire response in double quotation marks.",
    "Include the keywords {w1} and {w2} in the response.",
    "Give a title wrapped in double angular brackets, such as <<{w1} and {w2}>>.",
    "Summarize the text below in one sentence.",
    "Translate the following sentence into simple English.",
]


def sokoban_grid(rng: random.Random) -> str:
    """A random Sokoban room drawn with the env symbols (not necessarily solvable)."""
    h, w = rng.randint(5, 9), rng.randint(5, 9)
    grid = [["#" if r in (0, h - 1) or c in (0, w - 1) else "_" for c in range(w)] for r in range(h)]
    inner = [(r, c) for r in range(1, h - 1) for c in range(1, w - 1)]
    rng.shuffle(inner)
    n_boxes = rng.randint(1, 3)
    for r, c in inner[: rng.randint(0, len(inner) // 4)]:
        grid[r][c] = "#"
    free = [(r, c) for r, c in inner if grid[r][c] == "_"]
    rng.shuffle(free)
    for i in range(min(n_boxes, len(free) // 3)):
        (tr, tc), (br, bc) = free[2 * i], free[2 * i + 1]
        if rng.random() < 0.25:
            grid[tr][tc] = "√"
        else:
            grid[tr][tc], grid[br][bc] = "O", "X"
    pr, pc = free[-1]
    grid[pr][pc] = "S" if rng.random() < 0.1 else "P"
    return "\n".join("".join(row) for row in grid)


def frozen_lake_grid(rng: random.Random) -> str:
    n = rng.choice([3, 4, 4, 5, 6, 8])
    grid = [["O" if rng.random() < 0.2 else "_" for _ in range(n)] for _ in range(n)]
    grid[0][0] = rng.choice(["P", "P", "P", "_"])
    grid[n - 1][n - 1] = "G"
    if grid[0][0] == "_":
        r, c = rng.randrange(n), rng.randrange(n)
        grid[r][c] = rng.choice(["P", "X", "√"])
    return "\n".join("".join(row) for row in grid)


def _think_answer(rng: random.Random, answer: str, thought: str) -> str:
    if rng.random() < 0.3:
        return f"<answer>{answer}</answer>"
    return f"<think>{thought}</think><answer>{answer}</answer>"


def grid_episode(rng: random.Random) -> str:
    sokoban = rng.random() < 0.6
    if sokoban:
        intro = ("You are solving the Sokoban puzzle. You are the player and you need to push all "
                 "boxes to targets. When you are right next to a box, you can push it by moving in "
                 "the same direction. You cannot push a box through a wall, and you cannot pull a box.")
        legend, make = SOKOBAN_LEGEND, sokoban_grid
    else:
        intro = ("You are solving the FrozenLake game. Avoid the holes and walk to the goal. The ice "
                 "is slippery, so you may move in an unintended direction.")
        legend, make = FROZEN_LAKE_LEGEND, frozen_lake_grid
    fmt = ("Always output: <think> [your thoughts] </think> <answer> [your answer] </answer> "
           f"with no extra text. Actions: {', '.join(ACTIONS)}. Example: <answer>{rng.choice(ACTIONS)}</answer>")
    parts = [intro, legend, fmt]
    for turn in range(1, rng.randint(2, 5)):
        left = rng.randint(1, 20)
        parts.append(f"Turn {turn}:\nState:\n{make(rng)}\nYou have {left} actions left. Decide the next action:")
        k = rng.randint(1, 3)
        acts = [rng.choice(ACTIONS) for _ in range(k)]
        thought = rng.choice([
            f"The box is to the {acts[0].lower()} of me, so I move {acts[0].lower()}.",
            f"I should go {acts[0].lower()} to get closer to the target.",
            "The hole is below me, so I must not move down.",
            f"Moving {acts[0].lower()} keeps the box away from the wall.",
        ])
        parts.append(_think_answer(rng, ", ".join(acts) if rng.random() < 0.7 else " || ".join(acts), thought))
        parts.append(rng.choice(["Reward: 0.0", "Reward: -0.1", "Reward: 1.0", "Invalid action.",
                                 "The action had no effect.", "Success! All boxes are on targets."]))
    return "\n".join(parts)


def _product(rng: random.Random) -> tuple[str, str, str]:
    # Mostly digits: random letter runs would only spend merges on noise.
    asin = "B0" + "".join(rng.choice("0123456789" * 4 + "ABCDEFGHJKLMNPQRSTUVWXYZ") for _ in range(8))
    title = f"{rng.choice(['Brand', 'Acme', 'Nova', 'Zen', 'Peak', 'Luna'])} {rng.choice(_ADJ)} {rng.choice(_NOUNS)}"
    price = f"${rng.randint(2, 150)}.{rng.randint(0, 99):02d}"
    return asin, title.title() if rng.random() < 0.5 else title, price


def webshop_episode(rng: random.Random) -> str:
    want = f"{rng.choice(_ADJ)} {rng.choice(_NOUNS)}"
    budget = f"{rng.randint(10, 100)}.00"
    instr = (f"i need a {want} in {rng.choice(_COLORS)} color, size {rng.choice(_SIZES)}, "
             f"and price lower than {budget} dollars")
    products = [_product(rng) for _ in range(rng.randint(3, 10))]
    parts = [
        "You are shopping on WebShop. Find the item that best matches the instruction and buy it. "
        "Actions are search[keywords] or click[button]. Put the action in <answer></answer>.",
        f"WebShop [SEP] Instruction: [SEP] {instr} [SEP] Search",
        "Available actions: {'has_search_bar': True, 'clickables': ['search']}",
        _think_answer(rng, f"search[{want}]", f"I will search for {want}."),
        f"Back to Search [SEP] Page 1 (Total results: {rng.randint(10, 50)}) [SEP] Next >",
    ]
    parts += [f"[SEP] {a} [SEP] {t} [SEP] {p}" for a, t, p in products]
    asin, title, price = rng.choice(products)
    clickables = ["back to search", "next >"] + [a.lower() for a, _, _ in products]
    parts.append(f"Available actions: {{'has_search_bar': False, 'clickables': {clickables!r}}}")
    parts.append(_think_answer(rng, f"click[{asin.lower()}]", f"{title} costs {price}, which is within the budget."))
    opts = " [SEP] ".join(["size"] + rng.sample(_SIZES, 3) + ["color"] + rng.sample(_COLORS, 3))
    parts.append(f"Back to Search [SEP] < Prev [SEP] {opts} [SEP] {title} [SEP] Price: {price} "
                 "[SEP] Rating: N.A. [SEP] Description [SEP] Features [SEP] Reviews [SEP] Buy Now")
    parts.append(_think_answer(rng, rng.choice(["click[buy now]", "click[< prev]", f"click[{rng.choice(_COLORS)}]"]),
                               "This matches the instruction."))
    parts.append(f"Your score (min 0.0, max 1.0): {rng.random():.2f}")
    return "\n".join(parts)


def _ident(rng: random.Random) -> str:
    return "_".join(rng.sample(["max", "min", "count", "total", "value", "items", "result", "index",
                                "left", "right", "word", "num", "data", "cache", "node", "path"], rng.randint(1, 2)))


def python_snippet(rng: random.Random) -> str:
    f, a, b = _ident(rng), _ident(rng), _ident(rng)
    n = rng.randint(0, 100)
    snippets = [
        f"def {f}({a}: list[int]) -> int:\n    \"\"\"Return the sum of the even numbers.\"\"\"\n"
        f"    {b} = 0\n    for x in {a}:\n        if x % 2 == 0:\n            {b} += x\n    return {b}\n",
        f"def {f}(n):\n    if n < 2:\n        return n\n    return {f}(n - 1) + {f}(n - 2)\n\n\nprint({f}({n % 20}))\n",
        f"import sys\n\n\ndef main():\n    {a} = [int(x) for x in sys.stdin.read().split()]\n"
        f"    {b} = sorted({a}, reverse=True)\n    print(' '.join(map(str, {b})))\n\n\nif __name__ == \"__main__\":\n    main()\n",
        f"class {f.title().replace('_', '')}:\n    def __init__(self, {a}):\n        self.{a} = {a}\n        self._{b} = {{}}\n\n"
        f"    def get(self, key, default=None):\n        return self._{b}.get(key, default)\n",
        f"def {f}(s: str) -> bool:\n    # A palindrome reads the same backwards.\n    s = ''.join(c.lower() for c in s if c.isalnum())\n    return s == s[::-1]\n\n\n"
        f"assert {f}(\"A man, a plan, a canal: Panama\")\nassert not {f}(\"hello\")\n",
        f"def {f}(nums, target):\n    seen = {{}}\n    for i, x in enumerate(nums):\n        if target - x in seen:\n"
        f"            return [seen[target - x], i]\n        seen[x] = i\n    return []\n",
        f"n = int(input())\n{a} = list(map(int, input().split()))\nprint(max({a}) - min({a}) + {n})\n",
        f"from collections import Counter\n\n{a} = Counter(\"{rng.choice(_WORDS)}{rng.choice(_WORDS)}\")\n"
        f"for k, v in {a}.most_common({rng.randint(1, 5)}):\n    print(f\"{{k}}: {{v}}\")\n",
        f"try:\n    {a} = {n} / {rng.randint(0, 3)}\nexcept ZeroDivisionError as e:\n    raise ValueError(\"bad input\") from e\n",
    ]
    body = rng.choice(snippets)
    if rng.random() < 0.4:
        body = f"```python\n{body}```"
    if rng.random() < 0.3:
        body = (f"Write a function {f} that solves the problem. Read input from stdin and print the answer.\n"
                + _think_answer(rng, body, "I loop over the input once and keep a running value."))
    return body


def math_problem(rng: random.Random) -> str:
    a, b, c = rng.randint(1, 999), rng.randint(1, 99), rng.randint(2, 12)
    kind = rng.randrange(6)
    if kind == 0:
        op = rng.choice(["+", "-", "*"])
        val = {"+": a + b, "-": a - b, "*": a * b}[op]
        q, work, ans = f"What is {a} {op} {b}?", f"{a} {op} {b} = {val}", str(val)
    elif kind == 1:
        who, thing = rng.choice(_NAMES), rng.choice(_THINGS)
        q = f"{who} has {a} {thing}. {who} gives away {b} {thing} and then buys {c} more. How many {thing} does {who} have now?"
        work, ans = f"{a} - {b} = {a - b}, then {a - b} + {c} = {a - b + c}.", str(a - b + c)
    elif kind == 2:
        q = f"Solve for x: {c}x + {b} = {c * a + b}."
        work, ans = f"{c}x = {c * a + b} - {b} = {c * a}, so x = {c * a} / {c} = {a}.", str(a)
    elif kind == 3:
        q = f"Compute \\frac{{{a}}}{{{c}}} + \\frac{{{b}}}{{{c}}}."
        work, ans = f"The denominators match, so the sum is \\frac{{{a + b}}}{{{c}}}.", f"\\frac{{{a + b}}}{{{c}}}"
    elif kind == 4:
        q = f"Find the roots of x^2 - {b + c}x + {b * c} = 0."
        work, ans = f"(x - {b})(x - {c}) = 0, so x = {b} or x = {c}.", f"{min(b, c)}, {max(b, c)}"
    else:
        q = f"A rectangle has sides {b} cm and {c} cm. What is its area in cm^2?"
        work, ans = f"Area = {b} \\times {c} = {b * c}.", str(b * c)
    if rng.random() < 0.5:
        return f"{q}\n{_think_answer(rng, ans, work)}"
    return f"Problem: {q}\nSolution: {work} The answer is \\boxed{{{ans}}}."


def english_text(rng: random.Random) -> str:
    instr = rng.choice(_INSTRUCTIONS).format(n=rng.randint(2, 50), w1=rng.choice(_WORDS), w2=rng.choice(_WORDS))
    words = [rng.choice(_WORDS) for _ in range(rng.randint(8, 40))]
    sentence = " ".join(words).capitalize() + rng.choice([".", "!", "?", "."])
    return f"{instr}\n{sentence}"


def chat_wrap(rng: random.Random, user: str, assistant: str) -> str:
    system = rng.choice(["You are a helpful assistant.", "You're a helpful assistant. ",
                         "You are an agent that plays games by choosing actions.", ""])
    head = f"<|im_start|>system\n{system}<|im_end|>\n" if system else ""
    return f"{head}<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n{assistant}<|im_end|>\n"


_GENERATORS: list[tuple[Callable[[random.Random], str], int]] = [
    (grid_episode, 5), (webshop_episode, 3), (python_snippet, 3), (math_problem, 3), (english_text, 2),
]


def corpus(seed: int = 0, n_docs: int = 6000) -> Iterator[str]:
    """``n_docs`` training documents, the same for the same seed."""
    rng = random.Random(seed)
    gens = [g for g, w in _GENERATORS for _ in range(w)]
    for _ in range(n_docs):
        doc = rng.choice(gens)(rng)
        if rng.random() < 0.35:
            cut = doc.find("\n")
            doc = chat_wrap(rng, doc[:cut] if cut > 0 else doc, doc[cut + 1:] if cut > 0 else "")
        yield doc
