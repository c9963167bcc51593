"""Agent functions used by the endpoint tests (and, through PYTHONPATH, by the CLI test)."""
from __future__ import annotations

import json
import re
import time

SYSTEM = "You guess numbers."


def three_turns(client, task):
    """Three requests, each extending the last: the usual multi-turn agent."""
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"Guess a number below {task['n']}."}]
    for turn in range(3):
        reply = client.chat.completions.create(model="anything", messages=messages, max_tokens=8)
        messages.append({"role": "assistant", "content": reply.choices[0].message.content})
        if turn < 2:
            messages.append({"role": "user", "content": "Higher." if turn == 0 else "Lower."})
    return {"reward": float(task["n"]) / 10, "success": True, "info": {"turns": 3}}


def sdk_messages(client, task):
    """Sends the SDK's message objects back (model_dump: refusal, tool_calls None, ...)."""
    messages = [{"role": "user", "content": "Say something."}]
    reply = client.chat.completions.create(model="m", messages=messages, max_tokens=6)
    messages += [reply.choices[0].message.model_dump(), {"role": "user", "content": "More."}]
    client.chat.completions.create(model="m", messages=messages, max_tokens=6)
    return 1


def rewrites_history(client, task):
    """The second request drops the first exchange: a new segment."""
    first = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "First question."}]
    reply = client.chat.completions.create(model="m", messages=first, max_tokens=6)
    summary = f"Earlier you said: {reply.choices[0].message.content!r}. Second question."
    client.chat.completions.create(model="m", messages=[{"role": "system", "content": SYSTEM},
                                                         {"role": "user", "content": summary}], max_tokens=6)
    return 0.5


def raises(client, task):
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hi."}], max_tokens=4)
    raise ValueError(f"the agent gave up on task {task['n']}")


SLEPT = {}


def sleeps(client, task):
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hi."}], max_tokens=4)
    time.sleep(3)
    try:  # the episode timed out meanwhile: the endpoint no longer knows it
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Again."}], max_tokens=4)
        SLEPT[task["n"]] = "answered"
    except Exception as e:
        SLEPT[task["n"]] = type(e).__name__
    return 1.0


def returns_text(client, task):
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hi."}], max_tokens=4)
    return "great"


def asks_nothing(client, task):
    return 1.0


async def async_two_turns(client, task):
    messages = [{"role": "user", "content": "Count."}]
    reply = await client.chat.completions.create(model="m", messages=messages, max_tokens=6)
    messages += [{"role": "assistant", "content": reply.choices[0].message.content}, {"role": "user", "content": "Go on."}]
    await client.chat.completions.create(model="m", messages=messages, max_tokens=6)
    return 0.25


CALCULATOR = {"type": "function", "function": {
    "name": "calculator", "description": "Evaluates arithmetic.",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}}}


def uses_a_tool(client, task):
    """A tool-calling agent: runs the call the model made and sends the result back."""
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "What is 3 * 7?"}]
    reply = client.chat.completions.create(model="m", messages=messages, tools=[CALCULATOR], max_tokens=64)
    message = reply.choices[0].message
    assert reply.choices[0].finish_reason == "tool_calls", reply
    call = message.tool_calls[0]
    result = eval(json.loads(call.function.arguments)["expression"], {"__builtins__": {}})  # test input only
    messages += [{"role": "assistant", "content": message.content, "tool_calls": [call.model_dump()]},
                 {"role": "tool", "tool_call_id": call.id, "content": str(result)}]
    final = client.chat.completions.create(model="m", messages=messages, tools=[CALCULATOR], max_tokens=64)
    return 1.0 if "21" in (final.choices[0].message.content or "") else 0.0


def arithmetic(client, task):
    """The CLI test's task: a sum, one retry. Reward 1 for the right number; otherwise a small
    checkable shaping term (distinct characters of the replies / 100, up to 0.5), so a tiny random
    model's samples differ in reward and the policy gradient is not zero."""
    messages = [{"role": "user", "content": f"{task['a']} + {task['b']} = ?"}]
    seen = set()
    for _ in range(2):
        reply = client.chat.completions.create(model="policy", messages=messages, max_tokens=6)
        text = reply.choices[0].message.content or ""
        found = re.search(r"\d+", text)
        if found and int(found.group()) == task["a"] + task["b"]:
            return 1.0
        seen.update(text)
        messages += [{"role": "assistant", "content": text}, {"role": "user", "content": "Try again."}]
    return min(len(seen), 50) / 100
