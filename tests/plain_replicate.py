"""A plain ``replicate()`` script (DDP on FSDP2's code, torch ≥ 2.9) that knows nothing of fsdpbench.

Run under torchrun (gloo, CPU): a small transformer-like model (that of tests/plain_fsdp2.py), each block and the root wrapped with
``torch.distributed._composable.replicate_with_fsdp.replicate``, ``torch.profiler`` around one training step
(one warm-up step, then one recorded). Writes ``<out>/rank<r>.pt.trace.json`` per rank.

    torchrun --nproc-per-node 2 tests/plain_replicate.py OUT
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed._composable.replicate_with_fsdp import replicate

from plain_fsdp2 import Net  # the same model (this folder is on sys.path: torchrun runs the file as a script)


def main() -> None:
    out = Path(sys.argv[1])
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = Net(vocab=256, dim=64, n_blocks=3)
    for block in model.blocks:
        replicate(block)
    replicate(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    tokens = torch.randint(0, 256, (4, 64), generator=torch.Generator().manual_seed(rank))
    out.mkdir(parents=True, exist_ok=True)
    schedule = torch.profiler.schedule(wait=0, warmup=1, active=1, repeat=1)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], schedule=schedule) as prof:
        for _ in range(2):  # a warm-up step, then the recorded one
            loss = nn.functional.cross_entropy(model(tokens).flatten(0, 1), tokens.flatten())
            loss.backward()
            opt.step()
            opt.zero_grad()
            prof.step()
    prof.export_chrome_trace(str(out / f"rank{rank}.pt.trace.json"))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
