"""ToolEnv: gives any text env tools the model may call before it answers.

The wrapped env is unchanged: it only ever sees final answers. A model turn that calls tools
(found by the tool-call parser) is executed by :class:`roll.tools.ToolExecutor` and answered
with ``tool`` messages, with no env step; any other turn goes to the wrapped env's ``step`` as
today. The rollout loop (roll/rollout/env_manager.py) finds the capability through
``get_wrapper_attr``: ``tool_schemas`` (rendered into the first prompt with the chat template's
``tools=``), ``tool_turn(text)`` and ``tool_stats()``.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym

from roll.tools import ToolExecutor, ToolTurn
from roll.tools.executor import describe_tool_spec, tool_spec_problems

DEFAULT_HINT = ("You may call the tools described in the system message before you answer; "
                "their results come back in the next turn.")


class ToolEnv(gym.Wrapper):
    """``env`` (a registered id, made with ``env_kwargs``, or an env object) plus ``tools``
    (registry ids, ``{"id": ..., **options}`` or tool objects)."""

    def __init__(
        self,
        env: str | gym.Env = "roll/FrozenLake-v0",
        env_kwargs: Mapping[str, Any] | None = None,
        tools: Sequence[Any] = ("calculator",),
        parser: str | Mapping[str, Any] = "hermes",
        max_tool_calls: int = 4,
        max_result_chars: int = 4000,
        tool_hint: str = DEFAULT_HINT,
        render_mode: str | None = None,
    ):
        if isinstance(env, str):
            import roll.envs  # noqa: F401  (the shipped ids, when this module is used on its own)

            kwargs = dict(env_kwargs or {})
            if render_mode is not None:
                kwargs["render_mode"] = render_mode
            env = gym.make(env, **kwargs)
        elif env_kwargs or render_mode is not None:
            raise ValueError("env_kwargs and render_mode are only used when env is a registered id")
        super().__init__(env)
        self.tool_executor = ToolExecutor(tools, parser=parser, max_calls_per_episode=max_tool_calls,
                                          max_result_chars=max_result_chars)
        self.tool_schemas: list[dict[str, Any]] = self.tool_executor.schemas
        self.tool_hint = tool_hint

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict[str, Any]]:
        self.tool_executor.reset()
        obs, info = self.env.reset(seed=seed, options=options)
        info = dict(info or {})
        if self.tool_hint:
            instruction = info.get("instruction")
            info["instruction"] = f"{instruction}\n{self.tool_hint}" if instruction else self.tool_hint
        info["tools"] = list(self.tool_executor.tools)
        return obs, info

    def tool_turn(self, text: str) -> ToolTurn | None:
        """Results of a tool-calling turn, or None: the turn is the answer (no call, or the
        call budget is spent) and goes to ``step``."""
        return self.tool_executor.handle(text)

    def tool_stats(self) -> dict[str, int]:
        """This episode's counts: calls, errors, turns, per tool and per error kind."""
        return dict(self.tool_executor.stats)

    def close(self) -> None:
        self.tool_executor.close()
        super().close()

    # ---- before anything starts (pre-flight and `roll plan` read these from the class) ----
    @classmethod
    def _settings(cls, env_kwargs: Mapping[str, Any]) -> dict[str, Any]:
        import inspect

        defaults = {n: p.default for n, p in inspect.signature(cls.__init__).parameters.items()
                    if p.default is not inspect.Parameter.empty}
        return {**defaults, **dict(env_kwargs)}

    @classmethod
    def config_problems(cls, env_kwargs: Mapping[str, Any], where: str = "env_kwargs") -> list[str]:
        """Problems of these ``env_kwargs`` that show without building the env: unknown tool
        ids or options, a bad MCP entry (its command not on PATH, ...), an unknown parser."""
        settings = cls._settings(env_kwargs)
        problems = tool_spec_problems(settings["tools"], settings["parser"], f"{where}.tools")
        budget = settings["max_tool_calls"]
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
            problems.append(f"{where}.max_tool_calls: an integer >= 1, got {budget!r}")
        return [p if p.startswith(where) else f"{where}.{p}" for p in problems]

    @classmethod
    def describe_tools(cls, env_kwargs: Mapping[str, Any]) -> list[tuple[str, str]]:
        """``roll plan``'s rows for a tool env: each tool (an MCP source as its command; no
        server is started), the parser and the budgets."""
        settings = cls._settings(env_kwargs)
        wrapped = settings["env"] if isinstance(settings["env"], str) else type(settings["env"]).__name__
        rows = [("wraps", str(wrapped))]
        rows += [(f"tool {i}", describe_tool_spec(spec)) for i, spec in enumerate(settings["tools"])]
        parser = settings["parser"]
        rows.append(("parser", str(parser.get("id")) if isinstance(parser, Mapping) else str(parser)))
        budget = f"{settings['max_tool_calls']} tool calls per episode, results cut at {settings['max_result_chars']} chars"
        rows.append(("budget", budget))
        return rows
