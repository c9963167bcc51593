"""An example agent function: what a user writes for roll/AgentFunction-v0 (docs/tools.md)."""
from __future__ import annotations

import re
from typing import Any


def add_numbers(client: Any, task: dict[str, int]) -> dict[str, Any]:
    """Asks for ``a + b``; one retry after a wrong answer. Reward 1 for a right first answer,
    0.5 for a right second one."""
    messages = [{"role": "system", "content": "You are good at arithmetic."},
                {"role": "user", "content": f"What is {task['a']} + {task['b']}? Reply with the number only."}]
    want = task["a"] + task["b"]
    for attempt in range(2):
        reply = client.chat.completions.create(model="policy", messages=messages, max_tokens=16)
        text = reply.choices[0].message.content or ""
        found = re.search(r"-?\d+", text)
        if found and int(found.group()) == want:
            return {"reward": 1.0 if attempt == 0 else 0.5, "success": True, "info": {"attempts": attempt + 1}}
        messages += [{"role": "assistant", "content": text}, {"role": "user", "content": "No. Try again."}]
    return {"reward": 0.0, "success": False, "info": {"attempts": 2}}
