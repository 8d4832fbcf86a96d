"""Sweeps: grid expansion, validation before anything runs, resume, and the index report."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from fsdpbench.errors import ConfigError
from fsdpbench.run.sweep import expand, find_run_dir, load_sweep, run_status, run_sweep
from helpers import TINY_SWEEP, FakeRunAb, inspect_html, write_sweep_file

REPO = Path(__file__).resolve().parents[1]


def test_grid_expands_experiment_by_experiment_naming_only_varying_axes(tmp_path):
    sweep = load_sweep(write_sweep_file(tmp_path, TINY_SWEEP), out=tmp_path / "results")
    names = [c.name for c in sweep.cells]
    assert names == ["a-s64", "a-s128", "b-l2", "b-l4"]
    by_name = {c.name: c.config for c in sweep.cells}
    assert by_name["a-s128"].seq_len == 128 and by_name["a-s128"].rounds == 1
    assert by_name["b-l4"].model.num_hidden_layers == 4 and by_name["b-l4"].rounds == 2
    assert [a.label for a in by_name["b-l2"].arms] == ["torch", "torch-pf"]
    assert sweep.tree == tmp_path / "results" / "tiny"
    assert all(c.config.out == str(sweep.tree) for c in sweep.cells)


def test_prefetch_and_mesh_axes_apply_to_every_arm_and_arm_sets_multiply():
    spec = {
        "grid": {
            "prefetch": [0, 2],
            "mesh": ["", "1x2"],
            "arms": [["torch", "torch:reshard_after_forward=false"], "torch,torch:ac=full"],
        }
    }
    _, _, cells = expand(spec, "x.toml")
    assert len(cells) == 2 * 2 * 2
    assert cells[0][0] == "grid-p0-mdefault-arms0"
    assert {c[2]["arms"] for c in cells} == {"torch,torch:reshard_after_forward=false", "torch,torch:ac=full"}


def test_the_cpu_study_file_holds_three_cells_on_two_gloo_ranks(monkeypatch):
    # configs/study.toml (experiments A-E) is checked in test_study.py
    monkeypatch.setattr("fsdpbench.config.arms.hyper_available", lambda: True)
    cpu = load_sweep(REPO / "configs" / "study-cpu.toml")
    assert len(cpu.cells) == 3 and all(c.config.device == "cpu" and c.config.nproc == 2 for c in cpu.cells)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[sweeep]\nname='x'", "unknown table"),
        ("[grid]\nsteps = [1, 2]", "not axes"),
        ("[[experiment]]\nname='a'\n[[experiment]]\nname='a'", "appears twice"),
        ("[[experiment]]\nname='a'\nlayers = [2, 0]\narms='torch'", "cell 'a-l0'.*layers must be >= 1"),
        ("[base]\nbogus = 1\n[grid]\narms='torch'", "unknown option 'bogus'"),
        ("[sweep]\nname = 'a b'", "may hold only"),
        ("[sweep]\nnmae = 'x'", "takes name and out"),
        ("[[experiment]]\nname='a'\nseq_len = []", "axis seq_len is an empty list"),
    ],
)
def test_bad_sweep_files_fail_before_anything_runs_naming_the_problem(tmp_path, text, message):
    with pytest.raises(ConfigError, match=message):
        load_sweep(write_sweep_file(tmp_path, text), out=tmp_path)


def test_a_rerun_skips_finished_cells_and_resumes_the_failed_one(tmp_path):
    sweep = load_sweep(write_sweep_file(tmp_path, TINY_SWEEP), out=tmp_path)
    fake = FakeRunAb(crash_once={"a-s128"})
    cells = run_sweep(sweep, run_ab=fake)
    assert {c.name: c.status for c in cells} == {
        "a-s64": "done",
        "a-s128": "failed",
        "b-l2": "done",
        "b-l4": "done",
    }
    failed = next(c for c in cells if c.name == "a-s128")
    assert "rank 1 crashed" in failed.error
    state = orjson.loads((sweep.tree / "sweep.json").read_bytes())
    assert [c["status"] for c in state["cells"]] == ["done", "failed", "done", "done"]

    again = load_sweep(write_sweep_file(tmp_path, TINY_SWEEP), out=tmp_path)
    fake2 = FakeRunAb()
    cells = run_sweep(again, run_ab=fake2)
    partial_dir = find_run_dir(sweep.tree, "a-s128")
    assert fake2.calls == [("a-s128", partial_dir)]  # only the failed cell, resumed in its own folder
    assert all(c.status == "done" for c in cells)
    assert len(list(sweep.tree.glob("a-s128_*"))) == 1


def test_index_report_compares_cells_with_a_ratio_plot_and_links(tmp_path):
    sweep = load_sweep(write_sweep_file(tmp_path, TINY_SWEEP), out=tmp_path)
    run_sweep(sweep, run_ab=FakeRunAb(crash_once={"b-l4"}))
    page = inspect_html(sweep.tree / "index.html")
    assert page.external == [] and "fig-ratio_per_cell" in page.figures
    md = (sweep.tree / "index.md").read_text()
    cells_table = md.split("## Cells")[1]  # the overview above it has a row per cell too (test_study.py)
    rows = [line for line in cells_table.splitlines() if line.startswith("| a-") or line.startswith("| b-")]
    assert len(rows) == 4
    assert "| a-s128 | done | 128 |" in md and "1.020" in md  # ratio = 1 + 0.01 * 128 / 64
    assert "1 cell(s) failed" in md and "rank 1 crashed" in md
    # `fsdpbench report TREE` rewrites the index of a sweep tree
    import argparse

    from fsdpbench.commands import report as report_command

    (sweep.tree / "index.html").unlink()
    assert report_command.main(argparse.Namespace(run_dir=sweep.tree)) == 0
    assert (sweep.tree / "index.html").is_file()


def test_changed_configuration_refuses_to_resume_in_the_same_tree(tmp_path):
    sweep = load_sweep(write_sweep_file(tmp_path, TINY_SWEEP), out=tmp_path)
    run_sweep(sweep, run_ab=FakeRunAb(), write_index=False)
    changed = load_sweep(
        write_sweep_file(tmp_path, TINY_SWEEP.replace("steps = 1", "steps = 2")), out=tmp_path
    )
    with pytest.raises(ConfigError, match=r"different configuration \(steps: 1 → 2\).*new --out"):
        run_sweep(changed, run_ab=FakeRunAb())


def test_only_runs_matching_cells_and_rejects_a_glob_that_matches_none(tmp_path):
    sweep = load_sweep(write_sweep_file(tmp_path, TINY_SWEEP), out=tmp_path)
    fake = FakeRunAb()
    run_sweep(sweep, run_ab=fake, only="b-*", write_index=False)
    assert [c[0] for c in fake.calls] == ["b-l2", "b-l4"]
    assert run_status(find_run_dir(sweep.tree, "a-s64")) == "pending"
    with pytest.raises(ConfigError, match="matches no cell"):
        run_sweep(sweep, run_ab=fake, only="zzz")


@pytest.mark.distributed
@pytest.mark.timeout(400)
def test_a_real_one_cell_sweep_runs_reports_and_is_skipped_on_rerun(tmp_path):
    from helpers import run_cli

    # one arm, one launch, to stay cheap; master_port stays 0: the launcher picks a free port per launch
    config = write_sweep_file(
        tmp_path,
        """
[sweep]
name = "e2e"
[base]
arms = ["torch:prefetch=1"]
preset = "tiny"
nproc = 2
device = "cpu"
warmup = 1
steps = 1
rounds = 1
[[experiment]]
name = "one"
seq_len = 64
layers = 2
""",
    )
    first = run_cli("sweep", "--config", str(config), "--out", str(tmp_path), timeout=360)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    tree = tmp_path / "e2e"
    run = find_run_dir(tree, "one")
    assert run_status(run) == "done"
    assert (run / "report.html").is_file() and (tree / "index.html").is_file()
    assert "torch-prefetch1" in (tree / "index.md").read_text()
    again = run_cli("sweep", "--config", str(config), "--out", str(tmp_path), timeout=120)
    assert again.returncode == 0 and "done already" in again.stdout
    assert list(tree.glob("one_*")) == [run]


def test_arm_tables_of_base_and_experiment_merge_like_an_ab_config(tmp_path):
    text = """
[base]
arms = "torch"
[base.arm]
param_dtype = "bfloat16"
reshard_after_forward = false
[[experiment]]
name = "x"
[experiment.arm]
param_dtype = "float32"
"""
    cell = load_sweep(write_sweep_file(tmp_path, text), out=tmp_path).cells[0]
    arm = cell.config.arms[0]
    assert (arm.param_dtype, arm.reshard_after_forward) == ("float32", False)


def test_index_says_which_cells_analysis_json_it_could_not_read(tmp_path):
    """A cell whose analysis.json is not JSON, and one whose arm entry does not decode: the index still
    shows both cells and names each file it left out (it used to skip them silently)."""
    from fsdpbench.report import write_index

    sweep = load_sweep(write_sweep_file(tmp_path, TINY_SWEEP), out=tmp_path)
    run_sweep(sweep, run_ab=FakeRunAb())
    state = orjson.loads((sweep.tree / "sweep.json").read_bytes())
    done = {c["name"]: sweep.tree / c["run_dir"] for c in state["cells"] if c.get("run_dir")}
    (done["a-s128"] / "analysis.json").write_text("{not json")
    (done["a-s64"] / "analysis.json").write_bytes(orjson.dumps({"torch": {"ranks": "not a list"}}))
    write_index(sweep.tree)
    md = (sweep.tree / "index.md").read_text()
    (banner,) = [line for line in md.splitlines() if "could not be read and are left out" in line]
    assert banner.startswith("> ⚠️ **WARNING**: 2 analysis file(s)")
    assert "cell a-s128: `analysis.json` is not a JSON object of arms" in banner
    assert "cell a-s64: arm `torch` of `analysis.json` does not decode (" in banner
    assert "| a-s128 | done | 128 |" in md and "| a-s64 | done | 64 |" in md  # the cells are still shown
