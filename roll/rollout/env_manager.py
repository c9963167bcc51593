"""EnvManager: runs one multi-turn episode against an inference client, token-exactly.

reset the env -> (system prompt, instruction + first observation) through the chat template
-> generate -> decode -> ``env.step(text)`` -> render the next observation with the tag's
``turn_template`` -> append its token delta -> ... until terminated, truncated, max turns or
the context limit.

The episode is split into ``reset`` / ``generate_turn`` / ``step_env`` so the same code runs
per-sample (``run``: each episode at its own pace) and in lockstep (the scheduler's sync
baseline calls each phase for all episodes of a batch together). Results are identical.

Tool envs (docs/tools.md; an env exposing ``tool_schemas``, ``tool_turn`` and ``tool_stats``,
e.g. roll/Tools-v0): the first prompt renders the tool schemas; a model turn that calls tools
is answered with the template's delta for ``tool`` messages instead of an env step. It counts
as a turn (reward 0) against ``max_turns``, so every episode still ends.

Agent-function envs (an env exposing ``run_agent`` and ``agent_options``, e.g.
roll/AgentFunction-v0) run the user's function against the OpenAI-compatible endpoint in their
one generate phase; roll/rollout/agent_episode.py builds their samples.

Failures are typed (``Trajectory.failure``): ``env_error`` (reset/step raised),
``env_timeout`` (slower than ``step_timeout_s``), ``inference_error`` / ``worker_died``
(generation failed), plus two non-infrastructure stops the scheduler restarts: ``stale``
(older than the staleness bound) and ``discarded`` (weight update in discard mode).
"""
from __future__ import annotations

import functools
import hashlib
import math
import time
import traceback
import zlib
from dataclasses import dataclass
from typing import Any

from roll.config.roles import GeneratingArgs
from roll.config.rollout import TURN_TEMPLATE_FIELDS, EnvConfig, EnvManagerConfig
from roll.data.trajectory import Trajectory
from roll.rollout.chat import ChatRenderer
from roll.rollout.control import CallTimeout, RolloutControl, ThreadRunner
from roll.rollout.hosts import actor_died
from roll.rollout.router import InferenceClient
from roll.strategies.base import GenerationRequest

FEEDBACK_INVALID = "\nYour last answer was not an action here: {error}"
FEEDBACK_NO_EFFECT = "\nYour last action changed nothing."
_MAX_RESUMES_PER_TURN = 64


def _shape(result: Any) -> str:
    """How a value an env returned looks, for an error message: ``a tuple of 4``, ``a dict``."""
    if isinstance(result, (tuple, list)):
        return f"a {type(result).__name__} of {len(result)}"
    return f"a {type(result).__name__}"


@dataclass
class EpisodeSpec:
    """Which episode to run: env tag and seed, its group, and its sampling seed."""

    episode_id: str
    tag: str
    group_id: str
    env_seed: int
    index_in_group: int = 0
    attempt: int = 0

    @property
    def sample_seed(self) -> int:
        """Deterministic per (group, index, attempt), so reruns reproduce the same samples."""
        return zlib.crc32(f"{self.group_id}|{self.env_seed}|{self.index_in_group}|{self.attempt}".encode()) & 0x7FFFFFFF


class EpisodeFailure(Exception):
    """Why an episode ended early. ``permanent``: it will recur (the run stops, see
    roll/rollout/failures.py); ``traceback``: where in the env code it was raised."""

    def __init__(self, kind: str, detail: str = "", permanent: bool = False, traceback: str = ""):
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail
        self.permanent = permanent
        self.traceback = traceback


class _ToolCapability:
    """The tool hooks of an env (through gymnasium wrappers)."""

    def __init__(self, schemas: list[dict], turn: Any, stats: Any):
        self.schemas, self.turn, self.stats = schemas, turn, stats


def _tool_capability(env: Any) -> _ToolCapability | None:
    """The env's tool hooks, or None for an env without tools."""
    get = getattr(env, "get_wrapper_attr", None)
    try:
        attrs = [get(n) if get is not None else getattr(env, n) for n in ("tool_schemas", "tool_turn", "tool_stats")]
    except AttributeError:
        return None
    return _ToolCapability(*attrs)


def _agent_episode(manager: EnvManager) -> Any:
    """The AgentEpisode of an env that runs an agent function (``run_agent``, e.g.
    roll/AgentFunction-v0; roll/rollout/agent_episode.py), or None."""
    get = getattr(manager.env, "get_wrapper_attr", None)
    try:
        run, options = (get(n) if get is not None else getattr(manager.env, n) for n in ("run_agent", "agent_options"))
    except AttributeError:
        return None
    from roll.rollout.agent_episode import AgentEpisode

    return AgentEpisode(manager, run, dict(options))


def action_feedback(info: dict[str, Any] | None) -> str:
    """The ``{feedback}`` of the turn after a step with this ``info``: empty after a valid action
    that changed something (and after reset); otherwise one line, starting with a newline, that says
    the answer was no action on the page (with the env's error) or that the action changed nothing.
    Without it a step-mode prompt without history is the same page again, and a greedy policy
    repeats the same answer to the turn limit."""
    info = info or {}
    if not info.get("action_is_valid", True):
        error = " ".join(str(info.get("parse_error") or info.get("error") or "invalid answer").split())
        return FEEDBACK_INVALID.format(error=error[:200])
    if not info.get("action_is_effective", True):
        return FEEDBACK_NO_EFFECT
    return ""


def format_turn(template: str, **fields: Any) -> str:
    fields.setdefault("feedback", "")
    try:
        return template.format(**fields)
    except (KeyError, IndexError) as e:
        raise ValueError(f"turn_template {template!r} uses an unknown field {e}; known: {', '.join(TURN_TEMPLATE_FIELDS)}") from None


class EnvManager:
    """One episode. ``env``/``runner`` come from the host's env pool and are returned there
    unless the episode marks them broken (``env_broken``)."""

    def __init__(
        self,
        spec: EpisodeSpec,
        env: Any,
        runner: ThreadRunner,
        env_config: EnvConfig,
        manager_config: EnvManagerConfig,
        generating_args: GeneratingArgs,
        renderer: ChatRenderer,
        client: InferenceClient,
        control: RolloutControl,
    ):
        self.spec = spec
        self.env = env
        self.runner = runner
        self.cfg = env_config
        self.mcfg = manager_config
        self.gen = generating_args
        self.renderer = renderer
        self.client = client
        self.control = control
        self.step_mode = manager_config.mode == "step"
        self.env_broken = False
        self.done = False
        self.turn = 0
        # trajectory-mode token stream (also the current context in trajectory mode)
        self.ids: list[int] = []
        self.mask: list[int] = []
        self.logprobs: list[float] = []
        self.tturns: list[int] = []
        self.tversions: list[int] = []
        self.turn_versions: list[int] = []
        self.turn_rewards: list[float] = []
        self.messages: list[dict[str, str]] = []
        self.turn_actions: list[dict] = []  # per turn: the env's parse of the model text (dumps only)
        self.step_samples: list[Trajectory] = []
        self.last_output: list[int] = []
        self.observation = ""
        self.feedback = ""  # the {feedback} of the next user turn (action_feedback)
        self.instruction = ""
        self.final_reward = 0.0
        self.success = False
        self.success_reported = False  # whether any step's info had "success" (the metric means nothing without)
        self.terminated = False
        self.truncated = False
        self.failure: str | None = None
        self.failure_detail = ""
        self.failure_traceback = ""
        self.failure_permanent = False
        self.invalid_actions = 0
        self.effective_actions = 0
        self.responses = 0
        self.cut_responses = 0  # responses that used their whole token budget without a stop token
        self.partial_resumes = 0
        self.tools = _tool_capability(env)
        self.tool_schemas: list[dict] | None = None
        self.tool_stats: dict[str, int] = {}
        self.agent = _agent_episode(self)
        self.gen_time = self.env_time = self.wait_time = 0.0
        self.t_start = time.monotonic()

    # ---- phases -----------------------------------------------------------------------
    async def reset(self) -> None:
        try:
            result = await self._env_call(self.env.reset, seed=self.spec.env_seed)
            if not isinstance(result, tuple) or len(result) != 2:
                raise self._contract_error(f"reset() returned {_shape(result)}, expected (observation, info)")
            obs, info = result
            self._check_observation(obs, "reset")
            if info is not None and not isinstance(info, dict):
                raise self._contract_error(f"reset() returned a {type(info).__name__} as info, expected a dict")
        except EpisodeFailure as f:
            return self._fail(f)
        self.instruction = str((info or {}).get("instruction", "")) if self.cfg.include_instruction else ""
        self.observation = str(obs)
        if self.agent is not None:  # the agent function writes its own prompts
            return self.agent.check_mode()
        first = self._render_turn(reward=0.0)
        user = f"{self.instruction}\n\n{first}" if self.instruction else first
        self.messages.append({"role": "user", "content": user})
        if self.tools is not None:
            if self.step_mode:
                return self._fail(EpisodeFailure(
                    "env_error", f"env {self.cfg.env_id!r} has tools, which need env manager mode 'trajectory' "
                    "(step mode rebuilds each prompt from a window of user/assistant turns)", permanent=True))
            self.tool_schemas = list(self.tools.schemas)
        if not self.step_mode:
            self._append(self.renderer.initial_prompt(user, tools=self.tool_schemas), model=False)
            if len(self.ids) >= self.mcfg.max_context_tokens:
                self._fail(self._first_prompt_overflow(len(self.ids)))

    async def generate_turn(self) -> None:
        if self.done:
            return
        if self.agent is not None:  # the whole agent function is the episode's one phase
            return await self.agent.run()
        prompt = self._window_prompt() if self.step_mode else list(self.ids)
        # reserve room for the end-of-turn tokens appended after the output
        room = self.mcfg.max_context_tokens - len(prompt) - len(self.renderer.assistant_suffix_ids)
        budget = min(self.gen.max_new_tokens, room)
        if budget <= 0:
            if self.turn == 0:  # no answer fits at all: a failure, not an episode of no turns
                return self._fail(self._first_prompt_overflow(len(prompt)))
            self.truncated = self.done = True
            return
        out: list[int] = []
        lps: list[float] = []
        vers: list[int] = []
        resumes = 0
        while True:
            t_wait = time.monotonic()
            await self.control.wait_running()
            self.wait_time += time.monotonic() - t_wait
            oldest = min(self.turn_versions + vers, default=-1)
            if self.control.on_weight_update == "discard" and 0 <= oldest < self.control.version:
                # discard mode: an episode never mixes versions, even one stopped between turns
                return self._fail("discarded", "weight update in discard mode")
            if self.control.is_stale(oldest):
                return self._fail("stale", f"oldest version {oldest} < {self.control.version} - {self.control.max_staleness}")
            version = self.control.version
            request = GenerationRequest(
                request_id=f"{self.spec.episode_id}/t{self.turn}/r{resumes}",
                prompt_ids=prompt + out,
                max_new_tokens=budget - len(out),
                temperature=self.gen.temperature if self.gen.do_sample else 0.0,
                top_p=self.gen.top_p,
                top_k=self.gen.top_k,
                seed=(self.spec.sample_seed * 1009 + self.turn * 31 + resumes) & 0x7FFFFFFF,
                stop_strings=list(self.gen.stop_strings),
                stop_token_ids=list(self.renderer.stop_token_ids),
                meta={"episode_id": self.spec.episode_id, "turn": self.turn, "policy_version": version},
            )
            self.control.request_started(request.request_id)
            t0 = time.monotonic()
            try:
                result = await self.client.generate(request)
            except Exception as e:  # typed below; the scheduler counts and refills
                kind = "worker_died" if actor_died(e) else "inference_error"
                return self._fail(kind, f"{type(e).__name__}: {e}")
            finally:
                self.control.request_finished(request.request_id)
                self.gen_time += time.monotonic() - t0
            if len(result.logprobs) != len(result.output_ids):
                return self._fail("inference_error", "logprobs and output_ids differ in length")
            out += list(result.output_ids)
            lps += [float(x) for x in result.logprobs]
            vers += [version] * len(result.output_ids)
            finished = out and out[-1] in self.renderer.stop_token_ids
            if result.finish_reason != "abort" or finished or len(out) >= budget:
                break
            # aborted by a weight update: keep the partial tokens, resume under the new weights
            if self.control.on_weight_update == "discard":
                return self._fail("discarded", "weight update in discard mode")
            resumes += 1
            self.partial_resumes += 1
            if resumes > _MAX_RESUMES_PER_TURN:
                return self._fail("inference_error", "turn aborted too many times")
        self.last_output = out
        self.responses += 1
        self.cut_responses += int(not finished and len(out) >= budget and result.finish_reason != "stop")
        close = self.renderer.close_assistant(out)
        self.turn_versions.append(min(vers, default=self.control.version))
        self.messages.append({"role": "assistant", "content": self.renderer.assistant_text(out)})
        if self.step_mode:
            self._add_step_sample(prompt, out, lps, vers, close)
        else:
            self._append(out, model=True, logprobs=lps, versions=vers)
            self._append(close, model=False)

    async def step_env(self) -> None:
        if self.done:
            return
        text = self.renderer.decode(self.last_output)
        if self.tools is not None:
            try:
                tool_turn = await self._env_call(self.tools.turn, text)
            except EpisodeFailure as f:
                return self._fail(f)
            self.tool_stats = dict(self.tools.stats())
            if tool_turn is not None:
                return self._append_tool_turn(tool_turn)
        try:
            obs, reward, terminated, truncated, info = self._checked_step(await self._env_call(self.env.step, text))
        except EpisodeFailure as f:
            return self._fail(f)
        self.turn += 1
        self.turn_rewards.append(float(reward))
        if self.step_mode:
            self.step_samples[-1].turn_rewards = [float(reward)]
        self.success = bool(info.get("success", self.success))
        self.success_reported = self.success_reported or "success" in info
        self.invalid_actions += 0 if info.get("action_is_valid", True) else 1
        self.turn_actions.append({"actions": [str(a) for a in info.get("actions") or []],
                                  "valid": bool(info.get("action_is_valid", True)),
                                  "error": str(info.get("parse_error") or info.get("error") or "")})
        self.effective_actions += 1 if info.get("action_is_effective", False) else 0
        self.observation = str(obs)
        self.feedback = action_feedback(info)
        if terminated or truncated or self.turn >= self.cfg.max_turns:
            self.final_reward = float(info.get("final_reward", 0.0))
            self.terminated = bool(terminated)
            self.truncated = not terminated
            self.done = True
            return
        content = self._render_turn(reward=float(reward))
        self.messages.append({"role": "user", "content": content})
        if not self.step_mode:
            delta = self.renderer.user_turn_delta(content)
            if len(self.ids) + len(delta) >= self.mcfg.max_context_tokens:
                self.truncated = self.done = True  # the model never sees a cut observation
                self.messages.pop()
                return
            self._append(delta, model=False)

    def _append_tool_turn(self, tool_turn: Any) -> None:
        """The tool results as ``tool`` messages: a turn with reward 0 and no env step."""
        self.turn += 1
        self.turn_rewards.append(0.0)
        errors = [r.error for r in tool_turn.results if r.error]
        self.turn_actions.append({"actions": [f"tool:{r.call.name or '?'}" for r in tool_turn.results],
                                  "valid": not errors, "error": "; ".join(errors)})
        if self.turn >= self.cfg.max_turns:
            self.truncated = self.done = True
            return
        contents = [r.content for r in tool_turn.results]
        delta = self.renderer.tool_turn_delta(contents, self.tool_schemas)
        if len(self.ids) + len(delta) >= self.mcfg.max_context_tokens:
            self.truncated = self.done = True  # the model never sees cut tool results
            return
        self.messages += [{"role": "tool", "content": c} for c in contents]
        self._append(delta, model=False)

    async def run(self) -> list[Trajectory]:
        await self.reset()
        while not self.done:
            await self.generate_turn()
            await self.step_env()
        return self.trajectories()

    # ---- results ----------------------------------------------------------------------
    def trajectories(self) -> list[Trajectory]:
        episode_return = sum(self.turn_rewards) + self.final_reward
        metrics = {
            "invalid_action_rate": self.invalid_actions / max(self.turn, 1),
            "effective_action_rate": self.effective_actions / max(self.turn, 1),
            "cut_response_rate": self.cut_responses / max(self.responses, 1),
            "success_reported": float(self.success_reported),
            "response_tokens": float(sum(self.mask) if not self.step_mode else sum(s.num_model_tokens for s in self.step_samples)),
            "time/generate_s": self.gen_time,
            "time/env_s": self.env_time,
            "time/wait_s": self.wait_time,
            "time/total_s": time.monotonic() - self.t_start,
            "partial_resumes": float(self.partial_resumes),
        }
        if self.tools is not None:
            metrics.update({f"tool/{k}": float(v) for k, v in self.tool_stats.items()})
            for key in ("calls", "errors", "turns"):
                metrics.setdefault(f"tool/{key}", 0.0)
        common = dict(
            final_reward=self.final_reward, episode_return=episode_return, success=self.success,
            num_turns=self.turn, terminated=self.terminated, truncated=self.truncated,
            failure=self.failure, failure_detail=self.failure_detail, failure_traceback=self.failure_traceback,
            failure_permanent=self.failure_permanent, env_tag=self.spec.tag,
            env_id=self.cfg.env_id, group_id=self.spec.group_id, env_seed=self.spec.env_seed,
            episode_id=self.spec.episode_id, turn_actions=list(self.turn_actions),
            temperature=self.gen.temperature if self.gen.do_sample else 0.0,
        )
        if self.agent is not None and self.failure is None:
            return self.agent.trajectories(common, metrics)
        if self.step_mode and self.failure is None:
            # an unfinished last turn (context limit before the env step) has no reward yet
            samples = [s for s in self.step_samples if s.step_index < self.turn]
            for s in samples:
                for k, v in common.items():
                    setattr(s, k, v)
                s.messages = self.messages  # one shared list: the episode's text, for dumps
                s.metrics = dict(metrics)
            return samples
        traj = Trajectory(
            input_ids=list(self.ids), loss_mask=list(self.mask), logprobs=list(self.logprobs),
            token_turns=list(self.tturns), token_versions=list(self.tversions),
            turn_versions=list(self.turn_versions[: self.turn] if self.failure is None else self.turn_versions),
            turn_rewards=list(self.turn_rewards), prompt_length=self.mask.index(1) if 1 in self.mask else len(self.mask),
            messages=list(self.messages), metrics=metrics, **common,
        )
        return [traj]

    # ---- helpers ----------------------------------------------------------------------
    def _render_turn(self, reward: float) -> str:
        return format_turn(
            self.cfg.turn_template, turn_idx=self.turn + 1, observation=self.observation,
            actions_left=self.cfg.max_turns - self.turn, reward=reward, max_turns=self.cfg.max_turns,
            feedback=self.feedback,
        )

    def _shown_feedback(self) -> str:
        """The feedback the prompt shows: part of the state GiGPO compares (same page, other
        feedback: another prompt)."""
        return self.feedback if "{feedback" in self.cfg.turn_template else ""

    def _window_prompt(self) -> list[int]:
        """Step mode: the instruction stays in the first kept user turn; older turns drop out."""
        w = max(self.mcfg.history_window, 0)
        first_kept = max(self.turn - w, 0)
        turns = self.messages[2 * first_kept:]
        if first_kept > 0 and self.instruction:
            turns = [{"role": "user", "content": f"{self.instruction}\n\n{turns[0]['content']}"}] + turns[1:]
        return self.renderer.windowed_prompt(turns)

    def _add_step_sample(self, prompt, out, lps, vers, close) -> None:
        n_p, n_o, n_c = len(prompt), len(out), len(close)
        self.step_samples.append(Trajectory(
            input_ids=prompt + out + close,
            loss_mask=[0] * n_p + [1] * n_o + [0] * n_c,
            logprobs=[0.0] * n_p + lps + [0.0] * n_c,
            token_turns=[-1] * n_p + [self.turn] * n_o + [-1] * n_c,
            token_versions=[-1] * n_p + vers + [-1] * n_c,
            turn_versions=[min(vers, default=self.control.version)],
            prompt_length=n_p,
            state_key=hashlib.sha1(f"{self.spec.tag}|{self.observation}{self._shown_feedback()}".encode()).hexdigest()[:16],
            step_index=self.turn,
        ))

    def _append(self, ids: list[int], model: bool, logprobs: list[float] | None = None, versions: list[int] | None = None) -> None:
        n = len(ids)
        self.ids += ids
        self.mask += [1 if model else 0] * n
        self.logprobs += logprobs if model else [0.0] * n
        self.tturns += [self.turn if model else -1] * n
        self.tversions += versions if model else [-1] * n

    async def _env_call(self, fn, *args, **kwargs):
        t0 = time.monotonic()
        try:
            return await self.runner.call(functools.partial(fn, *args, **kwargs), timeout=self.cfg.step_timeout_s)
        except CallTimeout:
            name = getattr(fn, "__name__", "call")
            raise EpisodeFailure("env_timeout", f"env.{name} took longer than {self.cfg.step_timeout_s}s") from None
        except Exception as e:  # any error inside user env code is an env failure
            raise EpisodeFailure("env_error", f"{type(e).__name__}: {e}", traceback="".join(traceback.format_exception(e))) from None
        finally:
            self.env_time += time.monotonic() - t0

    def _contract_error(self, what: str) -> EpisodeFailure:
        """A permanent env failure: the env breaks the gymnasium API the same way every time."""
        return EpisodeFailure("env_error", f"env {self.cfg.env_id!r} (tag {self.spec.tag!r}): {what}", permanent=True)

    def _checked_step(self, result: Any) -> tuple[str, float, bool, bool, dict]:
        """env.step's ``(observation, reward, terminated, truncated, info)``, checked: the five
        values of the gymnasium API, a finite number as the reward (and as ``info["final_reward"]``),
        a dict or None as info. Anything else is a bug in the env that would otherwise surface
        later and elsewhere (an unpacking error in the worker, or a NaN advantage for the batch)."""
        if not isinstance(result, tuple) or len(result) != 5:
            old_api = isinstance(result, (tuple, list)) and len(result) == 4
            hint = (" (the old gym API's obs, reward, done, info: gymnasium splits done into terminated and "
                    "truncated)") if old_api else ""
            raise self._contract_error(f"step() returned {_shape(result)}, expected (observation, reward, terminated, "
                                       f"truncated, info){hint}")
        obs, reward, terminated, truncated, info = result
        self._check_observation(obs, "step")
        if info is not None and not isinstance(info, dict):
            raise self._contract_error(f"step() returned a {type(info).__name__} as info, expected a dict")
        info = info or {}
        value = self._finite(reward, "a reward")
        if "final_reward" in info:
            info = {**info, "final_reward": self._finite(info["final_reward"], "info['final_reward']")}
        return obs, value, bool(terminated), bool(truncated), info

    def _finite(self, x: Any, what: str) -> float:
        value = None
        if x is not None and not isinstance(x, (str, bytes)):
            try:
                value = float(x)
            except (TypeError, ValueError):
                pass
        if value is None:
            raise self._contract_error(f"step() returned {what} of type {type(x).__name__} ({str(x)[:40]!r}), expected a number")
        if not math.isfinite(value):
            raise self._contract_error(f"step() returned {what} of {value}, expected a finite number")
        return value

    def _check_observation(self, obs: Any, method: str) -> None:
        """Observations are text: anything else is a bug in the env, not something to render
        with str() (an int would silently become part of the prompt)."""
        if not isinstance(obs, str):
            raise EpisodeFailure(
                "env_error", f"env {self.cfg.env_id!r} (tag {self.spec.tag!r}) returned a {type(obs).__name__} "
                f"observation from {method}(): observations must be text (str), got {str(obs)[:80]!r}",
                permanent=True)

    def _first_prompt_overflow(self, tokens: int) -> EpisodeFailure:
        return EpisodeFailure("context_overflow", (
            f"first prompt has {tokens} tokens, which leaves no room for an answer within max_context_tokens="
            f"{self.mcfg.max_context_tokens} (raise the env manager's max_context_tokens, or shorten the "
            f"instruction or observation)"))

    def _fail(self, f: EpisodeFailure | str, detail: str = "") -> None:
        """End the episode as failed: every early exit goes through here, so the fields a
        Trajectory reports (and env_broken, which keeps a broken env out of the pool) agree."""
        if isinstance(f, str):
            f = EpisodeFailure(f, detail)
        self.failure, self.failure_detail, self.done = f.kind, f.detail, True
        self.failure_traceback, self.failure_permanent = f.traceback, f.permanent
        if f.kind in ("env_error", "env_timeout"):
            self.env_broken = True
