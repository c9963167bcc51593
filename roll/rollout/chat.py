"""Token-exact chat rendering for multi-turn episodes.

The first prompt is the tokenizer's chat template over (system, first user turn) with the
generation prompt. Every later turn is appended as the token ids of the *delta* the template
adds for one more user turn after an assistant turn; history is never re-tokenized.

How the delta is derived (template-agnostic): render a fixed dummy conversation
``[system, user "U", assistant "A"]`` and the same conversation plus the new user turn with
the generation prompt; the second must start with the first, and the suffix is the delta.
What the template writes after an assistant message's content (ChatML: ``<|im_end|>\\n``) is
the *assistant suffix*; its first token is the end-of-turn token. When the model's output
ends with that token, only the rest of the suffix (``\\n``) is appended as non-model tokens;
otherwise (length cut, abort) the whole suffix is.

Tool turns (docs/tools.md) work the same way: the first prompt renders the tool schemas
through the template's ``tools=``, and a tool-calling model turn is followed by the delta the
template adds for one or more ``tool`` messages after an assistant turn (Qwen-style templates
wrap them in one user turn of ``<tool_response>`` blocks), ending with the generation prompt.

Documented non-prefix-stable case: templates that rewrite earlier assistant turns (Qwen3
strips ``<think>`` blocks from history) or models that emit a non-canonical tokenization of
their text. Re-rendering the whole conversation then differs from what the model saw; the
trajectory keeps the generated ids and logprobs unchanged, which is what training needs.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

_DUMMY_USER = "U"
_DUMMY_ASSISTANT = "A"


class ChatRenderer:
    """Renders episode turns to token ids with one tokenizer's chat template."""

    def __init__(self, tokenizer: Any, system_prompt: str | None = None, cache_size: int = 4096):
        self.tokenizer = tokenizer
        self.system_prompt = system_prompt
        # rendered ids by content: same-seed episodes of a group repeat prompts and observations
        self.cache_size = cache_size
        self._cache: dict[tuple, list[int]] = {}
        self._closed_with_tools: dict[str, str] = {}  # the dummy closed dialog, per tool set
        head = self._head()
        prompt_text = self.render_text(head + [{"role": "user", "content": _DUMMY_USER}], add_generation_prompt=True)
        closed_text = self.render_text(
            head + [{"role": "user", "content": _DUMMY_USER}, {"role": "assistant", "content": _DUMMY_ASSISTANT}],
            add_generation_prompt=False,
        )
        if not closed_text.startswith(prompt_text + _DUMMY_ASSISTANT):
            raise ValueError(
                "chat template is not prefix-stable for an assistant turn: rendering the assistant "
                f"message does not extend the generation prompt ({closed_text[-80:]!r})"
            )
        self._closed_text = closed_text
        self.assistant_suffix = closed_text[len(prompt_text) + len(_DUMMY_ASSISTANT):]
        self.assistant_suffix_ids: list[int] = self.encode(self.assistant_suffix)
        eot = self.assistant_suffix_ids[:1]
        self.end_of_turn_id: int | None = eot[0] if eot else None
        stop = {i for i in (self.end_of_turn_id, getattr(tokenizer, "eos_token_id", None)) if i is not None}
        self.stop_token_ids: list[int] = sorted(stop)

    def _head(self) -> list[dict[str, str]]:
        return [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []

    def render_text(self, messages: list[dict[str, str]], add_generation_prompt: bool,
                    tools: list[dict] | None = None) -> str:
        # tools only when there are some: a template without tool support still renders the rest
        extra = {"tools": tools} if tools else {}
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt,
                                                  **extra)

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def initial_prompt(self, user_content: str, tools: list[dict] | None = None) -> list[int]:
        """(system, first user turn) with the generation prompt, as ids; ``tools`` (OpenAI
        function schemas) are rendered by the template."""
        # the episodes of a group share their env seed, hence their first prompt
        return self._cached(("first", user_content, _tools_key(tools)), lambda: self.encode(self.render_text(
            self._head() + [{"role": "user", "content": user_content}], add_generation_prompt=True, tools=tools)))

    def _cached(self, key: tuple, render: Callable[[], list[int]]) -> list[int]:
        ids = self._cache.get(key)
        if ids is None:
            if len(self._cache) >= self.cache_size:
                self._cache.pop(next(iter(self._cache)))  # oldest first
            ids = self._cache[key] = render()
        return list(ids)

    def windowed_prompt(self, turns: list[dict[str, str]]) -> list[int]:
        """Step mode: a fresh prompt from text messages (user/assistant alternating, ending with user)."""
        return self.encode(self.render_text(self._head() + list(turns), add_generation_prompt=True))

    def close_assistant(self, output_ids: list[int]) -> list[int]:
        """Non-model ids that close an assistant turn whose generated ids are ``output_ids``."""
        if output_ids and self.end_of_turn_id is not None and output_ids[-1] == self.end_of_turn_id:
            return self.assistant_suffix_ids[1:]
        return list(self.assistant_suffix_ids)

    def user_turn_delta(self, user_content: str) -> list[int]:
        """Ids the template adds for one user turn after a closed assistant turn, ending with
        the generation prompt."""
        def render() -> list[int]:
            full = self.render_text(self._head() + [
                {"role": "user", "content": _DUMMY_USER},
                {"role": "assistant", "content": _DUMMY_ASSISTANT},
                {"role": "user", "content": user_content},
            ], add_generation_prompt=True)
            if not full.startswith(self._closed_text):
                raise ValueError("chat template rewrites history when a user turn is added; cannot append turns token-exactly")
            return self.encode(full[len(self._closed_text):])

        return self._cached(("delta", user_content), render)

    def tool_turn_delta(self, contents: list[str], tools: list[dict] | None = None) -> list[int]:
        """Ids the template adds for ``tool`` messages (one per result, in call order) after a
        closed assistant turn, ending with the generation prompt."""
        if not contents:
            raise ValueError("a tool turn needs at least one tool result")
        dialog = self._head() + [{"role": "user", "content": _DUMMY_USER},
                                 {"role": "assistant", "content": _DUMMY_ASSISTANT}]
        key = _tools_key(tools)
        closed = self._closed_with_tools.get(key)
        if closed is None:
            closed = self.render_text(dialog, add_generation_prompt=False, tools=tools)
            if not closed.endswith(_DUMMY_ASSISTANT + self.assistant_suffix):
                raise ValueError("chat template closes assistant turns differently when tools are declared")
            self._closed_with_tools[key] = closed
        # not cached: tool results rarely repeat, and can be long
        full = self.render_text(dialog + [{"role": "tool", "content": c} for c in contents],
                                add_generation_prompt=True, tools=tools)
        if not full.startswith(closed):
            raise ValueError("chat template rewrites history when tool messages are added; "
                             "cannot append tool results token-exactly")
        return self.encode(full[len(closed):])

    def assistant_text(self, output_ids: list[int]) -> str:
        """The text of a model turn as the template would show it (end-of-turn token removed)."""
        ids = list(output_ids)
        if ids and ids[-1] in self.stop_token_ids:
            ids = ids[:-1]
        return self.tokenizer.decode(ids, skip_special_tokens=False)


def _tools_key(tools: list[dict] | None) -> str:
    return json.dumps(tools, sort_keys=True) if tools else ""
