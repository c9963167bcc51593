"""Shared pieces of the text environments: text spaces and a small base class.

A roll env is any ``gymnasium.Env`` whose observations and actions are strings (see
docs/adding_an_env.md); nothing here is required. ``TextEnv`` just saves the grid envs the
parsing, step counting, reward bookkeeping and info assembly that they would otherwise repeat.
"""
from __future__ import annotations

import string
from collections.abc import Mapping
from dataclasses import fields, replace
from typing import Any, ClassVar

import gymnasium as gym
from gymnasium.spaces import Text
from roll.envs.parsing import ActionParser, ParsedAction, ParserConfig

#: Characters every observation space allows: printable ASCII, newline and tab.
BASE_CHARSET = string.printable
#: Default upper bound on observation and action length, in characters.
MAX_TEXT_LENGTH = 100_000
#: Keys every step info carries (the env contract).
STEP_INFO_KEYS = ("success", "action_is_valid", "action_is_effective")

_SAMPLE_EXTRA = "<>/ \n\t" + "éüßçñ" + "√×÷∞→←↑↓" + "你好世界" + "привет" + "😀🚀"


class UnicodeText(Text):
    """A ``Text`` space of arbitrary model text: every string of Unicode characters.

    gymnasium's ``Text`` stores its charset as a set plus a per-character index; covering all
    1.1 million code points that way costs about 1.4 s and hundreds of MB per space, and envs
    are built by the hundred in a rollout. So the charset here is a representative sample
    (printable ASCII, tag characters, a few accented, mathematical, CJK, Cyrillic and emoji
    characters) used by ``sample()``, while ``contains()`` accepts any ``str`` within the
    length bounds. Flattening to an index array is not meaningful for model text and refuses.
    """

    def __init__(self, max_length: int = MAX_TEXT_LENGTH, *, min_length: int = 0, seed: Any = None):
        super().__init__(max_length, min_length=min_length, charset=BASE_CHARSET + _SAMPLE_EXTRA, seed=seed)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def __repr__(self) -> str:
        return f"UnicodeText({self.min_length}, {self.max_length})"

    def __eq__(self, other: object, /) -> bool:
        return isinstance(other, UnicodeText) and (self.min_length, self.max_length) == (other.min_length, other.max_length)


def grid_text_space(symbols: str, max_length: int = MAX_TEXT_LENGTH) -> Text:
    """Observation space of a grid env: printable ASCII plus the env's (possibly non-ASCII) symbols."""
    return Text(max_length, min_length=0, charset=BASE_CHARSET + "".join(sorted(set(symbols))))


def check_render_mode(env: gym.Env, render_mode: str | None) -> None:
    """Raise unless ``render_mode`` is None or one of the env's ``metadata["render_modes"]``."""
    if render_mode is not None and render_mode not in env.metadata["render_modes"]:
        raise ValueError(f"render_mode {render_mode!r} not in {env.metadata['render_modes']}")


def build_parser_config(
    parser: ParserConfig | Mapping[str, Any] | None = None,
    *,
    max_actions_per_turn: int | None = None,
    format_penalty: float | None = None,
) -> ParserConfig:
    """Parser options from env kwargs: a ParserConfig or dict, plus the two common overrides."""
    if parser is None:
        config = ParserConfig()
    elif isinstance(parser, ParserConfig):
        config = parser
    elif isinstance(parser, Mapping):
        known = {f.name for f in fields(ParserConfig)}
        unknown = sorted(set(parser) - known)
        if unknown:
            raise ValueError(f"unknown parser option(s) {unknown}; valid options: {sorted(known)}")
        config = ParserConfig(**parser)
    else:
        raise TypeError(f"parser must be a ParserConfig or a dict, got {type(parser).__name__}")
    overrides = {}
    if max_actions_per_turn is not None:
        overrides["max_actions_per_turn"] = int(max_actions_per_turn)
    if format_penalty is not None:
        overrides["format_penalty"] = float(format_penalty)
    config = replace(config, **overrides) if overrides else replace(config)
    if config.max_actions_per_turn < 1:
        raise ValueError(f"max_actions_per_turn must be >= 1, got {config.max_actions_per_turn}")
    return config


class TextEnv(gym.Env[str, str]):
    """Base of envs with a fixed vocabulary of action words, parsed from model text.

    Subclasses set ``action_words`` (canonical words, or a mapping spelling -> canonical) and
    implement ``_new_episode``, ``_apply``, ``_render_text``, ``instruction`` and
    ``_is_success``/``_is_failure``. ``step`` parses the text, applies up to
    ``max_actions_per_turn`` actions, counts every primitive action (and every unparseable turn,
    a no-op) against ``max_steps``, and truncates there.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"], "render_fps": 4}
    action_words: ClassVar[tuple[str, ...]] = ()

    def __init__(
        self,
        *,
        max_steps: int,
        parser: ParserConfig | Mapping[str, Any] | None = None,
        max_actions_per_turn: int | None = None,
        format_penalty: float | None = None,
        render_mode: str | None = None,
    ):
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        check_render_mode(self, render_mode)
        self.max_steps = int(max_steps)
        self.render_mode = render_mode
        self.parser_config = build_parser_config(
            parser, max_actions_per_turn=max_actions_per_turn, format_penalty=format_penalty
        )
        self._parser = ActionParser(self._accepted_words(), self.parser_config)
        self.action_space = UnicodeText(MAX_TEXT_LENGTH)
        self._steps = 0
        self._done = False
        self._obs = ""

    # ----- what subclasses implement -------------------------------------------------------
    def _accepted_words(self) -> Mapping[str, str] | tuple[str, ...]:
        return self.action_words

    def _new_episode(self, options: dict | None) -> None:
        """Build a new episode from ``self.np_random`` (already seeded by ``reset``)."""
        raise NotImplementedError

    def _apply(self, action: str) -> tuple[float, bool]:
        """Apply one canonical action; return (reward, whether the state changed)."""
        raise NotImplementedError

    def _render_text(self) -> str:
        raise NotImplementedError

    def _is_success(self) -> bool:
        raise NotImplementedError

    def _is_failure(self) -> bool:
        """An unrecoverable non-success end (e.g. a hole); the episode terminates."""
        return False

    def instruction(self) -> str:
        raise NotImplementedError

    # ----- the gymnasium API ----------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        self._new_episode(options)
        self._steps = 0
        self._done = False
        self._obs = self._render_text()
        info = {
            "instruction": self.instruction(),
            "success": False,
            "steps": 0,
            "steps_left": self.max_steps,
            "max_actions_per_turn": self.parser_config.max_actions_per_turn,
        }
        return self._obs, info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        parsed: ParsedAction = self._parser(action)
        reward = 0.0
        effective = False
        executed: list[str] = []
        if self._done:
            # Stepping a finished episode is a caller bug, but never worth a crash mid-rollout:
            # report it as an invalid, ineffective no-op.
            parsed = ParsedAction(error="episode already finished; call reset()")
        elif not parsed.valid:
            reward = self.parser_config.format_penalty
            self._steps += 1
        else:
            for a in parsed.actions:
                r, changed = self._apply(a)
                reward += r
                effective = effective or changed
                executed.append(a)
                self._steps += 1
                if self._is_success() or self._is_failure() or self._steps >= self.max_steps:
                    break
        success = self._is_success()
        terminated = success or self._is_failure()
        truncated = (not terminated) and self._steps >= self.max_steps
        self._done = self._done or terminated or truncated
        self._obs = self._render_text()
        info = {
            "success": success,
            "action_is_valid": parsed.valid,
            "action_is_effective": effective,
            "actions": executed,
            "parse_error": parsed.error,
            "steps": self._steps,
            "steps_left": max(0, self.max_steps - self._steps),
        }
        return self._obs, float(reward), terminated, truncated, info

    def render(self) -> str | None:
        if self.render_mode == "ansi":
            return self._obs
        return None
