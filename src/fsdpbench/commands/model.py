"""``fsdpbench model``: parameters, FLOPs, per-rank memory and FSDP communication bytes of the workload.

Pure arithmetic from the config (no torch import, nothing is allocated); the counts are tested
against the model built on the meta device.
"""

from __future__ import annotations

import argparse
import difflib
from typing import Any

from fsdpbench.config import DTYPES, PRESETS, ModelConfig, coerce, model_fields, model_preset, parse_mesh
from fsdpbench.errors import ConfigError

SCHEMA_VERSION = 1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``fsdpbench model``."""
    parser.add_argument("--preset", default="full", help=f"model preset: {', '.join(PRESETS)} (default full)")
    parser.add_argument(
        "--layers", type=int, help="number of decoder layers (keeps the [GDN ×3, attention] pattern)"
    )
    parser.add_argument("--seq-len", type=int, default=8192, help="sequence length for FLOPs (default 8192)")
    parser.add_argument("--mesh", default="8", help="FSDP mesh: N (1D over N ranks) or RxS (HSDP); default 8")
    parser.add_argument(
        "--param-dtype",
        default="bfloat16",
        choices=DTYPES,
        help="compute / all-gather dtype (default bfloat16)",
    )
    parser.add_argument(
        "--reduce-dtype",
        default="float32",
        choices=DTYPES,
        help="gradient reduce-scatter dtype (default float32)",
    )
    parser.add_argument(
        "--master-dtype",
        default="float32",
        choices=DTYPES,
        help="dtype of the sharded parameters, gradients and AdamW states (default float32)",
    )
    parser.add_argument(
        "--prefetch", type=int, default=0, help="layers prefetched ahead (adds unsharded copies)"
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="override any ModelConfig field, e.g. --set num_experts=64 (repeatable)",
    )
    parser.add_argument("--batch-size", type=int, default=1, help="sequences per rank (default 1)")
    parser.add_argument(
        "--optimizer", default="adamw", choices=("adamw", "sgd"), help="optimizer states (default adamw)"
    )
    parser.add_argument(
        "--ac",
        default="off",
        choices=("off", "full"),
        help="activation checkpointing of every layer (default off)",
    )
    parser.add_argument(
        "--device",
        help="say whether the estimated peak fits this device's memory: 910b, h100, h200, a100, ... "
        "(docs/memory.md lists them)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """``["num_experts=64", ...]`` → ``{"num_experts": 64}``, typed by the ModelConfig field."""
    fields = model_fields()
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep:
            raise ConfigError(f"--set {item!r} is not FIELD=VALUE (e.g. --set num_experts=64)")
        if key not in fields:
            close = difflib.get_close_matches(key, fields, n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else f"; fields: {', '.join(fields)}"
            raise ConfigError(f"--set {key}: unknown model field{hint}")
        out[key] = coerce(raw.strip(), fields[key], f"--set {key}")
    return out


def resolve_config(args: argparse.Namespace) -> ModelConfig:
    """Preset, then ``--layers``, then ``--set`` overrides; validated."""
    overrides = {}
    if args.layers is not None:
        overrides["num_hidden_layers"] = args.layers
    overrides.update(parse_overrides(args.overrides))
    return model_preset(args.preset).replace(**overrides)


def summarize(
    cfg: ModelConfig,
    seq_len: int,
    mesh: tuple[int, ...],
    *,
    param_dtype: str = "bfloat16",
    reduce_dtype: str = "float32",
    master_dtype: str = "float32",
    prefetch: int = 0,
    batch_size: int = 1,
    optimizer: str = "adamw",
    ac: str = "off",
    device: str | None = None,
) -> dict[str, Any]:
    """Everything ``fsdpbench model`` reports, as a JSON-ready dict (bytes, FLOPs and counts unrounded)."""
    from fsdpbench.model.flops import (
        DTYPE_BYTES,
        active_matmul_params,
        comm_bytes_per_unit,
        flops_per_token,
        fsdp_memory_per_rank,
        params_per_layer,
        total_params,
    )
    from fsdpbench.model.memory import estimate_peak

    cfg.validate_seq_len(seq_len)
    if prefetch < 0:
        raise ConfigError(f"--prefetch must be >= 0, got {prefetch}")
    if batch_size < 1:
        raise ConfigError(f"--batch-size must be >= 1, got {batch_size}")
    if device is not None:
        from fsdpbench.model.memory import DEVICE_MEMORY_GIB, device_fit

        try:
            device_fit(0, device)
        except ValueError:
            raise ConfigError(
                f"--device {device!r} is not in the memory table; use one of {', '.join(DEVICE_MEMORY_GIB)}"
            ) from None
    per_layer = params_per_layer(cfg)
    counts = {t: cfg.layer_types.count(t) for t in ("linear_attention", "full_attention")}
    active = active_matmul_params(cfg)
    shard_size = mesh[-1]
    return {
        "schema_version": SCHEMA_VERSION,
        "config": vars(cfg).copy(),
        "seq_len": seq_len,
        "mesh": list(mesh),
        "dtypes": {"param": param_dtype, "reduce": reduce_dtype, "master": master_dtype},
        "layer_counts": counts,
        "total_params": total_params(cfg),
        "active_matmul_params_per_token": sum(active[t] for t in cfg.layer_types) + active["lm_head"],
        "params_per_layer": per_layer,
        "bytes_per_layer": {k: v * DTYPE_BYTES[param_dtype] for k, v in per_layer.items()},
        "flops_per_token": flops_per_token(cfg, seq_len),
        "flops_convention": "training (fwd + 2×fwd bwd), active experts only, causal attention as Megatron "
        "counts it (half of QKᵀ and AV), GDN chunked core with a triangular solve, embedding free",
        "per_rank_memory_bytes": fsdp_memory_per_rank(
            cfg,
            shard_size,
            param_dtype=param_dtype,
            master_dtype=master_dtype,
            reduce_dtype=reduce_dtype,
            prefetch=prefetch,
        ),
        "peak_memory_estimate": estimate_peak(
            cfg,
            seq_len,
            mesh,
            batch_size=batch_size,
            param_dtype=param_dtype,
            reduce_dtype=reduce_dtype,
            master_dtype=master_dtype,
            optimizer=optimizer,
            ac=ac,
            prefetch=prefetch,
            device=device,
        ),
        "comm_bytes_per_layer": comm_bytes_per_unit(
            cfg, mesh, param_dtype=param_dtype, reduce_dtype=reduce_dtype
        ),
    }


def _si(value: float, unit: str) -> str:
    """``1.685e9, "B"`` → ``"1.685 GB"`` (decimal prefixes, 4 significant digits)."""
    for factor, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.4g} {prefix}{unit}"
    return f"{value:.4g} {unit}"


def _print_tables(s: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    def gb(n: float) -> str:
        return _si(n, "B")

    console = Console()
    c = s["config"]
    console.print(
        f"[bold]Qwen3.5-MoE workload[/]: {c['num_hidden_layers']} layers "
        f"({s['layer_counts']['linear_attention']} Gated DeltaNet, {s['layer_counts']['full_attention']} attention), "
        f"hidden {c['hidden_size']}, {c['num_experts']} experts top-{c['num_experts_per_tok']}, vocab {c['vocab_size']}"
    )
    console.print(f"total parameters      {s['total_params']:,}")
    console.print(f"active matmul params  {s['active_matmul_params_per_token']:,} per token")
    console.print(
        f"training FLOPs/token  {_si(s['flops_per_token'], 'FLOP')} at seq {s['seq_len']} "
        f"({s['flops_convention']})"
    )
    table = Table(title=f"parameters and bytes per piece ({s['dtypes']['param']})")
    for col in ("piece", "params", "bytes"):
        table.add_column(col, justify="left" if col == "piece" else "right")
    for name, n in s["params_per_layer"].items():
        table.add_row(name, f"{n:,}", gb(s["bytes_per_layer"][name]))
    console.print(table)
    mesh = "x".join(map(str, s["mesh"]))
    table = Table(title=f"model state per rank under FSDP over mesh {mesh} (AdamW, activations excluded)")
    table.add_column("what")
    table.add_column("bytes", justify="right")
    for name, n in s["per_rank_memory_bytes"].items():
        table.add_row(name, gb(n))
    console.print(table)
    _print_peak(console, s["peak_memory_estimate"], gb)
    table = Table(
        title="communication per shard unit and step (all-gather in forward; again in backward when resharded)"
    )
    for col in ("unit", "all-gather", "reduce-scatter", "AG per rank", "RS per rank", "HSDP all-reduce"):
        table.add_column(col, justify="left" if col == "unit" else "right")
    for unit, b in s["comm_bytes_per_layer"].items():
        table.add_row(
            unit,
            gb(b["all_gather_bytes"]),
            gb(b["reduce_scatter_bytes"]),
            gb(b["all_gather_bytes_per_rank"]),
            gb(b["reduce_scatter_bytes_per_rank"]),
            gb(b["all_reduce_bytes"]),
        )
    console.print(table)


def _print_peak(console: Any, est: dict[str, Any], gb: Any) -> None:
    """The peak-memory estimate: its components, the candidates and the device verdict."""
    from rich.table import Table

    st = est["settings"]
    table = Table(
        title=f"estimated peak per rank: {gb(est['total'])} at {est['peak_at']} (seq {st['seq_len']} × batch "
        f"{st['batch_size']}, ac {st['ac']}, prefetch {st['prefetch']}, {st['optimizer']}, {st['param_dtype']})"
    )
    table.add_column("what")
    table.add_column("bytes", justify="right")
    for name, n in est["components"].items():
        table.add_row(name, gb(n))
    console.print(table)
    others = ", ".join(f"{k} {gb(v)}" for k, v in est["candidates"].items())
    console.print(f"peak candidates: {others}")
    console.print(
        f"kernel path modelled: {est['kernel_path_description']} (measured on CPU only: docs/memory.md)"
    )
    if "fits" in est:
        verdict = "fits" if est["fits"] else "[bold red]does not fit[/]"
        console.print(f"{est['device']} ({gb(est['device_memory_bytes'])} nominal): {verdict}")


def main(args: argparse.Namespace) -> int:
    """Resolve the config, compute the summary, print it as tables or JSON."""
    cfg = resolve_config(args)
    mesh = parse_mesh(args.mesh)
    summary = summarize(
        cfg,
        args.seq_len,
        mesh,
        param_dtype=args.param_dtype,
        reduce_dtype=args.reduce_dtype,
        master_dtype=args.master_dtype,
        prefetch=args.prefetch,
        batch_size=args.batch_size,
        optimizer=args.optimizer,
        ac=args.ac,
        device=args.device,
    )
    if args.json:
        import sys

        import orjson

        sys.stdout.write(orjson.dumps(summary, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        _print_tables(summary)
    return 0
