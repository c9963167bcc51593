"""The pipeline config: every section of a run, with one docstring per field.

`docs/config.md` is generated from these docstrings (`python -m roll.config.docs`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Optional, Union

from roll.config.algorithm import AlgorithmConfig, RewardNormConfig
from roll.config.roles import GeneratingArgs, StrategyArgs, TrainingArgs, WorkerConfig
from roll.config.rollout import EnvConfig, EnvManagerConfig, RolloutConfig
from roll.config.validate import ranged

__all__ = [
    "AlgorithmConfig", "RewardNormConfig", "GeneratingArgs", "StrategyArgs", "TrainingArgs",
    "WorkerConfig", "EnvConfig", "EnvManagerConfig", "RolloutConfig", "RayConfig",
    "ResourcesConfig", "TrackingConfig", "RewardConfig", "DataConfig", "PipelineConfig",
]


@dataclass
class RayConfig:
    """Which Ray cluster to use."""

    address: Optional[str] = None
    """null starts a local cluster; "auto" joins a running one (`ray start --head`); or "ray://host:port"."""
    num_cpus: Optional[int] = ranged(None, ge=1)
    """CPUs of a local cluster (null: all of this machine)."""
    namespace: str = "roll"
    """Ray namespace for the run's actors."""
    runtime_env: dict[str, Any] = field(default_factory=dict)
    """Ray runtime_env passed to ray.init (env_vars, working_dir, ...)."""


@dataclass
class ResourcesConfig:
    """The device pool that roles' device_mappings index into."""

    device: Literal["auto", "gpu", "cpu"] = "auto"
    """auto: GPUs when the cluster has them, else the same ranks map onto CPU slots (a GPU YAML
    runs unchanged at tiny scale); gpu: require GPUs; cpu: always CPU slots."""
    num_devices: Optional[int] = ranged(None, ge=1)
    """Pool size; null reads it from the Ray cluster (GPUs, or CPU slots on device=cpu/auto without GPUs)."""
    cpus_per_device_slot: float = ranged(0.0, ge=0)
    """On CPU, Ray CPUs reserved by each device slot (0 lets tiny runs oversubscribe a laptop)."""


@dataclass
class TrackingConfig:
    """Where metrics go."""

    track_with: list[str] = field(default_factory=lambda: ["stdout", "jsonl"])
    """Any of stdout, jsonl, tensorboard, wandb, swanlab."""
    project: str = "roll"
    """Project name for wandb / swanlab."""
    log_dir: Optional[str] = None
    """Directory for jsonl and tensorboard files (null: <output_dir>/logs)."""
    tracker_kwargs: dict[str, Any] = field(default_factory=dict)
    """Extra keyword arguments passed to the tracker backends (e.g. wandb entity, tags)."""
    dump_trajectories: int = ranged(4, ge=0)
    """Trajectories (whole groups) dumped per step to trajectories/step-NNNNNN.jsonl.gz for `roll view` (docs/viewer.md); 0 disables."""


@dataclass
class RewardConfig:
    """One reward domain (RLVR) or extra reward function (agentic)."""

    reward_fn: str
    """Registered reward function id (`roll list rewards`)."""
    tags: list[str] = field(default_factory=list)
    """Sample tags / domains routed to this reward."""
    reward_fn_args: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of the reward function (pre-flight checks each key against the fields
    the function reads, docs/rlvr.md)."""
    world_size: int = ranged(1, ge=1)
    """Reward worker actors for this domain."""
    timeout_s: float = ranged(60.0, gt=0)
    """A sample whose reward takes longer is marked failed and counted."""
    judge: Optional[WorkerConfig] = None
    """For llm_judge: the judge model's inference role."""
    max_concurrency: int = ranged(8, ge=1)
    """Samples one reward worker scores at once (each in its own thread)."""
    max_hung_calls: int = ranged(4, ge=1)
    """A reward worker holding this many timed-out calls that still run is restarted (its
    hung threads cannot be stopped otherwise)."""
    drop_uniform_groups: bool = False
    """Dynamic sampling (RLVR): drop prompt groups of this domain whose rewards are all equal
    (no signal for group baselines) and draw more prompts, up to data.max_sampling_rounds."""


@dataclass
class DataConfig:
    """Prompt or chat data (RLVR and SFT)."""

    train_files: list[str] = field(default_factory=list)
    """jsonl or parquet files."""
    val_files: list[str] = field(default_factory=list)
    """Held-out files for validation."""
    domain_interleave_probs: dict[str, float] = field(default_factory=dict)
    """Sampling probability per domain/tag (RLVR); empty: uniform. Given, it lists every domain
    with training data (0 leaves one out)."""
    max_prompt_length: int = ranged(512, ge=1)
    """Prompts longer than this (tokens) are dropped and counted."""
    messages_key: str = "messages"
    """Field holding chat messages."""
    prompt_key: str = "prompt"
    """Field holding a plain prompt (when there are no messages)."""
    tag_key: str = "tag"
    """Field holding the domain tag."""
    num_epochs: int = ranged(1, ge=1)
    """Passes over the data (SFT)."""
    max_sampling_rounds: int = ranged(3, ge=0)
    """Dynamic sampling (RLVR): rounds of prompt draws per step to refill groups that query
    filters dropped; after that the step trains on the groups it has (counted)."""
    max_seq_length: int = ranged(1024, ge=1)
    """SFT: conversations longer than this (tokens) are dropped and counted."""
    shuffle: bool = True
    """SFT: shuffle the examples every epoch (seeded)."""
    with_tools: bool = True
    """SFT: render a row's tool schemas (its ``tools`` list) into the system block, as a tool env's
    prompts are; false leaves them out, the calls and results stay: a short first stage that lets
    a small model learn the calls' format and copying before the long prompts (docs/tools.md)."""


@dataclass
class PipelineConfig:
    """A whole run."""

    pipeline: str = "agentic"
    """Registered pipeline: agentic, rlvr, sft (`roll list pipelines`)."""
    exp_name: str = "roll"
    """Experiment name: used in output paths and tracker run names."""
    seed: int = 42
    """Global seed (torch, numpy, env seeds derive from it)."""
    output_dir: str = "./output/${exp_name}"
    """Metrics, checkpoints, trajectory samples and the resolved config go here."""
    pretrain: str = "roll-tiny://tiny"
    """Default model for every role (a path, a hub id, or roll-tiny://tiny|small)."""
    max_steps: int = ranged(10, ge=1)
    """Pipeline steps (one rollout batch + training each)."""
    rollout_batch_size: int = ranged(16, ge=1)
    """Training samples per step (episodes in trajectory mode, prompts x group in RLVR)."""
    val_batch_size: int = ranged(16, ge=1)
    """Episodes / prompts per validation round."""
    save_steps: int = ranged(0, ge=0)
    """Checkpoint every N steps (0: only at the end)."""
    eval_steps: int = ranged(0, ge=0)
    """Validate before the first step, every N steps and after the last (0: never)."""
    logging_steps: int = ranged(1, ge=0)
    """Log metrics every N steps."""
    resume_from_checkpoint: Union[bool, str] = False
    """true resumes from the latest checkpoint in output_dir; a path resumes from that checkpoint."""
    max_ckpt_to_keep: int = ranged(3, ge=0)
    """Older checkpoints are deleted (0 keeps all)."""
    model_update_buffer_size_mb: int = ranged(256, ge=1)
    """Weight-sync bucket size."""
    deterministic: bool = False
    """Deterministic torch algorithms (for resume and invariance tests)."""
    show_progress: bool = True
    """Rich progress bars."""
    val_decoding: list[Literal["sampled", "greedy"]] = field(default_factory=lambda: ["sampled"])
    """Validation rounds per eval: sampled (the training generating_args; metrics under val/)
    and/or greedy (same, with do_sample false; metrics under val_greedy/)."""
    imports: list[str] = field(default_factory=list)
    """Python modules imported before the run, e.g. one that registers your own Gym env or reward."""
    ray: RayConfig = field(default_factory=RayConfig)
    """Ray cluster."""
    resources: ResourcesConfig = field(default_factory=ResourcesConfig)
    """Device pool."""
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    """Metrics tracking."""
    actor_train: WorkerConfig = field(default_factory=lambda: WorkerConfig(strategy_args=StrategyArgs("torch_train")))
    """Policy training role."""
    actor_infer: WorkerConfig = field(default_factory=WorkerConfig)
    """Policy inference (generation) role."""
    reference: Optional[WorkerConfig] = None
    """Reference policy for KL (null: no reference)."""
    critic: Optional[WorkerConfig] = None
    """Value model for GAE (null: critic-free estimators)."""
    rewards: dict[str, RewardConfig] = field(default_factory=dict)
    """Reward domains / functions by name."""
    custom_envs: dict[str, EnvConfig] = field(default_factory=dict)
    """Environment tags by name."""
    train_env_manager: EnvManagerConfig = field(default_factory=EnvManagerConfig)
    """Training rollouts."""
    val_env_manager: Optional[EnvManagerConfig] = None
    """Validation rollouts (null: no validation)."""
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    """Rollout scheduling."""
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    """Advantage estimator, losses, KL."""
    data: DataConfig = field(default_factory=DataConfig)
    """Prompt / chat data (RLVR, SFT)."""
    source_path: Optional[str] = None
    """Set by the loader: the YAML file this config came from."""


# ---- chains: several runs in order, each feeding the next (pipelines/chain.py) ------------------
@dataclass
class DemosArgs:
    """What a `demos` stage generates (the options of `roll data demos`)."""

    episodes: int = ranged(200, ge=1)
    """Expert episodes per env tag."""
    epsilon: float = ranged(0.5, ge=0, le=1)
    """Share of random actions (a noisy expert gives a weak but non-zero SFT start)."""
    tags: list[str] = field(default_factory=list)
    """Env tags to play (empty: the stage config's train_env_manager tags)."""


@dataclass
class StageConfig:
    """One stage of a chain: a pipeline config (a file and/or inline keys) and what it does with it."""

    kind: Literal["run", "eval", "demos"] = "run"
    """run: train (`roll run` of the stage config; output: its final_model); eval: validation
    rounds only, of the stage config's model before any training (output: eval.json); demos:
    expert demonstrations from the stage config's envs (output: demos.jsonl)."""
    config: Optional[str] = None
    """Pipeline YAML of the stage, relative to the chain file (null: `overrides` alone are the config)."""
    overrides: dict[str, Any] = field(default_factory=dict)
    """Config keys on top of `config` (nested, or dotted like `actor_train.training_args.lr`)."""
    input: Optional[str] = "auto"
    """Config key that receives the output of the nearest earlier demos or run stage. auto: a
    demos file becomes `data.train_files`, a model becomes `pretrain` (a demos stage takes no
    input); null: nothing is fed."""
    inputs: dict[str, str] = field(default_factory=dict)
    """Config key -> name of an earlier demos or run stage whose output it receives, for a stage
    fed by more than one (e.g. `{pretrain: sft_short, data.train_files: demos}`); replaces `input`."""
    demos: DemosArgs = field(default_factory=DemosArgs)
    """kind demos: episodes, epsilon and tags."""


@dataclass
class ChainConfig:
    """A chain (a YAML file with `stages:`): stages that `roll run` runs in order, each in
    `<output_dir>/<stage name>`, resumable at the right stage."""

    exp_name: str = "chain"
    """Name of the chain (stage runs are named `<exp_name>_<stage>`)."""
    output_dir: str = "./output/${exp_name}"
    """The chain's directory: one sub-directory per stage and chain_state.json (what finished)."""
    seed: int = 42
    """Seed of every stage (sets each stage config's `seed`, and the demonstrations' seed)."""
    stages: dict[str, StageConfig] = field(default_factory=dict)
    """Stages by name, run in the order written."""
    source_path: Optional[str] = None
    """Set by the loader: the YAML file this chain came from."""
