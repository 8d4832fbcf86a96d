"""Synthetic tokens: the same batches for every arm, round and mesh.

The global batch of a step (``world_size × batch_size`` sequences) comes from a generator seeded by
``(seed, step)``; each rank takes its own rows. Any rank layout therefore trains on the same data, and a
single-process reference can rebuild it with ``global_batch``.
"""

from __future__ import annotations

import torch

_STEP_STRIDE = 1_000_003  # keeps the per-step seeds of nearby base seeds apart


def global_batch(seed: int, step: int, rows: int, seq_len: int, vocab_size: int) -> torch.Tensor:
    """Token ids ``[rows, seq_len]`` (int64, cpu) of step ``step``; uniform over the vocabulary."""
    gen = torch.Generator().manual_seed(seed * _STEP_STRIDE + step)
    return torch.randint(0, vocab_size, (rows, seq_len), generator=gen, dtype=torch.long)


def rank_batch(
    seed: int, step: int, *, rank: int, world_size: int, batch_size: int, seq_len: int, vocab_size: int
) -> torch.Tensor:
    """This rank's ``[batch_size, seq_len]`` slice of the step's global batch."""
    full = global_batch(seed, step, world_size * batch_size, seq_len, vocab_size)
    return full[rank * batch_size : (rank + 1) * batch_size].contiguous()
