"""The one supervised loop: masked next-token cross-entropy on (ids, loss mask) examples.

The warm start (both roles, copy drills, the polish), SEED's analyst warm start and world
grounding (`ground_world`) differ only in their examples, their batch order and their schedule;
each passes a `next_batch(step)` and a learning-rate schedule to `sft_loop`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from rehearsal_gym.core.batching import pad_masked
from rehearsal_gym.core.model import LM

Example = tuple[list[int], list[int]]
"""Token ids and a loss mask of the same length (1 = a target token)."""
Batch = tuple[torch.Tensor, torch.Tensor, torch.Tensor]
"""(ids, attention mask, loss mask), right-padded."""


def masked_lm_loss(logits: torch.Tensor, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy over positions whose target has mask 1."""
    targets, weights = ids[:, 1:], mask[:, 1:].float()
    nll = F.cross_entropy(
        logits[:, :-1].reshape(-1, logits.size(-1)).float(), targets.reshape(-1), reduction="none"
    )
    return (nll * weights.reshape(-1)).sum() / weights.sum().clamp(min=1.0)


def collate(examples: Sequence[Example], idx: Sequence[int], pad_id: int) -> Batch:
    """The batch of `examples[i]` for i in `idx`."""
    return pad_masked([examples[i][0] for i in idx], [examples[i][1] for i in idx], pad_id)


def length_batches(lengths: list[int], batch_size: int, rng: np.random.Generator) -> list[np.ndarray]:
    """One epoch of batches of similar length (less padding), in random order."""
    order = rng.permutation(len(lengths))
    pool = 50 * batch_size  # sort within pools of 50 batches: similar lengths, still shuffled
    batches = []
    for start in range(0, len(order), pool):
        chunk = sorted(order[start : start + pool], key=lambda i: lengths[i])
        batches += [np.array(chunk[i : i + batch_size]) for i in range(0, len(chunk), batch_size)]
    return [batches[i] for i in rng.permutation(len(batches))]


class Epochs:
    """Length-bucketed batches of `examples`, epoch after epoch (a new order from `rng` each)."""

    def __init__(self, examples: Sequence[Example], batch_size: int, rng: np.random.Generator, pad_id: int):
        self.examples, self.batch_size, self.rng, self.pad_id = examples, batch_size, rng, pad_id
        self._left: list[np.ndarray] = []

    def next(self) -> Batch:
        if not self._left:
            self._left = length_batches([len(ids) for ids, _ in self.examples], self.batch_size, self.rng)
        return collate(self.examples, self._left.pop(), self.pad_id)


def random_batch(
    examples: Sequence[Example], batch_size: int, rng: np.random.Generator, pad_id: int
) -> Batch:
    """`batch_size` examples drawn with replacement."""
    return collate(examples, rng.integers(0, len(examples), batch_size), pad_id)


def cosine_lr(peak: float, warmup: int, total: int) -> Callable[[int], float]:
    """Linear warmup to `peak` over `warmup` steps, then cosine decay to 10% of it at step `total`."""

    def lr_at(step: int) -> float:
        if step < warmup:
            return peak * (step + 1) / warmup
        frac = (step - warmup) / max(1, total - warmup)
        return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))

    return lr_at


def lm_step(lm: LM, opt: torch.optim.Optimizer, batch: Batch, lr: float, where: str, lr_field: str) -> float:
    """One optimizer step (lr set, grad-norm clip 1.0) of the masked LM loss on a batch; a non-finite
    loss stops with an error naming `where` and the `lr_field` to lower."""
    ids, attn, loss_mask = (t.to(lm.device) for t in batch)
    for group in opt.param_groups:
        group["lr"] = lr
    loss = masked_lm_loss(lm.model(input_ids=ids, attention_mask=attn).logits, ids, loss_mask)
    if not torch.isfinite(loss):
        raise FloatingPointError(f"loss is {loss.item()} at {where}; lower {lr_field}")
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(lm.model.parameters(), 1.0)
    opt.step()
    return loss.item()


def sft_loop(
    lm: LM,
    opt: torch.optim.Optimizer,
    steps: int,
    next_batch: Callable[[int], Batch],
    lr_at: Callable[[int], float],
    *,
    desc: str,
    lr_field: str,
    progress: bool = True,
) -> list[float]:
    """`steps` optimizer steps on `next_batch(step)` at `lr_at(step)`, with a progress bar; the model
    is left in eval mode. Returns the loss per step."""
    lm.model.train()
    losses: list[float] = []
    bar = tqdm(range(steps), desc=desc, disable=not progress, mininterval=2)
    for step in bar:
        losses.append(lm_step(lm, opt, next_batch(step), lr_at(step), f"{desc} step {step}", lr_field))
        if step % 20 == 0:
            bar.set_postfix(loss=f"{np.mean(losses[-20:]):.3f}")
    lm.model.eval()
    return losses
