"""The study as the study wrote it: configs A–E (sweep and ab files agree), the dry-run listing, and the
sweep index's overview table (settings, medians, ratio, CI and a one-line conclusion per experiment)."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import orjson
import pytest

from fsdpbench.config import RunConfig, read_toml
from fsdpbench.results import run_folder
from fsdpbench.run.sweep import VOLATILE, Sweep, load_sweep, write_state
from helpers import analysis, inspect_html, rank

REPO = Path(__file__).resolve().parents[1]
STUDY = REPO / "configs" / "study.toml"

# The issue's list, by hand: (seq_len, layers, prefetch, mesh, profiled); every arm, 8 NPUs, full shape
EXPERIMENTS = {
    "A": (16384, 4, 0, "", True),  # prefetch 0 = the library's default
    "B": (16384, 4, 1, "", False),
    "C": (8192, 8, 1, "", True),
    "D": (8192, 8, 1, "2x4", False),
    "E": (8192, 8, 1, "2x4", True),
}


@pytest.fixture
def study(monkeypatch) -> Sweep:
    # the files name hyper arms; whether hyper_parallel is installed here is not what these tests check
    monkeypatch.setattr("fsdpbench.config.arms.hyper_available", lambda: True)
    return load_sweep(STUDY)


def test_the_study_sweep_is_experiments_a_to_e_as_the_issue_lists_them(study):
    raw = read_toml(str(STUDY))
    assert [e["name"] for e in raw["experiment"]] == list(EXPERIMENTS)
    assert [c.name for c in study.cells] == list(EXPERIMENTS)
    for cell in study.cells:
        cfg = cell.config
        seq_len, layers, prefetch, mesh, profiled = EXPERIMENTS[cell.name]
        assert (cfg.seq_len, cfg.model.num_hidden_layers, cfg.profile) == (seq_len, layers, profiled), (
            cell.name
        )
        assert [(a.backend, a.label, a.prefetch, a.mesh) for a in cfg.arms] == [
            ("torch", "torch", prefetch, mesh),
            ("hyper", "hyper", prefetch, mesh),
        ], cell.name
        assert (cfg.device, cfg.nproc, cfg.preset, cfg.batch_size, cfg.optimizer) == (
            "npu",
            8,
            "full",
            1,
            "adamw",
        )
        assert all((a.param_dtype, a.reduce_dtype) == ("bfloat16", "float32") for a in cfg.arms)
        # a profiled-only experiment has one round; the timing experiments B-D interleaved rounds until the
        # verdict is sure: at least 4, at most 16, a group-sequential 95% CI that excludes 1 or is narrower than 2%
        timing = cell.name in ("B", "C", "D")
        assert (cfg.rounds_auto, cfg.rounds) == ((True, 4) if timing else (False, 1)), cell.name
        if timing:
            assert (cfg.ci_target, cfg.max_rounds) == (2.0, 16), cell.name


@pytest.mark.parametrize("letter", list(EXPERIMENTS))
def test_each_study_ab_config_resolves_to_its_sweep_experiment(study, letter):
    [path] = sorted((REPO / "configs").glob(f"study-{letter}-*.toml"))
    ab = RunConfig.from_sources(str(path), env={}).to_dict()
    cell = next(c for c in study.cells if c.name == letter).config.to_dict()
    skip = {*VOLATILE, "name"}
    assert {k: v for k, v in ab.items() if k not in skip} == {k: v for k, v in cell.items() if k not in skip}
    assert ab["name"] == f"study-{letter}"


def test_dry_run_lists_a_to_e_with_the_settings_of_the_toml(study, monkeypatch, capsys):
    from fsdpbench.commands import sweep as sweep_command

    monkeypatch.setenv("COLUMNS", "250")
    args = argparse.Namespace(config=str(STUDY), out=None, only=None, dry_run=True, index_only=False)
    assert sweep_command.main(args) == 0
    lines = capsys.readouterr().out.splitlines()
    raw = read_toml(str(STUDY))
    base = raw["base"]
    for exp in raw["experiment"]:
        [row] = [line for line in lines if line.startswith(f"│ {exp['name']} ")]
        cells = [c.strip() for c in row.strip("│").split("│")]
        mesh = f"HSDP {exp['mesh'].replace('x', '×')}" if exp.get("mesh") else f"FSDP ×{base['nproc']}"
        prefetch = "0 (default)" if exp["prefetch"] == 0 else str(exp["prefetch"])
        assert cells == [
            exp["name"],
            mesh,
            str(exp["seq_len"]),
            str(exp["layers"]),
            prefetch,
            "torch,hyper",
            str(exp["rounds"]),
            "yes" if exp["profile"] else "no",
            "pending",
        ]


# --------------------------------------------------------------------------------------------
# The overview table, from hand-written cell results (fields as docs/DATA.md specifies them)
# --------------------------------------------------------------------------------------------


def _summary(medians: dict[str, list[float]], comparison: dict, parity_valid: bool = True) -> dict:
    return {
        "schema_version": 1,
        "arms": {
            arm: {
                "status": "ok",
                "rounds": [{"round": r, "median_ms": m, "n_steps": 8} for r, m in enumerate(rounds)],
                "median_ms": sorted(rounds)[len(rounds) // 2],
            }
            for arm, rounds in medians.items()
        },
        "comparisons": [{"base": "torch", "test": "hyper", **comparison}],
        "verdict": comparison.get("verdict"),
        "parity": {
            "valid": parity_valid,
            "reason": None if parity_valid else "hyper step 0: loss 9 vs torch 8",
        },
        "missing": [],
        "profiles": {},
    }


def _diff(title: str, subject: str, overlap_base: float, overlap_test: float) -> dict:
    return {
        "schema_version": 1,
        "base": "torch",
        "test": "hyper",
        "side_by_side": {
            "mean": {"base": {"overlap_ratio": overlap_base}, "test": {"overlap_ratio": overlap_test}}
        },
        "findings": [
            {
                "id": "step_time",
                "severity": "info",
                "title": "Profiled step: hyper is 3.99× slower than torch",
            },
            {"id": "fragmentation", "severity": "high", "title": title, "subject": subject},
            {
                "id": "low_overlap",
                "severity": "high",
                "title": "hyper leaves 5.0 ms exposed",
                "subject": "hyper",
            },
        ],
    }


def _study_tree(tmp_path: Path, study: Sweep) -> Path:
    """The study's sweep tree with hand-written results: A (1 round, profiled; an old summary without
    `rounds` and with the old verdict text), B (3 rounds, hyper faster), C (profiled, analysis.json only),
    D (CI contains 1, parity failed), E (failed before writing anything)."""
    study.tree = tmp_path / "study"
    cells = {c.name: c for c in study.cells}
    runs = {
        "A": (
            _summary(
                {"torch": [100.0], "hyper": [399.0]},
                {
                    "ratio": 3.99,
                    "ci95": None,
                    "significant": False,
                    "verdict": "no difference detected between hyper and torch (ratio 3.990 from one round per arm)",
                },
            ),
            _diff("hyper's communication is 10.3× more fragmented than torch's", "hyper", 0.58, 0.44),
            None,
        ),
        "B": (
            _summary(
                {"torch": [812.0, 810.0, 815.0], "hyper": [744.6, 740.0, 750.0]},
                {"ratio": 744.6 / 812.0, "ci95": [0.905, 0.931], "rounds": [3, 3], "significant": True},
            ),
            None,
            None,
        ),
        "C": (
            _summary(
                {"torch": [400.0, 401.0, 399.0], "hyper": [416.0, 417.0, 415.0]},
                {"ratio": 1.04, "ci95": [1.02, 1.06], "rounds": [3, 3], "significant": True},
            ),
            None,
            {
                "torch": analysis(rank(0, overlap=0.8), rank(1, overlap=0.9)),
                "hyper": analysis(rank(0, overlap=0.5), rank(1, overlap=0.7)),
            },
        ),
        "D": (
            _summary(
                {"torch": [300.0, 310.0, 290.0], "hyper": [301.0, 305.0, 298.0]},
                {"ratio": 1.003, "ci95": [0.99, 1.02], "rounds": [3, 3], "significant": False},
                parity_valid=False,
            ),
            None,
            None,
        ),
    }
    for name, (summary, diff, analyses) in runs.items():
        run = study.tree / f"{name}_20261203_120000"
        run.mkdir(parents=True)
        (run / run_folder.SUMMARY).write_bytes(orjson.dumps(summary))
        if diff is not None:
            (run / run_folder.DIFF_JSON).write_bytes(orjson.dumps(diff))
        if analyses is not None:
            (run / run_folder.ANALYSIS).write_bytes(orjson.dumps(analyses))
        cells[name].run_dir, cells[name].status = run, "done"
    cells["E"].status, cells["E"].error = "failed", "rank 3 crashed"
    write_state(study)
    return study.tree


# Each row by hand: the settings from the issue's list, medians from the summaries above, ratio and CI,
# and the conclusion: speed ("1.09× faster": 812 / 744.6 = 1.0905; "−8.3%": 744.6 / 812 − 1 = −0.0830),
# then the top finding after the step-time headline, then each arm's mean overlap.
EXPECTED_ROWS = {
    "A": [
        "A", "FSDP ×8", "16384", "4", "0 (default)", "yes", "100.0", "399.0", "3.990", "none (1 round)",
        "cannot tell yet: hyper 3.99× slower (+299.0%) from 1 round per arm, no CI (needs 3+ rounds per arm); "
        "its communication is 10.3× more fragmented than torch's, overlap 44% (hyper) vs 58% (torch)",
    ],
    "B": [
        "B", "FSDP ×8", "16384", "4", "1", "no", "812.0", "744.6", "0.917", "0.905–0.931",
        "hyper 1.09× faster (−8.3%)",
    ],
    "C": [
        "C", "FSDP ×8", "8192", "8", "1", "yes", "400.0", "416.0", "1.040", "1.020–1.060",
        "hyper 1.04× slower (+4.0%); overlap 60% (hyper) vs 85% (torch)",
    ],
    "D": [
        "D", "HSDP 2×4", "8192", "8", "1", "no", "300.0", "301.0", "1.003", "0.990–1.020",
        "INVALID (losses differ): no difference detected (hyper/torch 1.003, CI 0.990–1.020)",
    ],
    "E": ["E", "HSDP 2×4", "8192", "8", "1", "yes", "—", "—", "—", "—", "failed: rank 3 crashed"],
}  # fmt: skip


def test_overview_writes_the_study_table_from_the_cells_results(tmp_path, study):
    from fsdpbench.report.index import overview, write_index

    tree = _study_tree(tmp_path, study)
    table = overview(tree)
    assert table.headers == [
        "experiment", "mesh", "seq_len", "layers", "prefetch", "profiled", "torch (ms)", "hyper (ms)",
        "ratio", "95% CI", "conclusion",
    ]  # fmt: skip
    assert {row[0]: row for row in table.rows} == EXPECTED_ROWS
    write_index(tree)
    md = (tree / "index.md").read_text()
    for row in EXPECTED_ROWS.values():
        assert "| " + " | ".join(row) + " |" in md
    # the cells table regenerates old summaries' verdicts from their numbers: A cannot tell, not "no difference"
    [a_row] = [line for line in md.splitlines() if line.startswith("| A | done |")]
    assert "cannot tell yet whether hyper differs from torch: ratio 3.990 from 1 round per arm" in a_row
    assert "no difference" not in a_row
    text = " ".join(inspect_html(tree / "index.html").text)
    assert EXPECTED_ROWS["A"][-1] in text and EXPECTED_ROWS["B"][-1] in text


def test_a_cell_whose_summary_is_not_a_summary_shows_no_result(tmp_path, study):
    """B's summary.json replaced by JSON of the wrong shape (arms as a list): B's row has no medians and
    no ratio, the other cells' rows are as before."""
    from fsdpbench.report.index import overview

    tree = _study_tree(tmp_path, study)
    (next(tree.glob("B_*")) / run_folder.SUMMARY).write_bytes(orjson.dumps({"arms": ["torch", "hyper"]}))
    rows = {row[0]: row for row in overview(tree).rows}
    assert rows["B"][6:10] == ["—", "—", "—", "—"]
    assert {k: v for k, v in rows.items() if k != "B"} == {k: v for k, v in EXPECTED_ROWS.items() if k != "B"}


def test_a_cells_analysis_or_diff_of_the_wrong_kind_is_left_out_of_its_conclusion(tmp_path, study):
    """C's analysis.json with an arm of another schema and A's diff.json of another schema: C loses its
    overlaps, A its top finding and the diff's overlaps, their speeds stay; nothing raises."""
    from fsdpbench.report.index import overview

    tree = _study_tree(tmp_path, study)
    c_run, a_run = next(tree.glob("C_*")), next(tree.glob("A_*"))
    broken = {"torch": {"ranks": [{"overlap_ratio": 0.8}]}, "hyper": analysis(rank(0, overlap=0.5))}
    (c_run / run_folder.ANALYSIS).write_bytes(orjson.dumps(broken))
    (a_run / run_folder.DIFF_JSON).write_bytes(
        orjson.dumps({**_diff("x", "hyper", 0.1, 0.2), "schema_version": 9})
    )
    rows = {row[0]: row for row in overview(tree).rows}
    assert rows["C"][-1] == "hyper 1.04× slower (+4.0%)"  # one arm's overlap alone is not shown
    assert rows["A"][-1] == EXPECTED_ROWS["A"][-1].split(";")[0]
    assert rows["B"] == EXPECTED_ROWS["B"]


def test_the_sweep_prints_the_overview_in_the_terminal(tmp_path, study):
    from rich.console import Console

    from fsdpbench.report.terminal.sweep import print_overview

    tree = _study_tree(tmp_path, study)
    console = Console(record=True, width=400)
    print_overview(console, tree, "sweep study: overview")
    out = console.export_text()
    for row in EXPECTED_ROWS.values():
        [line] = [x for x in out.splitlines() if x.startswith(f"│ {row[0]} ")]
        assert [c.strip() for c in line.strip("│").split("│")] == row


def test_a_cell_with_more_than_two_arms_gets_a_row_per_comparison(tmp_path, study):
    from fsdpbench.report.index import overview

    tree = _study_tree(tmp_path, study)
    run = next(tree.glob("B_*"))
    summary = orjson.loads((run / run_folder.SUMMARY).read_bytes())
    summary["comparisons"].append(
        {"base": "torch", "test": "torch-pf", "ratio": 2.0, "ci95": [1.9, 2.1], "rounds": [3, 3]}
    )
    (run / run_folder.SUMMARY).write_bytes(orjson.dumps(summary))
    rows = [r for r in overview(tree).rows if r[0] == "B"]
    assert [r[-3] for r in rows] == ["0.917 (hyper/torch)", "2.000 (torch-pf/torch)"]
    assert rows[1][-1] == "torch-pf 2.00× slower (+100.0%)"


@pytest.mark.distributed
@pytest.mark.timeout(600)
def test_overview_of_a_real_profiled_one_round_run(tmp_path, study, profiled_ab_run):
    """The shared profiled fixture (torch vs torch:prefetch=1, 1 round) as a sweep cell: the row's numbers
    and conclusion come from its own summary.json and diff.json, read here."""
    from fsdpbench.report import write_report
    from fsdpbench.report.index import overview

    study.tree = tmp_path / "study"
    study.tree.mkdir()
    run = Path(shutil.copytree(profiled_ab_run, study.tree / "A_20261203_120000"))
    write_report(run)  # analysis.json and diff.json, as the sweep's cell report writes them
    manifest = orjson.loads((run / run_folder.MANIFEST).read_bytes())
    cell = study.cells[0]
    cell.config = RunConfig.from_dict(manifest["config"])
    cell.run_dir, cell.status = run, "done"
    study.cells = [cell]
    write_state(study)
    summary = orjson.loads((run / run_folder.SUMMARY).read_bytes())
    diff = orjson.loads((run / run_folder.DIFF_JSON).read_bytes())
    [comp] = summary["comparisons"]
    base, test = comp["base"], comp["test"]
    ratio = summary["arms"][test]["median_ms"] / summary["arms"][base]["median_ms"]
    assert comp["ci95"] is None and comp["ratio"] == pytest.approx(ratio)
    multiple = f"{ratio:.2f}× slower" if ratio > 1 else f"{1 / ratio:.2f}× faster"
    pct = f"{(ratio - 1) * 100:+.1f}%".replace("-", "−")
    mean = diff["side_by_side"]["mean"]
    overlap = (
        f"overlap {100 * mean['test']['overlap_ratio']:.0f}% ({test}) vs "
        f"{100 * mean['base']['overlap_ratio']:.0f}% ({base})"
    )
    [row] = overview(study.tree).rows
    layers = str(manifest["config"]["model"]["num_hidden_layers"])
    assert row[:6] == ["A", "FSDP ×2", "128", layers, f"{base} 0 (default) / {test} 1", "yes"]
    assert row[6:10] == [
        *(f"{summary['arms'][a]['median_ms']:.1f}" for a in (base, test)),
        f"{ratio:.3f}",
        "none (1 round)",
    ]
    finding = next(f for f in diff["findings"] if f["id"] != "step_time")
    top = finding["title"]
    if finding.get("subject") == test and top.startswith(f"{test}'s "):
        top = "its " + top[len(test) + 3 :]
    elif top[:1].isupper() and top[1:2].islower():
        top = top[0].lower() + top[1:]
    assert row[-1] == (
        f"cannot tell yet: {test} {multiple} ({pct}) from 1 round per arm, no CI (needs 3+ rounds per arm); "
        f"{top}, {overlap}"
    )


def test_index_only_rewrites_the_index_and_prints_the_overview(tmp_path, study, monkeypatch, capsys):
    from fsdpbench.commands import sweep as sweep_command

    tree = _study_tree(tmp_path, study)
    monkeypatch.setenv("COLUMNS", "400")
    args = argparse.Namespace(config=str(STUDY), out=tmp_path, only=None, dry_run=False, index_only=True)
    assert sweep_command.main(args) == 0
    out = capsys.readouterr().out
    assert "sweep study: overview" in out and (tree / "index.html").is_file()
    [line] = [x for x in out.splitlines() if x.startswith("│ B ")]
    assert [c.strip() for c in line.strip("│").split("│")] == EXPECTED_ROWS["B"]


def test_a_sweep_ends_with_the_overview_in_the_terminal(tmp_path, monkeypatch, capsys):
    """The whole command with the launcher's run_ab replaced by test_sweep's fake (it writes summaries)."""
    from fsdpbench.commands import sweep as sweep_command
    from helpers import TINY_SWEEP, FakeRunAb

    monkeypatch.setattr("fsdpbench.run.launcher.run_ab", FakeRunAb())
    monkeypatch.setenv("COLUMNS", "400")
    (tmp_path / "tiny.toml").write_text(TINY_SWEEP)
    args = argparse.Namespace(
        config=str(tmp_path / "tiny.toml"), out=tmp_path, only=None, dry_run=False, index_only=False
    )
    assert sweep_command.main(args) == 0
    out = capsys.readouterr().out
    [line] = [x for x in out.splitlines() if x.startswith("│ a-s128 ")]
    cells = [c.strip() for c in line.strip("│").split("│")]
    # the fake's ratio for seq_len 128: 1 + 0.01 * 128 / 64 = 1.02, CI [1.01, 1.03], medians 100 and 102
    assert cells == [
        "a-s128", "FSDP ×2", "128", "2", "torch 0 (default) / torch-pf 1", "no", "100.0", "102.0", "1.020",
        "1.010–1.030", "torch-pf 1.02× slower (+2.0%)",
    ]  # fmt: skip


def test_the_run_report_says_no_ci_rather_than_not_significant_for_one_round(tmp_path):
    from fsdpbench.report import write_report
    from helpers import make_run

    run = make_run(tmp_path, profiled=False)
    summary = orjson.loads((run / run_folder.SUMMARY).read_bytes())
    summary["comparisons"][0].update(ci95=None, significant=False, rounds_needed_1pct=None)
    (run / run_folder.SUMMARY).write_bytes(orjson.dumps(summary))
    write_report(run)
    [row] = [x for x in (run / "report.md").read_text().splitlines() if x.startswith("| hyper vs torch |")]
    assert "**no CI: cannot tell yet**" in row and "not significant" not in row
