"""Batched sampling with a KV cache, and scoring of given continuations.

Both return per-token log-probs under the same distribution (softmax of logits / temperature),
so a sampled turn scored again gives the log-probs the sampler reported: that is what PPO's
ratio and SEED's re-scoring need.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from transformers import Cache, StaticCache

from rehearsal_gym.core.batching import left_pad, right_pad
from rehearsal_gym.core.model import model_device


@dataclass
class Samples:
    """Sampled continuations: ids (with the stop token when produced) and their log-probs."""

    tokens: list[list[int]]
    logprobs: list[list[float]]
    stopped: list[bool]


def _transformers_model(model: torch.nn.Module) -> torch.nn.Module:
    """The transformers model under any wrapper (peft, `core.lora.AdapterDisabled`, torch.compile)."""
    while True:
        if isinstance(getattr(model, "policy", None), torch.nn.Module):
            model = model.policy
        elif isinstance(getattr(model, "_orig_mod", None), torch.nn.Module):
            model = model._orig_mod
        elif hasattr(model, "get_base_model"):
            model = model.get_base_model()
        else:
            return model


def _cache_argument(model: torch.nn.Module) -> str:
    """Name of the KV-cache argument and output: `cache` (transformers 5) or `past_key_values`."""
    inner = _transformers_model(model)
    return "cache" if "cache" in inspect.signature(inner.forward).parameters else "past_key_values"


def _static_cache(model: torch.nn.Module, cache_arg: str, width: int):
    """A preallocated KV cache of `width` positions where the model supports one (no per-token
    copy of the whole cache, as a growing cache makes), else None."""
    inner = _transformers_model(model)
    if not getattr(inner, "_can_compile_fullgraph", False) or cache_arg != "cache":
        return None
    return StaticCache(config=inner.config, max_cache_len=width)


class KVSession:
    """Conversations' KV caches kept between calls of `sample`, so that a conversation that grew by
    a turn is not read again: a call with the same `keys` feeds each row only its new ids.

    A row's prompt must extend what the session holds for its key (the previous prompt and the
    tokens sampled after it, the last one excepted); rows may leave (their caches are dropped). A
    call that breaks this (a new key, another prefix) or whose cache would outgrow `max_width`
    positions (padding holes included) reads its prompts afresh, which is always correct.
    """

    def __init__(self, max_width: int | None = None) -> None:
        self.max_width = max_width
        self.reset()

    def reset(self) -> None:
        self.cache: Any = None
        self.mask: torch.Tensor | None = None  # (rows, width): which cached positions are real tokens
        self.keys: list[Any] = []
        self.held: list[list[int]] = []  # per row, the ids in the cache
        self.reused = self.rebuilt = 0  # calls that continued the caches / read their prompts afresh

    def _rows(self, prompts: Sequence[Sequence[int]], keys: Sequence[Any], extra: int) -> list[int] | None:
        """Cache rows of `keys` when every prompt extends its row's ids and the width allows, else None."""
        if not isinstance(self.cache, Cache):  # none yet, or a model whose cache is not transformers'
            return None
        if len(set(keys)) != len(keys) or any(k not in self.keys for k in keys):
            return None
        rows = [self.keys.index(k) for k in keys]
        for row, prompt in zip(rows, prompts, strict=True):
            held = self.held[row]
            if len(prompt) <= len(held) or list(prompt[: len(held)]) != held:
                return None
        width = self.mask.shape[1] + max(
            len(p) - len(self.held[r]) for r, p in zip(rows, prompts, strict=True)
        )
        if self.max_width is not None and width + extra > self.max_width:
            return None
        return rows


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
    generator: torch.Generator | Sequence[torch.Generator] | None = None,
    session: KVSession | None = None,
    keys: Sequence[Any] | None = None,
) -> Samples:
    """Sample continuations of each prompt until `stop_id` or `max_new_tokens`.

    Prompts are left-padded into one batch; one forward pass per new token reuses the KV cache
    (preallocated where the model supports it). With `session` (and one key per prompt, e.g. an
    episode index), the caches are kept for the next call, which then feeds each conversation only
    its new ids (`KVSession`); the tokens and log-probs are those of reading the whole prompt.
    With `greedy`, the argmax is taken and log-probs are those of the temperature distribution.
    Randomness comes only from `generator`: one for the batch (`torch.multinomial`), or one per
    prompt (a sequence; rows may share one, drawing in row order): each row then draws one uniform
    per token from its own generator and takes the token where it falls in the row's cumulative
    distribution, so a row's tokens do not depend on which other prompts share its batch.
    """
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("sample needs at least one prompt, each with at least one token")
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}; use greedy=True for argmax")
    if session is not None and (keys is None or len(keys) != len(prompts)):
        raise ValueError("a KV session needs one key per prompt")
    device = model_device(model)
    per_row = generator is not None and not isinstance(generator, torch.Generator)
    if per_row and len(generator) != len(prompts):
        raise ValueError(f"{len(generator)} generators for {len(prompts)} prompts")
    batch = len(prompts)
    cache_arg = _cache_argument(model)
    rows = session._rows(prompts, keys, max_new_tokens) if session is not None else None
    if rows is not None:  # continue the kept caches: feed each row its new ids only
        kept, session.cache = session.cache, None  # a call that fails leaves nothing half-updated
        if rows != list(range(len(session.keys))):
            kept.batch_select_indices(torch.tensor(rows, device=device))
        held = [len(session.held[r]) for r in rows]
        ids, new_mask = left_pad([p[n:] for p, n in zip(prompts, held, strict=True)], pad_id)
        ids, new_mask = ids.to(device), new_mask.to(device)
        mask = torch.cat([session.mask[rows], new_mask], dim=1)
        positions = torch.tensor(held, device=device)[:, None] + (new_mask.cumsum(-1) - 1).clamp(min=0)
        cache = {cache_arg: kept}
        session.reused += 1
    else:
        ids, mask = left_pad(prompts, pad_id)
        ids, mask = ids.to(device), mask.to(device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        static = (
            None if session is not None else _static_cache(model, cache_arg, ids.shape[1] + max_new_tokens)
        )
        cache = {cache_arg: static} if static is not None else {}
        if session is not None:
            session.rebuilt += 1
    width = mask.shape[1]
    full = torch.zeros((batch, width + max_new_tokens), dtype=mask.dtype, device=device)
    full[:, :width] = mask  # the mask of every position the cache may hold, filled as tokens are fed
    out = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, **cache)
    done = torch.zeros(batch, dtype=torch.bool, device=device)
    tokens, logps = [], []
    position = positions[:, -1:]
    for step in range(max_new_tokens):
        logp = F.log_softmax(out.logits[:, -1, :].float() / temperature, dim=-1)
        if greedy:
            nxt = logp.argmax(-1)
        elif per_row:
            nxt = _inverse_cdf(logp.exp(), generator)
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
        if step == max_new_tokens - 1 or bool(done.all()):
            break  # the last token is not fed: a session's next call feeds it with the new ids
        full[:, width + step] = (~done).to(full.dtype)
        position = position + 1
        out = model(
            input_ids=nxt[:, None],
            attention_mask=full[:, : width + step + 1],
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
    if session is not None:  # the cache holds each prompt and its sampled tokens but the last
        fed = width + len(tokens) - 1
        session.cache, session.mask, session.keys = out[cache_arg], full[:, :fed], list(keys)
        session.held = [list(p) + t[:-1] for p, t in zip(prompts, result.tokens, strict=True)]
    return result


def _inverse_cdf(probs: torch.Tensor, generators: Sequence[torch.Generator]) -> torch.Tensor:
    """One token per row: row i's uniform draw from generators[i] placed in its cumulative distribution."""
    u = torch.cat([torch.rand(1, generator=g, device=g.device) for g in generators]).to(probs.device)
    cdf = probs.cumsum(-1)
    return (
        torch.searchsorted(cdf, (u * cdf[:, -1])[:, None], right=True)
        .squeeze(-1)
        .clamp(max=probs.shape[-1] - 1)
    )


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
    device = model_device(model)
    seqs = [list(c) + list(x) for c, x in zip(contexts, continuations, strict=True)]
    ids = right_pad(seqs, pad_id).to(device)
    mask = right_pad([[1] * len(s) for s in seqs], 0).to(device)
    logits = model(input_ids=ids, attention_mask=mask).logits
    all_lp = token_logprobs(logits[:, :-1], ids[:, 1:], temperature)
    out = []
    for i, (c, x) in enumerate(zip(contexts, continuations, strict=True)):
        out.append(all_lp[i, len(c) - 1 : len(c) - 1 + len(x)])
    return out
