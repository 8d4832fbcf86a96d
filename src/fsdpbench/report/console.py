"""A run's summary in the terminal: the per-arm table fitted to the console's width, the comparisons, the parity gate
and the per-phase table (what ``fsdpbench ab``/``run`` print at the end; it reads summary.json's object only)."""

from __future__ import annotations

from typing import Any

from fsdpbench.report.terminal.summary import print_phase_table
from fsdpbench.results import phases, run_folder, stats
from fsdpbench.results.summary import RatioSummary


def print_summary(console: Any, summary: dict[str, Any]) -> None:
    """The final table per arm, the comparisons and the parity gate."""

    def fmt(v: Any, spec: str = ".1f", scale: float = 1.0) -> str:
        return "—" if v is None else format(v * scale, spec)

    rows = {
        label: {
            "n": str(len(a["rounds"])),
            "median": fmt(a["median_ms"]),
            "p10": fmt(a["p10_ms"]),
            "p90": fmt(a["p90_ms"]),
            "tok/s": fmt(a["tokens_per_s_per_device"], ".0f"),
            "TFLOP/s": fmt(a["tflops_per_device"], ".3g"),
            "MFU": fmt(a["mfu"], ".1%"),
            "GiB": fmt(stats.peak_memory_figure(a)[0], ".2f", 1 / 2**30),
        }
        for label, a in summary["arms"].items()
    }
    console.print(summary_table(rows, console.width))
    print_phase_table(console, summary)
    for c in summary["comparisons"]:
        ci = "—" if c["ci95"] is None else f"{c['ci95'][0]:.3f}..{c['ci95'][1]:.3f}"
        need = c["rounds_needed_1pct"]
        console.print(
            f"{c['test']} / {c['base']}: ratio {c['ratio']:.3f} ({RatioSummary.from_dict(c).interval_name} {ci}); "
            f"rounds for ±1%: {need if need is not None else '—'}"
        )
    parity = summary["parity"]
    if not parity["valid"]:
        console.print(f"[bold red]PARITY FAILED — the comparison is INVALID: {parity['reason']}[/]")
    elif parity["steps_compared"]:
        console.print(
            f"parity ok ({parity['mode']}, {parity['steps_compared']} steps, "
            f"max |Δloss| {parity['max_abs_diff']:.2e})"
        )
    if summary["missing"]:
        missing = ", ".join(f"{m['arm']} round {m['round']}" for m in summary["missing"])
        console.print(f"[yellow]missing: {missing} — complete them with fsdpbench ab --resume RUN_DIR[/]")
    if summary["verdict"]:
        console.print(f"[bold]verdict:[/] {summary['verdict']}")
        phases.print_phase_verdicts(console, summary)
    if (summary.get("rounds_auto") or {}).get("stopped"):
        console.print(f"--rounds auto {summary['rounds_auto']['why']}")
    time_line = run_folder.launch_time_line(summary.get("launch_time"))
    if time_line:
        console.print(f"time: {time_line}")


def summary_table(rows: dict[str, dict[str, str]], width: int) -> Any:
    """The per-arm table of ``print_summary`` fitted to ``width`` columns.

    Units go in the caption; columns with no value for any arm (MFU and memory on CPU) are left out;
    arm labels are never cut: when they do not fit beside the numbers, the rows are numbered and the
    caption names each arm.
    """
    from rich.console import Console
    from rich.measure import Measurement
    from rich.table import Table

    columns = [c for c in next(iter(rows.values()), {}) if any(r[c] != "—" for r in rows.values())]
    caption = (
        "ms: median of per-round medians, p10 and p90 of the timed steps; n: rounds; tok/s, TFLOP/s, MFU: "
        "per device"
        + ("; GiB: peak memory (device: allocated; CPU: process resident set)" if "GiB" in columns else "")
    )

    def build(names: list[str], caption: str) -> Table:
        table = Table(title="step time per arm (ms)", caption=caption, caption_justify="left")
        table.add_column("arm", no_wrap=True)
        for col in columns:
            table.add_column(col, justify="right", no_wrap=True)
        for name, values in zip(names, rows.values(), strict=True):
            table.add_row(name, *(values[c] for c in columns))
        return table

    table = build(list(rows), caption)
    measure = Console(width=10_000)  # natural width, unwrapped
    if Measurement.get(measure, measure.options, table).maximum <= width:
        return table
    legend = "; ".join(f"{i} = {label}" for i, label in enumerate(rows, 1))
    return build([str(i) for i in range(1, len(rows) + 1)], f"arms: {legend}. {caption}")
