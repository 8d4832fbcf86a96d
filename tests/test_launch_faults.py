"""Failures stay contained: bad input is one line before any launch; a hung rank is killed with its
whole process group, results survive, and --resume runs only what is missing; OOM is named."""

from __future__ import annotations

import orjson
import pytest

import fsdpbench.config
from helpers import free_port, processes_mentioning, run_cli

TINY = ["--seq-len", "32", "--warmup", "1", "--steps", "2", "--no-report"]


def _one_line_error(proc, needle: str) -> None:
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ": error: " in ln]
    assert len(errors) == 1 and needle in errors[0], proc.stderr


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--arms", "jax"], "unknown backend 'jax'"),
        (["--arms", "torch:depth=1"], "unknown option 'depth'"),
        (["--arms", "torch:prefetch=x"], "prefetch='x'; use default, none or a depth N >= 0"),
        (["--arms", "torch", "--mesh", "3"], "covers 3 ranks but the world size is 2"),
        (["--arms", "torch", "--layers", "0"], "--layers must be >= 1"),
        (["--arms", "torch", "--seq-len", "0"], "seq_len must be an integer >= 1"),
        (["--arms", "torch", "--config", "/nonexistent.toml"], "no such file"),
        (["--resume", "/nonexistent_run"], "no manifest.json"),
    ],
)
def test_bad_input_is_one_clear_line_before_any_launch(tmp_path, args, needle):
    proc = run_cli("ab", *args, "--out", str(tmp_path), timeout=60)
    _one_line_error(proc, needle)
    assert not list(tmp_path.glob("ab_*")), "a run folder was created for a bad command"


@pytest.mark.skipif(fsdpbench.config.hyper_available(), reason="hyper_parallel is installed here")
def test_missing_hyper_parallel_is_named_with_the_fix(tmp_path):
    _one_line_error(
        run_cli("ab", "--arms", "torch,hyper", "--out", str(tmp_path), timeout=60),
        "needs hyper_parallel, which is not installed",
    )


@pytest.mark.distributed
@pytest.mark.timeout(200)
def test_hung_rank_is_killed_with_its_whole_process_group(tmp_path):
    proc = run_cli(
        "run",
        "--arm",
        "torch",
        *TINY,
        "--out",
        str(tmp_path),
        "--timeout",
        "15",
        "--master-port",
        str(free_port()),
        timeout=150,
        env={"FSDPBENCH_FAULT": "hang:torch:0:1:0"},
    )
    _one_line_error(proc, "arm 'torch' round 0: timed out after 15 s")
    (run_dir,) = tmp_path.glob("run_*")
    status = orjson.loads((run_dir / "launches/torch/round0/status.json").read_bytes())
    assert status["rc"] != 0 and "process group was killed" in status["error"]
    spec = str(run_dir.resolve() / "launches/torch/round0/spec.json")
    leftovers = processes_mentioning(spec)
    assert leftovers == [], f"ranks still running: {leftovers}"


@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_out_of_memory_is_named_and_resume_runs_only_the_missing_round(tmp_path):
    args = ["ab", "--arms", "torch,torch:prefetch=1", "--rounds", "1", "--no-profile", *TINY]
    args += ["--out", str(tmp_path)]
    proc = run_cli(*args, timeout=200, env={"FSDPBENCH_FAULT": "oom:torch-prefetch1:0:1:1"})
    _one_line_error(proc, "arm 'torch-prefetch1' round 0: out of memory on rank 1")
    assert "reduce --seq-len" in proc.stderr
    (run_dir,) = tmp_path.glob("ab_*")
    summary = orjson.loads((run_dir / "summary.json").read_bytes())
    assert summary["arms"]["torch"]["status"] == "ok"
    assert summary["missing"] == [{"arm": "torch-prefetch1", "round": 0, "why": "not run yet"}]
    torch_status = (run_dir / "launches/torch/round0/status.json").read_bytes()

    proc = run_cli("ab", "--resume", str(run_dir), "--no-report", timeout=200)
    assert proc.returncode == 0, proc.stderr
    assert (run_dir / "launches/torch/round0/status.json").read_bytes() == torch_status  # not rerun
    steps = [orjson.loads(ln) for ln in (run_dir / "steps.jsonl").read_bytes().splitlines()]
    assert sorted((s["arm"], s["step"]) for s in steps) == sorted(
        (a, i) for a in ("torch", "torch-prefetch1") for i in range(3)
    )  # the failed attempt's step 0 is gone
    summary = orjson.loads((run_dir / "summary.json").read_bytes())
    assert (
        summary["missing"] == [] and summary["parity"]["valid"] and summary["parity"]["steps_compared"] == 3
    )
    assert list((run_dir / "launches/torch-prefetch1").glob("round0.failed_*/error_rank1.json"))


def test_crash_message_names_the_rank_that_failed_first_not_its_peers(tmp_path):
    from fsdpbench.results.run_folder import write_json
    from fsdpbench.run.failures import explain

    write_json(
        tmp_path / "error_rank0.json",
        {
            "rank": 0,
            "type": "DistBackendError",
            "message": "Connection closed by peer",
            "oom": False,
            "time": 1.0,
        },
    )
    write_json(
        tmp_path / "error_rank1.json",
        {"rank": 1, "type": "RuntimeError", "message": "shape mismatch", "oom": False, "time": 2.0},
    )
    message = explain(tmp_path, 1)
    assert message.startswith(
        "rank 1 crashed with RuntimeError: shape mismatch — then, as consequences: rank 0"
    )
