"""Structured trajectory dumps: one gzip-compressed JSON line per trajectory, one file per step.

``RUN_DIR/trajectories/step-000001.jsonl.gz`` holds the sampled trajectories of step 1 in
the schema below (docs/viewer.md documents it for readers outside Python). Agentic episodes,
RLVR responses (a one-turn trajectory) and SFT conversations share it, so the viewer, the
wandb table and any user script read all three the same way.

A record::

    {"schema": 1, "kind": "agentic" | "rlvr" | "sft", "step": 1, "id": "...",
     "env_tag": "...", "env_id": "...", "group_id": "...", "seed": 0,
     "success": false, "return": 0.0, "advantage": 0.12 | null, "trained": true | null,
     "num_turns": 2, "terminated": true, "truncated": false, "failure": null, "info": {...},
     "turns": [{"observation": "...", "model_text": "...",
                "action": {"actions": [...], "valid": true, "error": ""} | null,
                "reward": 0.0, "policy_version": 0}],
     "tokens": {"ids": [...], "text": [...], "mask": [...], "logprobs": [...] | null,
                "advantages": [...] | null, "truncated": false} | null}

The per-step sample is bounded by ``tracking.dump_trajectories`` and picks whole groups (so
the viewer can show a group's members side by side), one group per env tag first.
"""
from __future__ import annotations

import gzip
import json
import math
import os
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1
MAX_DUMP_TOKENS = 8192
"""Token arrays longer than this are cut (``tokens.truncated``): a dump stays small."""
MAX_TEXT_CHARS = 20000
"""Observation / model text longer than this is cut, with a marker."""

TRAJECTORY_DIR = "trajectories"


def step_path(run_dir: Path, step: int) -> Path:
    return Path(run_dir) / TRAJECTORY_DIR / f"step-{step:06d}.jsonl.gz"


def _num(x: Any) -> float | None:
    """A JSON-safe float (NaN/inf become null)."""
    if x is None:
        return None
    x = float(x)
    return round(x, 6) if math.isfinite(x) else None


def _text(s: Any) -> str:
    s = "" if s is None else str(s)
    return s if len(s) <= MAX_TEXT_CHARS else s[:MAX_TEXT_CHARS] + f"... [{len(s)} chars]"


def pick_groups(group_ids: Sequence[str], tags: Sequence[str], n: int) -> list[int]:
    """Indices of the items to dump: whole groups, the first group of every tag first, then
    further groups in order while the total stays within ``n``. A group larger than ``n`` is
    cut to ``n`` members; every tag keeps at least one group."""
    if n <= 0:
        return []
    groups: OrderedDict[str, list[int]] = OrderedDict()
    for i, g in enumerate(group_ids):
        groups.setdefault(str(g), []).append(i)
    first_of_tag: OrderedDict[str, str] = OrderedDict()
    for g, idx in groups.items():
        first_of_tag.setdefault(str(tags[idx[0]]), g)
    order = list(first_of_tag.values()) + [g for g in groups if g not in first_of_tag.values()]
    picked: list[int] = []
    for k, g in enumerate(order):
        members = groups[g][:n]
        if k >= len(first_of_tag) and len(picked) + len(members) > n:
            break
        picked += members
    return picked


def token_block(tokenizer: Any, ids: Sequence[int], mask: Sequence[int],
                logprobs: Sequence[float] | None = None,
                advantages: Sequence[float] | None = None) -> dict[str, Any]:
    """The token view of one sample: ids, each token's text, loss mask, logprob and advantage."""
    cut = len(ids) > MAX_DUMP_TOKENS
    ids = [int(i) for i in ids[:MAX_DUMP_TOKENS]]
    # one decode per id: a token's own text is what the viewer colours
    text = tokenizer.batch_decode([[i] for i in ids], skip_special_tokens=False) if ids else []
    return {
        "ids": ids,
        "text": text,
        "mask": [int(m) for m in mask[:MAX_DUMP_TOKENS]],
        "logprobs": None if logprobs is None else [round(float(x), 4) for x in logprobs[:MAX_DUMP_TOKENS]],
        "advantages": None if advantages is None else [round(float(x), 4) for x in advantages[:MAX_DUMP_TOKENS]],
        "truncated": cut,
    }


def masked_mean(values: Sequence[float], mask: Sequence[int]) -> float | None:
    picked = [float(v) for v, m in zip(values, mask) if m]
    return _num(sum(picked) / len(picked)) if picked else None


def record(kind: str, step: int, **fields: Any) -> dict[str, Any]:
    """One record with every schema field present (missing ones null / empty)."""
    out: dict[str, Any] = {
        "schema": SCHEMA_VERSION, "kind": kind, "step": int(step), "id": "", "env_tag": "", "env_id": "",
        "group_id": "", "seed": None, "success": None, "return": None, "advantage": None, "trained": None,
        "num_turns": 0, "terminated": None, "truncated": None, "failure": None, "info": {}, "turns": [],
        "tokens": None,
    }
    unknown = set(fields) - set(out)
    if unknown:
        raise ValueError(f"unknown trajectory record fields: {sorted(unknown)}")
    out.update(fields)
    out["return"] = _num(out["return"])
    out["advantage"] = _num(out["advantage"])
    return out


def turn(observation: Any, model_text: Any, reward: Any = None, policy_version: Any = None,
         action: dict[str, Any] | None = None) -> dict[str, Any]:
    if action is not None:
        action = {"actions": [str(a) for a in action.get("actions") or []], "valid": bool(action.get("valid", True)),
                  "error": str(action.get("error") or "")}
    return {"observation": _text(observation), "model_text": _text(model_text), "action": action,
            "reward": _num(reward), "policy_version": None if policy_version is None else int(policy_version)}


# ---- agentic -----------------------------------------------------------------------------------
def agentic_records(step: int, trajectories: Sequence[Any], n: int, tokenizer: Any,
                    advantages: Any | None = None, trained: Any | None = None) -> list[dict[str, Any]]:
    """Records of up to ``n`` episodes of a rollout (whole groups).

    ``trajectories`` are ``roll.data.trajectory.Trajectory`` objects in batch-row order;
    ``advantages`` is the batch's [B, T] tensor (or None before advantages exist) and
    ``trained`` the batch's final ``response_mask`` (rows a sample mask dropped are all 0).
    In step mode an episode is several samples (one per turn); its record joins them: the
    turns come from the episode's messages, the token view is its last turn's sample.
    """
    episodes: OrderedDict[str, list[int]] = OrderedDict()
    for i, t in enumerate(trajectories):
        episodes.setdefault(t.episode_id or f"row-{i}", []).append(i)
    keys = list(episodes)
    heads = [trajectories[episodes[k][0]] for k in keys]
    out = []
    for e in pick_groups([t.group_id for t in heads], [t.env_tag for t in heads], n):
        rows = episodes[keys[e]]
        out.append(_agentic_record(step, [trajectories[r] for r in rows], rows, tokenizer, advantages, trained))
    return out


def _agentic_record(step: int, samples: list[Any], rows: list[int], tokenizer: Any,
                    advantages: Any | None, trained: Any | None) -> dict[str, Any]:
    t = samples[-1]
    messages = next((s.messages for s in samples if s.messages), [])
    actions = next((getattr(s, "turn_actions", None) for s in samples if getattr(s, "turn_actions", None)), [])
    versions = t.turn_versions if t.step_index < 0 else [v for s in samples for v in s.turn_versions]
    rewards = t.turn_rewards if t.step_index < 0 else [r for s in samples for r in s.turn_rewards]
    turns = []
    for k in range(t.num_turns):
        obs = messages[2 * k]["content"] if 2 * k < len(messages) else ""
        text = messages[2 * k + 1]["content"] if 2 * k + 1 < len(messages) else ""
        turns.append(turn(obs, text, rewards[k] if k < len(rewards) else None,
                          versions[k] if k < len(versions) else None, actions[k] if k < len(actions) else None))
    adv_row = advantages[rows[-1]].tolist()[: len(t.input_ids)] if advantages is not None else None
    sample_adv = None
    if advantages is not None:
        # one number per episode: the mean over its model tokens (all samples in step mode)
        vals = [v for s, r in zip(samples, rows)
                for v, m in zip(advantages[r].tolist()[: len(s.input_ids)], s.loss_mask) if m]
        sample_adv = sum(vals) / len(vals) if vals else None
    was_trained = None if trained is None else any(bool(trained[r].any()) for r in rows)
    return record(
        "agentic", step, id=t.episode_id, env_tag=t.env_tag, env_id=t.env_id, group_id=t.group_id,
        seed=int(t.env_seed), success=bool(t.success), **{"return": t.episode_return}, advantage=sample_adv,
        trained=was_trained, num_turns=int(t.num_turns), terminated=bool(t.terminated), truncated=bool(t.truncated),
        failure=t.failure, info={k: _num(v) for k, v in (t.metrics or {}).items()}, turns=turns,
        tokens=token_block(tokenizer, t.input_ids, t.loss_mask, t.logprobs, adv_row),
    )


# ---- RLVR and SFT -------------------------------------------------------------------------------
def rlvr_record(step: int, response: Any, index: int, tokenizer: Any, advantages: Sequence[float] | None = None,
                trained: bool | None = None, policy_version: int | None = None) -> dict[str, Any]:
    """One RLVR response as a one-turn trajectory (``pipelines/rlvr.py``'s ``Response``).

    ``advantages`` is the response's batch row ([T], prompt first) or None when the response
    did not enter the batch (failed, or its group was filtered out)."""
    p = response.prompt
    ids = list(p.ids) + list(response.output_ids)
    mask = [0] * len(p.ids) + [1] * len(response.output_ids)
    logprobs = [0.0] * len(p.ids) + [float(x) for x in response.logprobs]
    rw = response.reward
    info = {f"reward/{k}": _num(v) for k, v in (rw.components or {}).items()}
    if rw.error:
        info["reward_error"] = _text(rw.error)
    adv = list(advantages)[: len(ids)] if advantages is not None else None
    return record(
        "rlvr", step, id=f"{response.group_id}-{index}",
        env_tag=response.tag, env_id=str(getattr(p.sample, "id", "")), group_id=response.group_id, seed=None,
        success=None if rw.failed else bool(rw.success), **{"return": None if rw.failed else rw.score},
        advantage=masked_mean(adv, mask) if adv is not None else None, trained=trained, num_turns=1,
        terminated=not response.truncated, truncated=bool(response.truncated), failure=rw.failed, info=info,
        turns=[turn(p.sample.prompt_text, response.text, None if rw.failed else rw.score, policy_version)],
        tokens=token_block(tokenizer, ids, mask, logprobs, adv),
    )


def sft_record(step: int, index: int, ids: Sequence[int], mask: Sequence[int], tokenizer: Any,
               tag: str = "sft") -> dict[str, Any]:
    """One SFT training conversation. Its turns are the spans of the loss mask: each
    non-trained span (system/user text and template tokens) is an observation, the trained
    span after it the model text. SFT has no reward, advantage or sampling logprobs."""
    turns, spans, start = [], [], 0
    for k in range(1, len(mask) + 1):
        if k == len(mask) or mask[k] != mask[k - 1]:
            spans.append((int(mask[start]) if len(mask) else 0, start, k))
            start = k
    pending_obs = ""
    for is_model, a, b in spans:
        text = tokenizer.decode(list(ids[a:b]), skip_special_tokens=False)
        if is_model:
            turns.append(turn(pending_obs, text))
            pending_obs = ""
        else:
            pending_obs += text
    return record("sft", step, id=f"s{step}-{index}", env_tag=tag, group_id=f"s{step}", num_turns=len(turns),
                  turns=turns, tokens=token_block(tokenizer, ids, mask))


# ---- writing and reading ------------------------------------------------------------------------
def write_step(run_dir: Path, step: int, records: Sequence[dict[str, Any]]) -> Path:
    """``RUN_DIR/trajectories/step-NNNNNN.jsonl.gz``, written atomically (a reader never sees
    half a file; a resumed run rewrites its steps)."""
    path = step_path(run_dir, step)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with gzip.open(tmp, "wt", encoding="utf-8", compresslevel=6) as f:
        for r in records:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    os.replace(tmp, path)
    return path


def summary_text(records: Sequence[dict[str, Any]], render: Callable[[dict], str] | None = None) -> str:
    """A short plain-text form of the records for text trackers (tensorboard, samples.jsonl)."""
    parts = []
    for r in records:
        head = (f"## {r['id']} tag={r['env_tag']} group={r['group_id']} return={r['return']} "
                f"success={r['success']} advantage={r['advantage']}")
        body = render(r) if render else "\n".join(
            f"[turn {k}] OBS: {t['observation']}\nMODEL: {t['model_text']}\nREWARD: {t['reward']}"
            for k, t in enumerate(r["turns"]))
        parts.append(f"{head}\n{body}\n")
    return "\n".join(parts)


TABLE_COLUMNS = ["step", "kind", "env_tag", "group_id", "id", "success", "return", "advantage", "num_turns", "transcript"]


def table_rows(records: Sequence[dict[str, Any]]) -> list[list[Any]]:
    """Rows for a tracker table (wandb): one per trajectory, the transcript as text."""
    rows = []
    for r in records:
        transcript = "\n\n".join(f"[{k}] {t['observation']}\n>>> {t['model_text']}  (reward {t['reward']})"
                                 for k, t in enumerate(r["turns"]))
        rows.append([r["step"], r["kind"], r["env_tag"], r["group_id"], r["id"], r["success"], r["return"],
                     r["advantage"], r["num_turns"], transcript])
    return rows


def log_records(tracker: Any, records: Sequence[dict[str, Any]], step: int, text: bool = True) -> None:
    """Text to every tracker (unless ``text`` is false); a table to those that take one
    (``log_table``)."""
    if tracker is None or not records:
        return
    if text:
        tracker.log_text("rollout/trajectories", summary_text(records), step=step)
    log_table = getattr(tracker, "log_table", None)
    if log_table is not None:
        log_table("rollout/trajectories_table", TABLE_COLUMNS, table_rows(records), step=step)
