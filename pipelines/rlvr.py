"""RLVR pipeline: single-turn RL with verifiable rewards over several domains in one run.

One step, each phase a method below:

    sync_weights -> generate_rollout (sample prompts by domain_interleave_probs; generate
      num_return_sequences responses each, a prompt's group in one call to an inference
      worker; score a group on its domain's reward workers, in one call, as soon as it
      finishes; dynamic sampling refills dropped groups)
      -> reference_logprobs -> old_logprobs -> critic_values -> advantages -> train_critic
      -> train_actor -> (checkpoint, validation per domain: BasePipeline)

With ``rollout.async_generation_ratio: 1`` the next step's batch is generated while this one
trains (generation and training overlap; each batch is one weight version behind the policy it
trains, its old log-probabilities those of the weights that sampled it): sync_weights -> start
generating batch k+1 in a thread -> train on batch k (generated during step k-1) -> wait.
Validation and checkpoints wait for the batch in flight first, and a checkpoint records the
prompt sampler as it was before that batch drew, so a resume generates it again.

The training phases are the shared `PolicyTrainer`'s (pipelines/policy.py, ``train_on``), as
in the agentic pipeline, on a batch built like the agentic one: by
``roll.data.trajectory.trajectories_to_batch``, a response being a one-turn trajectory. No
algorithm maths lives here.

Failures: a response whose reward function raised or timed out, whose reward worker died, or
whose generation failed is dropped from the batch and counted (``reward/<tag>/failed*``,
``rollout/<tag>/inference_failed``); it never enters group statistics as a 0. Each goes to
``<output_dir>/reward_errors.log`` with its traceback. A reward failure that does not depend on
the sample (roll/workers/reward.py), a step with no trainable sample, or one where more than
``rollout.max_failed_share`` of the responses failed stops the run (roll/rollout/failures.py).
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import random
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from roll.config.preflight import rlvr_async_problem
from roll.config.roles import WorkerConfig
from roll.config.schema import PipelineConfig
from roll.config.validate import ConfigError
from roll.data.batch import Batch
from roll.data.rlvr import DomainSampler, PromptSample, load_prompts, prompts_seen_in_training
from roll.data.trajectory import response_trajectory, trajectories_to_batch
from roll.errors import RunFailedError
from roll.rollout.failures import REWARD_ERRORS_LOG, ErrorLog, check_step, one_line
from roll.rollout.router import Router
from roll.strategies.base import GenerationRequest
from roll.utils.logging import get_logger
from roll.viewer.records import log_records, pick_groups, rlvr_record, write_step
from roll.workers.base import resolve_model
from roll.workers.inference import InferenceWorker
from roll.workers.reward import RewardClient, RewardResult, RewardWorker

from roll.pipelines.base import BasePipeline, lower_thread_priority
from roll.utils.loop import LoopThread
from roll.pipelines.policy import PolicyTrainer

logger = get_logger("roll.pipelines.rlvr")


@dataclasses.dataclass
class Prompt:
    """A prompt with its chat-template token ids."""

    sample: PromptSample
    ids: list[int]


@dataclasses.dataclass
class Rollout:
    """One step's generated batch and what its step reports about it."""

    batch: Batch | None
    metrics: dict[str, float]
    failures: tuple[int, int, int, Counter]
    """(responses, failed responses, filtered groups, failures by cause)."""
    dump_source: tuple[list["Response"], list["Response"]]
    """(generated, batch samples) for ``dump_samples``."""


@dataclasses.dataclass
class Response:
    """One generated response and its reward."""

    prompt: Prompt
    group_id: str
    output_ids: list[int]
    logprobs: list[float]
    text: str
    truncated: bool
    reward: RewardResult
    policy_version: int = -1
    """Weight version that generated the response (-1: none, a failed generation)."""
    index: int = 0
    """Position of the response in its group (request order)."""

    @property
    def tag(self) -> str:
        return self.prompt.sample.tag


def _chat_ids(tokenizer: Any, messages: list[dict]) -> list[int]:
    ids = tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=True)
    if isinstance(ids, dict) or hasattr(ids, "input_ids"):  # BatchEncoding in newer transformers
        ids = ids["input_ids"]
    return list(ids)


class RLVRPipeline(BasePipeline):
    """Trains ``actor_train`` on prompts from ``data.train_files`` scored by ``rewards``."""

    def __init__(self, cfg: PipelineConfig):
        super().__init__(cfg)
        errors = []
        if not cfg.data.train_files:
            errors.append("data.train_files: the rlvr pipeline needs prompt files (jsonl or parquet)")
        if not cfg.rewards:
            errors.append("rewards: the rlvr pipeline needs at least one reward domain")
        self.group_size = int(cfg.actor_infer.generating_args.num_return_sequences)
        if self.group_size < 1 or cfg.rollout_batch_size % self.group_size:
            errors.append(f"rollout_batch_size {cfg.rollout_batch_size} must be a multiple of "
                          f"actor_infer.generating_args.num_return_sequences {self.group_size}")
        problem = rlvr_async_problem(cfg.rollout.async_generation_ratio)
        if problem:
            errors.append(problem)
        if errors:
            raise ConfigError(errors)
        self.model_path = resolve_model(cfg.pretrain)
        self.ahead: concurrent.futures.Future | None = None
        """The next step's rollout, generating while this step trains (async_generation_ratio 1)."""
        self.sampler_before_ahead: dict[str, Any] | None = None
        """The prompt sampler's state before the batch in flight drew its prompts (checkpoints)."""
        self.policy: PolicyTrainer | None = None
        self.loop: LoopThread | None = None
        self.data_metrics: dict[str, float] = {}
        self.dump_source: tuple[list[Response], list[Response]] = ([], [])
        """This step's (generated, batch samples) for ``dump_samples``."""
        self.error_log = ErrorLog(self.output_dir / REWARD_ERRORS_LOG)
        self.step_failures: tuple[int, int, int, Counter] = (0, 0, 0, Counter())
        """This step's (responses, failed responses, filtered groups, failures by cause)."""

    # ================================================================ setup
    def setup(self) -> None:
        cfg = self.cfg
        self.record_process_start()
        # The prompts load (tokenizer import and chat templates: Python in this process, at a
        # lower CPU priority) while the local Ray cluster starts (mostly its own processes), not
        # one after the other. A data error is raised once the cluster is up, which the
        # pipeline's shutdown then takes down.
        with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="rlvr-data") as ex:
            data = ex.submit(self._load_data)
            with self.startup_phase("ray"):
                self.make_pool()
            data.result()
        # Start-up is spent starting worker processes (imports, model loads): the reward workers
        # start in a thread while the policy roles are built instead of after them.
        with self.startup_phase("workers"), concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="rlvr-setup") as ex:
            rewards = ex.submit(self._make_reward_clusters)
            with self.startup_phase("policy_roles"):
                self.policy = PolicyTrainer(cfg, self.make_cluster, self.timer)
            self.reward_clusters = rewards.result()
        self.rewards = RewardClient(self.reward_clusters, self.tag_to_reward, dict(cfg.rewards))
        self.loop = LoopThread("rlvr-rollout")
        self.router = Router(self.policy.actor_infer.workers, cfg.rollout.max_inflight_per_worker)
        self.record_startup_total()

    def _load_data(self) -> None:
        """The tokenizer, the train and validation prompts (tokenized) and the domain routes."""
        cfg = self.cfg
        lower_thread_priority()
        with self.startup_phase("data"):
            from transformers import AutoTokenizer

            self.tokenizer = AutoTokenizer.from_pretrained(self.model_path)
            base_dir = str(Path(cfg.source_path).parent) if cfg.source_path else None
            train = self._prepare(load_prompts(cfg.data.train_files, cfg.data.messages_key, cfg.data.prompt_key,
                                               cfg.data.tag_key, base_dir), "train")
            self.sampler = DomainSampler([p.sample for p in train], cfg.data.domain_interleave_probs, seed=cfg.seed)
            self.prompts = {id(p.sample): p for p in train}
            self.val_prompts = (self._prepare(load_prompts(cfg.data.val_files, cfg.data.messages_key, cfg.data.prompt_key,
                                                           cfg.data.tag_key, base_dir), "val")
                                if cfg.data.val_files else [])
            self._check_val_prompts([p.sample for p in train])
            self.tag_to_reward = self._route_tags({p.sample.tag for p in train} | {p.sample.tag for p in self.val_prompts})

    def _check_val_prompts(self, train: list[PromptSample]) -> None:
        """Warn (and count in ``data/val/<tag>/prompts_in_train``) where validation prompts are
        training prompts too: their scores rise as the policy memorises the training data."""
        shared = prompts_seen_in_training(train, [p.sample for p in self.val_prompts])
        for tag, n in sorted(shared.items()):
            total = sum(p.sample.tag == tag for p in self.val_prompts)
            logger.warning("val data: %d of the %d %s validation prompts are also training prompts (the same "
                           "messages); validation on them measures recall of the training data, not "
                           "generalisation: hold them out of data.train_files", n, total, tag)
            self.data_metrics[f"data/val/{tag}/prompts_in_train"] = float(n)

    def _prepare(self, samples: list[PromptSample], split: str) -> list[Prompt]:
        """Tokenize with the chat template; drop (and count) prompts over max_prompt_length."""
        out, dropped = [], Counter()
        for s in samples:
            ids = _chat_ids(self.tokenizer, s.messages)
            if len(ids) > self.cfg.data.max_prompt_length:
                dropped[s.tag] += 1
                continue
            out.append(Prompt(s, ids))
        for tag, n in dropped.items():
            logger.warning("%s data: dropped %d %s prompts longer than data.max_prompt_length=%d",
                           split, n, tag, self.cfg.data.max_prompt_length)
            self.data_metrics[f"data/{split}/{tag}/dropped_long_prompts"] = float(n)
        if not out:
            raise ConfigError([f"data: no {split} prompt fits data.max_prompt_length={self.cfg.data.max_prompt_length}"])
        return out

    def _route_tags(self, tags: set[str]) -> dict[str, str]:
        """Domain tag -> reward name (a reward's `tags`, or its own name when it lists none)."""
        route: dict[str, str] = {}
        errors = []
        for name, rc in self.cfg.rewards.items():
            for tag in rc.tags or [name]:
                if tag in route:
                    errors.append(f"rewards: domain {tag!r} is routed to both {route[tag]!r} and {name!r}")
                route[tag] = name
        missing = sorted(t for t in tags if t not in route and self.sampler.probs.get(t, 1.0) > 0)
        if missing:
            errors.append(f"rewards: no reward for data domains {missing} (add them to a reward's `tags`)")
        if errors:
            raise ConfigError(errors)
        return route

    def _make_reward_clusters(self) -> dict[str, Any]:
        with self.startup_phase("reward_workers"):
            return {name: self._make_reward_cluster(name, rc) for name, rc in self.cfg.rewards.items()}

    def _make_reward_cluster(self, name: str, rc: Any) -> Any:
        from ray import cloudpickle

        judge_workers, judge_path = None, None
        if rc.judge is not None:
            judge_path = resolve_model(rc.judge.model_name_or_path or self.cfg.pretrain)
            judge = self.make_cluster(f"reward.{name}.judge", InferenceWorker, rc.judge, model_path=judge_path)
            # pickled here: actor handles among an actor's creation arguments make Ray log an error
            # for every restartable actor (roll/workers/environment.py, EnvironmentWorkerActor)
            judge_workers = cloudpickle.dumps(list(judge.workers))
        wc = WorkerConfig(world_size=rc.world_size, num_cpus_per_worker=1.0,
                          max_concurrency=max(16, 4 * (rc.max_concurrency + rc.max_hung_calls)),
                          call_timeout_s=rc.timeout_s + 60.0, max_restarts=-1)
        return self.make_cluster(f"reward.{name}", RewardWorker, wc, reward_config=rc, imports=list(self.cfg.imports),
                                 judge_workers=judge_workers, judge_model_path=judge_path)

    # ================================================================ one step
    def train_step(self, step: int) -> dict[str, float]:
        metrics: dict[str, float] = {**self.data_metrics, **self.startup_timings} if step == self.start_step else {}
        rollout = None
        if self.ahead is not None:  # generated while the last step trained
            with self.timer("rollout_wait"):
                rollout = self.take_ahead()
        metrics.update(self.sync_weights(step))  # nothing generates now
        if rollout is None:
            with self.timer("rollout"):
                rollout = self.generate_rollout(step)
        if self.cfg.rollout.async_generation_ratio and step + 1 < self.cfg.max_steps:
            self.start_ahead(step + 1)
        batch, rollout_metrics = self.use_rollout(rollout)
        metrics.update(rollout_metrics)
        if batch is not None:  # weight versions between the sampling and the trained policy
            metrics["rollout/policy_lag"] = float((self.policy.version - batch["min_policy_version"].float()).mean())
        if batch is None:
            self.dump_samples(step, None)  # the failed and filtered responses, before the run stops
        self.check_rollout(step, batch, metrics)
        metrics.update(self.policy.train_on(batch))
        self.dump_samples(step, batch)
        return metrics

    def check_rollout(self, step: int, batch: Batch | None, metrics: dict[str, float]) -> None:
        """Stop the run (RunFailedError, after logging the step's metrics) when the step has no
        trainable sample or more than ``rollout.max_failed_share`` of its responses failed."""
        attempted, failed, filtered, causes = self.step_failures
        note = f"{filtered} groups filtered (drop_uniform_groups)" if filtered else ""
        try:
            check_step(step, what="responses", attempted=attempted, failed=failed,
                       trainable=0 if batch is None else len(batch), limit=self.cfg.rollout.max_failed_share,
                       causes=causes, log=self.error_log, note=note)
        except RunFailedError:
            metrics["rollout/empty_batch"] = float(batch is None)
            self.tracker.log(metrics, step=step + 1)
            raise

    def record_failures(self, groups: list[list[Response]]) -> None:
        """Every failed response goes to reward_errors.log (the first traceback of each distinct
        error in full); a reward failure that does not depend on the sample stops the run."""
        for r in (r for g in groups for r in g if r.reward.failed):
            self.error_log.record(f"response {r.group_id} domain={r.tag} reward={self.tag_to_reward.get(r.tag)}",
                                  r.reward.failed, r.reward.error, r.reward.traceback)
        broken = next((r for g in groups for r in g if r.reward.permanent), None)
        if broken is not None:
            name = self.tag_to_reward[broken.tag]
            raise RunFailedError(f"reward {name!r} (reward_fn {self.cfg.rewards[name].reward_fn!r}, domain "
                                 f"{broken.tag!r}) fails permanently: {one_line(broken.reward.error)}; "
                                 f"traceback in {self.error_log}")

    def sync_weights(self, step: int) -> dict[str, float]:
        """Generation is finished between steps, so no request sees a half-updated model."""
        return self.policy.sync_weights(step)

    def use_rollout(self, rollout: Rollout) -> tuple[Batch | None, dict[str, float]]:
        """Make ``rollout`` this step's: its failures for ``check_rollout``, its responses for
        ``dump_samples``."""
        self.step_failures, self.dump_source = rollout.failures, rollout.dump_source
        return rollout.batch, rollout.metrics

    def start_ahead(self, step: int) -> None:
        """Generate ``step``'s batch in a thread, by the weights the inference workers hold now. A
        daemon thread: if the run stops while it generates, it cannot keep the process alive
        (its calls may never return once the workers and the loop are gone)."""
        self.sampler_before_ahead = self.sampler.state_dict()
        future: concurrent.futures.Future = concurrent.futures.Future()

        def generate() -> None:
            future.set_running_or_notify_cancel()
            t0 = time.perf_counter()
            try:
                rollout = self.generate_rollout(step)
            except BaseException as e:  # noqa: BLE001  (raised by take_ahead in the step that uses it)
                future.set_exception(e)
            else:  # its own time: it overlapped the last step's training
                rollout.metrics["timing/rollout"] = time.perf_counter() - t0
                future.set_result(rollout)

        threading.Thread(target=generate, name=f"rlvr-ahead-{step}", daemon=True).start()
        self.ahead = future

    def take_ahead(self) -> Rollout:
        """The batch generated ahead, with its generation time as ``timing/rollout`` (its errors
        raised here)."""
        assert self.ahead is not None
        try:
            return self.ahead.result()
        finally:
            self.ahead, self.sampler_before_ahead = None, None

    def wait_ahead(self) -> None:
        """Let the batch in flight finish (before weights change or a checkpoint); it is kept
        for the next step."""
        if self.ahead is not None:
            with self.timer("rollout_wait"):
                concurrent.futures.wait([self.ahead])

    def generate_rollout(self, step: int) -> Rollout:
        """Groups of scored responses for ``rollout_batch_size / group_size`` prompts, with
        per-domain query filters and up to ``data.max_sampling_rounds`` refill rounds. Touches
        no per-step state of the pipeline: it may run in a thread while the last batch trains."""
        cfg = self.cfg
        need = cfg.rollout_batch_size // self.group_size
        kept: list[list[Response]] = []
        generated: list[Response] = []
        counts: dict[str, Counter] = defaultdict(Counter)
        rounds = 0
        while len(kept) < need and rounds <= cfg.data.max_sampling_rounds:
            prompts = [self.prompts[id(s)] for s in self.sampler.sample(need - len(kept))]
            groups = self.loop.run(self._generate_groups(prompts, step, rounds, self.group_size,
                                                         cfg.actor_infer.generating_args.temperature))
            self.record_failures(groups)
            for group in groups:
                generated += group
                verdict = self.query_filter(group)
                counts[group[0].tag]["groups"] += 1
                if verdict == "keep":
                    kept.append(group)
                else:
                    counts[group[0].tag][f"groups_{verdict}"] += 1
            rounds += 1
        # every generated response counts in the reward metrics, also those of dropped groups
        metrics = self._rollout_metrics(generated, counts)
        metrics["rollout/refill_rounds"] = float(rounds - 1)
        metrics["rollout/groups_kept"] = float(len(kept))
        metrics["rollout/groups_short"] = float(max(0, need - len(kept)))
        t0 = time.perf_counter()
        metrics.update(self.rewards.restart_hung_workers())
        metrics["timing/reward_health"] = time.perf_counter() - t0
        samples = [r for g in kept for r in g if r.reward.failed is None and r.output_ids]
        failed = [r for r in generated if r.reward.failed]
        failures = (len(generated), len(failed), sum(c.get("groups_filtered", 0) for c in counts.values()),
                    Counter(f"{r.reward.failed}: {r.reward.error}" for r in failed))
        metrics["rollout/batch_samples"] = float(len(samples))
        # the responses are dumped after the advantages (train_step)
        return Rollout(self.build_batch(samples) if samples else None, metrics, failures, (generated, samples))

    def query_filter(self, group: list[Response]) -> str:
        """"keep", or why the group is dropped: "all_failed" (no response has a reward), or
        "filtered" (its domain sets drop_uniform_groups and all rewards are equal)."""
        valid = [r for r in group if r.reward.failed is None and r.output_ids]
        if not valid:
            return "all_failed"
        scores = [r.reward.score for r in valid]
        if self.cfg.rewards[self.tag_to_reward[group[0].tag]].drop_uniform_groups and max(scores) - min(scores) <= 1e-6:
            return "filtered"
        return "keep"

    async def _generate_groups(self, prompts: list[Prompt], step: int, round_: int, n: int,
                               temperature: float, validation: bool = False) -> list[list[Response]]:
        prefix = "val" if validation else "train"
        return await asyncio.gather(*(self._respond_group(p, f"{prefix}-s{step}-r{round_}-p{k}", n, temperature)
                                      for k, p in enumerate(prompts)))

    async def _respond_group(self, prompt: Prompt, group_id: str, n: int, temperature: float) -> list[Response]:
        """Generate a prompt's ``n`` responses in one call to one inference worker, then score
        them in one call to a reward worker (per group, so rewards overlap the other groups'
        generation): two round trips per group instead of two per response."""
        gen = self.cfg.actor_infer.generating_args
        requests = [GenerationRequest(
            request_id=f"{group_id}-{i}", prompt_ids=prompt.ids, max_new_tokens=gen.max_new_tokens,
            temperature=temperature if gen.do_sample else 0.0, top_p=gen.top_p, top_k=gen.top_k,
            seed=random.Random(f"{self.cfg.seed}-{group_id}-{i}").randrange(2**31),
            stop_strings=list(gen.stop_strings)) for i in range(n)]
        try:
            results = await self.router.generate_batch(requests)
        except Exception as e:  # noqa: BLE001  (a dead or failing inference worker: these samples fail, counted)
            logger.warning("generation of group %s failed: %s", group_id, e)
            failed = RewardResult(failed="inference_error", error=f"{type(e).__name__}: {str(e)[:300]}")
            return [Response(prompt, group_id, [], [], "", False, dataclasses.replace(failed), index=i) for i in range(n)]
        texts = [self.tokenizer.decode(r.output_ids, skip_special_tokens=True) for r in results]
        scored = [i for i, r in enumerate(results) if r.output_ids]
        samples = [{**prompt.sample.fields, "response": texts[i], "prompt_text": prompt.sample.prompt_text} for i in scored]
        rewards = dict(zip(scored, await self.rewards.score_batch(prompt.sample.tag, samples)))
        empty = RewardResult(failed="empty_response", error="EmptyResponse: no tokens generated")
        return [Response(prompt, group_id, list(r.output_ids), list(r.logprobs), texts[i], r.finish_reason == "length",
                         rewards.get(i) or dataclasses.replace(empty), r.policy_version, i)
                for i, r in enumerate(results)]

    def build_batch(self, samples: list[Response]) -> Batch:
        """The training batch of ``samples`` through ``trajectories_to_batch``: each response
        is a one-turn trajectory (its reward on its last token, the version that generated it
        on every token); ``tag`` and ``prompt_id`` are added for the per-domain metrics and dumps."""
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        gen = self.cfg.actor_infer.generating_args
        # training samples are all drawn at the configured temperature (greedy validation is not trained on)
        temperature = gen.temperature if gen.do_sample else 0.0
        batch = trajectories_to_batch([
            response_trajectory(
                s.prompt.ids, s.output_ids, s.logprobs, reward=s.reward.score, policy_version=s.policy_version,
                temperature=temperature, group_id=s.group_id, env_tag=s.tag, env_id=self.tag_to_reward.get(s.tag, ""),
                episode_id=f"{s.group_id}-{s.index}", success=bool(s.reward.success),
                truncated=bool(s.truncated), terminated=not s.truncated)
            for s in samples], pad)
        batch["tag"] = [s.tag for s in samples]
        batch["prompt_id"] = [s.prompt.sample.id for s in samples]
        return batch

    def _rollout_metrics(self, responses: list[Response], counts: dict[str, Counter], prefix: str = "") -> dict[str, float]:
        """Per-domain reward and rollout metrics (``reward/<tag>/...``, ``rollout/<tag>/...``)."""
        out: dict[str, float] = {}
        by_tag: dict[str, list[Response]] = defaultdict(list)
        for r in responses:
            by_tag[r.tag].append(r)
        for tag, rs in sorted(by_tag.items()):
            ok = [r for r in rs if r.reward.failed is None]
            out[f"{prefix}rollout/{tag}/samples"] = float(len(rs))
            out[f"{prefix}rollout/{tag}/response_length"] = float(np.mean([len(r.output_ids) for r in rs]))
            out[f"{prefix}rollout/{tag}/truncated_rate"] = float(np.mean([r.truncated for r in rs]))
            out[f"{prefix}reward/{tag}/failed"] = float(len(rs) - len(ok))
            if ok:
                out[f"{prefix}reward/{tag}/score"] = float(np.mean([r.reward.score for r in ok]))
                out[f"{prefix}reward/{tag}/success"] = float(np.mean([r.reward.success for r in ok]))
                comps = {k for r in ok for k in r.reward.components}
                for k in sorted(comps):
                    vals = [r.reward.components[k] for r in ok if k in r.reward.components]
                    out[f"{prefix}reward/{tag}/{k}"] = float(np.mean(vals))
            failed = [r.reward for r in rs if r.reward.failed]
            for kind, n in Counter(f.failed for f in failed).items():
                out[f"{prefix}reward/{tag}/failed_{kind}"] = float(n)
            for etype, n in Counter(f.error.split(":", 1)[0] for f in failed).items():
                out[f"{prefix}reward/{tag}/errors/{etype}"] = float(n)
        for tag, c in counts.items():
            for k, v in c.items():
                out[f"{prefix}rollout/{tag}/{k}"] = float(v)
        valid = [r for r in responses if r.reward.failed is None]
        if valid:
            out[f"{prefix}reward/score"] = float(np.mean([r.reward.score for r in valid]))
            out[f"{prefix}reward/success"] = float(np.mean([r.reward.success for r in valid]))
        out[f"{prefix}reward/failed"] = float(len(responses) - len(valid))
        return out

    def dump_samples(self, step: int, batch: Batch | None) -> None:
        """Up to ``tracking.dump_trajectories`` responses of this step (whole groups, one per
        domain first; also failed and filtered ones) to ``trajectories/step-NNNNNN.jsonl.gz``
        as one-turn trajectories (schema: roll/viewer/records.py), with the advantages of those
        that entered ``batch``; as text to the trackers and as a table to those taking one."""
        n = self.cfg.tracking.dump_trajectories
        generated, samples = self.dump_source
        self.dump_source = ([], [])
        if n <= 0 or not generated:
            return
        row_of = {id(r): i for i, r in enumerate(samples)}
        index_in_group: dict[str, int] = {}
        indices = []
        for r in generated:  # a group's responses are consecutive, in request order
            indices.append(index_in_group.get(r.group_id, 0))
            index_in_group[r.group_id] = indices[-1] + 1
        advantages = batch.tensors.get("advantages") if batch is not None else None
        records = []
        for k in pick_groups([r.group_id for r in generated], [r.tag for r in generated], n):
            r = generated[k]
            row = row_of.get(id(r))
            adv = advantages[row].tolist() if advantages is not None and row is not None else None
            trained = None if advantages is None else (row is not None and bool(batch["response_mask"][row].any()))
            records.append(rlvr_record(step + 1, r, indices[k], self.tokenizer, adv, trained, self.policy.version))
        write_step(self.output_dir, step + 1, records)
        log_records(self.tracker, records, step=step + 1)

    # ================================================================ validation
    def validate(self, step: int) -> dict[str, float]:
        """One response per held-out prompt, scored per domain, for each of ``val_decoding``:
        sampled (the training temperature; ``val/reward/<tag>/score`` ...) and/or greedy
        (``val_greedy/...``). Up to ``val_batch_size`` prompts, the domains in turn."""
        if not self.val_prompts:
            return {}
        self.wait_ahead()  # no weight change under a batch in flight
        self.sync_weights(step)
        by_tag: dict[str, list[Prompt]] = defaultdict(list)
        for p in self.val_prompts:
            by_tag[p.sample.tag].append(p)
        chosen: list[Prompt] = []
        for k in range(max(len(v) for v in by_tag.values())):
            chosen += [v[k] for _, v in sorted(by_tag.items()) if k < len(v)]
        chosen = chosen[: self.cfg.val_batch_size]
        metrics: dict[str, float] = {}
        for mode in dict.fromkeys(self.cfg.val_decoding):
            temperature = 0.0 if mode == "greedy" else self.cfg.actor_infer.generating_args.temperature
            groups = self.loop.run(self._generate_groups(chosen, step, 0, 1, temperature, validation=True))
            prefix = "val/" if mode == "sampled" else f"val_{mode}/"
            metrics.update(self._rollout_metrics([r for g in groups for r in g], {}, prefix=prefix))
        return metrics

    # ================================================================ checkpoint
    def save_state(self, ckpt_dir: Path) -> dict[str, Any]:
        """A batch generating ahead is not saved: the sampler is recorded as it was before that
        batch drew its prompts, so a resume draws and generates them again."""
        self.wait_ahead()
        sampler = self.sampler_before_ahead if self.ahead is not None else self.sampler.state_dict()
        return {**self.policy.save(ckpt_dir), "sampler": sampler}

    def load_state(self, ckpt_dir: Path, state: dict[str, Any]) -> None:
        self.policy.load(ckpt_dir, state)
        self.sampler.load_state_dict(state["sampler"])

    def shutdown(self) -> None:
        self.ahead = None  # a batch in flight when the run stopped is dropped (its thread is a daemon)
        if self.loop is not None:
            self.loop.close()
        super().shutdown()

    def status_line(self, metrics: dict[str, float]) -> str:
        parts = [f"{k.split('/')[1]} {metrics[k]:.2f}" for k in sorted(metrics)
                 if k.startswith("reward/") and k.endswith("/score") and k.count("/") == 2][:5]
        if "actor/loss" in metrics:
            parts.append(f"loss {metrics['actor/loss']:.3f}")
        return " | ".join(parts)
