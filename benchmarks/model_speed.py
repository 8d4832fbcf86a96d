"""Forward+backward speed and peak memory of fsdpbench's model vs transformers' Qwen3_5MoeForCausalLM.

Both run the same config (the ``tiny`` preset by default) with the same weights (ours are seeded, then
loaded into transformers' model with ``strict=True``), the same tokens and the same loss, on CPU.
Time: both models live in one process and their steps alternate (A B B A ...), so a noisy machine
slows both alike; each step is the wall time (``time.perf_counter``) of
``loss = model(ids, labels=ids).loss; loss.backward()``, and the median is reported, with the
median CPU time of the thread (``time.thread_time``, robust to other processes) beside it. Memory: each
model in its own fresh process (no shared allocator state):

- ``peak_torch_bytes``: the peak of torch's CPU allocations during the step above what was live
  before it (from the profiler's memory events, ``profile_memory=True``);
- ``peak_rss_bytes``: the rise of the process's peak RSS over the training steps above its RSS once
  the model is built (``/proc/self/clear_refs`` resets VmHWM; Linux only); it also sees non-torch
  allocations and allocator caching, so it is coarse at tiny sizes.

Usage: ``python benchmarks/model_speed.py [--preset tiny] [--seq-len 256] [--batch 1] [--steps 21] [--json]``
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

IMPLS = ("ours", "transformers")


def _hf_config(cfg):
    from transformers import Qwen3_5MoeTextConfig

    from fsdpbench.model.hf import hf_config_kwargs

    return Qwen3_5MoeTextConfig(**hf_config_kwargs(cfg))


def _rss_hwm_bytes() -> tuple[int, int]:
    fields = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("VmHWM", "VmRSS")):
                key, value = line.split(":")
                fields[key] = int(value.split()[0]) * 1024
    return fields["VmRSS"], fields["VmHWM"]


def _torch_peak_bytes(step) -> int:
    """Peak of torch CPU allocations during ``step()``, above what was allocated when it started."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    with tempfile.NamedTemporaryFile(suffix=".json") as tmp:
        prof.export_chrome_trace(tmp.name)
        with open(tmp.name) as f:
            events = json.load(f)["traceEvents"]
    mem = sorted(
        (e for e in events if e.get("name") == "[memory]" and e.get("args", {}).get("Device Type") == 0),
        key=lambda e: e["ts"],
    )
    if not mem:
        return 0
    totals = [e["args"]["Total Allocated"] for e in mem]
    start = totals[0] - mem[0]["args"]["Bytes"]
    del torch
    return max(totals) - start


def build(impl: str, args: argparse.Namespace):
    """``(model, ids)`` for ``impl``: the same config, weights and tokens for both implementations."""
    import torch

    from fsdpbench.config import model_preset
    from fsdpbench.model import build_model, init_weights

    cfg = model_preset(args.preset)
    ours = build_model(cfg, device="cpu")
    init_weights(ours, seed=0)
    model = ours
    if impl == "transformers":
        from transformers import Qwen3_5MoeForCausalLM

        model = Qwen3_5MoeForCausalLM(_hf_config(cfg)).float()
        model.load_state_dict(ours.state_dict(), strict=True)
    model.train()
    ids = torch.randint(
        0, cfg.vocab_size, (args.batch, args.seq_len), generator=torch.Generator().manual_seed(1)
    )
    return model, ids


def train_step(model, ids) -> float:
    """One forward + backward; returns the loss."""
    loss = model(ids, labels=ids).loss
    loss.backward()
    model.zero_grad(set_to_none=True)
    return loss.item()


def memory_worker(impl: str, args: argparse.Namespace) -> dict:
    """In a fresh process: warm up, then measure one step's peak torch allocations and peak RSS rise."""
    import torch

    torch.set_num_threads(args.threads)
    model, ids = build(impl, args)
    gc.collect()
    rss_before, _ = _rss_hwm_bytes()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset VmHWM to the current RSS
    for _ in range(args.warmup + 1):
        train_step(model, ids)
    _, hwm = _rss_hwm_bytes()
    return {
        "impl": impl,
        "peak_torch_bytes": _torch_peak_bytes(lambda: train_step(model, ids)),
        "peak_rss_bytes": hwm - rss_before,
    }


def time_side_by_side(args: argparse.Namespace) -> dict[str, list[float]]:
    """Both models in this process, steps alternating (A B B A ...) so load on the machine hits both alike."""
    import torch

    torch.set_num_threads(args.threads)
    models = {impl: build(impl, args) for impl in IMPLS}
    losses = {impl: train_step(*models[impl]) for impl in IMPLS}
    for _ in range(args.warmup - 1):
        for impl in IMPLS:
            train_step(*models[impl])
    times: dict[str, list[float]] = {impl: [] for impl in IMPLS}
    cpu_times: dict[str, list[float]] = {impl: [] for impl in IMPLS}
    for i in range(args.steps):
        for impl in IMPLS if i % 2 == 0 else IMPLS[::-1]:
            t0, c0 = time.perf_counter(), time.thread_time()
            train_step(*models[impl])
            cpu_times[impl].append(time.thread_time() - c0)
            times[impl].append(time.perf_counter() - t0)
    return {"times_s": times, "cpu_times_s": cpu_times, "loss": losses}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--steps", type=int, default=21, help="timed steps per implementation (median)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="print the raw results as JSON")
    parser.add_argument("--memory-worker", choices=IMPLS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_worker:
        print(json.dumps(memory_worker(args.memory_worker, args)))
        return 0

    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    timing = time_side_by_side(args)
    passthrough = [
        f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items() if k not in ("json", "memory_worker")
    ]
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    memory = {}
    for impl in IMPLS:
        proc = subprocess.run(
            [sys.executable, __file__, "--memory-worker", impl, *passthrough],
            capture_output=True,
            text=True,
            env=env,
            timeout=600,
        )
        if proc.returncode:
            print(proc.stderr, file=sys.stderr)
            return proc.returncode
        memory[impl] = json.loads(proc.stdout.strip().splitlines()[-1])

    summary = {
        impl: {
            "median_ms": 1e3 * statistics.median(timing["times_s"][impl]),
            "median_cpu_ms": 1e3 * statistics.median(timing["cpu_times_s"][impl]),
            "n_steps": len(timing["times_s"][impl]),
            "loss": timing["loss"][impl],
            "peak_torch_bytes": memory[impl]["peak_torch_bytes"],
            "peak_rss_bytes": memory[impl]["peak_rss_bytes"],
        }
        for impl in IMPLS
    }
    ours, hf = summary["ours"], summary["transformers"]
    ratios = {
        "speedup": hf["median_ms"] / ours["median_ms"],
        "cpu_time_speedup": hf["median_cpu_ms"] / ours["median_cpu_ms"],
        "peak_torch_ratio": ours["peak_torch_bytes"] / hf["peak_torch_bytes"],
        "peak_rss_ratio": ours["peak_rss_bytes"] / max(hf["peak_rss_bytes"], 1),
    }
    if args.json:
        print(
            json.dumps({"config": vars(args), "summary": summary, "ratios": ratios, "raw": timing}, indent=1)
        )
        return 0
    print(
        f"preset {args.preset}, batch {args.batch} × seq {args.seq_len}, {args.threads} thread(s), fp32, "
        f"fwd+bwd, median of {ours['n_steps']} alternating steps each"
    )
    print(f"{'':14}{'median ms':>10}{'(CPU ms)':>10}{'peak torch MiB':>16}{'peak RSS MiB':>14}{'loss':>9}")
    for impl, s in summary.items():
        print(
            f"{impl:14}{s['median_ms']:10.1f}{s['median_cpu_ms']:10.1f}{s['peak_torch_bytes'] / 2**20:16.2f}"
            f"{s['peak_rss_bytes'] / 2**20:14.2f}{s['loss']:9.4f}"
        )
    print(
        f"ours is {ratios['speedup']:.2f}x faster (CPU time {ratios['cpu_time_speedup']:.2f}x); peak memory "
        f"ours/transformers: torch allocations {ratios['peak_torch_ratio']:.2f}, RSS {ratios['peak_rss_ratio']:.2f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
