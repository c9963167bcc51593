"""ReferenceWorker: the frozen reference policy for KL (role ``reference``).

Same strategy and placement machinery as the actor, forward only:
``compute_logprobs(batch, key="ref_logprobs")`` (dispatch ``dp``) -> Batch with ``ref_logprobs`` [B, T].
"""
from __future__ import annotations

from roll.data.batch import Batch
from roll.workers.actor import ActorWorker


class ReferenceWorker(ActorWorker):
    metric_prefix = "reference"

    def compute_logprobs(self, batch: Batch, key: str = "ref_logprobs") -> Batch:
        return Batch({key: self.strategy.logprobs(batch)})

    def train_step(self, batch, loss_fn):
        raise RuntimeError("the reference policy is frozen; it has no train_step")

    train = train_step
