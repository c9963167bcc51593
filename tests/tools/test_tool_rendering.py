"""Token-exact tool turns: the ids the renderer appends equal the chat template's rendering of
the whole conversation, with the tool schemas and with one or several tool results per turn."""
import json

import pytest

from roll.rollout.chat import ChatRenderer
from roll.tools import ToolExecutor

# The tiny template before tool support: conversations without tools must render identically.
CHATML_WITHOUT_TOOLS = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def call(name, **arguments):
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


@pytest.mark.parametrize("system", ["You solve tasks.", None])
def test_tool_turns_are_token_exact(tok, system):
    schemas = ToolExecutor(["calculator", "search"]).schemas
    r = ChatRenderer(tok, system)
    eot = r.end_of_turn_id
    messages = [{"role": "system", "content": system}] if system else []
    user = "What is 6*7? Answer in <answer></answer>."
    messages.append({"role": "user", "content": user})
    ids = r.initial_prompt(user, tools=schemas)
    assert "<tools>" in tok.decode(ids) and '"name": "calculator"' in tok.decode(ids)

    def model_turn(text, cut=False):
        out = tok.encode(text, add_special_tokens=False) + ([] if cut else [eot])
        messages.append({"role": "assistant", "content": r.assistant_text(out)})
        return out + r.close_assistant(out)

    def tool_turn(results):
        messages.extend({"role": "tool", "content": c} for c in results)
        return r.tool_turn_delta(results, schemas)

    ids += model_turn("<think>use the tool</think>" + call("calculator", expression="6*7"))
    ids += tool_turn(["42"])
    ids += model_turn(call("search", query="light speed") + "\n" + call("calculator", expression="1/0")
                      + call("nope"))
    ids += tool_turn(["[Speed of light] The speed ...", "Error: division by zero", "Error: unknown tool 'nope'"])
    ids += model_turn(call("calculator", expression="2**10"), cut=True)  # length-cut turn: no end-of-turn token
    ids += tool_turn(["1024"])
    ids += model_turn("<answer>42</answer>")
    ids += r.user_turn_delta("Wrong. Try again.")
    messages.append({"role": "user", "content": "Wrong. Try again."})
    ids += model_turn("<answer>43</answer>")
    rendered = tok.apply_chat_template(messages, tools=schemas, tokenize=False)
    assert ids == tok.encode(rendered, add_special_tokens=False)
    assert rendered.count("<tool_response>") == 5 and rendered.count("<|im_start|>user") == 5


def test_tool_deltas_group_results_in_one_user_turn(tok):
    r = ChatRenderer(tok, "s")
    one = tok.decode(r.tool_turn_delta(["a"]))
    two = tok.decode(r.tool_turn_delta(["a", "b"]))
    assert one == "<|im_start|>user\n<tool_response>\na\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    assert two.count("<|im_start|>user") == 1 and two.count("<tool_response>") == 2
    with pytest.raises(ValueError, match="at least one"):
        r.tool_turn_delta([])


def test_conversations_without_tools_render_as_before(tok):
    convs = [
        [{"role": "system", "content": "S"}, {"role": "user", "content": "u"}, {"role": "assistant", "content": "a"},
         {"role": "user", "content": "<tool_call>{}</tool_call>"}],
        [{"role": "user", "content": "only"}],
        [{"role": "user", "content": ""}, {"role": "assistant", "content": ""}],
    ]
    for messages in convs:
        for gen in (False, True):
            assert tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=gen) == \
                tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=gen,
                                        chat_template=CHATML_WITHOUT_TOOLS)


def test_structured_tool_calls_render_in_the_hermes_format(tok):
    messages = [{"role": "user", "content": "u"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"type": "function", "function": {"name": "calculator", "arguments": {"expression": "1+2"}}},
                    {"name": "search", "arguments": '{"query": "moon"}'}]}]
    text = tok.apply_chat_template(messages, tokenize=False)
    assert text.endswith('<|im_start|>assistant\n<tool_call>\n{"name": "calculator", "arguments": {"expression": "1+2"}}'
                         '\n</tool_call>\n<tool_call>\n{"name": "search", "arguments": {"query": "moon"}}\n</tool_call>'
                         '<|im_end|>\n')
