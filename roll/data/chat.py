"""Chat data -> token ids with an assistant-only loss mask, token-exact.

Each assistant message's tokens are found by rendering the conversation prefix with and
without that message through the tokenizer's chat template, so the ids are exactly those a
model sees when it generates the turn (prompt up to the generation prompt, then its own
tokens). A template that is not prefix-stable is reported, not silently mis-masked.
"""
from __future__ import annotations

from typing import Any, Sequence


class ChatTemplateError(ValueError):
    """The chat template re-renders earlier turns differently (not prefix-stable)."""


def _render(tokenizer: Any, messages: Sequence[dict], add_generation_prompt: bool,
            tools: Sequence[dict] | None = None) -> list[int]:
    # tools only when there are some: a template without tool support still renders the rest
    extra = {"tools": list(tools)} if tools else {}
    ids = tokenizer.apply_chat_template(list(messages), tokenize=True, add_generation_prompt=add_generation_prompt, **extra)
    if isinstance(ids, dict) or hasattr(ids, "input_ids"):  # BatchEncoding in newer transformers
        ids = ids["input_ids"]
    return list(ids)


def tokenize_conversation(tokenizer: Any, messages: Sequence[dict], end_of_turn_id: int | None = None,
                          tools: Sequence[dict] | None = None) -> tuple[list[int], list[int]]:
    """Return ``(input_ids, loss_mask)``: loss on assistant content and its end-of-turn token.

    ``tools`` (JSON schemas) are rendered through the template's ``tools=``, as the rollout's
    first prompt renders them (docs/tools.md); ``tool`` messages are context, never trained on.

    Tokens the template adds after the end-of-turn token (e.g. a newline) are not trained on,
    mirroring rollouts where the engine stops at end-of-turn and the rest is appended.
    """
    if end_of_turn_id is None:
        end_of_turn_id = tokenizer.eos_token_id
    ids: list[int] = []
    mask: list[int] = []
    for i, msg in enumerate(messages):
        if msg.get("role") != "assistant":
            continue
        prompt = _render(tokenizer, messages[:i], add_generation_prompt=True, tools=tools)
        full = _render(tokenizer, messages[: i + 1], add_generation_prompt=False, tools=tools)
        if full[: len(prompt)] != prompt or prompt[: len(ids)] != ids:
            raise ChatTemplateError(f"chat template is not prefix-stable at message {i}")
        mask += [0] * (len(prompt) - len(ids))
        ids = list(prompt)
        span = full[len(prompt):]
        cut = span.index(end_of_turn_id) + 1 if end_of_turn_id in span else len(span)
        ids += span
        mask += [1] * cut + [0] * (len(span) - cut)
    full = _render(tokenizer, messages, add_generation_prompt=False, tools=tools)
    if full[: len(ids)] != ids:
        raise ChatTemplateError("chat template is not prefix-stable at the end of the conversation")
    mask += [0] * (len(full) - len(ids))
    return full, mask
