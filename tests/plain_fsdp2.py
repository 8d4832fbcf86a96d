"""A plain FSDP2 training script that knows nothing of fsdpbench (issue 30's "Done when" profile).

Run under torchrun (gloo, CPU): a small transformer-like model, each block and the root wrapped with
``fully_shard``, ``torch.profiler`` around one training step (its schedule: one warm-up step, then one recorded), once with
``reshard_after_forward=True`` and once with ``False`` in the same launch. Writes
``<out>/raf_<true|false>/rank<r>.pt.trace.json`` per rank.

Then (issue 40) torchtitan's layout, ``<out>/torchtitan/``: ``fully_shard`` on the embedding, each block,
``[norm, head]`` together, then the model, whose root keeps no parameter of its own; and in the same
process a second model of the same architecture and wrapping (a reference model, as an RL step keeps
beside its actor) whose no-grad forward runs before the actor's forward in each step.

    torchrun --nproc-per-node 2 tests/plain_fsdp2.py OUT
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import fully_shard


class Block(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.up = nn.Linear(dim, 4 * dim)
        self.down = nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.relu(self.up(self.norm(x))))


class Net(nn.Module):
    def __init__(self, vocab: int, dim: int, n_blocks: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(Block(dim) for _ in range(n_blocks))
        self.head = nn.Linear(dim, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


class TitanNet(nn.Module):
    """torchtitan's decoder shape: embedding, blocks, final norm and output head as own modules."""

    def __init__(self, vocab: int, dim: int, n_blocks: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(Block(dim) for _ in range(n_blocks))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def titan_model() -> TitanNet:
    """torchtitan's ``apply_fsdp``: the embedding, each block, ``[norm, head]``, then the root (no
    parameter left to it)."""
    model = TitanNet(vocab=256, dim=64, n_blocks=2)
    fully_shard(model.embed)
    for block in model.blocks:
        fully_shard(block)
    fully_shard([model.norm, model.head])
    fully_shard(model)
    return model


def profile_torchtitan(out: Path, rank: int) -> None:
    torch.manual_seed(0)
    actor, reference = titan_model(), titan_model()
    opt = torch.optim.AdamW(actor.parameters(), lr=1e-3)
    tokens = torch.randint(0, 256, (4, 64), generator=torch.Generator().manual_seed(rank))

    def step() -> None:
        with torch.no_grad():
            reference(tokens)
        loss = nn.functional.cross_entropy(actor(tokens).flatten(0, 1), tokens.flatten())
        loss.backward()
        opt.step()
        opt.zero_grad()

    folder = out / "torchtitan"
    folder.mkdir(parents=True, exist_ok=True)
    schedule = torch.profiler.schedule(wait=0, warmup=1, active=1, repeat=1)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], schedule=schedule) as prof:
        for _ in range(2):
            step()
            prof.step()
    prof.export_chrome_trace(str(folder / f"rank{rank}.pt.trace.json"))


def profile_one(out: Path, reshard_after_forward: bool, rank: int) -> None:
    torch.manual_seed(0)
    model = Net(vocab=256, dim=64, n_blocks=3)
    for block in model.blocks:
        fully_shard(block, reshard_after_forward=reshard_after_forward)
    fully_shard(model, reshard_after_forward=reshard_after_forward)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    tokens = torch.randint(0, 256, (4, 64), generator=torch.Generator().manual_seed(rank))

    def step() -> None:
        loss = nn.functional.cross_entropy(model(tokens).flatten(0, 1), tokens.flatten())
        loss.backward()
        opt.step()
        opt.zero_grad()

    folder = out / f"raf_{str(reshard_after_forward).lower()}"
    folder.mkdir(parents=True, exist_ok=True)
    schedule = torch.profiler.schedule(wait=0, warmup=1, active=1, repeat=1)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], schedule=schedule) as prof:
        for _ in range(2):  # a warm-up step, then the recorded one
            step()
            prof.step()
    prof.export_chrome_trace(str(folder / f"rank{rank}.pt.trace.json"))


def main() -> None:
    out = Path(sys.argv[1])
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    for raf in (True, False):
        profile_one(out, raf, rank)
        dist.barrier()
    profile_torchtitan(out, rank)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
