"""No number is cut in the terminal (issue 42): each command's tables drawn at 80, 120 and 200 columns hold
every number of their JSON whole, and every name that tells rows apart (unit, phase, arm, experiment).

The numbers are read from the JSON each command writes (``analyze --json``, diff.json, summary.json, a
sweep's files) and formatted here by plain Python (ms with three decimals, ``f"{x:.1f}"``, …), not by
fsdpbench's formatter; a number is whole when no digit, point or comma touches it on either side. A table
too wide for the console is split in parts that repeat the row labels: no line is wider than the console
and no cell ends in "…" (only an op type's kernel name may be shortened in its middle, kept distinct).
"""

from __future__ import annotations

import functools
import io
import re
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
from rich.console import Console

from helpers import hand_built_run

FIXTURES = Path(__file__).parent / "fixtures"
GLOO_MIN = FIXTURES / "traces" / "gloo_min.json"
LEVEL0 = FIXTURES / "ascend_level0"
WIDTHS = (80, 120, 200)
LONG_ARM = "hyper-prefetch2-pdtbf16-rdtfp32-fusion1"


def drawn(draw: Callable[[Console], None], width: int) -> str:
    """What ``draw`` prints on a console of ``width`` columns, as plain text."""
    out = io.StringIO()
    draw(Console(file=out, width=width, color_system=None, force_terminal=False, legacy_windows=False))
    return out.getvalue()


def whole(text: str, token: str) -> bool:
    """``token`` occurs in ``text`` with no digit, point, comma or slash-joined number glued to either side."""
    return re.search(rf"(?<![\d.,/]){re.escape(token)}(?![\d.,/]|[\w])", text) is not None


def ms3(us: float) -> str:
    """µs as ms with three decimals and thousands commas, minus sign "−" (the tables' unit)."""
    return f"{us / 1000:,.3f}".replace("-", "−")


def missing_numbers(text: str, numbers: list[str]) -> list[str]:
    return [n for n in numbers if not whole(text, n)]


def assert_fits(text: str, width: int, shortened_ok: Callable[[str], bool] = lambda line: False) -> None:
    """No line wider than the console; no table line with "…" (but those ``shortened_ok`` accepts)."""
    lines = text.splitlines()
    assert max(len(line.rstrip()) for line in lines) <= width, "\n".join(
        line for line in lines if len(line.rstrip()) > width
    )
    cut = [line for line in lines if line.startswith(("│", "┃")) and "…" in line and not shortened_ok(line)]
    assert not cut, "cut cells:\n" + "\n".join(cut)


@functools.cache
def _analysis(paths: tuple[Path, ...], replay: bool = False):  # noqa: ANN202
    """The analysis of ``paths``, once per module (drawing it does not change it)."""
    from fsdpbench.analysis import analyze

    return analyze(list(paths), workers=1, replay=replay)


def _json(res) -> dict:  # noqa: ANN001
    from fsdpbench.analysis.output.result import encode_analysis

    return orjson.loads(encode_analysis(res))


NARROW = ("step_time_us", "compute_us", "comm_us", "exposed_comm_us")
WIDE = (*NARROW, "overlapped_us", "free_us", "carried_over_us", "kernel_time_us")


def analyze_numbers(data: dict, wide: bool, top: int = 15) -> list[str]:
    """The numbers ``analyze`` shows, from its JSON: per rank, collectives, op types, syncs, waits."""
    out: list[str] = []
    for r in data["ranks"]:
        out += [ms3(r[k]) for k in (WIDE if wide else NARROW) if r[k] is not None]
        out.append(f"{100 * r['overlap_ratio']:.1f}%")
        for c in r["collectives"].values():
            out += [str(c["count"]), ms3(c["time_us"])]
        out += [str(v) for v in r["sync"].values() if v is not None]
    for op in data["ranks"][0]["ops"][:top]:
        out += [str(op["count"]), ms3(op["total_us"]), f"{op['mean_us']:.2f}"]
    for w in (data["waits"] or {}).get("ranks", []):
        out += [ms3(w[k]) for k in ("wait_us", "transfer_us", "exposed_wait_us", "exposed_transfer_us")]
    return out


def _op_name_shortened(line: str) -> bool:
    return line.startswith("│") and "…" in line.split("│")[1]


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("wide", [False, True], ids=["narrow", "wide"])
@pytest.mark.parametrize("paths", [(GLOO_MIN,), (LEVEL0,)], ids=["kineto", "ascend-2-ranks"])
def test_analyze_shows_every_number_whole(paths, wide, width):
    from fsdpbench.report.terminal.analyze import render_analysis

    res = _analysis(paths)
    text = drawn(lambda con: render_analysis(res, console=con, wide=wide), width)
    assert_fits(text, width, _op_name_shortened)
    numbers = analyze_numbers(_json(res), wide)
    assert len(numbers) > 10 and not missing_numbers(text, numbers)


LONG_PREFIX = "model.language_model.decoder."


@pytest.fixture(scope="module")
def fsdp2_long_names(tmp_path_factory) -> Path:
    """A torchtitan FSDP2 step (FSDP2's own ranges) whose units have names as long as a HF model's FQNs."""
    from test_fsdp2_layouts import Labels, _torchtitan_step

    path = _torchtitan_step(Labels("2.12")).write(tmp_path_factory.mktemp("units") / "rank0.json")
    path.write_bytes(path.read_bytes().replace(b"(layers.", b"(" + LONG_PREFIX.encode() + b"layers."))
    return path


@pytest.mark.parametrize("width", WIDTHS)
def test_analyze_units_keeps_numbers_and_unit_names_whole(fsdp2_long_names, width):
    """Every unit × phase row's compute, comm, exposed and FSDP2-internals host/device ms, and its unit and
    phase, whole; in a narrow console the table is split and every part labels its rows."""
    from fsdpbench.report.terminal.units import render_units

    res = _analysis((fsdp2_long_names,))
    text = drawn(lambda con: render_units(res, con), width)
    assert_fits(text, width)
    rows = _json(res)["ranks"][0]["units"]
    assert any(row["unit"].startswith(LONG_PREFIX) for row in rows)
    numbers = [ms3(row[k]) for row in rows for k in ("compute_us", "comm_us", "exposed_us")]
    numbers += [
        f"{ms3(part['host_us'])}/{ms3(part['device_us'])}"
        for row in rows
        for part in (row["fsdp_internals"] or {}).values()
        if part is not None
    ]
    assert not missing_numbers(text, numbers)
    table_rows = [line for line in text.splitlines() if line.startswith("│")]
    parts = text.count("Units × phases (rank 0")
    for row in rows:  # each row, labelled by its unit and phase, once in every part
        labelled = [
            line
            for line in table_rows
            if [c.strip() for c in line.split("│")[1:3]] == [row["unit"], row["phase"]]
        ]
        assert len(labelled) == parts, (row["unit"], row["phase"])
    assert (parts > 1) == (width < 200)


def _fmt_us(us: float, signed: bool = False) -> str:
    mag = abs(us)
    sign = ("+" if us > 0 else "−" if us < 0 else "±") if signed else ""
    return sign + (f"{mag / 1e3:.1f} ms" if mag >= 1000 else f"{mag:.0f} µs")


def _count(x: float) -> str:
    return f"{x:.0f}" if float(x).is_integer() else f"{x:.1f}"


@pytest.mark.parametrize("width", WIDTHS)
def test_diff_shows_every_number_whole(tmp_path, width):
    from fsdpbench.analysis import derived
    from fsdpbench.report.terminal.diff import OPS_IN_TERMINAL, render_diff

    run = hand_built_run(tmp_path, ["torch-prefetch2-mesh1x2-pdtbf16", LONG_ARM])
    [result] = derived.diff_run(run)
    text = drawn(lambda con: render_diff(result, con), width)
    assert_fits(text, width, _op_name_shortened)
    data = result.to_dict()
    mean = data["side_by_side"]["mean"]
    numbers = [
        _fmt_us(mean[side][k], signed=side == "delta")
        for side in ("base", "test", "delta")
        for k in mean["base"]
        if k != "overlap_ratio"
    ]
    numbers += [f"{100 * mean[side]['overlap_ratio']:.1f}%" for side in ("base", "test")]
    for c in data["collectives"]:
        numbers += [_count(c["base_count"]), _count(c["test_count"]), f"{c['count_ratio']:.1f}×"]
    for op in data["ops"][:OPS_IN_TERMINAL]:
        numbers += [_fmt_us(op["base_us"]), _fmt_us(op["test_us"]), _fmt_us(op["delta_us"], signed=True)]
    assert len(numbers) > 20 and not missing_numbers(text, numbers)


def _summary() -> dict:
    sample = orjson.loads((Path(__file__).parents[1] / "docs" / "img" / "terminal_sample.json").read_bytes())
    sample["arms"] = {(LONG_ARM if label == "hyper" else label): a for label, a in sample["arms"].items()}
    for c in sample["comparisons"]:
        c.update({k: LONG_ARM for k in ("base", "test") if c[k] == "hyper"})
    return sample


@pytest.mark.parametrize("width", WIDTHS)
def test_ab_closing_tables_show_every_number_and_arm_whole(width):
    """The per-arm table (medians, p10, p90 in ms) and the phase table (slowest rank and rank 0 per phase)
    of a run with a 39-character arm label."""
    from fsdpbench.report.console import print_summary

    summary = _summary()
    text = drawn(lambda con: print_summary(con, summary), width)
    assert_fits(text, width)
    numbers = []
    for arm in summary["arms"].values():
        numbers += [f"{arm[k]:.1f}" for k in ("median_ms", "p10_ms", "p90_ms")]
        numbers += [f"{v:.1f}" for view in ("max_over_ranks", "rank0") for v in arm["phases"][view].values()
                    if isinstance(v, float)]  # fmt: skip
    assert not missing_numbers(text, numbers)
    assert all(whole(text, label) for label in summary["arms"])


@pytest.mark.parametrize("width", WIDTHS)
def test_sweep_overview_shows_every_cell_whole(tmp_path, monkeypatch, width):
    """The study's overview (test_study's hand-written tree): each setting, median, ratio and CI whole in
    its cell of the experiment's row, and every word of each conclusion whole."""
    import test_study
    from fsdpbench.report.terminal.sweep import print_overview
    from fsdpbench.run.sweep import load_sweep

    monkeypatch.setattr("fsdpbench.config.arms.hyper_available", lambda: True)
    tree = test_study._study_tree(tmp_path, load_sweep(test_study.STUDY))
    text = drawn(lambda con: print_overview(con, tree, "sweep study: overview"), width)
    assert_fits(text, width)
    cells = {}
    for line in text.splitlines():
        if line.startswith("│") and line[1:].strip()[:1].isalpha():
            name, *rest = (c.strip() for c in line.strip("│").split("│"))
            cells.setdefault(name, []).extend(rest)
    for name, row in test_study.EXPECTED_ROWS.items():
        assert set(row[1:-1]) <= set(cells[name]), name
        assert all(whole(text, word) for word in row[-1].split()), name


@pytest.mark.parametrize("width", WIDTHS)
def test_a_real_profile_analysed_with_units_and_replay_shows_every_number_whole(profiled_ab_run, width):
    """The shared profiled gloo run (2 ranks, fsdpbench's own ranges): ``analyze``'s tables, the unit ×
    phase rows, the waiting vs transferring split and the replay's critical path, whole at every width."""
    from fsdpbench.report.terminal.analyze import render_analysis
    from fsdpbench.report.terminal.replay import REPLAY_TOP, render_replay
    from fsdpbench.report.terminal.units import render_units

    arm = sorted((profiled_ab_run / "profiles").iterdir())[0]
    res = _analysis((arm,), replay=True)

    def draw(con: Console) -> None:
        render_analysis(res, console=con)
        render_units(res, con)
        render_replay(res, con)

    text = drawn(draw, width)
    assert_fits(text, width, _op_name_shortened)
    data = _json(res)
    numbers = analyze_numbers(data, wide=False)
    for r in data["ranks"]:
        numbers += [ms3(row[k]) for row in r["units"] for k in ("compute_us", "comm_us", "exposed_us")]
    replay = data["replay"]
    numbers += [ms3(p["us"]) for p in replay["by_phase"]]
    numbers += [ms3(x["us"]) for x in replay["critical"][:REPLAY_TOP]]
    assert len(numbers) > 40 and not missing_numbers(text, numbers)
    units = {row["unit"] for r in data["ranks"] for row in r["units"]}
    assert all(whole(text, u) for u in units)
