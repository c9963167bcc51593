"""Advantage estimation, policy/value losses, KL control and masks."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Optional

from roll.config.validate import ranged


@dataclass
class RewardNormConfig:
    """How episode rewards are normalised before advantages."""

    group_by: Literal["group", "batch", "tag"] = "group"
    """Statistics over each env group (same seed), the whole batch, or each env tag."""
    method: Literal["mean_std", "mean", "none"] = "mean_std"
    """Subtract the mean and divide by std, subtract the mean only, or leave rewards as they are."""


@dataclass
class AlgorithmConfig:
    """Which estimator and loss, registered by name, and their coefficients."""

    adv_estimator: str = "grpo"
    """Registered advantage estimator: gae, grpo, reinforce_pp, rloo, reinforce, gigpo (`roll list advantages`)."""
    adv_estimator_args: dict[str, Any] = field(default_factory=dict)
    """Extra keyword arguments of the estimator."""
    policy_loss: str = "ppo_clip"
    """Registered policy loss: ppo_clip, dual_clip, gspo, pg (`roll list losses`); truncated IS against the inference logprobs is `tis_cap`, usable with any of them."""
    policy_loss_args: dict[str, Any] = field(default_factory=dict)
    """Extra keyword arguments of the policy loss, checked against its signature (the builtin losses take none: their coefficients are the fields below; a registered loss declares its own)."""
    loss_agg_mode: Literal["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"] = "token-mean"
    """How per-token losses are reduced; normalisers use the whole mini-batch, not each micro-batch."""
    loss_agg_norm_constant: Optional[float] = ranged(None, gt=0)
    """Constant C of seq-mean-token-sum-norm (Dr. GRPO), e.g. the response token budget; required by that mode."""
    clip_ratio_low: float = ranged(0.2, ge=0, le=1)
    """PPO lower clip: ratio >= 1 - clip_ratio_low."""
    clip_ratio_high: float = ranged(0.2, ge=0)
    """PPO upper clip: ratio <= 1 + clip_ratio_high (raise it for clip-higher)."""
    dual_clip: Optional[float] = ranged(None, gt=1)
    """Dual-clip bound c (> 1) on negative advantages; null disables."""
    gamma: float = ranged(1.0, ge=0, le=1)
    """Discount between turns (from the last model token of a turn to the first of the next); also GiGPO's step discount. With one turn only `token_gamma` matters."""
    lambd: float = ranged(1.0, ge=0, le=1)
    """GAE lambda between turns."""
    token_gamma: float = ranged(1.0, ge=0, le=1)
    """Discount between consecutive model tokens inside one turn (gae, reinforce, reinforce_pp); 1 treats a turn as one action."""
    token_lambd: float = ranged(1.0, ge=0, le=1)
    """GAE lambda between consecutive model tokens inside one turn (classic token-level PPO uses 0.95)."""
    reward_norm: RewardNormConfig = field(default_factory=RewardNormConfig)
    """Reward normalisation of episode scores (read by grpo, reinforce, gigpo; see docs/algorithms.md)."""
    reward_clip: Optional[float] = ranged(None, gt=0)
    """Clip each token reward (turn reward) to [-x, x] before the KL penalty and the estimator."""
    advantage_clip: Optional[float] = ranged(None, gt=0)
    """Clip advantages to [-x, x] (after whitening)."""
    advantage_floor: Optional[float] = None
    """Raise every advantage below this to it (after whitening and advantage_clip). 0 keeps only
    the actions that did better than their group's average and leaves the others' tokens alone:
    the update pushes up what worked and never pushes down what failed (self-imitation), which
    keeps a small model whose failures are most of a batch from moving probability onto text that
    is no action at all (docs/algorithms.md); null disables."""
    invalid_action_advantage: Optional[float] = None
    """Cap the advantage of every turn whose text the env rejected as no valid action (the env's
    ``info["action_is_valid"]``) at this value, after ``advantage_floor``. 0: an invalid turn is
    never pushed up, even inside an episode that earned more than its group (with an outcome
    reward it otherwise shares that episode's advantage, and a zero format penalty makes it
    free); a negative value pushes it down whatever its episode earned. Works in step and
    trajectory mode (docs/algorithms.md); null disables."""
    whiten_advantages: bool = False
    """Whiten advantages over all model tokens of the batch (masked mean/std), after the estimator."""
    use_kl_loss: bool = False
    """Add KL to the reference policy as a loss term."""
    kl_loss_coef: float = ranged(0.0, ge=0)
    """Weight of the KL loss term (aggregated with loss_agg_mode like the policy loss)."""
    kl_estimator: Literal["k1", "k2", "k3"] = "k3"
    """KL estimator (k1, k2, k3) for the loss term and the reward penalty."""
    use_kl_in_reward: bool = False
    """Subtract a KL penalty from the reward (REINFORCE++ / classic PPO)."""
    init_kl_coef: float = ranged(0.0, ge=0)
    """KL-in-reward coefficient (initial value when adaptive)."""
    kl_target: Optional[float] = ranged(None, gt=0)
    """Adaptive KL controller target (mean per-sequence KL); null keeps the coefficient fixed."""
    kl_horizon: int = ranged(10000, ge=1)
    """Adaptive KL controller horizon."""
    entropy_coef: float = 0.0
    """Entropy bonus weight (loss -= coef * aggregated entropy); needs the strategy to pass extra["entropy"]."""
    value_clip: Optional[float] = ranged(0.2, gt=0)
    """Value-loss clipping range around the rollout-time values; null disables."""
    value_loss_coef: float = ranged(1.0, ge=0)
    """Weight of the value loss."""
    ppo_epochs: int = ranged(1, ge=1)
    """Passes over each rollout batch."""
    early_stop_kl: Optional[float] = ranged(None, gt=0)
    """Trust region per rollout batch: once the mean ``actor/ppo_kl`` of a mini-batch (KL of the
    policy being trained from the rollout policy, measured before that mini-batch's update and
    averaged over all ranks) exceeds this, that mini-batch is the last one trained on the batch
    (remaining mini-batches and epochs are skipped; ``actor/early_stopped`` counts it); null disables."""
    recompute_old_logprobs: bool = True
    """Recompute old logprobs with the trainer; false uses the inference logprobs."""
    tis_cap: Optional[float] = ranged(None, gt=0)
    """Truncated importance sampling: weight each token's policy loss by min(exp(old - inference logprob), cap); null disables."""
    mask_overlong: bool = False
    """Drop samples that hit the length or turn limit from the loss."""
    difficulty_mask_low: Optional[float] = ranged(None, ge=0, le=1)
    """Mask groups whose mean success is at or below this (too hard); needs per-sample success."""
    difficulty_mask_high: Optional[float] = ranged(None, ge=0, le=1)
    """Mask groups whose mean success is at or above this (too easy)."""
