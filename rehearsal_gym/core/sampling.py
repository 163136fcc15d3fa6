"""Batched sampling with a KV cache, and scoring of given continuations.

Both return per-token log-probs under the same distribution (softmax of logits / temperature),
so a sampled turn scored again gives the log-probs the sampler reported: that is what PPO's
ratio and SEED's re-scoring need.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from rehearsal_gym.core.batching import left_pad, right_pad


@dataclass
class Samples:
    """Sampled continuations: ids (with the stop token when produced) and their log-probs."""

    tokens: list[list[int]]
    logprobs: list[list[float]]
    stopped: list[bool]


def _cache_argument(model: torch.nn.Module) -> str:
    """Name of the KV-cache argument and output: `cache` (transformers 5) or `past_key_values`,
    read from the transformers model under any wrapper (peft, `core.lora.AdapterDisabled`)."""
    while True:
        if isinstance(getattr(model, "policy", None), torch.nn.Module):
            model = model.policy
        elif hasattr(model, "get_base_model"):
            model = model.get_base_model()
        else:
            break
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


@torch.no_grad()
def sample(
    model: torch.nn.Module,
    prompts: Sequence[Sequence[int]],
    *,
    max_new_tokens: int,
    stop_id: int | None,
    pad_id: int,
    temperature: float = 1.0,
    greedy: bool = False,
    generator: torch.Generator | None = None,
) -> Samples:
    """Sample continuations of each prompt until `stop_id` or `max_new_tokens`.

    Prompts are left-padded into one batch; one forward pass per new token reuses the KV cache.
    With `greedy`, the argmax is taken and log-probs are those of the temperature distribution.
    Randomness comes only from `generator`.
    """
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("sample needs at least one prompt, each with at least one token")
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}; use greedy=True for argmax")
    device = next(model.parameters()).device
    ids, mask = left_pad(prompts, pad_id)
    ids, mask = ids.to(device), mask.to(device)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    cache_arg = _cache_argument(model)
    out = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True)
    batch = len(prompts)
    done = torch.zeros(batch, dtype=torch.bool, device=device)
    tokens, logps = [], []
    position = positions[:, -1:]
    for _ in range(max_new_tokens):
        logp = F.log_softmax(out.logits[:, -1, :].float() / temperature, dim=-1)
        if greedy:
            nxt = logp.argmax(-1)
        else:
            probs = logp.exp()
            if generator is not None and generator.device != probs.device:
                # the seeded generator lives on the CPU: the same seed draws the same tokens on every
                # device (one row of probabilities per prompt crosses to it per token)
                nxt = torch.multinomial(probs.cpu(), 1, generator=generator).squeeze(-1).to(device)
            else:
                nxt = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
        nxt = torch.where(done, torch.full_like(nxt, pad_id), nxt)
        tokens.append(nxt)
        logps.append(logp.gather(-1, nxt[:, None]).squeeze(-1))
        if stop_id is not None:
            done = done | (nxt == stop_id)
        if bool(done.all()):
            break
        mask = torch.cat([mask, (~done).long()[:, None]], dim=1)
        position = position + 1
        out = model(
            input_ids=nxt[:, None],
            attention_mask=mask,
            position_ids=position,
            use_cache=True,
            **{cache_arg: out[cache_arg]},
        )
    tok = torch.stack(tokens, 1).tolist() if tokens else [[] for _ in range(batch)]
    lp = torch.stack(logps, 1).tolist() if logps else [[] for _ in range(batch)]
    result = Samples([], [], [])
    for row_t, row_l in zip(tok, lp, strict=True):
        n = row_t.index(stop_id) + 1 if stop_id is not None and stop_id in row_t else len(row_t)
        result.tokens.append(row_t[:n])
        result.logprobs.append(row_l[:n])
        result.stopped.append(stop_id is not None and n > 0 and row_t[n - 1] == stop_id)
    return result


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """log p(targets) under softmax(logits / temperature); shapes (..., V) and (...)."""
    logp = F.log_softmax(logits.float() / temperature, dim=-1)
    return logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)


def score(
    model: torch.nn.Module,
    contexts: Sequence[Sequence[int]],
    continuations: Sequence[Sequence[int]],
    *,
    pad_id: int,
    temperature: float = 1.0,
) -> list[torch.Tensor]:
    """Per-token log-probs of each continuation after its context, in one batched forward.

    Differentiable when grad is enabled (PPO); wrap in `torch.no_grad()` for teachers.
    """
    if len(contexts) != len(continuations):
        raise ValueError(f"{len(contexts)} contexts but {len(continuations)} continuations")
    if any(len(c) == 0 for c in contexts):
        raise ValueError("every context needs at least one token")
    device = next(model.parameters()).device
    seqs = [list(c) + list(x) for c, x in zip(contexts, continuations, strict=True)]
    ids = right_pad(seqs, pad_id).to(device)
    mask = right_pad([[1] * len(s) for s in seqs], 0).to(device)
    logits = model(input_ids=ids, attention_mask=mask).logits
    all_lp = token_logprobs(logits[:, :-1], ids[:, 1:], temperature)
    out = []
    for i, (c, x) in enumerate(zip(contexts, continuations, strict=True)):
        out.append(all_lp[i, len(c) - 1 : len(c) - 1 + len(x)])
    return out
