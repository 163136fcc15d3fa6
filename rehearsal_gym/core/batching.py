"""Padding ragged token rows into tensors: the one collate every trainer and the sampler use."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def right_pad(rows: Sequence[Sequence[int | float]], fill: int | float = 0, dtype=torch.long, width: int = 0):
    """(len(rows), max(width, longest row)) tensor of `rows`, each followed by `fill`."""
    width = max(width, max((len(r) for r in rows), default=0))
    out = torch.full((len(rows), width), fill, dtype=dtype)
    for i, row in enumerate(rows):
        if len(row):
            out[i, : len(row)] = torch.as_tensor(row, dtype=dtype)
    return out


def left_pad(rows: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids, attention mask) with each row ending at the right edge (prompts for generation)."""
    width = max(len(s) for s in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, s in enumerate(rows):
        if s:
            ids[i, width - len(s) :] = torch.as_tensor(s, dtype=torch.long)
            mask[i, width - len(s) :] = 1
    return ids, mask


def pad_masked(
    rows: Sequence[Sequence[int]], masks: Sequence[Sequence[int]], pad_id: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(ids, attention mask, loss mask) of right-padded rows and their per-token loss masks."""
    ids = right_pad(rows, pad_id)
    attn = right_pad([[1] * len(r) for r in rows], 0)
    return ids, attn, right_pad(masks, 0, width=ids.shape[1])
