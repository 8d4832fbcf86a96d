"""The model under FSDP2 on 2 gloo ranks: meta build → shard → to_empty → seeded init gives the
same full weights and the same loss as a plain single-process build."""

from __future__ import annotations

import os
import subprocess
import textwrap

import pytest

from helpers import torchrun_command

SCRIPT = textwrap.dedent(
    """
    import torch, torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from fsdpbench.config import preset_tiny
    from fsdpbench.model import build_model, init_weights

    dist.init_process_group("gloo")
    cfg = preset_tiny()
    reference = build_model(cfg, device="cpu")
    init_weights(reference, seed=3)
    model = build_model(cfg, device="meta")
    mesh = init_device_mesh("cpu", (2,))
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    model.to_empty(device="cpu")
    init_weights(model, seed=3)  # DTensor parameters receive their local shard
    full = {n: p.full_tensor() for n, p in model.named_parameters()}
    assert all(torch.equal(p, full[n]) for n, p in reference.named_parameters())
    ids = torch.randint(0, cfg.vocab_size, (1, 40), generator=torch.Generator().manual_seed(0))
    loss = model(ids, labels=ids).loss
    loss.backward()
    reference_loss = reference(ids, labels=ids).loss
    reference_loss.backward()
    torch.testing.assert_close(loss, reference_loss)
    for n, p in model.named_parameters():
        torch.testing.assert_close(p.grad.full_tensor(), dict(reference.named_parameters())[n].grad, atol=1e-6, rtol=1e-4)
    print(f"rank {dist.get_rank()} ok", flush=True)  # one write: the two ranks share the pipe
    dist.destroy_process_group()
    from fsdpbench.run.process_exit import exit_without_teardown
    exit_without_teardown(0)  # gloo's threads can abort the interpreter's own teardown
    """
)


@pytest.mark.distributed
@pytest.mark.timeout(180)
def test_fsdp2_sharded_meta_init_gives_the_same_weights_loss_and_gradients_as_a_plain_build(tmp_path):
    script = tmp_path / "fsdp_model.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [*torchrun_command(2), str(script)],
        capture_output=True,
        text=True,
        timeout=170,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.count(" ok") == 2
