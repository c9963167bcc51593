"""ModelUpdateGroup failure paths on a local Ray cluster (CPU): one trainer rank (DDP) and one
colocated plus one disaggregated inference worker on the tiny model.

Faults are injected into the real workers through Ray's ``__ray_call__`` (a function run on
the actor instance), so every stage still runs through the real Ray calls: a send that raises
publishes nothing and leaves the receivers serving; a receiver that fails to pause is named
and the other receiver is resumed; a receiver that Ray restarted while idle (its cluster never
saw it die) is set up again, relinked, and then serves the trainer's weights.

The one-call locked path is tested with a second ModelUpdateGroup on the same trainer and only
the colocated worker: parity and versions without any receiver call, a writer that waits for
the running decode batch, a hung receiver named within the timeout with its weights intact,
relinking after a kill, and the staged fallback when flock is unavailable.
"""
from __future__ import annotations

import sys
import time

import pytest
import torch

from roll.config.algorithm import AlgorithmConfig
from roll.config.roles import StrategyArgs, TrainingArgs, WorkerConfig
from roll.config.schema import ResourcesConfig
from roll.data.batch import Batch
from roll.strategies.base import GenerationRequest

pytestmark = pytest.mark.integration

CALL_TIMEOUT_S = 60.0
VOCAB = 3052


def batch(rows: int = 4, width: int = 12, seed: int = 0) -> Batch:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, VOCAB, (rows, width), generator=g)
    resp = torch.zeros_like(ids)
    resp[:, width // 2:] = 1
    return Batch({"input_ids": ids, "attention_mask": torch.ones_like(ids), "response_mask": resp,
                  "advantages": resp.float(), "old_logprobs": torch.zeros(rows, width)})


class Setup:
    def __init__(self, model_dir: str):
        from roll.algorithms.losses import make_actor_loss_fn
        from roll.distributed.cluster import Cluster
        from roll.distributed.model_update import ModelUpdateGroup
        from roll.distributed.resource_pool import ResourcePool
        from roll.workers.actor import ActorWorker
        from roll.workers.inference import InferenceWorker

        train_cfg = WorkerConfig(model_name_or_path=model_dir, device_mapping=[0], call_timeout_s=CALL_TIMEOUT_S,
                                 num_cpus_per_worker=0.01, strategy_args=StrategyArgs("torch_train", {"parallel": "ddp"}),
                                 training_args=TrainingArgs(lr=1e-3, per_device_train_batch_size=2))
        colo_cfg = WorkerConfig(model_name_or_path=model_dir, device_mapping=[0], call_timeout_s=CALL_TIMEOUT_S, max_concurrency=8)
        remote_cfg = WorkerConfig(model_name_or_path=model_dir, device_mapping=[1], call_timeout_s=CALL_TIMEOUT_S, max_concurrency=8)
        self.pool = ResourcePool(ResourcesConfig(device="cpu"),
                                 {"actor_train": train_cfg, "actor_infer": colo_cfg, "actor_infer_remote": remote_cfg})
        self.train = Cluster("actor_train", ActorWorker, train_cfg, self.pool)
        self.colo = Cluster("actor_infer", InferenceWorker, colo_cfg, self.pool)
        self.remote = Cluster("actor_infer_remote", InferenceWorker, remote_cfg, self.pool)
        self.mu = ModelUpdateGroup(self.train, [self.colo, self.remote])
        self.loss_fn = make_actor_loss_fn(AlgorithmConfig(policy_loss="pg"))

    def train_step(self) -> None:
        self.train.call("train_step", batch(), self.loss_fn, mode="dp")

    def parity(self) -> float:
        probe = batch(rows=2, seed=1).select_keys(["input_ids", "attention_mask"])
        ref = self.train.call("compute_logprobs", probe, mode="dp")["old_logprobs"]
        return max(float((cl.call("compute_logprobs", probe, mode="rank0")["infer_logprobs"] - ref).abs().max())
                   for cl in (self.colo, self.remote))

    def parity_of(self, cluster) -> float:
        probe = batch(rows=2, seed=1).select_keys(["input_ids", "attention_mask"])
        ref = self.train.call("compute_logprobs", probe, mode="dp")["old_logprobs"]
        return float((cluster.call("compute_logprobs", probe, mode="rank0")["infer_logprobs"] - ref).abs().max())

    def versions(self) -> list[int]:
        return [cl.call("policy_version", mode="rank0") for cl in (self.colo, self.remote)]

    CLUSTERS = ("train", "colo", "remote")

    def close(self) -> None:
        for name in self.CLUSTERS:
            getattr(self, name).shutdown()
        self.pool.shutdown()


def pickle_test_module_by_value() -> None:
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import test modules


@pytest.fixture(scope="module")
def setup(ray_cluster, tiny_model_dir):
    pickle_test_module_by_value()
    s = Setup(tiny_model_dir)
    assert s.mu.paths == {(0, 0): "colocated", (1, 0): "broadcast"}
    yield s
    s.close()


def generates_within(cluster, seconds: float) -> int:
    """A short generate call must come back quickly (the worker is not left paused); its version."""
    import ray

    req = GenerationRequest(f"probe-{time.monotonic_ns()}", [5, 6, 7], max_new_tokens=2, seed=0)
    return ray.get(cluster.workers[0].generate.remote(req), timeout=seconds).policy_version


def kill_and_await_restart(ray_cluster, worker) -> None:
    """Kill an idle inference worker and wait until Ray has restarted it (a new pid answers
    ``ping``, which needs no setup)."""
    import ray

    old_pid = ray.get(worker.ping.remote())["pid"]
    ray_cluster.kill(worker, no_restart=False)
    deadline = time.monotonic() + CALL_TIMEOUT_S
    while True:
        try:
            if ray.get(worker.ping.remote(), timeout=10)["pid"] != old_pid:
                break
        except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError):
            pass
        assert time.monotonic() < deadline, "Ray did not restart the killed inference worker"
        time.sleep(0.2)


def _fail_send(worker) -> None:
    def send(*args, **kwargs):
        raise RuntimeError("injected send failure")

    for sender in worker.senders.values():
        sender.send = send  # instance attribute: shadows WeightSender.send


def _restore_send(worker) -> None:
    for sender in worker.senders.values():
        sender.__dict__.pop("send", None)


def _fail_pause(worker) -> None:
    async def pause(timeout_s):
        raise RuntimeError("injected pause failure")

    worker.strategy.pause = pause


def _restore_pause(worker) -> None:
    worker.strategy.__dict__.pop("pause", None)


def test_send_failure_publishes_nothing_and_receivers_resume(setup):
    import ray

    setup.mu.update()
    before = setup.versions()
    setup.train_step()
    ray.get(setup.train.workers[0].__ray_call__.remote(_fail_send))
    try:
        with pytest.raises(RuntimeError, match="injected send failure") as err:
            setup.mu.update()
        assert "raised by actor_train rank 0 in weight_sync_send" in "".join(getattr(err.value, "__notes__", []))
    finally:
        ray.get(setup.train.workers[0].__ray_call__.remote(_restore_send))
    assert setup.versions() == before and setup.mu.version == before[0]
    assert [generates_within(cl, 20.0) for cl in (setup.colo, setup.remote)] == before
    metrics = setup.mu.update()  # the next update goes through and publishes the next version
    assert setup.versions() == [before[0] + 1] * 2 == [int(metrics["model_update/version"])] * 2
    assert setup.parity() < 1e-5


def test_receiver_failing_to_pause_is_named_and_the_other_resumes(setup):
    import ray

    before = setup.versions()
    ray.get(setup.remote.workers[0].__ray_call__.remote(_fail_pause))
    try:
        with pytest.raises(RuntimeError, match="injected pause failure") as err:
            setup.mu.update()
        assert "raised by actor_infer_remote rank 0 in begin_weight_update" in "".join(getattr(err.value, "__notes__", []))
    finally:
        ray.get(setup.remote.workers[0].__ray_call__.remote(_restore_pause))
    # the colocated worker paused fine and was resumed at once, on its old version
    assert generates_within(setup.colo, 20.0) == before[0]
    assert setup.versions() == before
    setup.train_step()
    setup.mu.update()
    assert setup.versions() == [before[0] + 1] * 2 and setup.parity() < 1e-5


def test_receiver_restarted_while_idle_is_set_up_and_relinked(setup, ray_cluster):
    kill_and_await_restart(ray_cluster, setup.colo.workers[0])  # no call in flight: the cluster does not see it
    setup.train_step()
    metrics = setup.mu.update()  # notices the new pid and the missing setup: sets up, relinks, retries
    version = int(metrics["model_update/version"])
    assert setup.colo.restarts == 1
    assert setup.versions() == [version, version]
    assert setup.parity() < 1e-5


def test_control_call_finds_a_slot_while_generations_fill_the_worker(setup):
    """Paused generations occupy every configured slot (max_concurrency 8); the publish call
    that resumes them must still run (the cluster adds control slots), or they wait forever."""
    import ray

    worker = setup.colo.workers[0]
    version = setup.versions()[0]
    ray.get(worker.begin_weight_update.remote(CALL_TIMEOUT_S), timeout=20)
    reqs = [GenerationRequest(f"full-{i}-{time.monotonic_ns()}", [5, 6, 7], max_new_tokens=2, seed=i) for i in range(8)]
    pending = [worker.generate.remote(r) for r in reqs]
    time.sleep(0.5)
    assert ray.wait(pending, timeout=0)[0] == []  # all parked behind the pause
    assert ray.get(worker.finish_weight_update.remote(None), timeout=10) == version
    assert [r.policy_version for r in ray.get(pending, timeout=30)] == [version] * 8


# ---- the one-call locked path (colocated shared-memory receivers only) ---------------------------
def fast_group(setup, **kwargs):
    from roll.distributed.model_update import ModelUpdateGroup

    mu = ModelUpdateGroup(setup.train, [setup.colo], **kwargs)
    assert mu.paths == {(0, 0): "colocated"} and mu.fast_path
    return mu


def next_version(setup) -> int:
    return max(setup.versions()) + 1


def test_fast_path_is_one_trainer_call_with_parity_and_versions(setup):
    import ray

    fast = fast_group(setup)
    setup.train_step()
    assert setup.parity_of(setup.colo) > 1e-3
    version = next_version(setup)
    # a receiver that cannot pause does not matter: no receiver is called during the update
    ray.get(setup.colo.workers[0].__ray_call__.remote(_fail_pause))
    try:
        metrics = fast.update(version)
    finally:
        ray.get(setup.colo.workers[0].__ray_call__.remote(_restore_pause))
    assert metrics["model_update/fast_path"] == 1.0 and metrics["model_update/receivers"] == 1.0
    assert metrics["model_update/bytes"] > 0 and metrics["model_update/version"] == version
    assert setup.versions()[0] == version and generates_within(setup.colo, 20.0) == version
    assert setup.parity_of(setup.colo) < 1e-5


def _running(worker) -> int:
    return len(worker.strategy._running)


def test_fast_path_writer_waits_for_the_running_batch(setup):
    """An update issued while a greedy batch decodes lands after it: the batch's tokens and
    logprobs are those of the old weights throughout, and it reports the old version."""
    import ray

    fast = fast_group(setup)
    worker = setup.colo.workers[0]
    old = setup.versions()[0]

    def request(tag):
        return GenerationRequest(f"{tag}-{time.monotonic_ns()}", [5, 6, 7, 8], max_new_tokens=300, temperature=0.0,
                                 meta={"ignore_eos": True})

    ref_out = ray.get(worker.generate.remote(request("ref")), timeout=CALL_TIMEOUT_S)  # old weights, undisturbed
    setup.train_step()
    pending = worker.generate.remote(request("raced"))
    deadline = time.monotonic() + 20
    while not ray.get(worker.__ray_call__.remote(_running)):
        assert time.monotonic() < deadline, "the generation never started"
        time.sleep(0.005)
    metrics = fast.update(old + 1)
    # the batch ended before the update returned; its reply may still be in transit (a zero timeout
    # here failed on a loaded machine). What proves the wait is the batch itself: every token and
    # logprob below is the old weights', which an update landing mid-batch would have changed.
    assert ray.wait([pending], timeout=10.0)[0], "the batch never finished"
    raced = ray.get(pending)
    assert raced.policy_version == old and raced.output_ids == ref_out.output_ids
    assert torch.allclose(torch.tensor(raced.logprobs), torch.tensor(ref_out.logprobs), atol=1e-6)
    assert metrics["model_update/fast_path"] == 1.0 and generates_within(setup.colo, 20.0) == old + 1
    assert setup.parity_of(setup.colo) < 1e-5


def _hold_shared_lock(worker) -> None:
    import fcntl

    fcntl.flock(worker.strategy._shm._fd, fcntl.LOCK_SH)  # as a decode batch that never ends


def _release_shared_lock(worker) -> None:
    import fcntl

    fcntl.flock(worker.strategy._shm._fd, fcntl.LOCK_UN)


def test_fast_path_hung_receiver_is_named_within_the_timeout_and_keeps_its_weights(setup):
    import ray

    from roll.distributed.cluster import CallTimeoutError

    fast = fast_group(setup, timeout_s=6.0)
    worker = setup.colo.workers[0]
    probe = batch(rows=2, seed=1).select_keys(["input_ids", "attention_mask"])
    before = ray.get(worker.compute_logprobs.remote(probe))["infer_logprobs"]
    old = setup.versions()[0]
    setup.train_step()
    ray.get(worker.__ray_call__.remote(_hold_shared_lock))
    try:
        t0 = time.monotonic()
        with pytest.raises(CallTimeoutError, match="actor_infer rank 0: held its weight block"):
            fast.update(old + 1)
        assert time.monotonic() - t0 < 6.0
    finally:
        ray.get(worker.__ray_call__.remote(_release_shared_lock))
    # straight to the actor (a cluster call would restart it first): old weights, old version
    assert ray.get(worker.policy_version.remote()) == old
    assert torch.equal(ray.get(worker.compute_logprobs.remote(probe))["infer_logprobs"], before)
    # the next update restarts the hung worker, relinks it and serves the trainer's weights
    metrics = fast.update(old + 2)
    assert setup.colo.restarts >= 1 and setup.versions()[0] == old + 2 == metrics["model_update/version"]
    assert setup.parity_of(setup.colo) < 1e-5
    assert fast.update(old + 3)["model_update/fast_path"] == 1.0


def test_fast_path_relinks_a_receiver_killed_between_updates(setup, ray_cluster):
    fast = fast_group(setup)
    version = next_version(setup)
    fast.update(version)
    kill_and_await_restart(ray_cluster, setup.colo.workers[0])
    setup.train_step()
    metrics = fast.update(version + 1)  # the trainer sees the dead pid: staged update, relink
    assert metrics["model_update/fast_path"] == 0.0 and setup.versions()[0] == version + 1
    assert setup.parity_of(setup.colo) < 1e-5
    setup.train_step()
    assert fast.update(version + 2)["model_update/fast_path"] == 1.0
    assert setup.versions()[0] == version + 2 and setup.parity_of(setup.colo) < 1e-5


def _disable_flock(worker) -> None:
    sys.modules["roll.distributed.model_update"].fcntl = None


def _enable_flock(worker) -> None:
    import fcntl

    sys.modules["roll.distributed.model_update"].fcntl = fcntl


def test_staged_fallback_when_flock_is_unavailable(setup):
    import ray

    from roll.distributed.model_update import ModelUpdateGroup

    trainer = setup.train.workers[0]
    ray.get(trainer.__ray_call__.remote(_disable_flock))
    try:
        mu = ModelUpdateGroup(setup.train, [setup.colo])
        assert mu.paths == {(0, 0): "colocated"} and not mu.fast_path
        setup.train_step()
        version = next_version(setup)
        metrics = mu.update(version)
    finally:
        ray.get(trainer.__ray_call__.remote(_enable_flock))
    assert metrics["model_update/fast_path"] == 0.0 and setup.versions()[0] == version
    assert setup.parity_of(setup.colo) < 1e-5


# ---- the one-call locked path with an FSDP2 trainer (2 ranks: rank 1 only drains the gathers) ---------
class FSDPSetup:
    def __init__(self, model_dir: str):
        from roll.algorithms.losses import make_actor_loss_fn
        from roll.distributed.cluster import Cluster
        from roll.distributed.resource_pool import ResourcePool
        from roll.workers.actor import ActorWorker
        from roll.workers.inference import InferenceWorker

        train_cfg = WorkerConfig(model_name_or_path=model_dir, device_mapping="0-1", call_timeout_s=CALL_TIMEOUT_S,
                                 num_cpus_per_worker=0.01, strategy_args=StrategyArgs("torch_train", {"parallel": "fsdp2"}),
                                 training_args=TrainingArgs(lr=1e-3, per_device_train_batch_size=2))
        colo_cfg = WorkerConfig(model_name_or_path=model_dir, device_mapping=[0], call_timeout_s=CALL_TIMEOUT_S, max_concurrency=8)
        self.pool = ResourcePool(ResourcesConfig(device="cpu"), {"actor_train": train_cfg, "actor_infer": colo_cfg})
        self.train = Cluster("actor_train", ActorWorker, train_cfg, self.pool)
        self.colo = Cluster("actor_infer", InferenceWorker, colo_cfg, self.pool)
        self.loss_fn = make_actor_loss_fn(AlgorithmConfig(policy_loss="pg"))

    train_step = Setup.train_step
    parity_of = Setup.parity_of
    CLUSTERS = ("train", "colo")
    close = Setup.close


@pytest.fixture(scope="module")
def fsdp_setup(ray_cluster, tiny_model_dir):
    pickle_test_module_by_value()
    s = FSDPSetup(tiny_model_dir)
    yield s
    s.close()


def test_fast_path_with_fsdp2_trainer_parity_and_busy_receiver(fsdp_setup):
    """Parity after a one-call update from a 2-rank FSDP2 trainer; when the receiver's lock
    times out, rank 0 still drains its gathers, so the trainer group is not left stuck and the
    next update goes through."""
    import ray

    from roll.distributed.cluster import CallTimeoutError
    from roll.distributed.model_update import ModelUpdateGroup

    s = fsdp_setup
    mu = ModelUpdateGroup(s.train, [s.colo], timeout_s=8.0)
    assert mu.fast_path
    s.train_step()
    assert s.parity_of(s.colo) > 1e-3
    assert mu.update()["model_update/fast_path"] == 1.0
    assert s.parity_of(s.colo) < 1e-5 and s.colo.call("policy_version", mode="rank0") == 1
    s.train_step()
    worker = s.colo.workers[0]
    ray.get(worker.__ray_call__.remote(_hold_shared_lock))
    try:
        with pytest.raises(CallTimeoutError, match="actor_infer rank 0"):
            mu.update()
    finally:
        ray.get(worker.__ray_call__.remote(_release_shared_lock))
    assert s.train.restarts == 0
    s.train.call("compute_logprobs", batch(rows=2), mode="dp")  # both ranks answer: no one stuck in a gather
    mu.update()
    assert s.train.restarts == 0 and s.colo.call("policy_version", mode="rank0") == 2
    assert s.parity_of(s.colo) < 1e-5
