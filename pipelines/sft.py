"""SFT pipeline: supervised fine-tuning on chat data (jsonl, one ``{"messages": [...]}`` per
line), loss on assistant tokens only, with the same training strategies, checkpoints and
resume as the RL pipelines. Used to warm-start a policy before agentic RL
(see ``roll.pipelines.sft_data`` for demonstration data from the envs' expert agents).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from roll.algorithms.sft import make_sft_loss_fn
from roll.config.schema import PipelineConfig
from roll.config.validate import ConfigError
from roll.data.batch import Batch
from roll.data.chat import ChatTemplateError, tokenize_conversation
from roll.data.trajectory import masked_trajectory, trajectories_to_batch
from roll.utils.logging import get_logger
from roll.viewer.records import log_records, sft_record, write_step
from roll.workers.actor import ActorWorker
from roll.workers.base import resolve_model

from roll.pipelines.base import BasePipeline

logger = get_logger("roll.pipelines.sft")


def read_conversations(paths: list[str], key: str) -> list[list[dict]]:
    """All conversations of the given jsonl files; a malformed line is a clear error."""
    return [messages for messages, _ in read_examples(paths, key)]


def read_examples(paths: list[str], key: str) -> list[tuple[list[dict], list[dict] | None]]:
    """(conversation, tool schemas or None) of every row: a row's optional ``tools`` list is
    rendered with its conversation, as a tool env's prompts are (pipelines/sft_data.py)."""
    out = []
    for path in paths:
        with open(path) as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                    messages = row[key]
                    tools = row.get("tools")
                except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as e:
                    raise ConfigError([f"{path}:{lineno}: expected a JSON object with a {key!r} list ({e})"]) from None
                if tools is not None and not (isinstance(tools, list) and all(isinstance(t, dict) for t in tools)):
                    raise ConfigError([f"{path}:{lineno}: 'tools' must be a list of JSON schemas (objects)"])
                out.append((messages, tools or None))
    return out


def collate(examples: list[tuple[list[int], list[int]]], pad_id: int) -> Batch:
    """Right-padded input_ids / attention_mask / response_mask (the loss mask), built like every
    training batch: each conversation is a trajectory whose trained tokens are its assistant
    turns (roll/data/trajectory.py)."""
    return trajectories_to_batch([masked_trajectory(ids, mask) for ids, mask in examples], pad_id)


class SFTPipeline(BasePipeline):
    """``max_steps`` optimizer rounds of ``rollout_batch_size`` conversations each."""

    def __init__(self, cfg: PipelineConfig):
        super().__init__(cfg)
        if not cfg.data.train_files:
            raise ConfigError(["data.train_files: the sft pipeline needs at least one jsonl file"])
        self.model_path = resolve_model(cfg.pretrain)
        self.loss_fn = make_sft_loss_fn(cfg.algorithm.loss_agg_mode)
        self.cursor = 0
        self.epoch = 0
        self.data_metrics: dict[str, float] = {}

    def setup(self) -> None:
        cfg = self.cfg
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(self.model_path)
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.tokenizer.eos_token_id
        self.train = self._tokenize(read_examples(cfg.data.train_files, cfg.data.messages_key), "train")
        self.val = self._tokenize(read_examples(cfg.data.val_files, cfg.data.messages_key), "val") if cfg.data.val_files else []
        for split, files, kept in (("train", cfg.data.train_files, self.train), ("val", cfg.data.val_files, self.val)):
            if files and not kept:
                raise ConfigError([f"data.{split}_files: no usable conversation (all over data.max_seq_length="
                                   f"{cfg.data.max_seq_length} or without assistant turns)"])
        self.order = self._permutation(0)
        self.make_pool()
        self.actor_train = self.make_cluster("actor_train", ActorWorker, cfg.actor_train, num_training_steps=cfg.max_steps)

    def _tokenize(self, examples: list[tuple[list[dict], list[dict] | None]], split: str) -> list[tuple[list[int], list[int]]]:
        """Tokenized conversations; those over ``data.max_seq_length`` or without an assistant turn
        are dropped, warned of and counted (``data/<split>_dropped_*``, logged with the first step)."""
        out, too_long, no_loss, longest = [], 0, 0, 0
        for messages, tools in examples:
            try:
                ids, mask = tokenize_conversation(self.tokenizer, messages, tools=tools if self.cfg.data.with_tools else None)
            except ChatTemplateError as e:
                raise ConfigError([f"data ({split}): {e}"]) from None
            if len(ids) > self.cfg.data.max_seq_length:
                too_long += 1
                longest = max(longest, len(ids))
            elif not any(mask):
                no_loss += 1
            else:
                out.append((ids, mask))
        if too_long or no_loss:
            logger.warning("%s data: dropped %d of %d conversations over data.max_seq_length=%d (the longest has %d "
                           "tokens) and %d without assistant turns", split, too_long, len(examples),
                           self.cfg.data.max_seq_length, longest, no_loss)
        self.data_metrics.update({f"data/{split}_dropped_too_long": float(too_long),
                                  f"data/{split}_dropped_no_loss": float(no_loss)})
        return out

    def _permutation(self, epoch: int) -> np.ndarray:
        n = len(self.train)
        if not self.cfg.data.shuffle:
            return np.arange(n)
        return np.random.default_rng(self.cfg.seed + epoch).permutation(n)

    def next_examples(self, n: int) -> list[tuple[list[int], list[int]]]:
        out = []
        while len(out) < n:
            if self.cursor >= len(self.order):
                self.epoch += 1
                self.cursor = 0
                self.order = self._permutation(self.epoch)
            out.append(self.train[self.order[self.cursor]])
            self.cursor += 1
        return out

    def train_step(self, step: int) -> dict[str, float]:
        examples = self.next_examples(self.cfg.rollout_batch_size)
        self.dump_samples(step, examples)
        batch = collate(examples, self.pad_id)
        multiple = self.actor_train.world_size * self.cfg.actor_train.training_args.per_device_train_batch_size
        batch, _ = batch.pad_rows_to_multiple(multiple)
        with self.timer("train"):
            results = self.actor_train.call("train", batch, self.loss_fn, 1, mode="dp")
        metrics = results if isinstance(results, dict) else {k: float(np.mean([r[k] for r in results])) for k in results[0]}
        metrics["data/epoch"] = float(self.epoch + self.cursor / max(1, len(self.order)))
        if step == self.start_step:
            metrics.update(self.data_metrics)
        return metrics

    def dump_samples(self, step: int, examples: list[tuple[list[int], list[int]]]) -> None:
        """The first ``tracking.dump_trajectories`` conversations of the step to
        ``trajectories/step-NNNNNN.jsonl.gz`` in the trajectory schema (roll/viewer/records.py;
        turns are the loss mask's spans), and as a table to the trackers that take one."""
        n = self.cfg.tracking.dump_trajectories
        if n <= 0:
            return
        records = [sft_record(step + 1, i, ids, mask, self.tokenizer) for i, (ids, mask) in enumerate(examples[:n])]
        write_step(self.output_dir, step + 1, records)
        log_records(self.tracker, records, step=step + 1, text=False)  # SFT data is no news on the console

    def validate(self, step: int) -> dict[str, float]:
        if not self.val:
            return {}
        total, count = 0.0, 0.0
        for i in range(0, len(self.val), self.cfg.val_batch_size):
            batch = collate(self.val[i: i + self.cfg.val_batch_size], self.pad_id)
            batch, _ = batch.pad_rows_to_multiple(self.actor_train.world_size)
            lp = self.actor_train.call("compute_logprobs", batch, "lp", mode="dp")["lp"]
            mask = batch["response_mask"].float()
            total += float((-lp * mask).sum())
            count += float(mask.sum())
        return {"val/sft_nll": total / max(count, 1.0)}

    def save_state(self, ckpt_dir: Path) -> dict[str, Any]:
        self.actor_train.call("save", str(ckpt_dir / "actor_train"))
        return {"cursor": self.cursor, "epoch": self.epoch}

    def load_state(self, ckpt_dir: Path, state: dict[str, Any]) -> None:
        self.actor_train.call("load", str(ckpt_dir / "actor_train"))
        self.epoch = int(state["epoch"])
        self.order = self._permutation(self.epoch)
        self.cursor = int(state["cursor"])

    def status_line(self, metrics: dict[str, float]) -> str:
        return f"nll {metrics.get('sft/nll', float('nan')):.3f}"
