"""CriticWorker: the value model for GAE (role ``critic``).

The training strategy's critic variant (``critic=True``: the LM body with a one-output token
head, a scalar value per token). ``compute_values(batch)`` (dispatch ``dp``) -> Batch with
``values`` [B, T]; ``train_step`` / ``train`` as the actor, with the critic loss_fn
(``loss_fn(micro_batch, values, extra)``, see roll/algorithms/losses.py); metrics under ``critic/``.
"""
from __future__ import annotations

from roll.data.batch import Batch
from roll.workers.actor import ActorWorker


class CriticWorker(ActorWorker):
    metric_prefix = "critic"
    is_critic = True

    def compute_values(self, batch: Batch, key: str = "values") -> Batch:
        return Batch({key: self.strategy.values(batch)})

    def compute_logprobs(self, batch, key="old_logprobs"):
        raise RuntimeError("the critic has no logprobs; use compute_values")
