"""Run under torchrun with 4 gloo ranks (tests/test_init_values.py): shard the tiny model on meta with
each backend and mesh, fill the shards with ``backend.load_params`` and gather them back; rank 0 writes,
per layout, the sha256 of every gathered parameter and each rank's (values drawn, local elements).

Layouts: FSDP2 ×4, FSDP2 ×2 (each pair of ranks its own 1-D mesh), FSDP2 HSDP 2×2, FSDP1 ×4, FSDP1
HSDP 2×2, hyper ×4 (last, as hyper_parallel patches torch process-wide; skipped when not importable).
"""

from __future__ import annotations

import hashlib
import json
import sys
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

from fsdpbench.config import parse_arms, preset_tiny
from fsdpbench.model import InitialValues, build_model
from fsdpbench.run.process_exit import exit_without_teardown

SEED = 11


def digest(tensor: torch.Tensor) -> str:
    return hashlib.sha256(tensor.detach().float().contiguous().numpy().tobytes()).hexdigest()


def local_numel(model: torch.nn.Module) -> int:
    """Elements this rank holds (DTensor local shards, FSDP1's flat shards without padding)."""
    total = 0
    for p in model.parameters():
        local = p.to_local() if hasattr(p, "to_local") else p
        total += local.numel()
    return total


def layout(backend: Any, spec: str, mesh: Any) -> dict[str, Any]:
    model = build_model(preset_tiny(), device="meta")
    values = InitialValues({n: p.shape for n, p in model.named_parameters()}, SEED)
    model = backend.apply(model, mesh, parse_arms(spec)[0])
    model = backend.materialize(model, "cpu")
    backend.load_params(model, values)
    held = local_numel(model)
    gathered = backend.full_state_dict(model)
    drawn = [None] * dist.get_world_size()
    dist.all_gather_object(drawn, (values.values_drawn, held))
    return {"digests": {n: digest(t) for n, t in sorted(gathered.items())}, "drawn_held": drawn}


def main(out: str) -> None:
    dist.init_process_group("gloo")
    results: dict[str, Any] = {}
    from fsdpbench.backends.fsdp1 import FSDP1Backend
    from fsdpbench.backends.torch_fsdp2 import TorchFSDP2Backend

    torch_backend = TorchFSDP2Backend()
    results["fsdp2_x4"] = layout(torch_backend, "torch", init_device_mesh("cpu", (4,)))
    pairs = init_device_mesh("cpu", (2, 2), mesh_dim_names=("replicate", "shard"))
    results["fsdp2_x2"] = layout(torch_backend, "torch", pairs["shard"])
    results["fsdp2_hsdp_2x2"] = layout(torch_backend, "torch", pairs)
    fsdp1 = FSDP1Backend()
    results["fsdp1_x4"] = layout(fsdp1, "fsdp1", fsdp1.init_mesh("cpu", (4,)))
    results["fsdp1_hsdp_2x2"] = layout(fsdp1, "fsdp1", fsdp1.init_mesh("cpu", (2, 2)))
    try:
        from fsdpbench.backends.hyper import HyperBackend

        hyper = HyperBackend()
        hyper.setup("cpu")
        results["hyper_x4"] = layout(hyper, "hyper", hyper.init_mesh("cpu", (4,)))
    except Exception as exc:  # hyper_parallel is optional: the test says it was skipped
        results["hyper_x4"] = {"skipped": f"{type(exc).__name__}: {exc}"}
    if dist.get_rank() == 0:
        with open(out, "w") as f:
            json.dump(results, f)
    dist.barrier()
    dist.destroy_process_group()
    exit_without_teardown(0)  # gloo's threads can abort the interpreter's own teardown


if __name__ == "__main__":
    main(sys.argv[1])
