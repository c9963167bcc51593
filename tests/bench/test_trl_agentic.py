"""bench/trl_agentic.py without TRL: the episode loop TRL's rollout_func runs is roll's env
manager token for token, the TRL settings follow the shared config, and the report's figures
come from the recorded numbers."""
import asyncio
import json
import statistics
import zlib

import pytest
from bench_loader import load_bench

import roll.envs  # noqa: F401  (registers roll's envs)
from roll.config.roles import GeneratingArgs
from roll.config.rollout import EnvConfig, EnvManagerConfig
from roll.rollout.env_manager import EpisodeSpec
from roll.strategies.base import GenerationResult
from roll.workers.environment import EnvironmentWorker

ANSWERS = ["<answer>Up</answer>", "<answer>Down</answer>", "<answer>Left</answer>", "<answer>Right</answer>",
           "Up", "<answer>Jump</answer>"]


@pytest.fixture(scope="module")
def ta():
    return load_bench("trl_agentic")


@pytest.fixture(scope="module")
def task(ta):
    return ta.load_task()


@pytest.fixture(scope="module")
def tok(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


class Scripted:
    """A deterministic policy of the context alone: valid and invalid answers, some closed
    with the end-of-turn token and some cut off without it (a length stop)."""

    def __init__(self, tok):
        self.tok, self.eot = tok, tok.convert_tokens_to_ids("<|im_end|>")

    def output(self, context: list[int]) -> tuple[list[int], list[float]]:
        h = zlib.crc32(json.dumps(context).encode())
        ids = self.tok.encode(ANSWERS[h % len(ANSWERS)], add_special_tokens=False)
        if h % 5:
            ids = ids + [self.eot]
        return ids, [-0.01 * (k + 1) for k in range(len(ids))]

    async def generate(self, request):
        ids, lps = self.output(list(request.prompt_ids))
        return GenerationResult(request.request_id, ids, lps)

    async def abort(self, request_ids):
        pass


def test_rollout_loop_is_roll_env_manager_token_for_token(ta, task, tok):
    policy = Scripted(tok)
    seeds = list(range(12))
    eps = ta.run_episodes(lambda contexts: [policy.output(c) for c in contexts], tok, seeds, task)
    env_cfg = EnvConfig(env_id=task["env_id"], env_kwargs=task["env_kwargs"], max_turns=task["max_turns"],
                        system_prompt=task["system_prompt"], include_instruction=task["include_instruction"],
                        turn_template=task["turn_template"])
    worker = EnvironmentWorker({task["tag"]: env_cfg}, EnvManagerConfig(group_size=1, mode=task["mode"]),
                               GeneratingArgs(max_new_tokens=task["max_new_tokens"]), tok, [policy])
    turns, invalid, cut = 0, 0, 0
    for seed, ep in zip(seeds, eps):
        [traj] = asyncio.run(worker.run_episode(EpisodeSpec(f"e{seed}", task["tag"], f"g{seed}", seed)))
        assert traj.failure is None, traj.failure_detail
        assert ep.prompt_ids + ep.completion_ids == traj.input_ids
        assert [0] * len(ep.prompt_ids) + ep.env_mask == traj.loss_mask
        assert [0.0] * len(ep.prompt_ids) + ep.logprobs == pytest.approx(traj.logprobs)
        assert (ep.episode_return, ep.success, ep.turns) == (pytest.approx(traj.episode_return), traj.success, traj.num_turns)
        turns += ep.turns
        invalid += sum(1 for a in traj.turn_actions if not a["valid"])
        cut += sum(1 for k in range(1, len(ep.env_mask)) if ep.env_mask[k - 1] == 1 and ep.env_mask[k] == 0
                   and ep.completion_ids[k - 1] != policy.eot)
    # the episodes went through several turns, unparseable answers and cut-off turns
    assert turns > 2 * len(seeds) and invalid > 0 and cut > 0


def test_only_model_tokens_are_trained(ta, task, tok):
    policy = Scripted(tok)
    [ep] = ta.run_episodes(lambda contexts: [policy.output(c) for c in contexts], tok, [3], task)
    model = [policy.output(ep.prompt_ids + ep.completion_ids[:k])[0] for k in range(len(ep.completion_ids))
             if ep.env_mask[k] and (k == 0 or not ep.env_mask[k - 1])]
    assert len(model) == ep.turns
    assert sum(ep.env_mask) == sum(len(m) for m in model)
    assert len(ep.env_mask) == len(ep.completion_ids) == len(ep.logprobs)
    assert all(lp == 0.0 for lp, m in zip(ep.logprobs, ep.env_mask) if not m)


def test_hf_generate_logprobs_are_the_models(ta, tiny_model_dir):
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    contexts = [[1, 504, 205, 54, 69, 45, 2, 205, 1, 507, 205], [1, 507, 205]]
    gc = GenerationConfig(max_new_tokens=6, do_sample=True, temperature=1.0, top_k=0, top_p=1.0, eos_token_id=[2, 0],
                          pad_token_id=0)
    torch.manual_seed(0)
    rows = ta.hf_generate(model, contexts, gc)
    for ctx, (ids, lps) in zip(contexts, rows):
        assert 1 <= len(ids) <= 6 and len(lps) == len(ids)
        assert all(t not in (0, 2) for t in ids[:-1]), "a row continues past its EOS"
        with torch.no_grad():
            logits = model(torch.tensor([ctx + ids])).logits[0, len(ctx) - 1:-1]
        want = logits.log_softmax(-1).gather(-1, torch.tensor(ids).unsqueeze(-1)).squeeze(-1)
        assert lps == pytest.approx(want.tolist(), abs=1e-4)


def test_trl_settings_follow_the_shared_config(ta, task):
    args = ta.grpo_args(task, steps=20, seed=3)
    assert args["per_device_train_batch_size"] * args["gradient_accumulation_steps"] == task["episodes"] == 64
    assert (args["num_generations"], args["max_completion_length"], args["learning_rate"]) == (8, 8, 2e-4)
    assert (args["loss_type"], args["beta"], args["scale_rewards"], args["top_k"]) == ("dapo", 0.0, "group", 0)
    assert (args["max_steps"], args["seed"]) == (20, 3)
    seeds = ta.train_seeds(3, 20, task)
    assert seeds == list(range(3, 3 + 20 * 8))
    for bad in ({"mode": "step"}, {"adv_estimator": "gigpo"}, {"micro": 16}):
        with pytest.raises(ValueError):
            ta.grpo_args({**task, **bad}, 20, 0)


def _times(step_s, roll_s):
    begins = [100.0 + 10 * i for i in range(len(step_s))]
    return {"begins": begins, "ends": [b + s for b, s in zip(begins, step_s)], "torch_threads": 2,
            "rollouts": [{"seconds": r, "episodes": 64, "groups": 8, "model_tokens": 1200, "env_tokens": 6000,
                          "success": 0.25, "turns": 4.5} for r in roll_s]}


def test_trl_phases_from_the_runner_record(ta):
    f = ta.trl_figures(_times([9.0, 8.0, 6.0, 7.0, 5.0], [5.0, 4.0, 3.0, 4.0, 2.0]))
    assert f["phases"] == {"rollout": 3.0, "train": 3.0}
    assert f["model_tokens"] == [1200.0] * 5
    with pytest.raises(ValueError, match="rollouts"):
        ta.trl_figures(_times([9.0, 8.0, 6.0], [5.0, 4.0]))


def _run(ends, startup, pss, greedy, sampled, t0):
    return {"ends": ends, "startup_s": startup, "wall_s": startup + ends[-1] - ends[0], "peak_pss_mb": pss,
            "peak_procs": 1, "peak_by_process": {"p": pss}, "startup_cpu_by_process": {"p": startup / 2},
            "cpu_per_step": pss / 1000,
            "eval": {"greedy": greedy, "sampled": sampled}, "model_tokens": [1200.0], "env_tokens": [6000.0],
            "train_success": [0.2], "phases": {"rollout": 1.0, "train": 1.0}, "seed": 0, "t0": t0, "load_avg": 1.0,
            "cmd": "x"}


def test_figures_and_section_from_recorded_runs(ta, task, tmp_path):
    roll = [_run([0, 2, 4, 6, 8], 30.0, 2000.0, 0.30, 0.25, 1), _run([0, 2, 4, 7, 10], 40.0, 2200.0, 0.20, 0.25, 3)]
    trl = [_run([0, 3, 6, 9, 12], 10.0, 1000.0, 0.20, 0.30, 2), _run([0, 3, 6, 9, 12], 12.0, 1000.0, 0.20, 0.30, 4)]
    s = {"roll": ta.summarise(roll), "trl": ta.summarise(trl)}
    # steps 3..N: run 1's gaps 2, 2, 2 and run 2's 2, 3, 3 -> medians 2 and 3 -> 2.5
    assert s["roll"]["step_s"] == statistics.median([2.0, 3.0]) and s["trl"]["step_s"] == 3.0
    fig = ta.figures(s)
    assert fig["trl_agentic_step_speedup"] == pytest.approx(3.0 / 2.5)
    # the smaller of the two deltas: greedy +5, sampled -5 points
    assert fig["trl_agentic_success_delta_pp"] == pytest.approx(-5.0)
    assert fig["trl_agentic_mem_ratio"] == pytest.approx(2100 / 1000)
    assert fig["trl_agentic_cpu_per_step_ratio"] == pytest.approx(2.1 / 1.0)
    saved = {"task": task, "runs": {"roll": roll, "trl": trl}, "base": {"greedy": 0.1, "sampled": 0.12}, "steps": 5,
             "val_episodes": 64, "probe": {"error": "ValueError: x", "frames": ["trl/a.py:1"]}, "sft_cmds": ["python sft"]}
    text = ta.section(saved, s, "RESULT x=1")
    assert text.startswith(ta.SECTION + "\n") and "`RESULT x=1`" in text and "ValueError: x" in text
    assert text.count("\n| roll | 0 |") == 2 and text.count("\n| trl | 0 |") == 2
    doc = tmp_path / "benchmarks.md"
    assert not ta.write_section(text, quick=True, doc=doc) and not doc.exists()


def test_cpu_per_step_counts_steps_3_to_n_over_the_whole_tree(ta):
    # two processes; the second starts at t=5 and exits after t=7 (its last sample counts)
    samples = [(float(t), {1: ("a", 1.0 * t), **({2: ("b", 0.5 * (t - 4))} if 5 <= t <= 7 else {})}) for t in range(13)]
    ends = [2.0, 4.0, 8.0, 12.0]  # steps 3..N run from t=4 to t=12
    # a: 12 - 4 = 8 s; b: 1.5 s (its last sample, t=7) - 0 (absent at t=4)
    assert ta.cpu_seconds_per_step(samples, ends) == pytest.approx((8 + 1.5) / 2)
