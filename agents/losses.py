"""Losses and advantage estimators of the token-level PPO agent, as pure functions of tensors.

Every function takes an explicit mask (1 = a token this role generated; 0 = prompt, tool result,
padding), so tool-result tokens can never leak into a policy loss or a logged metric.
Shapes: (batch, tokens) unless stated.
"""

from __future__ import annotations

import torch


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of `x` over positions where `mask` is 1 (0 when the mask is empty)."""
    mask = mask.to(x.dtype)
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


REDUCTIONS = ("token", "sequence")


def reduce_masked(x: torch.Tensor, mask: torch.Tensor, reduction: str = "token") -> torch.Tensor:
    """Aggregate a per-token loss over the mask.

    "token": mean over all masked tokens of the batch (a long sequence weighs more);
    "sequence": mean over sequences of each sequence's token-mean (GRPO's original form; every
    sequence weighs the same whatever its length). Rows with an empty mask are left out.
    """
    if reduction == "token":
        return masked_mean(x, mask)
    if reduction == "sequence":
        mask = mask.to(x.dtype)
        counts = mask.sum(-1)
        per_seq = (x * mask).sum(-1) / counts.clamp(min=1.0)
        present = (counts > 0).to(x.dtype)
        return (per_seq * present).sum() / present.sum().clamp(min=1.0)
    raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")


def token_gae(
    rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float = 1.0, lam: float = 0.95
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over the masked tokens of each sequence.

    Unmasked positions (prompts, tool results) are passed through: the "next" value of a token is
    the value of the next *masked* token, exactly as if the unmasked positions were cut out.
    Returns (advantages, returns), both zero where the mask is 0.
    """
    mask = mask.to(torch.bool)
    adv = torch.zeros_like(values)
    last = values.new_zeros(values.shape[0])
    next_value = values.new_zeros(values.shape[0])
    for t in reversed(range(values.shape[1])):
        m = mask[:, t]
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        new_last = delta + gamma * lam * last
        last = torch.where(m, new_last, last)
        next_value = torch.where(m, values[:, t], next_value)
        adv[:, t] = torch.where(m, new_last, torch.zeros_like(new_last))
    returns = torch.where(mask, adv + values, torch.zeros_like(values))
    return adv, returns


def group_advantages(
    rewards: torch.Tensor, groups: torch.Tensor, scale: bool = False, eps: float = 1e-6
) -> torch.Tensor:
    """GRPO-style baseline: each episode's reward minus the mean reward of its group.

    `rewards` and `groups` have shape (episodes,); EnvACE uses one group per (prompt, role).
    With `scale`, each group's advantages are also divided by the group's standard deviation
    (population std, plus `eps`), as in GRPO; a group with equal rewards keeps advantage 0.
    """
    out = torch.empty_like(rewards)
    for g in torch.unique(groups):
        idx = groups == g
        centred = rewards[idx] - rewards[idx].mean()
        out[idx] = centred / (rewards[idx].std(unbiased=False) + eps) if scale else centred
    return out


def weight_negative(advantages: torch.Tensor, weight: float) -> torch.Tensor:
    """Scale negative advantages by `weight` (1 = plain PPO; 0 = reinforce only better-than-baseline
    samples, a filtered-imitation limit that keeps a small model from spreading mass to junk tokens)."""
    return torch.where(advantages < 0, advantages * weight, advantages)


def policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip: float = 0.2,
    reduction: str = "token",
) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO clipped surrogate, aggregated over the mask by `reduction` (see `reduce_masked`).

    Returns (loss, clip fraction); the clip fraction is always a token-mean.
    """
    ratio = torch.exp(logp - old_logp)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip, 1.0 + clip)
    loss = reduce_masked(torch.maximum(unclipped, clipped), mask, reduction)
    clip_frac = masked_mean(((ratio - 1.0).abs() > clip).to(logp.dtype), mask)
    return loss, clip_frac


def value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    clip: float | None = 0.2,
) -> torch.Tensor:
    """Squared error to the returns (half), optionally clipped around the old values as in PPO2."""
    err = (values - returns) ** 2
    if clip is not None:
        clipped = old_values + torch.clamp(values - old_values, -clip, clip)
        err = torch.maximum(err, (clipped - returns) ** 2)
    return 0.5 * masked_mean(err, mask)


def approx_kl(logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """How far the policy moved from the one that sampled the tokens: the k3 estimate of
    KL(old || new), ``(ratio - 1) - log(ratio)`` with ratio = exp(logp - old_logp), token-mean over the
    mask (stable-baselines3's `approx_kl`, its `target_kl` early stop compares it with 1.5 * target)."""
    log_ratio = logp - old_logp
    return masked_mean(torch.exp(log_ratio) - 1.0 - log_ratio, mask)


def kl_to_reference(
    logp: torch.Tensor, ref_logp: torch.Tensor, mask: torch.Tensor, max_token_kl: float = 0.0
) -> torch.Tensor:
    """Low-variance KL(policy || reference) estimator k3 = exp(r) - r - 1, r = ref_logp - logp,
    token-mean over the mask.

    k3 grows as exp(r): one token the policy has made e^20 times less likely than the reference did
    weighs 5e8 and, after gradient clipping, takes the whole optimizer step. `max_token_kl` > 0 caps
    each token's term (r is first clipped to [-20, 20]); a capped token gives no gradient, like
    verl's ``low_var_kl`` (cap 10). 0: no cap."""
    if max_token_kl:
        return masked_mean(token_kl(logp, ref_logp, max_log_ratio=20.0).clamp(max=max_token_kl), mask)
    return masked_mean(token_kl(logp, ref_logp), mask)


def token_kl(logp: torch.Tensor, ref_logp: torch.Tensor, max_log_ratio: float = 0.0) -> torch.Tensor:
    """Each token's k3 term exp(r) - r - 1, r = ref_logp - logp (clipped to +-max_log_ratio if > 0)."""
    r = ref_logp - logp
    if max_log_ratio:
        r = r.clamp(-max_log_ratio, max_log_ratio)
    return torch.exp(r) - r - 1.0


def entropy(logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Token-mean entropy of the policy's next-token distributions; logits (B, T, V)."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    return masked_mean(-(logp.exp() * logp).sum(-1), mask)


def opd_loss(
    logp: torch.Tensor, logp_skill: torch.Tensor, mask: torch.Tensor, beta: float = 5.0
) -> torch.Tensor:
    """SEED on-policy distillation: ``g * (sg[logp_skill] - logp)``, g = sigmoid(beta * sg(logp_skill - logp)).

    `logp_skill` is the same action scored with the skill hint in the observation (teacher, no
    gradient); `logp` without it (student). Token-mean over the action tokens; weight it by
    lambda_opd outside.
    """
    teacher = logp_skill.detach()
    gate = torch.sigmoid(beta * (teacher - logp.detach()))
    return masked_mean(gate * (teacher - logp), mask)


def world_model_loss(logp: torch.Tensor, world_mask: torch.Tensor) -> torch.Tensor:
    """ECHO: negative log-likelihood of the real tool-result tokens of the agent's own conversations
    (the same forward pass as the policy loss), token-mean over them; 0 when a batch has none."""
    return -masked_mean(logp, world_mask)


def grounding_loss(logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """EnvACE grounding: negative log-likelihood of the real tool result under the environment role,
    token-mean over the result tokens (`logp` are the log-probs of those tokens given the role's prompt)."""
    return -masked_mean(logp, mask)
