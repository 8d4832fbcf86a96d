"""Ctrl-C during a launch and a failing report writer: results stay, nothing is left running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import types

import orjson
import pytest
from rich.console import Console

from fsdpbench.run.launcher import write_report_safely
from helpers import free_port, processes_mentioning


@pytest.mark.distributed
@pytest.mark.timeout(200)
def test_ctrl_c_kills_the_launch_and_keeps_a_summary(tmp_path):
    cmd = [
        sys.executable,
        "-m",
        "fsdpbench",
        "run",
        "--arm",
        "torch",
        "--steps",
        "500",
        "--warmup",
        "0",
        "--seq-len",
        "32",
        "--no-report",
        "--out",
        str(tmp_path),
        "--master-port",
        str(free_port()),
    ]
    proc = subprocess.Popen(
        cmd,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # a shell's background job inherits SIGINT ignored, and Python then installs no KeyboardInterrupt:
        # the run gets the disposition a terminal gives it, however this test was started
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        deadline = time.monotonic() + 150
        while not list(tmp_path.glob("run_*/steps.jsonl")) and time.monotonic() < deadline:
            time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert "interrupted; results written so far are kept" in err
    (run_dir,) = tmp_path.glob("run_*")
    status = orjson.loads((run_dir / "launches/torch/round0/status.json").read_bytes())
    assert status["error"] == "interrupted"
    summary = orjson.loads((run_dir / "summary.json").read_bytes())
    assert summary["missing"] == [{"arm": "torch", "round": 0, "why": "not run yet"}]
    spec = str(run_dir.resolve() / "launches/torch/round0/spec.json")
    leftovers = processes_mentioning(spec)
    assert leftovers == [], f"processes still running: {leftovers}"


def test_a_failing_report_writer_is_a_warning_not_a_lost_run(tmp_path, monkeypatch):
    def write_report(run_dir):
        raise RuntimeError("matplotlib exploded")

    monkeypatch.setitem(sys.modules, "fsdpbench.report", types.SimpleNamespace(write_report=write_report))
    console = Console(record=True, width=200)
    write_report_safely(tmp_path, console)
    text = console.export_text()
    assert "warning: the report could not be written (RuntimeError: matplotlib exploded)" in text
