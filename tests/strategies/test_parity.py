"""Train/infer parity helper and `roll check parity` on the CPU default pair (hf_infer + torch_train)."""
from __future__ import annotations

import math

import pytest
import torch

from roll.distributed.parity import logprob_parity, parity_metrics, results_to_batch
from roll.strategies.base import GenerationResult


def test_logprob_parity_matches_loop():
    g = torch.Generator().manual_seed(0)
    li = -torch.rand(3, 7, generator=g) * 3
    lt = li + torch.randn(3, 7, generator=g) * 0.1
    mask = (torch.rand(3, 7, generator=g) > 0.3).long()
    got = logprob_parity(li, lt, mask)
    diffs, k1, k3 = [], [], []
    for b in range(3):
        for t in range(7):
            if mask[b, t]:
                d = float(lt[b, t]) - float(li[b, t])
                diffs.append(abs(d))
                k1.append(-d)
                k3.append(math.exp(d) - 1 - d)
    assert got["num_tokens"] == len(diffs)
    assert got["mean_abs_diff"] == pytest.approx(sum(diffs) / len(diffs), rel=1e-6)
    assert got["max_abs_diff"] == pytest.approx(max(diffs), rel=1e-6)
    assert got["kl_k1"] == pytest.approx(sum(k1) / len(k1), rel=1e-6)
    assert got["kl_k3"] == pytest.approx(sum(k3) / len(k3), rel=1e-6) and got["kl_k3"] >= 0
    m = parity_metrics(li, lt, mask)
    assert m["rollout/train_infer_logprob_diff"] == got["mean_abs_diff"]


def test_logprob_parity_edge_cases():
    z = torch.zeros(2, 3)
    assert logprob_parity(z, z, z.long())["num_tokens"] == 0
    with pytest.raises(ValueError, match="shapes differ"):
        logprob_parity(z, torch.zeros(2, 4), z.long())


def test_results_to_batch_alignment():
    prompts = [[5, 6], [7, 8, 9]]
    results = [GenerationResult("a", [10, 11, 12], [-0.1, -0.2, -0.3]), GenerationResult("b", [13], [-0.5])]
    b = results_to_batch(prompts, results)
    assert b["input_ids"].tolist() == [[5, 6, 10, 11, 12], [7, 8, 9, 13, 0]]
    assert b["attention_mask"].tolist() == [[1, 1, 1, 1, 1], [1, 1, 1, 1, 0]]
    assert b["response_mask"].tolist() == [[0, 0, 1, 1, 1], [0, 0, 0, 1, 0]]
    assert b["infer_logprobs"][0, 2:].tolist() == pytest.approx([-0.1, -0.2, -0.3])
    assert b["infer_logprobs"][1, 3].item() == pytest.approx(-0.5)
    with pytest.raises(ValueError, match="logprobs"):
        results_to_batch([[1]], [GenerationResult("c", [2, 3], [-1.0])])


@pytest.mark.integration
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_check_parity_cli_on_default_pair(capsys, temperature):
    """`roll check parity` with the defaults: hf_infer + torch_train (DDP, one process) on the
    tiny model, sampling at the config's temperature."""
    from roll.config.schema import PipelineConfig
    from roll.distributed.parity import main

    cfg = PipelineConfig()
    cfg.actor_infer.generating_args.temperature = temperature
    rc = main(cfg, num_prompts=4, max_new_tokens=8)
    out = capsys.readouterr().out
    assert "RESULT" in out and "mean_abs_diff" in out
    line = [x for x in out.splitlines() if x.startswith("RESULT")][-1]
    fields = dict(kv.split("=") for kv in line.split()[1:])
    assert rc == 0 and fields["ok"] == "1"
    assert float(fields["mean_abs_diff"]) < 1e-4 and int(fields["num_tokens"]) > 0


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_trainer_scores_the_sampling_temperature(temperature):
    """hf_infer samples at ``temperature``; torch_train recomputes the same tokens from the batch's
    per-sample ``temperature``: both describe one distribution (logits / temperature)."""
    import asyncio

    import torch.distributed as dist

    from roll.config.schema import PipelineConfig
    from roll.distributed.parity import build_strategies, sync_weights
    from roll.strategies.base import GenerationRequest

    async def generate(infer, prompts):
        await infer.start()
        return [await infer.generate(GenerationRequest(f"t-{i}", p, max_new_tokens=12, temperature=temperature, seed=i))
                for i, p in enumerate(prompts)]

    own_group = not dist.is_initialized()
    train, infer, _ = build_strategies(PipelineConfig())
    try:
        sync_weights(train, infer)
        prompts = [[5, 9, 13, 2, 7], [11, 3, 8], [4, 4, 6, 1]]
        results = asyncio.run(generate(infer, prompts))
        batch = results_to_batch(prompts, results)
        batch["temperature"] = torch.full((len(prompts),), temperature)
        report = logprob_parity(batch["infer_logprobs"], train.logprobs(batch), batch["response_mask"])
    finally:
        if own_group and dist.is_initialized():
            dist.destroy_process_group()
    assert report["num_tokens"] > 0
    assert report["mean_abs_diff"] < 1e-4 and report["max_abs_diff"] < 1e-3


def test_token_logprobs_per_row_temperature_and_batch_field():
    from roll.data.trajectory import Trajectory, trajectories_to_batch
    from roll.strategies.torch_train import sampling_temperatures, token_logprobs

    g = torch.Generator().manual_seed(1)
    logits, ids = torch.randn(2, 4, 9, generator=g), torch.randint(0, 9, (2, 4), generator=g)
    temp = torch.tensor([0.5, 2.0])
    got = token_logprobs(logits, ids, temp)
    for b in range(2):
        for t in range(1, 4):
            want = torch.log_softmax(logits[b, t - 1] / temp[b], -1)[ids[b, t]]
            assert float(got[b, t]) == pytest.approx(float(want), abs=1e-5)
    trajs = [Trajectory(input_ids=[1, 2], loss_mask=[0, 1], logprobs=[0.0, -1.0], token_turns=[-1, 0],
                        token_versions=[-1, 0], turn_versions=[0], temperature=t) for t in (0.7, 0.0)]
    batch = trajectories_to_batch(trajs, pad_token_id=0)
    assert batch["temperature"].tolist() == pytest.approx([0.7, 0.0])
    assert sampling_temperatures(batch).tolist() == pytest.approx([0.7, 1.0])  # greedy rows are scored at 1
    batch["temperature"] = torch.ones(2)
    assert sampling_temperatures(batch) is None
