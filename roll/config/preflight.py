"""Pre-flight: every check of a run that needs no Ray cluster, no model and no GPU.

``roll plan`` and ``roll run`` both call :func:`check` before anything starts, so a plan that
says OK is a run that starts: a typo in an env id, a missing data file or a role the
algorithm needs fails here in seconds with every problem listed (one line each), not minutes
later behind a traceback from a worker.

What is checked (docs/config.md, section Pre-flight, is the user's copy of this list):

- ``imports:`` modules import;
- names resolve in their registries: pipeline, strategies (and backend packages), advantage
  estimator, policy loss, reward functions (and the ``reward_fn_args`` keys they read), group
  filters, trackers (and their packages);
- agentic: env tags exist, env ids are registered, their entry points import and accept the
  ``env_kwargs``;
- rlvr / sft: data files exist and parse; every rlvr domain has a reward;
- models, checkpoints and output paths exist or can be created;
- role requirements of the algorithm (gae -> critic, KL -> reference) and its loss settings;
- greedy rollouts with a group-relative estimator (every advantage would be zero);
- ``lora``: a backend with LoRA (torch_train, deepspeed; not the critic), peft installed,
  ``target_modules`` naming linear modules of the model;
- placement and batch arithmetic (:mod:`roll.distributed.resource_pool`), including the GPU
  memory fractions of colocated inference engines.

Numeric ranges are checked earlier, when the YAML is validated against the schema.
Nothing here imports Ray or starts a process.
"""
from __future__ import annotations

import difflib
import importlib
import importlib.util
import inspect
import json
import os
import re
import string
import tempfile
import traceback
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from roll.config.validate import ConfigError
from roll.distributed.resource_pool import INFERENCE_STRATEGIES
from roll.errors import RollError

ENVS_PACKAGE = "roll.envs"
TRAINING_STRATEGIES = {"torch_train", "deepspeed", "megatron"}
#: strategy -> (module it needs, setup.py extra)
BACKEND_PACKAGES = {"vllm": ("vllm", "vllm"), "sglang": ("sglang", "sglang"), "deepspeed": ("deepspeed", "deepspeed"),
                    "megatron": ("megatron.core", "megatron")}
TORCH_TRAIN_OPTIONS = {"parallel": ("ddp", "fsdp2"), "reshard_after_forward": None}
#: gymnasium.make's own keyword arguments (not passed to the env constructor)
_MAKE_KWARGS = {"max_episode_steps", "disable_env_checker"}
#: files of which a local model directory needs one, for AutoTokenizer.from_pretrained
_TOKENIZER_FILES = frozenset({"tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json"})
# Hugging Face repo ids: "name" or "owner/name", word characters, dots and dashes
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.\-]{0,95}(/[\w.\-]{1,96})?$")


def _describe(exc: BaseException) -> str:
    """``Type: message`` plus where it was raised (file:line) for errors from user code."""
    text = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, ModuleNotFoundError):
        return text
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "importlib" not in f.filename]
    if frames:
        text += f" (at {frames[-1].filename}:{frames[-1].lineno})"
    return text


def _suggest(name: str, candidates: Iterable[str]) -> str:
    close = difflib.get_close_matches(str(name), list(candidates), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def import_user_modules(cfg: Any) -> list[str]:
    """Import the shipped envs and every module under ``imports:``; one problem per failure."""
    problems = []
    for where, module in [("roll.envs", ENVS_PACKAGE)] + [(f"imports[{i}]", m) for i, m in enumerate(cfg.imports)]:
        try:
            importlib.import_module(module)
        except Exception as e:  # user code may raise anything on import: report it with the others
            problems.append(f"{where}: cannot import {module!r}: {_describe(e)}")
    return problems


# ---- registered names ---------------------------------------------------------------------------
def _registered(registry: Any, id: Any, where: str, problems: list[str]) -> bool:
    if isinstance(id, str) and id in registry:
        return True
    ids = registry.ids()
    problems.append(f"{where}: unknown {registry.kind} {id!r}{_suggest(id, ids)} (registered: {', '.join(ids) or 'none'})")
    return False


def _roles(cfg: Any) -> dict[str, Any]:
    """Every model-holding role by config path."""
    roles = {"actor_train": cfg.actor_train, "actor_infer": cfg.actor_infer, "reference": cfg.reference, "critic": cfg.critic}
    roles.update({f"rewards.{name}.judge": rc.judge for name, rc in cfg.rewards.items()})
    return {k: v for k, v in roles.items() if v is not None}


def _check_strategies(cfg: Any, problems: list[str]) -> None:
    from roll.registry import STRATEGIES

    for role, wc in _roles(cfg).items():
        name = wc.strategy_args.strategy_name
        where = f"{role}.strategy_args.strategy_name"
        if not _registered(STRATEGIES, name, where, problems):
            continue
        generates = role == "actor_infer" or role.endswith(".judge")
        if generates and name in TRAINING_STRATEGIES:
            problems.append(f"{where}: {name!r} is a training strategy; {role} generates text with an inference "
                            f"engine ({', '.join(sorted(INFERENCE_STRATEGIES))})")
        if name in BACKEND_PACKAGES:
            module, extra = BACKEND_PACKAGES[name]
            try:
                found = importlib.util.find_spec(module) is not None
            except (ImportError, ValueError):  # the parent package of a dotted name is missing
                found = False
            if not found:
                problems.append(f"{where}: {name!r} needs the {module!r} package, which is not installed "
                                f"(pip install 'roll[{extra}]')")
        if name == "megatron" and getattr(wc.training_args, "max_tokens_per_micro_batch", 0):
            problems.append(f"{role}.training_args.max_tokens_per_micro_batch: sequence packing is implemented for "
                            "torch_train and deepspeed; megatron would ignore it (set it to 0)")
        if name == "torch_train":
            opts = wc.strategy_args.strategy_config
            for key, value in opts.items():
                where_key = f"{role}.strategy_args.strategy_config.{key}"
                if key not in TORCH_TRAIN_OPTIONS:
                    problems.append(f"{where_key}: not an option of torch_train{_suggest(key, TORCH_TRAIN_OPTIONS)} "
                                    f"(valid: {', '.join(TORCH_TRAIN_OPTIONS)})")
                elif TORCH_TRAIN_OPTIONS[key] is not None and value not in TORCH_TRAIN_OPTIONS[key]:
                    problems.append(f"{where_key}: expected one of {', '.join(TORCH_TRAIN_OPTIONS[key])}, got {value!r}")


def _check_algorithm(cfg: Any, problems: list[str]) -> None:
    from roll.registry import ADVANTAGES, POLICY_LOSSES

    alg = cfg.algorithm
    _registered(ADVANTAGES, alg.adv_estimator, "algorithm.adv_estimator", problems)
    if _registered(POLICY_LOSSES, alg.policy_loss, "algorithm.policy_loss", problems):
        from roll.algorithms.losses import make_actor_loss_fn, make_critic_loss_fn

        # the trainer builds these on the driver before the first step; their checks belong here
        try:
            make_actor_loss_fn(alg)
            if cfg.critic is not None:
                make_critic_loss_fn(alg)
        except (ValueError, RollError) as e:
            problems.append(f"algorithm: {e}")
    if alg.adv_estimator == "gae" and cfg.critic is None:
        problems.append("algorithm.adv_estimator: gae needs value estimates from a critic; add a `critic` role "
                        "(see configs/agentic/learning/*_ppo.yaml) or use a critic-free estimator (grpo, rloo, reinforce_pp)")
    for flag in ("use_kl_loss", "use_kl_in_reward"):
        if getattr(alg, flag) and cfg.reference is None:
            problems.append(f"algorithm.{flag}: the KL is measured against a reference policy; add a `reference` role "
                            f"(e.g. `reference: {{world_size: 1, strategy_args: {{strategy_name: torch_train}}}}`) "
                            f"or set {flag}: false")
    low, high = alg.difficulty_mask_low, alg.difficulty_mask_high
    if low is not None and high is not None and low >= high:
        problems.append(f"algorithm: difficulty_mask_low {low} must be below difficulty_mask_high {high} "
                        "(otherwise every group is masked)")
    _check_greedy_groups(cfg, problems)
    _check_groups_of_one(cfg, problems)


def _check_validation(cfg: Any, problems: list[str]) -> None:
    has_val = (cfg.pipeline == "agentic" and cfg.val_env_manager is not None) or (cfg.pipeline == "rlvr" and cfg.data.val_files)
    if cfg.eval_steps and has_val and not cfg.val_decoding:
        problems.append(f"val_decoding: empty, so validation (every {cfg.eval_steps} steps) would run nothing; "
                        f"list a decoding mode ([sampled], [greedy] or both) or set eval_steps: 0")


def _within_group(alg: Any) -> bool:
    """Whether the estimator's advantage compares a sample only with the other samples of its
    group (so a group of identical samples gets zero advantage everywhere)."""
    if alg.adv_estimator == "rloo":
        return True
    if alg.adv_estimator == "reinforce_pp":
        return bool(alg.adv_estimator_args.get("group_baseline", False))
    norm = alg.reward_norm
    return alg.adv_estimator in ("grpo", "reinforce", "gigpo") and norm.group_by == "group" and norm.method != "none"


def _check_greedy_groups(cfg: Any, problems: list[str]) -> None:
    """Greedy rollouts with a group-relative estimator train on nothing: the samples of a group
    share their prompt (and, agentic, their env seed), so greedy decoding gives each the same
    answers, every group's rewards are equal and every advantage is zero."""
    if cfg.pipeline not in ("agentic", "rlvr") or cfg.actor_infer is None:
        return
    gen = cfg.actor_infer.generating_args
    if gen.do_sample and gen.temperature > 0:
        return
    if cfg.pipeline == "agentic":
        size, where = cfg.train_env_manager.group_size, "train_env_manager.group_size"
    else:
        size, where = gen.num_return_sequences, "actor_infer.generating_args.num_return_sequences"
    if size > 1 and _within_group(cfg.algorithm):
        greedy = "do_sample: false" if not gen.do_sample else "temperature: 0"
        problems.append(f"actor_infer.generating_args: {greedy} decodes greedily, so the {size} samples of a group "
                        f"({where}) give the same answers and {cfg.algorithm.adv_estimator}'s advantages, "
                        f"measured within each group, are all zero: nothing would be learnt from the rewards. "
                        f"Sample the rollouts (do_sample: true, temperature > 0); greedy validation is "
                        f"`val_decoding: [greedy]`")


def _check_groups_of_one(cfg: Any, problems: list[str]) -> None:
    """Groups of one sample with an estimator that measures advantages within the group: each
    sample is its own baseline, so every advantage is zero (GiGPO's step-level part, over the
    states an episode revisits, is the exception: it needs ``step_weight`` > 0)."""
    if cfg.pipeline not in ("agentic", "rlvr") or cfg.actor_infer is None:
        return
    alg = cfg.algorithm
    if not _within_group(alg) or (alg.adv_estimator == "gigpo" and alg.adv_estimator_args.get("step_weight", 1.0)):
        return
    if cfg.pipeline == "agentic":
        size, where = cfg.train_env_manager.group_size, "train_env_manager.group_size"
    else:
        size, where = cfg.actor_infer.generating_args.num_return_sequences, "actor_infer.generating_args.num_return_sequences"
    if size == 1:
        problems.append(f"{where}: 1 makes every group a single sample, and {alg.adv_estimator}'s advantage, measured "
                        f"against the other samples of the group, is zero for all of them: nothing would be learnt "
                        f"from the rewards. Use groups of 2 or more, or a baseline over the batch "
                        f"(algorithm.reward_norm.group_by: batch)")


def _reward_options(fn: Any) -> frozenset[str] | None:
    """The ``reward_fn_args`` keys a reward function reads: declared with
    ``roll.rewards.base.reads``, else its keyword parameters; None when it takes any
    (``**fields`` without a declaration: nothing to compare against)."""
    declared = getattr(fn, "reward_options", None)
    if declared is not None:
        return frozenset(declared)
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return None
    return frozenset(p.name for p in params[1:] if p.kind is not p.VAR_POSITIONAL)  # after the sample


def _check_reward_args(name: str, rc: Any, problems: list[str]) -> None:
    from roll.registry import REWARDS

    try:
        fn = REWARDS.get(rc.reward_fn)
    except Exception as e:  # a user's entry point that fails to import: reported with the others
        problems.append(f"rewards.{name}.reward_fn: cannot load {rc.reward_fn!r}: {_describe(e)}")
        return
    options = _reward_options(fn)
    if options is None:
        return
    for key in rc.reward_fn_args:
        if key not in options:
            problems.append(f"rewards.{name}.reward_fn_args.{key}: reward function {rc.reward_fn!r} reads no field "
                            f"{key!r}{_suggest(key, options)} (it reads: {', '.join(sorted(options)) or 'none'})")
    pattern = rc.reward_fn_args.get("score_pattern") if rc.reward_fn == "llm_judge" else None
    if isinstance(pattern, str):
        try:
            re.compile(pattern)
        except re.error as e:
            problems.append(f"rewards.{name}.reward_fn_args.score_pattern: {pattern!r} is not a regular expression ({e})")


def _check_names(cfg: Any, problems: list[str]) -> None:
    from roll.registry import FILTERS, PIPELINES, REWARDS, TRACKERS

    _registered(PIPELINES, cfg.pipeline, "pipeline", problems)
    _check_strategies(cfg, problems)
    _check_algorithm(cfg, problems)
    _check_validation(cfg, problems)
    for name, rc in cfg.rewards.items():
        if _registered(REWARDS, rc.reward_fn, f"rewards.{name}.reward_fn", problems):
            _check_reward_args(name, rc, problems)
    for mname, manager in _managers(cfg).items():
        if manager.group_filter is not None:
            _registered(FILTERS, manager.group_filter, f"{mname}.group_filter", problems)
    for i, tracker in enumerate(cfg.tracking.track_with):
        if not _registered(TRACKERS, tracker, f"tracking.track_with[{i}]", problems):
            continue
        module, extra = getattr(TRACKERS.get(tracker), "requires", (None, None))
        if module is not None and importlib.util.find_spec(module) is None:
            install = f"pip install 'roll[{extra}]'" if extra else f"pip install {module}"
            problems.append(f"tracking.track_with[{i}]: tracker {tracker!r} needs the {module!r} package ({install})")


# ---- environments --------------------------------------------------------------------------------
def _managers(cfg: Any) -> dict[str, Any]:
    out = {"train_env_manager": cfg.train_env_manager}
    if cfg.val_env_manager is not None:
        out["val_env_manager"] = cfg.val_env_manager
    return out


def _env_creator(env_id: str) -> tuple[Any, dict[str, Any]]:
    """(the constructor gymnasium.make would call, the registered default kwargs)."""
    import gymnasium
    from gymnasium.envs.registration import load_env_creator

    spec = gymnasium.spec(env_id)
    creator = load_env_creator(spec.entry_point) if isinstance(spec.entry_point, str) else spec.entry_point
    return creator, dict(spec.kwargs or {})


def _env_kwargs_problems(env_id: str, creator: Callable, defaults: dict, given: dict, where: str) -> list[str]:
    try:
        sig = inspect.signature(creator)
    except (TypeError, ValueError):  # a builtin or C constructor: nothing to compare against
        return []
    params = {n: p for n, p in sig.parameters.items() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
    takes_any = any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values())
    problems = []
    if not takes_any:
        for key in given:
            if key not in params and key not in _MAKE_KWARGS:
                problems.append(f"{where}.{key}: {env_id} takes no argument {key!r}{_suggest(key, params)} "
                                f"(its arguments: {', '.join(params) or 'none'})")
    supplied = {**defaults, **given}
    missing = [n for n, p in params.items() if p.default is p.empty and p.kind is not p.POSITIONAL_ONLY and n not in supplied]
    if missing:
        problems.append(f"{where}: {env_id} needs the argument(s) {', '.join(missing)}")
    return problems


def _check_envs(cfg: Any, problems: list[str]) -> None:
    if cfg.pipeline != "agentic":
        return
    import gymnasium

    if not cfg.custom_envs:
        problems.append("custom_envs: the agentic pipeline needs at least one environment tag")
    for mname, manager in _managers(cfg).items():
        if mname == "train_env_manager" and not manager.tags:
            problems.append("train_env_manager.tags: no env tag to train on (list keys of custom_envs)")
        for i, tag in enumerate(manager.tags):
            if tag in manager.tags[:i]:
                problems.append(f"{mname}.tags[{i}]: {tag!r} is listed twice (to give one env more of each batch, "
                                f"raise its entry in num_groups_partition)")
            if tag not in cfg.custom_envs:
                problems.append(f"{mname}.tags[{i}]: {tag!r} is not a key of custom_envs{_suggest(tag, cfg.custom_envs)} "
                                f"(custom_envs has: {', '.join(cfg.custom_envs) or 'nothing'})")
        part = manager.num_groups_partition
        if mname != "train_env_manager" and part and len(part) != len(manager.tags):
            # the train manager's partition is checked with the batch arithmetic of the plan
            problems.append(f"{mname}.num_groups_partition has {len(part)} entries for {len(manager.tags)} tags")
    for tag, env in cfg.custom_envs.items():
        where = f"custom_envs.{tag}.env_id"
        if env.env_id not in gymnasium.registry:
            hint = _suggest(env.env_id, gymnasium.registry)
            problems.append(f"{where}: {env.env_id!r} is not a registered gymnasium env{hint} (the module that "
                            f"registers it must be listed under `imports:`; `roll envs list --import MODULE` shows what it registers)")
            continue
        try:
            creator, defaults = _env_creator(env.env_id)
        except Exception as e:  # the env's module fails to import: the same error every env worker would hit
            problems.append(f"{where}: the entry point of {env.env_id!r} cannot be loaded: {_describe(e)}")
            continue
        problems.extend(_env_kwargs_problems(env.env_id, creator, defaults, dict(env.env_kwargs), f"custom_envs.{tag}.env_kwargs"))
        problems.extend(turn_template_problems(env.turn_template, f"custom_envs.{tag}.turn_template"))
        # an env class may check its own kwargs further (roll/Tools-v0: its tools and MCP entries)
        config_problems = getattr(creator, "config_problems", None)
        if callable(config_problems):
            problems.extend(config_problems({**defaults, **dict(env.env_kwargs)}, f"custom_envs.{tag}.env_kwargs"))


def turn_template_problems(template: str, where: str) -> list[str]:
    """A turn template that would fail on the first turn of every episode: a field the env
    manager does not fill (a typo), or braces that do not pair (literal ones are written ``{{``)."""
    from roll.config.rollout import TURN_TEMPLATE_FIELDS

    try:
        names = [name for _, name, _, _ in string.Formatter().parse(template) if name is not None]
    except ValueError as e:
        return [f"{where}: {template!r} is not a valid template ({e}; write a literal brace as {{{{ or }}}})"]
    problems = []
    for name in names:
        field = re.split(r"[.\[!:]", name, maxsplit=1)[0]
        if field not in TURN_TEMPLATE_FIELDS:
            problems.append(f"{where}: unknown field {{{name}}}{_suggest(field, TURN_TEMPLATE_FIELDS)} "
                            f"(known: {', '.join('{' + f + '}' for f in TURN_TEMPLATE_FIELDS)})")
    return problems


# ---- data ---------------------------------------------------------------------------------------
def rlvr_async_problem(ratio: float) -> str | None:
    """The rlvr pipeline generates at most one batch ahead: ``async_generation_ratio`` 0 or 1."""
    if ratio in (0, 1):
        return None
    return (f"rollout.async_generation_ratio: the rlvr pipeline takes 0 (each batch generated by the weights it "
            f"trains) or 1 (the next batch generated while this one trains, one weight version behind), got {ratio}")


def _check_rlvr_data(cfg: Any, problems: list[str]) -> None:
    from roll.data.rlvr import DataError, load_prompts, normalize_probs

    data = cfg.data
    if not data.train_files:
        problems.append("data.train_files: the rlvr pipeline needs prompt files (jsonl or parquet)")
    if not cfg.rewards:
        problems.append("rewards: the rlvr pipeline needs at least one reward domain")
    problem = rlvr_async_problem(cfg.rollout.async_generation_ratio)
    if problem:
        problems.append(problem)
    base_dir = str(Path(cfg.source_path).parent) if cfg.source_path else None
    tags: dict[str, set[str]] = {"train_files": set(), "val_files": set()}
    for split in ("train_files", "val_files"):
        for i, name in enumerate(getattr(data, split)):
            try:
                samples = load_prompts([name], data.messages_key, data.prompt_key, data.tag_key, base_dir)
            except DataError as e:
                problems.append(f"data.{split}[{i}]: {e}")
                continue
            except OSError as e:
                problems.append(f"data.{split}[{i}]: cannot read {name}: {e.strerror or e}")
                continue
            if not samples:
                problems.append(f"data.{split}[{i}]: {name} holds no records")
            tags[split].update(s.tag for s in samples)
    probs = data.domain_interleave_probs
    if tags["train_files"]:
        try:
            probs = normalize_probs(probs, tags["train_files"])
        except DataError as e:
            problems.append(f"data.domain_interleave_probs: {e}")
    route: dict[str, str] = {}
    for name, rc in cfg.rewards.items():
        for tag in rc.tags or [name]:
            if tag in route:
                problems.append(f"rewards: domain {tag!r} is routed to both {route[tag]!r} and {name!r}")
            route[tag] = name
    # the same rule as the pipeline: a train domain with probability 0 needs no reward
    used = {t for t in tags["train_files"] if probs.get(t, 1.0) > 0} | tags["val_files"]
    missing = sorted(t for t in used if t not in route)
    if missing and cfg.rewards:
        problems.append(f"rewards: no reward for data domains {missing} (add them to a reward's `tags`)")


def _check_sft_data(cfg: Any, problems: list[str]) -> None:
    data = cfg.data
    if not data.train_files:
        problems.append("data.train_files: the sft pipeline needs at least one jsonl file")
    for split in ("train_files", "val_files"):
        for i, name in enumerate(getattr(data, split)):
            where = f"data.{split}[{i}]"
            try:
                with open(name, encoding="utf-8") as f:
                    for lineno, line in enumerate(f, 1):
                        if not line.strip():
                            continue
                        try:
                            row = json.loads(line)
                        except json.JSONDecodeError as e:
                            problems.append(f"{where}: {name}:{lineno}: not valid JSON ({e})")
                            break
                        if not isinstance(row, dict) or not isinstance(row.get(data.messages_key), list):
                            problems.append(f"{where}: {name}:{lineno}: expected a JSON object with a "
                                            f"{data.messages_key!r} list")
                            break
            except FileNotFoundError:
                problems.append(f"{where}: data file {name} not found (cwd {Path.cwd()})")
            except (OSError, UnicodeDecodeError) as e:
                problems.append(f"{where}: cannot read {name}: {e}")


# ---- paths ----------------------------------------------------------------------------------------
def _offline() -> bool:
    return any(os.environ.get(k, "").strip().lower() in ("1", "true", "yes", "on") for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def model_problem(path: Any, offline: bool | None = None) -> str | None:
    """Why ``path`` (a role's model) cannot be loaded, or None: ``roll-tiny://SIZE``, a local
    model directory, or a hub id (offline: one already in the local Hugging Face cache)."""
    from roll.models.tiny import SCHEME, SIZES

    if not isinstance(path, str) or not path.strip():
        return "no model given (set `pretrain` or the role's model_name_or_path)"
    if path.startswith(SCHEME):
        size = path[len(SCHEME):].strip("/")
        return None if size in SIZES else f"unknown tiny model {path!r}; choose one of {', '.join(SCHEME + s for s in SIZES)}"
    local = Path(path).expanduser()
    try:
        exists = local.exists()
    except (OSError, ValueError):
        exists = False
    if exists:
        if not local.is_dir():
            return f"{path} is not a model directory"
        if not (local / "config.json").exists():
            return f"{path} is not a model directory (no config.json)"
        names = {p.name for p in local.iterdir()}
        if not any(n.endswith((".safetensors", ".bin")) or n.endswith((".safetensors.index.json", ".bin.index.json")) for n in names):
            return f"{path} holds no weights (no *.safetensors or *.bin file)"
        if not names & _TOKENIZER_FILES:
            return (f"{path} holds no tokenizer ({', '.join(sorted(_TOKENIZER_FILES))}): the policy's tokenizer is loaded "
                    f"from its model directory; save it there (tokenizer.save_pretrained)")
        return None
    looks_local = path.startswith(("/", ".", "~")) or "\\" in path or path.count("/") > 1
    if looks_local or not _HUB_ID.match(path) or "--" in path or ".." in path:
        return f"{path} does not exist (not a local model directory, and not a hub id like 'owner/name')"
    if offline if offline is not None else _offline():
        try:
            from huggingface_hub import try_to_load_from_cache

            cached = try_to_load_from_cache(path, "config.json")
        except Exception:  # a malformed id by the hub's own rules: not cached either
            cached = None
        if not isinstance(cached, str):
            return (f"{path} is neither a local directory nor in the Hugging Face cache, and offline mode is on "
                    "(HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE): download it first or give a local path")
    return None


def _check_models(cfg: Any, problems: list[str], offline: bool | None) -> None:
    seen: dict[str, str] = {}
    for role, wc in _roles(cfg).items():
        path, where = (wc.model_name_or_path, f"{role}.model_name_or_path") if wc.model_name_or_path else (cfg.pretrain, "pretrain")
        if path in seen:
            continue
        seen[path] = where
        problem = model_problem(path, offline)
        if problem:
            problems.append(f"{where}: {problem}")


def _check_lora(cfg: Any, problems: list[str], offline: bool | None) -> None:
    """``lora`` on a role: a backend that has it (not megatron), peft installed, and
    ``target_modules`` that name linear modules of the role's model (read from its config on
    the meta device, no weights)."""
    from roll.models.lora import PEFT_INSTALL, model_linear_names, target_problems, validate_role

    for role, wc in _roles(cfg).items():
        lora = getattr(wc, "lora", None)
        if lora is None:
            continue
        found = validate_role(lora, wc.strategy_args.strategy_name, role, critic=role == "critic")
        problems.extend(found)
        if found:
            continue
        if importlib.util.find_spec("peft") is None:
            problems.append(f"{role}.lora: LoRA needs the 'peft' package, which is not installed ({PEFT_INSTALL})")
            continue
        path = wc.model_name_or_path or cfg.pretrain
        if model_problem(path, offline) is None:
            names = model_linear_names(path)
            if names is not None:
                problems.extend(f"{role}.lora.{p}" for p in target_problems(list(lora.target_modules), names))


def dir_problem(path: str | os.PathLike) -> str | None:
    """Why a run could not create and write directory ``path``, or None. Creates nothing that
    stays: at most a temporary file in the nearest existing ancestor, removed at once."""
    try:
        target = Path(path).expanduser().absolute()
        probe = target
        while not probe.exists() and probe.parent != probe:
            probe = probe.parent
        if not probe.is_dir():
            what = "exists and is not a directory" if probe == target else f"cannot be created: {probe} is not a directory"
            return f"{target} {what}"
        if not os.access(probe, os.W_OK | os.X_OK):
            return f"{target} cannot be created or written: {probe} is not writable"
        with tempfile.TemporaryFile(dir=probe):
            pass
    except (OSError, ValueError) as e:
        reason = getattr(e, "strerror", None) or str(e)
        return f"{path} cannot be created or written: {reason}"
    return None


def _check_paths(cfg: Any, problems: list[str]) -> None:
    for where, path in (("output_dir", cfg.output_dir), ("tracking.log_dir", cfg.tracking.log_dir)):
        if path is not None:
            problem = dir_problem(path)
            if problem:
                problems.append(f"{where}: {problem}")
    resume = cfg.resume_from_checkpoint
    if isinstance(resume, str) and not Path(resume).expanduser().exists():
        problems.append(f"resume_from_checkpoint: {resume} does not exist (true resumes from the latest "
                        "checkpoint in output_dir)")


# ---- entry points -------------------------------------------------------------------------------
def preflight(cfg: Any, *, offline: bool | None = None) -> list[str]:
    """Every problem of ``cfg`` that shows before Ray starts, one line each (empty: none).
    ``offline`` overrides the HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE environment variables."""
    problems = import_user_modules(cfg)
    _check_names(cfg, problems)
    _check_envs(cfg, problems)
    if cfg.pipeline == "rlvr":
        _check_rlvr_data(cfg, problems)
    elif cfg.pipeline == "sft":
        _check_sft_data(cfg, problems)
    _check_models(cfg, problems, offline)
    _check_lora(cfg, problems, offline)
    _check_paths(cfg, problems)
    return list(dict.fromkeys(problems))


def check(cfg: Any, *, placement: bool = True, pool: Any = None, offline: bool | None = None) -> Any:
    """Pre-flight plus (``placement``) the plan's placement and batch arithmetic on ``pool``
    (default: this machine). Raises ConfigError listing every problem; returns the plan."""
    from roll.distributed.resource_pool import make_plan

    problems = preflight(cfg, offline=offline)
    plan = None
    if placement:
        plan = make_plan(cfg, pool)
        problems += plan.errors
    if problems:
        raise ConfigError(problems)
    return plan
