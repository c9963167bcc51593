"""Pre-flight (roll/config/preflight.py): what `roll plan` and `roll run` reject before Ray starts.

Each case below is one the plan used to call OK, or one that failed only minutes into a run
(after Ray start and model load) behind a traceback.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from roll.cli import main as roll_main
from roll.config import ConfigError, load_config
from roll.config.preflight import check, dir_problem, model_problem, preflight
from roll.distributed.resource_pool import PoolInfo, make_plan

REPO = Path(__file__).resolve().parents[1]
SOKOBAN = REPO / "configs" / "agentic" / "sokoban_cpu.yaml"
RLVR = REPO / "configs" / "rlvr" / "multi_domain_cpu.yaml"
CPU_BOX = PoolInfo([0], [2.0], "test machine")


def plan(capsys, config: Path, *overrides: str) -> tuple[int, str]:
    """`roll plan` in this process: (exit code, everything printed, whitespace collapsed)."""
    rc = roll_main(["plan", str(config), *overrides])
    out = capsys.readouterr()
    return rc, " ".join((out.out + out.err).split())


@pytest.fixture
def out_dir(tmp_path) -> str:
    return f"output_dir={tmp_path / 'run'}"


# ---- each case of the issue: the plan used to say OK ---------------------------------------------
SEMANTIC_CASES = {
    "unknown env id": (["custom_envs.SimpleSokoban.env_id=roll/Sokobn-v0"],
                       "custom_envs.SimpleSokoban.env_id: 'roll/Sokobn-v0' is not a registered gymnasium env; did you mean 'roll/Sokoban-v0'?"),
    "env tag missing from custom_envs": (["train_env_manager.tags=[SimpleSokoban,Lake]"],
                                         "train_env_manager.tags[1]: 'Lake' is not a key of custom_envs"),
    "val env tag missing": (["val_env_manager.tags=[SimpleSokobn]"],
                            "val_env_manager.tags[0]: 'SimpleSokobn' is not a key of custom_envs; did you mean 'SimpleSokoban'?"),
    "unknown strategy": (["actor_train.strategy_args.strategy_name=fsdp9"],
                         "actor_train.strategy_args.strategy_name: unknown strategy 'fsdp9'"),
    "training strategy generating": (["actor_infer.strategy_args.strategy_name=torch_train"],
                                     "actor_infer.strategy_args.strategy_name: 'torch_train' is a training strategy"),
    "gae without a critic": (["algorithm.adv_estimator=gae"], "algorithm.adv_estimator: gae needs value estimates from a critic"),
    "KL loss without a reference": (["algorithm.use_kl_loss=true", "algorithm.kl_loss_coef=0.1"],
                                    "algorithm.use_kl_loss: the KL is measured against a reference policy"),
    "KL in reward without a reference": (["algorithm.use_kl_in_reward=true"], "algorithm.use_kl_in_reward: the KL is measured"),
    "pretrain path that does not exist": (["pretrain=/no/such/path"], "pretrain: /no/such/path does not exist"),
    "unknown estimator": (["algorithm.adv_estimator=gpro"], "algorithm.adv_estimator: unknown advantage estimator 'gpro'; did you mean 'grpo'?"),
    "unknown loss": (["algorithm.policy_loss=ppo"], "algorithm.policy_loss: unknown policy loss 'ppo'"),
    "loss setting that cannot build": (["algorithm.loss_agg_mode=seq-mean-token-sum-norm"],
                                       "algorithm: loss_agg_mode seq-mean-token-sum-norm needs algorithm.loss_agg_norm_constant"),
    "unknown group filter": (["train_env_manager.group_filter=zero_varianc"], "train_env_manager.group_filter: unknown group filter 'zero_varianc'"),
    "unknown tracker": (["tracking.track_with=[jsonl,tensorbord]"], "tracking.track_with[1]: unknown tracker 'tensorbord'; did you mean 'tensorboard'?"),
    "unknown pipeline": (["pipeline=agentc"], "pipeline: unknown pipeline 'agentc'; did you mean 'agentic'?"),
    "import that fails": (["imports=[no_such_module_for_roll]"],
                          "imports[0]: cannot import 'no_such_module_for_roll': ModuleNotFoundError"),
    "env kwarg the env does not take": (["custom_envs.SimpleSokoban.env_kwargs.max_stepz=3"],
                                        "custom_envs.SimpleSokoban.env_kwargs.max_stepz: roll/Sokoban-v0 takes no argument 'max_stepz'; did you mean 'max_steps'?"),
    "turn template field typo": (['custom_envs.SimpleSokoban.turn_template="{observaton}{feedback}"'],
                                 "custom_envs.SimpleSokoban.turn_template: unknown field {observaton}; did you mean 'observation'?"),
    "turn template unpaired brace": (['custom_envs.SimpleSokoban.turn_template="Turn {turn_idx: {observation}"'],
                                     "custom_envs.SimpleSokoban.turn_template: 'Turn {turn_idx: {observation}' is not a valid template"),
    "torch_train option": (["actor_train.strategy_args.strategy_config.parallel=fsdp9"],
                           "actor_train.strategy_args.strategy_config.parallel: expected one of ddp, fsdp2, got 'fsdp9'"),
    "packing on megatron": (["actor_train.strategy_args.strategy_name=megatron",
                             "actor_train.training_args.max_tokens_per_micro_batch=512"],
                            "actor_train.training_args.max_tokens_per_micro_batch: sequence packing is implemented for "
                            "torch_train and deepspeed; megatron would ignore it"),
    "resume path that does not exist": (["resume_from_checkpoint=/no/such/checkpoint"], "resume_from_checkpoint: /no/such/checkpoint does not exist"),
    "validation with no decoding mode": (["val_decoding=[]"], "val_decoding: empty, so validation (every 2 steps) would run nothing"),
    "env tag listed twice": (["train_env_manager.tags=[SimpleSokoban,SimpleSokoban]"],
                             "train_env_manager.tags[1]: 'SimpleSokoban' is listed twice"),
    "greedy rollouts in groups": (["actor_infer.generating_args.temperature=0"],
                                  "actor_infer.generating_args: temperature: 0 decodes greedily, so the 4 samples of a group "
                                  "(train_env_manager.group_size) give the same answers and grpo's advantages"),
    "greedy rollouts, gigpo": (["actor_infer.generating_args.do_sample=false", "algorithm.adv_estimator=gigpo",
                                "train_env_manager.mode=step"],
                               "do_sample: false decodes greedily, so the 4 samples of a group (train_env_manager.group_size) "
                               "give the same answers and gigpo's advantages, measured within each group, are all zero"),
    "groups of one": (["train_env_manager.group_size=1", "train_env_manager.num_groups_partition=[8]"],
                      "train_env_manager.group_size: 1 makes every group a single sample, and grpo's advantage, "
                      "measured against the other samples of the group, is zero for all of them"),
}


@pytest.mark.parametrize("case", sorted(SEMANTIC_CASES))
def test_plan_rejects(case, capsys, out_dir):
    overrides, expected = SEMANTIC_CASES[case]
    rc, out = plan(capsys, SOKOBAN, out_dir, *overrides)
    assert rc == 1 and "plan OK" not in out
    assert expected in out, out[-2000:]


RANGE_CASES = {
    "max_steps=-3": "max_steps: must be >= 1, got -3",
    "rollout_batch_size=-8": "rollout_batch_size: must be >= 1, got -8",
    "actor_train.training_args.lr=-1": "actor_train.training_args.lr: must be >= 0, got -1.0",
    "actor_infer.generating_args.top_p=1.5": "actor_infer.generating_args.top_p: must be > 0 and <= 1, got 1.5",
    "actor_train.training_args.adam_betas=[0.9,1.0]": "actor_train.training_args.adam_betas[1]: must be >= 0 and < 1, got 1.0",
    "algorithm.gamma=.nan": "algorithm.gamma: must be >= 0 and <= 1, got nan",
    "custom_envs.SimpleSokoban.max_turns=0": "custom_envs.SimpleSokoban.max_turns: must be >= 1, got 0",
}


@pytest.mark.parametrize("override", sorted(RANGE_CASES))
def test_numbers_out_of_range_are_config_errors(override, capsys, out_dir):
    rc, out = plan(capsys, SOKOBAN, out_dir, override)
    assert rc == 2
    assert RANGE_CASES[override] in out and "Traceback" not in out


@pytest.mark.parametrize("overrides", [
    # no group to compare within (GiGPO's step-level part compares the states an episode revisits)
    ["train_env_manager.group_size=1", "train_env_manager.num_groups_partition=[8]", "algorithm.adv_estimator=gigpo",
     "train_env_manager.mode=step"],
    ["algorithm.reward_norm.group_by=batch"],  # the baseline spans the batch: greedy episodes still differ by room
    ["algorithm.adv_estimator=reinforce_pp"],  # whitened over the batch
])
def test_greedy_rollouts_pass_where_advantages_are_not_within_a_group(overrides, capsys, out_dir):
    rc, out = plan(capsys, SOKOBAN, out_dir, "actor_infer.generating_args.temperature=0", *overrides)
    assert "decodes greedily" not in out, out[-2000:]
    assert rc == 0 and "plan OK" in out, out[-2000:]


def test_greedy_rlvr_groups_are_rejected(tmp_path, capsys):
    rc, out = plan(capsys, RLVR, f"output_dir={tmp_path / 'run'}", "actor_infer.generating_args.do_sample=false")
    assert rc == 1 and "plan OK" not in out
    assert ("actor_infer.generating_args: do_sample: false decodes greedily, so the 2 samples of a group "
            "(actor_infer.generating_args.num_return_sequences)") in out, out[-2000:]


@pytest.mark.parametrize("overrides", [
    ["algorithm.reward_norm.group_by=batch"],  # a baseline over the batch
    ["algorithm.adv_estimator=gigpo", "train_env_manager.mode=step"],  # step-level advantages over revisited states
])
def test_groups_of_one_pass_where_advantages_are_not_within_a_group(overrides, capsys, out_dir):
    rc, out = plan(capsys, SOKOBAN, out_dir, "train_env_manager.group_size=1", "train_env_manager.num_groups_partition=[8]",
                   *overrides)
    assert rc == 0 and "plan OK" in out, out[-2000:]


def test_rlvr_groups_of_one_are_rejected(tmp_path, capsys):
    rc, out = plan(capsys, RLVR, f"output_dir={tmp_path / 'run'}", "actor_infer.generating_args.num_return_sequences=1")
    assert rc == 1 and ("actor_infer.generating_args.num_return_sequences: 1 makes every group a single sample, and "
                        "grpo's advantage") in out, out[-2000:]


def test_every_problem_is_listed_at_once(capsys, out_dir):
    picks = ["unknown env id", "unknown strategy", "gae without a critic", "KL loss without a reference",
             "pretrain path that does not exist", "import that fails"]
    overrides = [o for case in picks for o in SEMANTIC_CASES[case][0]]
    rc, out = plan(capsys, SOKOBAN, out_dir, *overrides)
    assert rc == 1
    for case in picks:
        assert SEMANTIC_CASES[case][1] in out, case
    assert f"{len(picks)} problems:" in out
    with pytest.raises(ConfigError) as err:
        check(load_config(SOKOBAN, [out_dir, *overrides]))
    assert len(err.value.errors) == len(picks)


def test_unwritable_output_dir(tmp_path, capsys):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    rc, out = plan(capsys, SOKOBAN, f"output_dir={blocker / 'run'}")
    assert rc == 1 and f"output_dir: {blocker / 'run'} cannot be created: {blocker} is not a directory" in out
    rc, out = plan(capsys, SOKOBAN, f"output_dir={blocker}", f"tracking.log_dir={blocker}/logs")
    assert f"output_dir: {blocker} exists and is not a directory" in out and "tracking.log_dir:" in out
    assert not (tmp_path / "a_file" / "run").exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through permission bits")
def test_read_only_output_dir(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        assert "is not writable" in dir_problem(ro / "run")
    finally:
        ro.chmod(0o700)


def test_output_dir_checks_create_nothing(tmp_path):
    target = tmp_path / "deep" / "er" / "run"
    assert dir_problem(target) is None
    assert list(tmp_path.iterdir()) == []


def test_malformed_rlvr_jsonl_line(tmp_path, capsys):
    data = tmp_path / "math.jsonl"
    good = {"prompt": "1+1?", "tag": "math", "ground_truth": "2"}
    data.write_text(json.dumps(good) + "\n" + '{"prompt": "2+2?", "tag": "math", \n' + json.dumps(good) + "\n")
    rc, out = plan(capsys, RLVR, f"output_dir={tmp_path / 'run'}", f"data.train_files=[{data}]", "data.val_files=[]",
                   "data.domain_interleave_probs={}")
    assert rc == 1
    assert f"data.train_files[0]: {data}:2: not valid JSON" in out and "Traceback" not in out


def test_rlvr_missing_file_and_unrouted_domain(tmp_path, capsys):
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"prompt": "p", "tag": "poetry"}) + "\n")
    rc, out = plan(capsys, RLVR, f"output_dir={tmp_path / 'run'}", f"data.train_files=[{data},{tmp_path / 'nope.jsonl'}]",
                   "data.val_files=[]", "data.domain_interleave_probs={}")
    assert rc == 1
    assert f"data.train_files[1]: data file {tmp_path / 'nope.jsonl'} not found" in out
    assert "rewards: no reward for data domains ['poetry']" in out


def test_a_domain_with_data_and_no_probability_is_named(tmp_path, capsys):
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"prompt": "p", "tag": t}) + "\n" for t in ("math", "code", "ifeval", "mcq", "qa", "poetry")))
    rc, out = plan(capsys, RLVR, f"output_dir={tmp_path / 'run'}", f"data.train_files=[{data}]", "data.val_files=[]")
    assert rc == 1  # multi_domain_cpu.yaml's probabilities list the five shipped domains: poetry would never be drawn
    assert "data.domain_interleave_probs: domain_interleave_probs gives no probability to domains with data: ['poetry']" in out


def test_reward_fn_args_are_checked_against_what_the_function_reads(tmp_path, capsys):
    rc, out = plan(capsys, RLVR, f"output_dir={tmp_path / 'run'}", "rewards.code.reward_fn_args.timout_s=2",
                   "rewards.qa.reward_fn_args.score_pattern=([0-9]", "rewards.math.reward_fn_args.rel_tol=0.01")
    assert rc == 1 and "plan OK" not in out
    assert ("rewards.code.reward_fn_args.timout_s: reward function 'code_sandbox' reads no field 'timout_s'; "
            "did you mean 'timeout_s'?") in out, out[-2000:]
    assert "rewards.qa.reward_fn_args.score_pattern: '([0-9]' is not a regular expression" in out
    assert "rel_tol" not in out  # a field math_rule reads passes
    assert out.count("rewards.") == 2


USER_REWARDS = """
from roll.registry import REWARDS
from roll.rewards.base import RewardOutput


@REWARDS.register("preflight_test_keywords")
def keywords(sample, *, bonus=0.0, strict=False):
    return RewardOutput(bonus)


@REWARDS.register("preflight_test_any_field")
def any_field(sample, **fields):
    return RewardOutput(0.0)
"""


def test_user_reward_args_are_checked_when_its_signature_names_them(tmp_path, capsys, monkeypatch):
    (tmp_path / "preflight_user_rewards.py").write_text(USER_REWARDS)
    monkeypatch.syspath_prepend(str(tmp_path))
    common = [f"output_dir={tmp_path / 'run'}", "imports=[preflight_user_rewards]"]
    rc, out = plan(capsys, RLVR, *common, "rewards.math.reward_fn=preflight_test_keywords",
                   "rewards.math.reward_fn_args={bonus: 1.0, strikt: true}")
    assert rc == 1
    assert ("rewards.math.reward_fn_args.strikt: reward function 'preflight_test_keywords' reads no field 'strikt'; "
            "did you mean 'strict'? (it reads: bonus, strict)") in out, out[-2000:]
    rc, out = plan(capsys, RLVR, *common, "rewards.math.reward_fn=preflight_test_any_field",
                   "rewards.math.reward_fn_args={anything: 1}")
    assert rc == 0 and "plan OK" in out, out[-2000:]  # **fields without @reads: nothing to check against


def test_sft_data_lines_are_checked(tmp_path, capsys):
    data = tmp_path / "demos.jsonl"
    data.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}]}) + "\n" + json.dumps({"text": "x"}) + "\n")
    rc, out = plan(capsys, REPO / "configs" / "sft" / "frozenlake_sft_cpu.yaml", f"output_dir={tmp_path / 'run'}",
                   f"data.train_files=[{data}]")
    assert rc == 1 and f"{data}:2: expected a JSON object with a 'messages' list" in out


def test_model_paths():
    assert model_problem("roll-tiny://tiny") is None
    assert "unknown tiny model" in model_problem("roll-tiny://huge")
    assert "does not exist" in model_problem("/no/such/path")
    assert "does not exist" in model_problem("./relative/dir")
    assert model_problem("Qwen/Qwen2.5-0.5B-Instruct", offline=False) is None  # a plausible hub id, online
    assert "offline mode is on" in model_problem("Qwen/Qwen2.5-0.5B-Instruct-no-such", offline=True)
    assert "does not exist" in model_problem("not a hub id!", offline=False)


def test_local_model_dir_needs_a_config_weights_and_a_tokenizer(tmp_path):
    assert "no config.json" in model_problem(str(tmp_path))
    (tmp_path / "config.json").write_text("{}")
    assert model_problem(str(tmp_path)) == f"{tmp_path} holds no weights (no *.safetensors or *.bin file)"
    (tmp_path / "model-00001-of-00002.safetensors").write_bytes(b"")
    assert "holds no tokenizer (tokenizer.json, tokenizer.model, tokenizer_config.json, vocab.json)" in model_problem(str(tmp_path))
    (tmp_path / "tokenizer.json").write_text("{}")
    assert model_problem(str(tmp_path)) is None


def test_a_saved_tiny_model_is_a_model_directory(tmp_path):
    from roll.models.tiny import save_tiny_model

    assert model_problem(save_tiny_model(tmp_path / "tiny")) is None  # what `roll model tiny` and finalize write


# ---- placement: colocated engines' GPU memory --------------------------------------------------
FRACTIONS = """
pipeline: rlvr
rollout_batch_size: 16
actor_train: {{device_mapping: "0-1", training_args: {{per_device_train_batch_size: 1, gradient_accumulation_steps: 8}}}}
actor_infer:
  device_mapping: "0-1"
  strategy_args: {{strategy_name: vllm, strategy_config: {{gpu_memory_utilization: {policy}}}}}
  generating_args: {{num_return_sequences: 4}}
rewards:
  qa:
    reward_fn: llm_judge
    judge:
      device_mapping: "{judge_slots}"
      strategy_args: {{strategy_name: vllm{judge_cfg}}}
"""


@pytest.mark.parametrize("policy, judge_slots, judge_cfg, expected", [
    (0.6, "1", ", strategy_config: {gpu_memory_utilization: 0.6}", "device slots 1: colocated inference engines reserve "
     "actor_infer 0.6 (gpu_memory_utilization) + reward.qa.judge 0.6 (gpu_memory_utilization) = 1.2"),
    (0.5, "0-1", "", "device slots 0-1: colocated inference engines reserve actor_infer 0.5 (gpu_memory_utilization) + "
     "reward.qa.judge 0.9 (gpu_memory_utilization) = 1.4"),  # vLLM's default of 0.9 counts
    (0.6, "2", ", strategy_config: {gpu_memory_utilization: 0.6}", None),  # not colocated
    (0.5, "0", ", strategy_config: {gpu_memory_utilization: 0.5}", None),  # exactly 1.0
    (1.5, "2", "", "actor_infer.strategy_args.strategy_config.gpu_memory_utilization: must be a share of the device memory in (0, 1], got 1.5"),
])
def test_colocated_engine_memory_fractions(tmp_path, policy, judge_slots, judge_cfg, expected):
    path = tmp_path / "cfg.yaml"
    path.write_text(FRACTIONS.format(policy=policy, judge_slots=judge_slots, judge_cfg=judge_cfg))
    errors = make_plan(load_config(path), CPU_BOX).errors
    memory = [e for e in errors if "memory" in e]
    if expected is None:
        assert memory == [], errors
    else:
        assert any(expected in e for e in memory), errors


# ---- shipped configs, speed, no Ray -------------------------------------------------------------
RUNNABLE = sorted(p for p in (REPO / "configs").rglob("*.yaml") if "base" not in p.stem)


@pytest.mark.parametrize("path", RUNNABLE, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_shipped_configs_pass_preflight(path, tmp_path):
    from roll.pipelines.chain import is_chain_file, load_chain, preflight_chain

    if is_chain_file(path):  # a chain (`stages:`): every stage (outputs of earlier stages may not exist yet)
        assert preflight_chain(load_chain(path, [f"output_dir={tmp_path / 'run'}"])[1]) == []
        return
    cfg = load_config(path, [f"output_dir={tmp_path / 'run'}"])
    problems = preflight(cfg, offline=False)  # GPU configs name hub models: plausible ids pass online
    # SFT configs read demonstrations that `roll data demos` writes under output/ first
    generated = [p for p in problems if "data file output/" in p and "not found" in p]
    assert [p for p in problems if p not in generated] == []
    assert all(f.startswith("output/") for f in cfg.data.train_files) or not generated


def test_validation_on_training_seeds_is_a_plan_warning(capsys, out_dir):
    # sokoban_cpu.yaml: 4 steps of 2 groups from seed 42 + 0 (seeds 42-49); 8 validation groups at offset 4
    rc, out = plan(capsys, SOKOBAN, out_dir, "val_env_manager.seed_offset=4")
    assert rc == 0 and "plan OK" in out
    assert ("warning: val_env_manager: validation of tag 'SimpleSokoban' uses env seeds 46-53, which training draws "
            "from too (42-49 over 4 steps): it would replay training episodes") in out, out[-2000:]
    rc, out = plan(capsys, SOKOBAN, out_dir, "val_env_manager.seed_offset=8")  # seeds 50-57: just past training's
    assert rc == 0 and "replay" not in out


MULTI = REPO / "configs/agentic/learning/multi_env_grpo.yaml"


@pytest.mark.parametrize("overrides, expected", [
    # each would fail its first validation round, after Ray and the models had started
    (["val_batch_size=5", "val_env_manager.group_size=2"], "val_batch_size 5 is not a multiple of val_env_manager.group_size 2"),
    (["val_env_manager.num_groups_partition=[1,1,1]"],
     "val_env_manager.num_groups_partition sums to 3, but a validation batch has 384 / 1 = 384 groups"),
    # an even split over more tags than groups leaves tags out of every batch
    (["val_batch_size=2"], "val_env_manager: 2 group(s) per batch (val_batch_size / group_size) split evenly over 3 tags "
                           "leaves 'SokobanDifferentSymbols' with none: never validated"),
    (["rollout_batch_size=8", "actor_train.training_args.per_device_train_batch_size=8",
      "train_env_manager.num_groups_partition=[]"],
     "train_env_manager: 1 group(s) per batch (rollout_batch_size / group_size) split evenly over 2 tags leaves "
     "'FrozenLake' with none: never trained"),
])
def test_env_batches_that_leave_a_tag_out_or_do_not_split_are_plan_errors(overrides, expected, capsys, out_dir):
    rc, out = plan(capsys, MULTI, out_dir, *overrides)
    assert rc == 1 and expected in " ".join(out.split()), out[-2000:]


def test_a_partition_entry_of_0_leaves_its_tag_out_with_a_warning(capsys, out_dir):
    rc, out = plan(capsys, MULTI, out_dir, "train_env_manager.num_groups_partition=[8,0]")
    assert rc == 0 and "warning: train_env_manager.num_groups_partition gives 'FrozenLake' no groups: never trained" in out


@pytest.mark.parametrize("path", [p for p in RUNNABLE if "agentic" in p.parts], ids=lambda p: f"{p.parent.name}/{p.name}")
def test_shipped_configs_validate_on_other_seeds_than_they_train_on(path, tmp_path):
    from roll.pipelines.chain import is_chain_file

    if is_chain_file(path):
        return
    from roll.distributed.resource_pool import make_plan

    cfg = load_config(path, [f"output_dir={tmp_path / 'run'}"])
    assert [w for w in make_plan(cfg, CPU_BOX).warnings if "replay" in w] == []


def test_base_configs_are_not_runnable_alone():
    problems = preflight(load_config(REPO / "configs" / "agentic" / "base_cpu.yaml"))
    assert "custom_envs: the agentic pipeline needs at least one environment tag" in problems


def test_plan_imports_no_ray_and_is_fast(tmp_path):
    """`roll plan` of a shipped config and of a broken one: no Ray (not even imported)."""
    code = textwrap.dedent(f"""
        import sys, time
        from roll.cli import main
        t0 = time.perf_counter()
        good = main(["plan", {str(SOKOBAN)!r}, "output_dir={tmp_path / 'good'}"])
        bad = main(["plan", {str(SOKOBAN)!r}, "output_dir={tmp_path / 'bad'}", "custom_envs.SimpleSokoban.env_id=roll/Nope-v0",
                    "algorithm.adv_estimator=gae", "pretrain=/no/such/path"])
        print("RESULT", good, bad, "ray" in sys.modules, round(time.perf_counter() - t0, 2))
    """)
    env = {**os.environ, "NO_COLOR": "1"}
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO, env=env)
    wall = time.perf_counter() - t0
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT"))
    _, good, bad, ray_imported, _ = line.split()
    assert (good, bad, ray_imported) == ("0", "1", "False"), proc.stdout[-3000:] + proc.stderr[-3000:]
    assert not (tmp_path / "good").exists() and not (tmp_path / "bad").exists()
    assert wall < 60  # generous for a loaded CI box; docs/config.md quotes the unloaded timing


@pytest.mark.integration
def test_run_with_a_preflight_problem_stops_before_ray(tmp_path):
    """`roll run` gives the same problems as plan, in one message, in seconds; nothing is written."""
    out = tmp_path / "run"
    env = {**os.environ, "NO_COLOR": "1", "RAY_USAGE_STATS_ENABLED": "0"}
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "roll", "run", str(SOKOBAN), f"output_dir={out}",
                           "custom_envs.SimpleSokoban.env_id=roll/Nope-v0", "train_env_manager.tags=[SimpleSokoban,Lake]"],
                          capture_output=True, text=True, timeout=120, cwd=REPO, env=env)
    wall = time.perf_counter() - t0
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr.startswith("roll: invalid config (2 problems):")
    assert "'roll/Nope-v0' is not a registered gymnasium env" in proc.stderr and "'Lake' is not a key of custom_envs" in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert not out.exists()  # no run directory, no checkpoint, no final model
    assert wall < 60
