"""Environments, environment managers and the rollout scheduler."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Optional

from roll.config.validate import ranged

TURN_TEMPLATE_FIELDS = ("turn_idx", "observation", "actions_left", "reward", "max_turns", "feedback")
"""The fields a ``turn_template`` may use (roll/rollout/env_manager.py format_turn)."""
DEFAULT_TURN_TEMPLATE = "Turn {turn_idx}:\n{observation}\nActions left: {actions_left}. Reply in the format <answer>...</answer>."


@dataclass
class EnvConfig:
    """One environment tag: a registered gymnasium id plus how episodes are run on it."""

    env_id: str
    """gymnasium id, e.g. roll/Sokoban-v0 or a user's own registered id."""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments passed to gymnasium.make (override the registered defaults)."""
    max_turns: int = ranged(10, ge=1)
    """Turns per episode before truncation."""
    system_prompt: str = "You are a helpful agent that solves the task step by step."
    """System message of every episode (empty: none)."""
    include_instruction: bool = True
    """Put the env's instruction (rules, legend, answer format) before the first observation, and
    in step mode before every windowed prompt; false shows observations only (short prompts
    for small models, which then learn the rules from rewards)."""
    turn_template: str = DEFAULT_TURN_TEMPLATE
    """How each observation is rendered into a user turn: {turn_idx}, {observation}, {actions_left},
    {reward}, {max_turns}, {feedback} (empty after a valid action that changed something, else a
    line that starts with a newline and says what the last answer did not do)."""
    step_timeout_s: float = ranged(30.0, gt=0)
    """An env.step (or reset) slower than this ends the episode as an infrastructure failure."""
    max_env_steps_per_turn: int = ranged(1, ge=1)
    """Not used by text envs that take several actions per turn inside step(); kept for symmetry."""


@dataclass
class EnvManagerConfig:
    """How many episodes of which tags run, and how they are grouped."""

    tags: list[str] = field(default_factory=list)
    """Env tags (keys of custom_envs) this manager runs."""
    num_groups_partition: list[int] = ranged(default_factory=list, ge=0)
    """Groups per tag in each batch (same length as tags); empty splits evenly."""
    group_size: int = ranged(8, ge=1)
    """Episodes per group: same env seed, different samples (GRPO-style baselines)."""
    num_env_workers: int = ranged(1, ge=0)
    """Ray actors hosting env managers."""
    max_concurrent_episodes: int = ranged(64, ge=1)
    """Episodes run at once across all env workers."""
    mode: Literal["trajectory", "step"] = "trajectory"
    """trajectory: one training sample per episode; step: one sample per turn (step-level advantages)."""
    history_window: int = ranged(4, ge=0)
    """Step mode: previous turns kept in each per-turn sample's context."""
    max_context_tokens: int = ranged(2048, ge=1)
    """An episode whose context would exceed this is truncated; one whose first prompt leaves no room for an answer fails (`context_overflow`, counted and handled like other episode failures)."""
    redundancy: float = ranged(0.0, ge=0)
    """Extra share of groups started; the first to finish are kept."""
    group_filter: Optional[str] = None
    """Registered group filter id (e.g. drop zero-variance groups); null keeps every group."""
    group_filter_args: dict[str, Any] = field(default_factory=dict)
    """Arguments of the group filter."""
    max_group_refills: int = ranged(8, ge=0)
    """Refills per batch for filtered or failed groups before the batch is returned short."""
    max_episode_retries: int = ranged(3, ge=0)
    """An episode slot that ends in an infrastructure failure (env error/timeout, dead worker) is
    rerun with the same env seed up to this many times; then its group is dropped and refilled."""
    num_cpus_per_env_worker: float = ranged(1.0, ge=0)
    """Ray CPUs reserved by each environment worker actor."""
    max_worker_restarts: int = ranged(3, ge=-1)
    """Times Ray restarts a crashed environment worker (-1: unlimited); its running episodes are
    retried, and the worker serves again once restarted."""
    seed_offset: int = ranged(0, ge=0)
    """Env seeds of this manager start here (keep validation seeds disjoint from training: the
    plan warns when a validation tag's seeds fall in the range training draws from)."""


@dataclass
class RolloutConfig:
    """Scheduling of rollouts relative to training."""

    mode: Literal["sync", "async"] = "async"
    """sync: lockstep batches, every episode advances turn by turn together (baseline);
    async: per-sample scheduling, overlapping training up to async_generation_ratio."""
    async_generation_ratio: float = ranged(0.0, ge=0)
    """Rollouts for step k may start while step k-1 trains; no sample is older than this many versions.
    The rlvr pipeline takes 0 or 1 (1: the next batch generates while this one trains)."""
    on_weight_update: Literal["partial", "discard", "wait"] = "partial"
    """In-flight generation at a weight update: partial (suspend and resume under the new weights),
    discard (restart the episode), wait (finish under the old weights)."""
    get_batch_timeout_s: float = ranged(1800.0, gt=0)
    """get_batch fails loudly when a batch cannot be filled within this time."""
    max_inflight_per_worker: int = ranged(64, ge=1)
    """Router bound on outstanding requests per inference worker."""
    max_failed_share: float = ranged(1.0, ge=0, le=1)
    """Share (0 to 1) of a training step's episodes (agentic, retries included) or responses (RLVR)
    that may fail (env/reward/inference error, timeout, dead worker) before the run stops with an
    error. A step with no trainable sample always stops the run, so the default 1.0 stops it
    only then; 0.5 also stops it when more than half failed."""


TAG_SEED_STRIDE = 1_000_003
"""Env seeds of a manager's i-th tag start ``i * TAG_SEED_STRIDE`` after its base, keeping tags' seed ranges apart."""


def group_seed(seed: int, seed_offset: int, tag_index: int, group_index: int) -> int:
    """Env seed of the ``group_index``-th group of a manager's ``tag_index``-th tag (every episode
    of a group shares it)."""
    return seed + seed_offset + tag_index * TAG_SEED_STRIDE + group_index


def groups_per_tag(tags: Sequence[str], partition: Sequence[int], n_groups: int) -> dict[str, int]:
    """Groups of a batch of ``n_groups`` per env tag: ``num_groups_partition`` when given, else an
    even split (the first tags take the remainder)."""
    if partition:
        return dict(zip(tags, partition))
    base, extra = divmod(n_groups, max(1, len(tags)))
    return {t: base + (1 if i < extra else 0) for i, t in enumerate(tags)}
