"""The tool task's pieces together (docs/tools.md, "A task that needs a tool"): demonstrations
through roll/Tools-v0 are token-exact with the rollout loop, the SFT pipeline reads them with
their tool schemas, and the chain configs/agentic/tool_arith_cpu.yaml validates and plans."""
from __future__ import annotations

import asyncio
import json
from pathlib import Path

import gymnasium as gym
import pytest
import roll.envs  # noqa: F401  (registers roll/Arith-v0 and roll/Tools-v0)
import yaml
from roll.config.roles import GeneratingArgs
from roll.config.rollout import EnvConfig, EnvManagerConfig
from roll.config.validate import ConfigError, to_dict
from roll.data.chat import tokenize_conversation
from roll.envs.agents import demo_agent
from roll.pipelines.chain import load_chain, preflight_chain
from roll.pipelines.sft import read_examples
from roll.pipelines.sft_data import episode_messages, generate
from roll.rollout.env_manager import EpisodeSpec
from roll.strategies.base import GenerationResult
from roll.workers.environment import EnvironmentWorker

REPO = Path(__file__).resolve().parents[2]
CHAIN = REPO / "configs/agentic/tool_arith_cpu.yaml"
TOOL_ENV = {"env": "roll/Arith-v0", "tools": ["calculator"], "max_tool_calls": 2}


@pytest.fixture(scope="module")
def tok(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


class ScriptedPolicy:
    """Answers turn ``t`` with ``script[t]`` as the tokenizer's canonical ids plus end-of-turn."""

    def __init__(self, tok, script):
        self.tok, self.script = tok, script
        self.eot = tok.convert_tokens_to_ids("<|im_end|>")

    async def generate(self, request):
        text = self.script[min(request.meta["turn"], len(self.script) - 1)]
        ids = self.tok.encode(text, add_special_tokens=False) + [self.eot]
        return GenerationResult(request.request_id, ids, [-0.5] * len(ids), "stop", 0)

    async def abort(self, request_ids):
        pass


@pytest.mark.parametrize("seed, epsilon", [(3, 0.0), (11, 0.0), (4, 1.0)])
def test_demonstrations_are_the_rollouts_tokens(tok, seed, epsilon):
    """The SFT ids of a demonstration equal the trajectory the rollout loop builds when the
    model writes the same turns: SFT trains on exactly the prompts RL will show."""
    cfg = EnvConfig(env_id="roll/Tools-v0", env_kwargs=TOOL_ENV, max_turns=3, turn_template="{observation}",
                    include_instruction=False, system_prompt="")
    env = gym.make(cfg.env_id, **cfg.env_kwargs)
    messages, outcome = episode_messages(cfg, env, demo_agent(env, epsilon, seed=seed), seed)
    schemas = env.get_wrapper_attr("tool_schemas")
    env.close()
    script = [m["content"] for m in messages if m["role"] == "assistant"]
    worker = EnvironmentWorker({"a": cfg}, EnvManagerConfig(group_size=1), GeneratingArgs(max_new_tokens=128), tok,
                               [ScriptedPolicy(tok, script)])
    [traj] = asyncio.run(worker.run_episode(EpisodeSpec("ep0", "a", "a/0", seed)))
    assert traj.failure is None, traj.failure_detail
    assert traj.messages == messages and traj.success == outcome["success"] and traj.num_turns == outcome["turns"]
    ids, mask = tokenize_conversation(tok, messages, tools=schemas)
    n = len(traj.input_ids)
    assert ids[:n] == traj.input_ids and mask[:n] == traj.loss_mask
    assert not any(mask[n:])  # what the template adds after the last turn is not trained on
    if epsilon == 0.0:
        assert traj.success and [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]


def stage_config(tmp_path: Path, name: str) -> Path:
    _, stages = load_chain(CHAIN, [f"output_dir={tmp_path / 'out'}"])
    st = next(s for s in stages if s.name == name)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(to_dict(st.cfg), sort_keys=False))
    return path


def test_the_chains_demonstrations_carry_tools_and_the_sft_pipeline_reads_them(tmp_path, tok):
    out = tmp_path / "demos.jsonl"
    stats = generate(str(stage_config(tmp_path, "demos")), str(out), episodes=40, epsilon=0.0, seed=1)
    assert stats["Arith"]["success_rate"] == 1.0 and stats["rows"] == 40
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert all(r["tools"][0]["function"]["name"] == "calculator" for r in rows)
    examples = read_examples([str(out)], "messages")
    assert [e[1] for e in examples] == [r["tools"] for r in rows]
    messages, tools = examples[0]
    ids, mask = tokenize_conversation(tok, messages, tools=tools)
    assert "<tools>" in tok.decode(ids) and tok.decode([i for i, m in zip(ids, mask) if m]).count("<|im_end|>") == 2


def test_sft_without_tools_leaves_out_the_schema_and_trains_the_same_turns(tmp_path, tok):
    from roll.pipelines.sft import SFTPipeline

    demos = tmp_path / "demos.jsonl"
    generate(str(stage_config(tmp_path, "demos")), str(demos), episodes=4, epsilon=0.0, seed=2)
    chain, stages = load_chain(CHAIN, [f"output_dir={tmp_path / 'out'}"])
    trained = {}
    for name in ("sft_short", "sft"):
        cfg = next(s for s in stages if s.name == name).cfg
        pipe = SFTPipeline(cfg)
        pipe.tokenizer = tok
        trained[name] = pipe._tokenize(read_examples([str(demos)], "messages"), "train")
    for (short_ids, short_mask), (ids, mask) in zip(trained["sft_short"], trained["sft"]):
        assert "<tools>" in tok.decode(ids) and "<tools>" not in tok.decode(short_ids)
        assert len(short_ids) < len(ids) - 200
        assert [i for i, m in zip(short_ids, short_mask) if m] == [i for i, m in zip(ids, mask) if m]


def test_a_bad_tools_entry_in_sft_data_is_a_clear_error(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}], "tools": "calculator"}) + "\n")
    with pytest.raises(ConfigError, match=r"bad.jsonl:1: 'tools' must be a list"):
        read_examples([str(bad)], "messages")


def test_demonstrations_of_a_tool_env_in_step_mode_are_refused(tmp_path):
    cfg = stage_config(tmp_path, "demos")
    with pytest.raises(ConfigError, match="needs env manager mode 'trajectory'"):
        generate(str(cfg), str(tmp_path / "d.jsonl"), episodes=1, epsilon=0.0, overrides=("train_env_manager.mode=step",))


def test_the_chain_validates_and_plans(tmp_path):
    chain, stages = load_chain(CHAIN, [f"output_dir={tmp_path / 'out'}"])
    assert [s.name for s in stages] == ["baseline", "demos_clean", "sft_short", "demos", "sft", "grpo"]
    assert [s.spec.kind for s in stages] == ["eval", "demos", "run", "demos", "run", "run"]
    assert preflight_chain(stages, placement=False) == []
    by = {s.name: s for s in stages}
    out = tmp_path / "out"
    # copying is learned on short clean conversations first, then with the schema on noisy ones
    assert by["sft_short"].cfg.data.train_files == [str(out / "demos_clean" / "demos.jsonl")]
    assert not by["sft_short"].cfg.data.with_tools and by["sft"].cfg.data.with_tools
    assert by["sft"].feeds == {"pretrain": "sft_short", "data.train_files": "demos"}
    assert by["sft"].cfg.pretrain == str(out / "sft_short" / "final_model")
    assert by["sft"].cfg.pipeline == "sft" and by["grpo"].upstream == "sft"
    assert by["grpo"].cfg.actor_train.training_args.lr < by["baseline"].cfg.actor_train.training_args.lr
    assert by["grpo"].cfg.pipeline == "agentic" and by["grpo"].input_key == "pretrain"
    env = by["grpo"].cfg.custom_envs["Arith"]
    assert env.env_id == "roll/Tools-v0" and env.env_kwargs["env"] == "roll/Arith-v0"
    assert env.env_kwargs["tools"] == ["calculator"]
    # held-out validation, greedy and sampled, on problems the training seeds never reach
    assert by["grpo"].cfg.val_env_manager.seed_offset >= 100_000
    assert set(by["grpo"].cfg.val_decoding) == {"greedy", "sampled"}
