"""HFInferStrategy on the tiny model, in-process (no Ray)."""
from __future__ import annotations

import asyncio

import pytest
import torch

from roll.config.roles import StrategyArgs, WorkerConfig
from roll.data.batch import Batch
from roll.strategies.base import GenerationRequest, InferenceStrategy
from roll.strategies.hf_infer import HFInferStrategy, filter_logits, sample_rows, seeded_uniform


@pytest.fixture(scope="module")
def strategy(tiny_model_dir):
    return HFInferStrategy(WorkerConfig(model_name_or_path=tiny_model_dir))


def run(coro):
    return asyncio.run(coro)


def req(rid, prompt=(5, 6, 7), **kw):
    kw.setdefault("max_new_tokens", 8)
    return GenerationRequest(rid, list(prompt), **kw)


def test_implements_protocol(strategy):
    assert isinstance(strategy, InferenceStrategy)


def test_seeded_request_is_independent_of_batching(strategy):
    async def go():
        alone = await strategy.generate(req("a", seed=11, meta={"ignore_eos": True}))
        n0 = strategy.num_batches
        # same request among others with different prompts and sampling parameters: one batch
        crowd = await asyncio.gather(
            strategy.generate(req("b", seed=11, meta={"ignore_eos": True})),
            *[strategy.generate(req(f"o{i}", prompt=[9] * (i + 2), seed=i, temperature=0.5 + 0.2 * i, top_k=3 * i, top_p=0.8))
              for i in range(4)])
        return alone, crowd, strategy.num_batches - n0

    alone, crowd, n_batches = run(go())
    assert n_batches == 1  # concurrent requests were decoded as one batch
    assert crowd[0].output_ids == alone.output_ids and len(alone.output_ids) == 8
    assert alone.finish_reason == "length"
    assert torch.allclose(torch.tensor(crowd[0].logprobs), torch.tensor(alone.logprobs), atol=1e-4)
    assert run(strategy.generate(req("c", seed=12, meta={"ignore_eos": True}))).output_ids != alone.output_ids


def test_logprobs_match_a_full_forward(strategy):
    res = run(strategy.generate(req("lp", seed=3, meta={"ignore_eos": True})))
    ids = torch.tensor([[5, 6, 7] + res.output_ids])
    scored = strategy.logprobs(Batch({"input_ids": ids, "attention_mask": torch.ones_like(ids)}))
    # temperature 1, no truncation: the sampling distribution is the model's own
    assert torch.allclose(scored[0, 3:], torch.tensor(res.logprobs), atol=1e-5)


def test_lm_head_runs_on_the_last_column_only(strategy):
    """The prompt's forward computes no logits for its earlier columns (never read); the
    decoded tokens' logprobs still equal a full forward's (test above)."""
    widths = []
    hook = strategy.model.lm_head.register_forward_hook(lambda mod, args, out: widths.append(args[0].shape[1]))
    try:
        res = run(strategy.generate(req("keep", prompt=(5, 6, 7, 8, 9, 10), seed=4, max_new_tokens=3,
                                        meta={"ignore_eos": True})))
    finally:
        hook.remove()
    assert len(res.output_ids) == 3 and widths == [1, 1, 1]


def test_rows_with_one_prompt_share_its_forward_and_decode_as_alone(strategy):
    """A group's samples (one prompt, several seeds) run the prompt's forward once; each row's
    tokens and logprobs are those it gets decoded alone."""
    async def go():
        shared0, n0 = strategy.shared_prefill_rows, strategy.num_batches
        group = await asyncio.gather(*[strategy.generate(req(f"g{i}", prompt=(5, 6, 7, 8), seed=20 + i, temperature=1.0,
                                                             meta={"ignore_eos": True})) for i in range(4)],
                                     strategy.generate(req("other", prompt=(9, 9), seed=3, meta={"ignore_eos": True})))
        return group, strategy.shared_prefill_rows - shared0, strategy.num_batches - n0

    group, shared, batches = run(go())
    assert batches == 1 and shared == 3  # one batch; 3 of the 4 group rows reused the first one's forward
    for i, res in enumerate(group[:4]):
        alone = run(strategy.generate(req(f"a{i}", prompt=(5, 6, 7, 8), seed=20 + i, temperature=1.0,
                                          meta={"ignore_eos": True})))
        assert res.output_ids == alone.output_ids
        assert torch.allclose(torch.tensor(res.logprobs), torch.tensor(alone.logprobs), atol=1e-5)
    assert len({tuple(r.output_ids) for r in group[:4]}) > 1  # the rows still sample their own tokens


def test_filter_logits_top_k_top_p():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05], [0.5, 0.3, 0.15, 0.05]]))
    out = filter_logits(logits, torch.tensor([1.0, 1.0]), torch.tensor([2, -1]), torch.tensor([1.0, 0.7]))
    assert torch.isinf(out[0, 2:]).all() and torch.isfinite(out[0, :2]).all()  # top-2
    assert torch.isfinite(out[1, :2]).all() and torch.isinf(out[1, 2:]).all()  # 0.5 + 0.3 reaches 0.7
    p = out.softmax(-1)
    assert torch.allclose(p[0, :2], torch.tensor([0.625, 0.375]))


def test_greedy_stop_tokens_and_strings(strategy):
    greedy = run(strategy.generate(req("g", temperature=0.0, max_new_tokens=6, meta={"ignore_eos": True})))
    again = run(strategy.generate(req("g2", temperature=0.0, max_new_tokens=6, meta={"ignore_eos": True})))
    assert greedy.output_ids == again.output_ids
    stop_tok = greedy.output_ids[2]
    cut = run(strategy.generate(req("st", temperature=0.0, max_new_tokens=6, stop_token_ids=[stop_tok], meta={"ignore_eos": True})))
    first = greedy.output_ids.index(stop_tok)
    assert cut.output_ids == greedy.output_ids[:first + 1] and cut.finish_reason == "stop"
    text = strategy.tokenizer.decode(greedy.output_ids[:3])
    target = text[-1] if text.strip() else None
    if target:
        s = run(strategy.generate(req("ss", temperature=0.0, max_new_tokens=6, stop_strings=[target], meta={"ignore_eos": True})))
        assert s.finish_reason == "stop" and target in strategy.tokenizer.decode(s.output_ids)
        assert len(s.output_ids) <= 3


def test_abort_returns_partial_output(strategy):
    async def go():
        task = asyncio.create_task(strategy.generate(req("long", max_new_tokens=2000, seed=0, meta={"ignore_eos": True})))
        await asyncio.sleep(0.3)
        await strategy.abort(["long"])
        return await task

    res = run(go())
    assert res.finish_reason == "abort" and 0 < len(res.output_ids) < 2000 and len(res.logprobs) == len(res.output_ids)


def test_bad_requests_fail_clearly(strategy):
    with pytest.raises(ValueError, match="empty prompt"):
        run(strategy.generate(req("e", prompt=[])))
    with pytest.raises(ValueError, match="outside the vocabulary"):
        run(strategy.generate(req("v", prompt=[10 ** 7])))
    assert run(strategy.generate(req("z", max_new_tokens=0))).finish_reason == "length"
    with pytest.raises(ValueError, match="unknown strategy_config"):
        HFInferStrategy(WorkerConfig(model_name_or_path="x", strategy_args=StrategyArgs("hf_infer", {"batch": 3})))


@pytest.fixture(scope="module")
def own_strategy(tiny_model_dir):
    """A strategy whose weights the tests change (model loading is slow on a busy machine: one)."""
    s = HFInferStrategy(WorkerConfig(model_name_or_path=tiny_model_dir))
    yield s
    s.close()


def test_update_weights_version_and_shared_layout(own_strategy):
    s = own_strategy
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    probe = Batch({"input_ids": ids, "attention_mask": torch.ones_like(ids)})
    before = s.logprobs(probe)
    layout = s.shared_weight_layout()  # parameters now live in shared memory, values unchanged
    assert torch.equal(s.logprobs(probe), before) and layout["nbytes"] > 0
    name, p = next(iter(s.model.named_parameters()))
    s.update_weights([(name, torch.zeros_like(p))], version=3, last_bucket=False)
    assert s.policy_version() == 0  # visible only after the last bucket
    s.update_weights([], version=3, last_bucket=True)
    assert s.policy_version() == 3 and not torch.equal(s.logprobs(probe), before)
    with pytest.raises(KeyError, match="not a parameter"):
        s.update_weights([("nope.weight", torch.zeros(1))], 4)


def test_shared_block_header_lock_and_version(own_strategy):
    """A writer in another open file description of the block (as the colocated trainer is)
    holding LOCK_EX keeps decode batches and logprobs out; the batch that follows reports the
    version the writer put in the header."""
    import fcntl
    import os
    import threading
    import time
    from multiprocessing import shared_memory

    from roll.strategies.hf_infer import SHM_HEADER_BYTES, SHM_SLOTS

    s = own_strategy
    layout = s.shared_weight_layout()  # the same block again when an earlier test made it
    assert layout["header"] == SHM_HEADER_BYTES == 64 and layout["header_slots"] == SHM_SLOTS
    assert min(off for off, _, _ in layout["params"].values()) >= 64
    assert all(off % 64 == 0 for off, _, _ in layout["params"].values())
    writer = shared_memory.SharedMemory(name=layout["shm_name"])
    header = writer.buf[:64].cast("q")
    try:
        assert header[SHM_SLOTS["pid"]] == os.getpid() and header[SHM_SLOTS["version"]] == s.policy_version()
        s.update_weights([], version=2)  # the staged path's publish writes the header too
        assert header[SHM_SLOTS["version"]] == 2 == s.policy_version()

        fcntl.flock(writer._fd, fcntl.LOCK_EX)
        header[SHM_SLOTS["pause_requested"]] = os.getpid()
        got = {}
        t = threading.Thread(target=lambda: got.update(res=run(s.generate(req("locked", seed=1)))))
        t.start()
        time.sleep(0.5)
        assert t.is_alive() and "res" not in got  # waits for the writer
        header[SHM_SLOTS["version"]] = 7
        header[SHM_SLOTS["pause_requested"]] = 0
        fcntl.flock(writer._fd, fcntl.LOCK_UN)
        t.join(30)
        assert got["res"].policy_version == 7 == s.policy_version() and s.writer_yields >= 1

        # a flag left behind by a writer that died is cleared by the next batch, which then runs
        header[SHM_SLOTS["pause_requested"]] = 2 ** 22 + 12345  # above pid_max: no such process
        assert run(s.generate(req("stale", seed=1))).policy_version == 7
        assert header[SHM_SLOTS["pause_requested"]] == 0 and s.stale_pause_flags == 1
    finally:
        header.release()
        writer.close()


def _sample_loop(probs: torch.Tensor, seeds: list[int], step: int) -> list[int]:
    """The slow, obviously-correct inverse-CDF draw: walk each row's cumulative sum."""
    out = []
    for i, seed in enumerate(seeds):
        u = float(seeded_uniform(torch.tensor([seed]), step)[0]) * float(probs[i].double().sum())
        acc, pick = 0.0, None
        for v, p in enumerate(probs[i].double().tolist()):
            acc += p
            if acc > u:
                pick = v
                break
        out.append(pick if pick is not None else probs.shape[1] - 1)
    return out


def test_sample_rows_matches_a_loop_and_skips_masked_tokens():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(6, 50, generator=gen)
    logits[:, ::3] = float("-inf")  # outside the support: never drawn
    lp = logits.log_softmax(-1)
    seeds = [0, 1, 2, 12345, 2**62 + 7, 99]
    for step in range(20):
        drawn = sample_rows(lp, torch.tensor(seeds), step).tolist()
        assert drawn == _sample_loop(lp.exp(), seeds, step)
        assert all(t % 3 != 0 for t in drawn)


def test_seeded_uniform_is_per_row_and_uniform():
    seeds = torch.arange(20000, dtype=torch.long)
    u = seeded_uniform(seeds, 3)
    assert torch.equal(u[5:7], seeded_uniform(seeds[5:7], 3))  # a row's value ignores the others
    assert not torch.equal(u, seeded_uniform(seeds, 4))
    assert 0 < float(u.min()) and float(u.max()) < 1
    counts = torch.histc(u.float(), bins=10, min=0, max=1)
    assert float((counts - 2000).abs().max()) < 200  # 10 bins of 2000 expected, ~4.5 sigma


def test_sampled_tokens_follow_the_distribution():
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05])
    lp = probs.log()[None].expand(4000, -1)
    drawn = sample_rows(lp, torch.arange(4000, dtype=torch.long) * 7919, 0)
    freq = torch.bincount(drawn, minlength=4).double() / 4000
    assert torch.allclose(freq, probs.double(), atol=0.03)


def test_generate_batch_equals_single_requests(strategy):
    requests = [req(f"g{i}", seed=40 + i, meta={"ignore_eos": True}) for i in range(4)] + [req("g-greedy", temperature=0.0)]
    n0 = strategy.num_batches
    batch = run(strategy.generate_batch(requests))
    assert strategy.num_batches - n0 == 1
    assert [r.request_id for r in batch] == [r.request_id for r in requests]
    for r, got in zip(requests, batch):
        alone = run(strategy.generate(r))
        assert got.output_ids == alone.output_ids
    with pytest.raises(ValueError, match="empty prompt_ids"):
        run(strategy.generate_batch([req("ok"), req("bad", prompt=())]))
