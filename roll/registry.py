"""One small generic registry: id -> entry point ("module:attr" string or object), imported lazily.

Every pluggable kind (strategies, advantage estimators, losses, reward functions, group
filters, trackers, pipelines) is a :class:`Registry`. Environments use gymnasium's own
registry instead. Builtin entries are declared with entry-point strings or registered by a
decorator inside the modules listed in ``autoload``; those modules are imported the first
time the registry is listed or asked for an id it does not hold yet.
"""
from __future__ import annotations

import difflib
import importlib
import threading
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from roll.errors import RollError


class RegistryError(RollError, KeyError):
    """Unknown or duplicate id, or an entry point that cannot be imported."""

    def __str__(self) -> str:  # KeyError quotes its message; we want plain text
        return str(self.args[0]) if self.args else ""


@dataclass
class Entry:
    id: str
    target: Any  # "module:attr" string, or the object itself once loaded
    doc: str = ""

    @property
    def entry_point(self) -> str:
        if isinstance(self.target, str):
            return self.target
        return f"{self.target.__module__}:{getattr(self.target, '__qualname__', repr(self.target))}"


def load_entry_point(entry_point: str) -> Any:
    """Import ``"package.module:attr.sub"`` and return the attribute."""
    if ":" not in entry_point:
        raise RegistryError(f"entry point {entry_point!r} must look like 'package.module:attr'")
    module_name, attr = entry_point.split(":", 1)
    module = importlib.import_module(module_name)
    obj: Any = module
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


class Registry:
    """A named table of entries of one kind."""

    def __init__(self, kind: str, autoload: Iterable[str] = ()):
        self.kind = kind
        self._entries: dict[str, Entry] = {}
        self._autoload = list(autoload)
        self._autoloaded = False
        # envs (and their tools) are built in thread pools: a thread that asks while another is
        # still importing the autoload modules waits for them instead of seeing an empty registry
        self._autoload_lock = threading.RLock()
        self._autoloading = False

    def register(self, id: str, target: Any = None, *, doc: str = "") -> Any:
        """Register ``target`` under ``id``; without ``target``, act as a decorator."""
        if target is None:
            def decorator(obj: Callable) -> Callable:
                self.register(id, obj, doc=doc)
                return obj
            return decorator
        if id in self._entries:
            existing = self._entries[id]
            same = existing.target is target or (
                not isinstance(target, str) and existing.entry_point == Entry(id, target).entry_point
            )
            if not same:
                raise RegistryError(
                    f"duplicate {self.kind} id {id!r}: already registered as {existing.entry_point}"
                )
            if not isinstance(target, str):
                existing.target = target
            return target
        if not doc and not isinstance(target, str):
            doc = (getattr(target, "__doc__", None) or "").strip().split("\n")[0]
        self._entries[id] = Entry(id, target, doc)
        return target

    def _run_autoload(self) -> None:
        if self._autoloaded:
            return
        with self._autoload_lock:
            if self._autoloaded or self._autoloading:  # done, or asked again from inside the import
                return
            self._autoloading = True
            try:
                for module in self._autoload:
                    importlib.import_module(module)
            finally:
                self._autoloading = False
            self._autoloaded = True

    def get(self, id: str) -> Any:
        """Return the registered object, importing its module on first use."""
        if id not in self._entries:
            self._run_autoload()
        if id not in self._entries:
            close = difflib.get_close_matches(id, self._entries, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise RegistryError(
                f"unknown {self.kind} {id!r}{hint} (registered: {', '.join(sorted(self._entries)) or 'none'})"
            )
        entry = self._entries[id]
        if isinstance(entry.target, str):
            try:
                entry.target = load_entry_point(entry.target)
            except ImportError as e:
                raise RegistryError(
                    f"{self.kind} {id!r} needs a package that is not installed ({e}); "
                    f"see the extras in setup.py"
                ) from e
        return entry.target

    def entries(self) -> list[Entry]:
        self._run_autoload()
        return [self._entries[k] for k in sorted(self._entries)]

    def ids(self) -> list[str]:
        return [e.id for e in self.entries()]

    def __contains__(self, id: str) -> bool:
        self._run_autoload()
        return id in self._entries


# The registries of the project. Modules named in autoload register builtins on import.
STRATEGIES = Registry("strategy", autoload=["roll.strategies"])
ADVANTAGES = Registry("advantage estimator", autoload=["roll.algorithms.advantages"])
POLICY_LOSSES = Registry("policy loss", autoload=["roll.algorithms.losses"])
REWARDS = Registry("reward function", autoload=["roll.rewards"])
FILTERS = Registry("group filter", autoload=["roll.rollout.filters"])
TRACKERS = Registry("tracker", autoload=["roll.tracking"])
TOOLS = Registry("tool", autoload=["roll.tools.builtin"])
TOOL_PARSERS = Registry("tool-call parser", autoload=["roll.tools.parsers"])
PIPELINES = Registry("pipeline")
PIPELINES.register("agentic", "roll.pipelines.agentic:AgenticPipeline", doc="multi-turn agentic RL")
PIPELINES.register("rlvr", "roll.pipelines.rlvr:RLVRPipeline", doc="single-turn multi-domain RL with verifiable rewards")
PIPELINES.register("sft", "roll.pipelines.sft:SFTPipeline", doc="supervised fine-tuning on chat data")

REGISTRIES: dict[str, Registry] = {
    "strategies": STRATEGIES,
    "advantages": ADVANTAGES,
    "losses": POLICY_LOSSES,
    "rewards": REWARDS,
    "filters": FILTERS,
    "trackers": TRACKERS,
    "pipelines": PIPELINES,
}
