"""The suite runs on a checkout without ../shared: tests that read the real traces skip, none fail."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from helpers import REPO


@pytest.mark.timeout(240)
def test_tests_reading_shared_skip_when_it_is_absent(tmp_path):
    readers = sorted(
        p.name
        for p in (REPO / "tests").glob("test_*.py")
        if re.search(r"^from helpers import .*\b(SHARED|ASCEND_FIXTURES)\b", p.read_text(), re.M)
    )
    assert len(readers) >= 5  # the real-trace test modules are found
    env = {**os.environ, "FSDPBENCH_SHARED": str(tmp_path / "absent"), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", *readers],
        cwd=REPO / "tests",
        capture_output=True,
        text=True,
        env=env,
        timeout=220,
    )
    tail = proc.stdout[-3000:]
    assert proc.returncode == 0, tail
    summary = tail.strip().splitlines()[-1]
    assert "failed" not in summary and "error" not in summary, summary
    assert int(re.search(r"(\d+) skipped", summary).group(1)) >= 20, summary
    assert "absent: the real-trace fixtures live in ../shared" in proc.stdout
