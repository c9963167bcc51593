"""RL algorithms as pure tensor functions: advantage estimators, policy/value losses, KL,
masks and loss aggregation. Estimators and policy losses are registered by name in
``roll.registry.ADVANTAGES`` / ``POLICY_LOSSES``; see docs/algorithms.md."""
from roll.algorithms.advantages import AdvantageInputs, AdvantageOutputs, compute_advantages
from roll.algorithms.aggregation import AGG_MODES, aggregate_loss, loss_normalizers
from roll.algorithms.kl import (
    AdaptiveKLController,
    FixedKLController,
    build_kl_controller,
    compute_kl,
    entropy_from_logits,
    kl_for_reward,
    sequence_kl,
)
from roll.algorithms.losses import make_actor_loss_fn, make_critic_loss_fn, set_loss_normalizers, value_loss
from roll.algorithms.masks import (
    apply_sample_mask,
    build_sample_mask,
    difficulty_mask,
    masked_mean,
    masked_sum,
    masked_var,
    masked_whiten,
    overlong_mask,
    turn_ids_from_mask,
)

__all__ = [
    "AGG_MODES", "AdaptiveKLController", "AdvantageInputs", "AdvantageOutputs", "FixedKLController",
    "aggregate_loss", "apply_sample_mask", "build_kl_controller", "build_sample_mask", "compute_advantages",
    "compute_kl", "difficulty_mask", "entropy_from_logits", "kl_for_reward", "loss_normalizers",
    "make_actor_loss_fn", "make_critic_loss_fn", "masked_mean", "masked_sum", "masked_var", "masked_whiten",
    "overlong_mask", "sequence_kl", "set_loss_normalizers", "turn_ids_from_mask", "value_loss",
]
