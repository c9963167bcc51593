"""The distributed runtime on a local Ray cluster (CPU): 2 trainer ranks (DDP, then FSDP2), one
colocated and one disaggregated inference worker, weight sync, and fault handling.

One module-scoped fixture per parallel mode builds everything once (actor processes are the
slow part on a 2-core machine) and trains 5 steps; the tests then check, in order: logprob
parity after a ModelUpdateGroup update on both placement paths, recovery from a killed
inference worker, recovery from a killed trainer rank, and DDP == FSDP2 loss curves.
"""
from __future__ import annotations

import time

import pytest
import torch

from roll.config.algorithm import AlgorithmConfig
from roll.config.roles import StrategyArgs, TrainingArgs, WorkerConfig
from roll.config.schema import ResourcesConfig
from roll.data.batch import Batch
from roll.strategies.base import GenerationRequest

pytestmark = pytest.mark.integration

CALL_TIMEOUT_S = 90.0
LOSSES: dict[str, list[float]] = {}


def make_batch(vocab: int, rows: int = 8, width: int = 16, seed: int = 0) -> Batch:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vocab, (rows, width), generator=g)
    attn = torch.ones_like(ids)
    attn[0, :3] = 0  # one left-padded row: positions come from the attention mask
    ids[0, :3] = 0
    resp = torch.zeros_like(ids)
    resp[:, width // 2:] = 1
    return Batch({"input_ids": ids, "attention_mask": attn, "response_mask": resp,
                  "advantages": resp.float(), "old_logprobs": torch.zeros(rows, width)})


class Runtime:
    def __init__(self, mode: str, model_dir: str):
        from roll.algorithms.losses import make_actor_loss_fn
        from roll.distributed.cluster import Cluster
        from roll.distributed.model_update import ModelUpdateGroup
        from roll.distributed.resource_pool import ResourcePool
        from roll.workers.actor import ActorWorker
        from roll.workers.inference import InferenceWorker

        self.mode = mode
        train_cfg = WorkerConfig(model_name_or_path=model_dir, device_mapping="0-1", call_timeout_s=CALL_TIMEOUT_S,
                                 num_cpus_per_worker=0.01,
                                 strategy_args=StrategyArgs("torch_train", {"parallel": mode}),
                                 training_args=TrainingArgs(lr=1e-3, per_device_train_batch_size=2))
        colo_cfg = WorkerConfig(model_name_or_path=model_dir, device_mapping=[0], call_timeout_s=CALL_TIMEOUT_S, max_concurrency=16)
        remote_cfg = WorkerConfig(model_name_or_path=model_dir, device_mapping=[2], call_timeout_s=CALL_TIMEOUT_S, max_concurrency=16)
        self.pool = ResourcePool(ResourcesConfig(device="cpu"),
                                 {"actor_train": train_cfg, "actor_infer": colo_cfg, "actor_infer_remote": remote_cfg})
        assert self.pool.plan.roles["actor_infer"].colocated_with == ["actor_train"]
        assert self.pool.plan.roles["actor_infer_remote"].colocated_with == []
        self.train = Cluster("actor_train", ActorWorker, train_cfg, self.pool)
        self.colo = Cluster("actor_infer", InferenceWorker, colo_cfg, self.pool)
        self.remote = Cluster("actor_infer_remote", InferenceWorker, remote_cfg, self.pool)
        self.mu = ModelUpdateGroup(self.train, [self.colo, self.remote], bucket_size_mb=1)
        self.vocab = 3052
        self.loss_fn = make_actor_loss_fn(AlgorithmConfig(policy_loss="pg"))
        batch = make_batch(self.vocab)
        self.losses = [self.train.call("train_step", batch, self.loss_fn, mode="dp")[0]["actor/loss"] for _ in range(5)]
        LOSSES[mode] = self.losses

    def parity(self) -> dict[str, float]:
        """max |trainer - inference| logprob on fixed tokens, per inference cluster."""
        probe = make_batch(self.vocab, rows=4, seed=1).select_keys(["input_ids", "attention_mask"])
        ref = self.train.call("compute_logprobs", probe, mode="dp")["old_logprobs"]
        valid = probe["attention_mask"].bool()
        out = {}
        for cl in (self.colo, self.remote):
            got = cl.call("compute_logprobs", probe, mode="rank0")["infer_logprobs"]
            out[cl.role] = float((got - ref).abs()[valid].max())
        return out

    def close(self):
        for cl in (self.train, self.colo, self.remote):
            cl.shutdown()
        self.pool.shutdown()


@pytest.fixture(scope="module", params=["ddp", "fsdp2"])
def runtime(request, ray_cluster, tiny_model_dir):
    rt = Runtime(request.param, tiny_model_dir)
    yield rt
    rt.close()


def test_update_gives_trainer_logprobs_on_both_paths(runtime):
    assert runtime.mu.paths == {(0, 0): "colocated", (1, 0): "broadcast"}
    before = runtime.parity()
    assert min(before.values()) > 1e-3  # training moved the trainer away from the served weights
    metrics = runtime.mu.update()
    assert metrics["model_update/version"] == 1 and metrics["model_update/buckets"] > 1  # 1 MB buckets
    after = runtime.parity()
    assert max(after.values()) < 1e-5, after
    for cl in (runtime.colo, runtime.remote):
        assert cl.call("policy_version", mode="rank0") == 1
        res = cl.call("generate", GenerationRequest("v", [5, 6, 7], max_new_tokens=4, seed=0), mode="rank0")
        assert res.policy_version == 1 and len(res.output_ids) >= 1


def kill_mid_call(ray_cluster, worker, fut, named: str) -> None:
    """Kill ``worker`` while ``fut`` runs on it: the call fails with a WorkerDiedError that names
    the worker, within the call timeout."""
    from roll.distributed.cluster import WorkerDiedError

    ray_cluster.kill(worker, no_restart=False)
    t0 = time.monotonic()
    with pytest.raises(WorkerDiedError, match=named):
        fut.get()
    assert time.monotonic() - t0 < CALL_TIMEOUT_S


def test_killed_inference_worker_reported_and_restarted(runtime, ray_cluster):
    req = GenerationRequest("long", [5, 6, 7], max_new_tokens=4000, seed=0, meta={"ignore_eos": True})
    fut = runtime.remote.call_async("generate", req, mode="rank0")
    time.sleep(1.0)
    done, _ = ray_cluster.wait(fut.refs, timeout=0)
    assert not done, "generation finished before the kill"
    kill_mid_call(ray_cluster, runtime.remote.workers[0], fut, "actor_infer_remote rank 0")
    # the next call waits for the restart and sets the new process up, which then serves nothing
    # until it holds the current weights (it would generate from the pretrained model otherwise)
    from roll.errors import WorkerUnavailableError

    with pytest.raises(WorkerUnavailableError, match="waiting for the current weights"):
        runtime.remote.call("generate", GenerationRequest("next", [5, 6], max_new_tokens=3, seed=0), mode="rank0")
    assert runtime.remote.restarts == 1
    # the weight-sync links are rebuilt for the new process, it serves again and parity holds
    runtime.mu.update()
    res = runtime.remote.call("generate", GenerationRequest("next", [5, 6], max_new_tokens=3, seed=0), mode="rank0")
    assert len(res.output_ids) >= 1 and res.policy_version == runtime.mu.version
    assert max(runtime.parity().values()) < 1e-5


def test_killed_trainer_rank_reported_and_group_restarted(runtime, ray_cluster):
    # large enough to take seconds per rank (128 micro-batches each), so the kill lands mid-step
    big = make_batch(runtime.vocab, rows=512, width=256, seed=2)
    fut = runtime.train.call_async("train_step", big, runtime.loss_fn, mode="dp")
    time.sleep(0.5)
    done, _ = ray_cluster.wait(fut.refs, num_returns=len(fut.refs), timeout=0)
    assert not done, "the train step finished before the kill: the test batch is too small"
    kill_mid_call(ray_cluster, runtime.train.workers[1], fut, "actor_train rank 1")
    # the whole data-parallel group restarts and re-rendezvous; the next call is served
    metrics = runtime.train.call("train_step", make_batch(runtime.vocab), runtime.loss_fn, mode="dp")
    assert len(metrics) == 2 and torch.isfinite(torch.tensor(metrics[0]["actor/loss"]))
    assert runtime.train.restarts == 1
    runtime.mu.update()
    assert max(runtime.parity().values()) < 1e-5


def test_ddp_and_fsdp2_same_loss_curve(runtime):
    losses = runtime.losses
    assert len(losses) == 5 and losses[-1] < losses[0]
    if runtime.mode == "fsdp2":
        assert "ddp" in LOSSES, "run the whole module: the ddp runtime records its curve first"
        diffs = [abs(a - b) for a, b in zip(LOSSES["ddp"], losses)]
        assert max(diffs) < 1e-4, (LOSSES["ddp"], losses)
