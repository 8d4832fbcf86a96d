"""``fsdpbench analyze --critical-path`` and ``--what-if`` in the terminal: the replay's error, the places that
determine the step (their excess over the other ranks), the critical path per phase, the top places with
their slack, and the replayed what-ifs (docs/replay.md)."""

from __future__ import annotations

from pathlib import Path

from fsdpbench.fmt import fmt, fmt_us_as_ms
from fsdpbench.report.terminal.fit import print_fitted


def _ms(us: float | None) -> str:
    return fmt_us_as_ms(us, 3)


REPLAY_TOP = 10
ERROR_WARN_PCT = 5.0
"""A replay whose largest per-rank error exceeds this (%) gets a warning (here and in the report): read its path
with care."""
REPLAY_KINDS = ("compute", "transfer", "wait", "host_gap", "launch", "sync", "queue_gap")
"""The replay's kinds in table order (``queue_gap``: a queue lane's kept dispatch gap, an edge latency)."""


def error_warning(worst: float | None, shown: str) -> str | None:
    """The warning for a replay whose largest per-rank error (``worst`` %, ``shown`` as the caller writes it) is
    unknown or over :data:`ERROR_WARN_PCT`, in the terminal and the report; None where there is none."""
    if worst is not None and worst <= ERROR_WARN_PCT:
        return None
    why = "is unknown" if worst is None else f"reaches {shown} on a rank"
    return (
        f"the replay's error {why}: these traces hold starts that nothing in them explains (a dependency the "
        "trace does not record, or device tasks the export left out); read the path and the replayed what-ifs "
        'with care (docs/replay.md, "What the graph cannot see")'
    )


def slack_parts(rp: dict) -> str:
    """What the unexplained slack holds and what the queue lanes explain, as a clause (``""`` when the
    replay JSON predates the split): ``"; of it 49.0 ms at collectives whose peers are not in the input;
    65.2 ms of queue gaps kept as lane latencies"``."""
    parts = []
    split = rp.get("unexplained_slack_split_us") or {}
    outside = split.get("peers_outside") or 0.0
    if outside > 0:
        parts.append(f"of it {_ms(outside)} ms at collectives whose peers are not in the input")
    gap = rp.get("queue_gap_us") or 0.0
    if gap > 0:
        parts.append(f"{_ms(gap)} ms of queue gaps kept as lane latencies")
    return "".join(f"; {p}" for p in parts)


EXCESS_TOP = 5


def _print_excess(con, rows: list[dict], steps: int = 1) -> None:  # noqa: ANN001
    """The places that determine the step (``replay.critical_excess``): a rank's time at a place beyond the
    other ranks' there, on the critical path; shown first (docs/replay.md)."""
    from rich.table import Table

    rows = [x for x in rows if x["excess_us"] > 0]
    if not rows:
        con.print(
            "Which place determines the step: no rank spends more than the others at any place on the path",
            highlight=False,
        )
        return
    t = Table(
        title="Which place determines the step",
        title_justify="left",
        caption="ms; excess: the rank's time at the place above the other ranks' median at the same point "
        "(between the same collectives, per kind of task), as far as it lies on the path"
        + (
            f"; over {steps} profiled steps: the median of each step's excess (the other columns: all steps)"
            if steps > 1
            else ""
        ),
        caption_justify="left",
    )
    for col in ("rank", "unit", "phase", "excess", "on path", "this rank", "others (median)"):
        t.add_column(col, justify="left" if col in ("unit", "phase") else "right", no_wrap=True)
    for x in rows[:EXCESS_TOP]:
        t.add_row(
            str(x["rank"]), x["unit"], x["phase"], _ms(x["excess_us"]), _ms(x["critical_us"]),
            _ms(x["own_us"]), _ms(x["peers_us"]),
        )  # fmt: skip
    print_fitted(con, t, labels=3)


def render_replay(res, con, critical: bool = True, trace_file: Path | None = None) -> None:  # noqa: ANN001
    """The replay's terminal view: its error, the path per phase, the top places with their slack, and
    the what-ifs (docs/replay.md)."""
    from rich.table import Table

    rp = res.replay
    if rp is None:
        con.print(f"[yellow]no step replay:[/yellow] {res.replay_note or 'not computed'}", highlight=False)
        return
    from fsdpbench.analysis.crossrank.groups import seen_text

    err = rp["error_pct"]
    over = seen_text(rp.get("ranks_seen")) or f"{len(rp['ranks'])} ranks"
    con.print(
        f"Step replay: replayed vs measured step {fmt(err['median'], 3)} % median, {fmt(err['max'], 3)} % max "
        f"over {over}; unexplained slack {_ms(rp['unexplained_slack_us'])} ms{slack_parts(rp)}",
        highlight=False,
    )
    warning = error_warning(err.get("max"), f"{fmt(err.get('max'), 1)} %")
    if warning:
        con.print(f"[yellow]warning:[/yellow] {warning}", highlight=False)
    if critical:
        step = rp["figure"]["step_us"]  # the whole profiled window (``steps`` steps), as the path's times
        if "critical_excess" in rp:  # absent in replays made before it
            _print_excess(con, rp["critical_excess"], int(rp.get("steps") or 1))
        kinds = [k for k in REPLAY_KINDS if any(k in p["kinds"] for p in rp["by_phase"])]
        over = f"{rp['steps']} steps" if (rp.get("steps") or 1) > 1 else "step"
        t = Table(title=f"Critical path per phase ({over} {_ms(step)} ms)", title_justify="left",
                  caption="ms on the cross-rank critical path, by kind of task", caption_justify="left")  # fmt: skip
        for col in ("phase", "path", *kinds):
            t.add_column(col, justify="left" if col == "phase" else "right", no_wrap=True)
        for p in rp["by_phase"]:
            t.add_row(
                p["phase"], _ms(p["us"]), *[_ms(p["kinds"].get(k)) if k in p["kinds"] else "" for k in kinds]
            )
        print_fitted(con, t, labels=1)
        slack = {(x["rank"], x["unit"], x["phase"], x["kind"]): x["slack_us"] for x in rp["slack"]}
        top = Table(title="Top places on the critical path", title_justify="left",
                    caption="ms; slack: how much the place could grow before the step grows (0 on the path)",
                    caption_justify="left")  # fmt: skip
        for col in ("rank", "unit", "phase", "kind", "critical", "slack"):
            top.add_column(
                col, justify="right" if col in ("rank", "critical", "slack") else "left", no_wrap=True
            )
        for x in rp["critical"][:REPLAY_TOP]:
            key = (x["rank"], x["unit"], x["phase"], x["kind"])
            top.add_row(str(x["rank"]), x["unit"], x["phase"], x["kind"], _ms(x["us"]), _ms(slack.get(key)))
        print_fitted(con, top, labels=4)
        near = rp["near_critical"]
        if near:
            con.print(
                f"near-critical (off the path, slack < 2 % of the step): {len(near)} places, e.g. "
                + ", ".join(
                    f"rank {x['rank']} {x['unit']} {x['phase']} {x['kind']} ({_ms(x['slack_us'])} ms)"
                    for x in near[:3]
                ),
                highlight=False,
            )
        if trace_file is not None:
            con.print(
                f"replayed step with its critical path: {trace_file} (open in ui.perfetto.dev)",
                highlight=False,
            )
    if rp["what_if"]:
        w = Table(title="What-ifs (replayed)", title_justify="left", caption="ms", caption_justify="left")
        for col in ("edit", "predicted step", "change", "source", "largest change on the path"):
            w.add_column(
                col, justify="left" if col in ("edit", "source", "largest change on the path") else "right"
            )
        step = rp.get("step_us", rp["figure"]["step_us"])  # per step, as predicted_step_us
        for x in rp["what_if"]:
            c = x["changed"][0] if x["changed"] else None
            change = (
                f"rank {c['rank']} {c['unit']} {c['phase']} {c['kind']} {c['delta_us'] / 1000:+.3f}"
                if c
                else "—"
            )
            pred = x["predicted_step_us"]
            w.add_row(
                x["edit"],
                _ms(pred),
                "" if pred is None else f"{(pred - step) / 1000:+.3f}",
                x["source"],
                change,
            )
        print_fitted(con, w, labels=1, wrap={"largest change on the path"})
