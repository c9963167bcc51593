"""AgentFunctionEnv: a user's agent function, written against the ``openai`` client, as an env.

The function is ``solve(client, task)`` (or ``async def``), given an ``openai.OpenAI`` (or
``AsyncOpenAI``) client whose ``base_url`` is this episode's address on roll's
OpenAI-compatible endpoint, and one task. It returns the reward: a number, or
``{"reward": ..., "success": ..., "info": {...}}``.

The env itself only picks the task (``reset``: the seed chooses one of ``tasks``) and runs the
function when the env manager asks (``run_agent``, on the env's own thread); the rollout loop
finds ``run_agent`` and ``agent_options`` through ``get_wrapper_attr`` and does the rest
(roll/rollout/agent_episode.py). ``step`` is never called in a rollout: as a plain gymnasium
env (``roll envs check``, ``roll envs play``) a step ends the episode as an invalid action
with reward 0.
"""
from __future__ import annotations

import asyncio
import copy
import importlib
import importlib.util
import inspect
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar

import gymnasium as gym
from roll.envs.base import UnicodeText, check_render_mode

API_KEY = "roll-local"  # the endpoint checks no key; the openai client insists on one


def load_function(spec: str) -> Callable[..., Any]:
    """``"package.module:function"`` -> the callable."""
    module, sep, attr = str(spec).partition(":")
    if not sep or not module or not attr:
        raise ValueError(f"function must be 'package.module:name', got {spec!r}")
    obj: Any = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    if not callable(obj):
        raise TypeError(f"{spec!r} is a {type(obj).__name__}, not a function")
    return obj


def load_tasks(tasks: Sequence[Any] | None, tasks_file: str | None) -> list[Any]:
    """The task list: given inline, or one JSON value per line of a JSONL file."""
    if (tasks is None) == (tasks_file is None):
        raise ValueError("give exactly one of tasks (a list) and tasks_file (a JSONL path)")
    if tasks_file is not None:
        path = Path(tasks_file).expanduser()
        out = []
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if line.strip():
                    try:
                        out.append(json.loads(line))
                    except ValueError as e:
                        raise ValueError(f"{path}:{n} is not JSON ({e})") from None
    else:
        if isinstance(tasks, (str, bytes)) or not isinstance(tasks, Sequence):
            raise ValueError(f"tasks must be a list, got {type(tasks).__name__}")
        out = list(tasks)
    if not out:
        raise ValueError("the task list is empty")
    return out


class AgentFunctionEnv(gym.Env[str, str]):
    """One task per episode, solved by the agent function through the endpoint."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"], "render_fps": 4}

    def __init__(
        self,
        function: str,
        tasks: Sequence[Any] | None = None,
        tasks_file: str | None = None,
        timeout_s: float = 300.0,
        model: str = "roll-policy",
        max_requests: int = 64,
        tool_parser: str | dict | None = "hermes",
        render_mode: str | None = None,
    ):
        if importlib.util.find_spec("openai") is None:
            raise ImportError("roll/AgentFunction-v0 hands the function an openai client: pip install 'roll[agents]'")
        if timeout_s <= 0 or max_requests < 1:
            raise ValueError(f"timeout_s must be > 0 and max_requests >= 1, got {timeout_s}, {max_requests}")
        check_render_mode(self, render_mode)
        self.function_spec = str(function)
        self.function = load_function(function)
        # an async def, or an object whose __call__ is one
        self.is_async = inspect.iscoroutinefunction(self.function) or (
            not inspect.isroutine(self.function) and inspect.iscoroutinefunction(type(self.function).__call__))
        self.tasks = load_tasks(tasks, tasks_file)
        self.agent_options = {"timeout_s": float(timeout_s), "model": str(model), "max_requests": int(max_requests),
                              "tool_parser": tool_parser}
        self.render_mode = render_mode
        self.observation_space = UnicodeText()
        self.action_space = UnicodeText()
        self.task: Any = None
        self.task_index = -1
        self._obs = ""

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        self.task_index = int(self.np_random.integers(len(self.tasks)))
        self.task = self.tasks[self.task_index]
        self._obs = self.task if isinstance(self.task, str) else json.dumps(self.task, sort_keys=True, default=str)
        info = {"instruction": f"The agent function {self.function_spec} solves this task.",
                "task_index": self.task_index, "success": False}
        return self._obs, info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        # only reached outside a rollout: the env manager runs the function instead
        return self._obs, 0.0, True, False, {
            "success": False, "action_is_valid": False, "action_is_effective": False,
            "error": "roll/AgentFunction-v0 is played by its agent function (run_agent), not by step()"}

    def run_agent(self, base_url: str) -> Any:
        """Runs the function on this episode's task with a client for ``base_url``; returns
        what it returned (blocking: the env manager calls it on the env's thread)."""
        import openai

        task = copy.deepcopy(self.task)  # the function may mutate it; the next episode must not see that
        timeout = self.agent_options["timeout_s"]
        if self.is_async:
            async def main() -> Any:
                async with openai.AsyncOpenAI(base_url=base_url, api_key=API_KEY, max_retries=0,
                                              timeout=timeout) as client:
                    return await self.function(client, task)

            return asyncio.run(main())
        with openai.OpenAI(base_url=base_url, api_key=API_KEY, max_retries=0, timeout=timeout) as client:
            return self.function(client, task)

    def render(self) -> str | None:
        return self._obs if self.render_mode == "ansi" else None
