"""The independent reference for the sharded arms: unsharded single-process SGD training of the tiny
model on the same seeded weights and global batches that the runner gives every arm."""

from __future__ import annotations

import torch

from fsdpbench.config import preset_tiny
from fsdpbench.model import build_model, init_full_tensor
from fsdpbench.run.tokens import global_batch

SEQ, STEPS, LR, SEED = 32, 3, 1e-2, 0


def _train(rows: int, steps: int) -> tuple[list[float], list[float], dict[str, torch.Tensor]]:
    """Unsharded single-process SGD on the same global batches: losses, global gradient norms (before
    each optimizer step) and final params."""
    torch.manual_seed(0)
    cfg = preset_tiny()
    model = build_model(cfg, device="cpu")
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(init_full_tensor(name, tuple(p.shape), SEED))
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    losses, norms = [], []
    for step in range(steps):
        ids = global_batch(SEED, step, rows, SEQ, cfg.vocab_size)
        opt.zero_grad(set_to_none=True)
        loss = model(ids, labels=ids).loss
        loss.backward()
        norms.append(
            torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in model.parameters()])).item()
        )
        opt.step()
        losses.append(loss.item())
    return losses, norms, {n: p.detach().clone() for n, p in model.named_parameters()}


def reference_training(rows: int, steps: int = STEPS) -> tuple[list[float], dict[str, torch.Tensor]]:
    """Unsharded single-process SGD on the same global batches: (losses per step, final params)."""
    losses, _, params = _train(rows, steps)
    return losses, params


def reference_grad_norms(rows: int, steps: int = STEPS) -> list[float]:
    """Global gradient norm per step of the same single-process run."""
    return _train(rows, steps)[1]
