"""Issue 33 points 4-5: torch_npu's profiler path rule is checked before launching on NPU, and the multi-node
collect sends only the Ascend output the analysis reads.

References, each independent of fsdpbench's own output:

* the path rule: torch_npu's own check, quoted from its source (github.com/Ascend/pytorch,
  ``torch_npu/utils/_path_manager.py`` ``_input_path_common_check``, lines 157-173 at v2.7.1-7.2.0,
  commit 831bb294, the same at v2.9.0-26.1.0, commit 323a8176), applied by the test to the names used;
* the collect: the real two-rank Ascend text export in ``shared/fixtures/ascend`` plus raw files named as
  torch_npu writes them (``PROF_*``, ``FRAMEWORK``), and the trace reader run on the original folder: what is
  sent must read to the same table.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from fsdpbench.results import run_folder
from fsdpbench.run import collect
from helpers import run_cli

TORCH_NPU_PATTERN = r"(\.|/|_|-|\s|[~0-9a-zA-Z]|[\u4e00-\u9fa5])+"  # _path_manager.py line 165, as written


@pytest.mark.parametrize(
    "arms, out, name, where",
    [
        ("torch:label=a+b,torch", "o", "ab", "arm label 'a+b'"),
        ("torch", "o@1", "ab", "--out"),
        ("torch", "o", "x=1", "--name 'x=1'"),
    ],
)
def test_a_path_torch_npu_would_refuse_stops_the_run_before_launching(tmp_path, arms, out, name, where):
    bad = {"arm label 'a+b'": "a+b", "--out": out, "--name 'x=1'": name}[where]
    assert re.fullmatch(TORCH_NPU_PATTERN, bad) is None  # torch_npu's own verdict on that part
    proc = run_cli(
        "ab", "--arms", arms, "--device", "npu", "--profile", "--out", str(tmp_path / out), "--name", name
    )
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert where in lines[0] and "torch_npu's profiler" in lines[0], lines[0]
    assert not (tmp_path / out).exists(), "something was created for a refused run"


@pytest.mark.parametrize("label", ["torch", "torch-upstream", "torch_npu v2.9", "hyper-prefetch1-memcacheon"])
def test_names_torch_npu_accepts_pass(tmp_path, label):
    from fsdpbench.run.ascend_parse import npu_profile_path_problem

    assert re.fullmatch(TORCH_NPU_PATTERN, label) is not None
    assert npu_profile_path_problem(tmp_path / "out dir", "ab", [label]) is None


def test_the_path_check_is_for_npu_profiles_only(tmp_path):
    from fsdpbench.config import RunConfig
    from fsdpbench.run.launcher import npu_profile_paths

    def cfg(**overrides):
        return RunConfig.from_sources(
            env={}, overrides={"arms": "torch:label=a+b", "out": str(tmp_path), **overrides}
        )

    npu_profile_paths(cfg(device="cpu", profile=True), None)  # CPU: Kineto has no such rule
    npu_profile_paths(cfg(device="npu", profile=False), None)  # no profile launch
    from fsdpbench.errors import ConfigError

    with pytest.raises(ConfigError, match="arm label 'a\\+b'"):
        npu_profile_paths(cfg(device="npu", profile=True), None)


RAW = {  # what torch_npu leaves beside the parsed output (names as in its source and a real export)
    "PROF_000001_20250101000000000_ABCDEFGH/device_0/data/aicore.data.0.slice_0": 4096,
    "PROF_000001_20250101000000000_ABCDEFGH/host/data/api_event.data": 2048,
    "FRAMEWORK/torch.op_range": 1024,
    "logs/ascend_pytorch_profiler_0.log": 10,
}


def test_collect_sends_the_parsed_ascend_output_and_leaves_the_raw_data_in_place(shared_fixtures, tmp_path):
    from fsdpbench.trace import read_rank

    fixture = shared_fixtures / "fixtures" / "ascend" / "msinsight_pt_text_level1"
    run_dir = tmp_path / "run"
    ldir = run_folder.launch_dir(run_dir, "torch", run_folder.PROFILE_ROUND)
    ldir.mkdir(parents=True)
    (ldir / "torchrun.log").write_text("log")
    for rank in (2, 3):  # this node's ranks, each a copy of a real rank folder plus its raw data
        pt = run_dir / f"profiles/torch/rank{rank}/host_{rank}_ascend_pt"
        shutil.copytree(fixture / f"rank{rank - 2}_ascend_pt", pt)
        for rel, size in RAW.items():
            (pt / rel).parent.mkdir(parents=True, exist_ok=True)
            (pt / rel).write_bytes(b"r" * size)
    pairs = collect.files_to_send(run_dir, ldir, 1, range(2, 4), "torch", profile=True)
    sent = sorted(dest for _, dest in pairs)
    want = ["launches/torch/profile/node1/torchrun.log"]
    for rank in (2, 3):  # everything of the fixture (parsed output, profiler_info, metadata), nothing raw
        base = f"profiles/torch/rank{rank}/host_{rank}_ascend_pt"
        want += [
            f"{base}/{p.relative_to(fixture / f'rank{rank - 2}_ascend_pt').as_posix()}"
            for p in (fixture / f"rank{rank - 2}_ascend_pt").rglob("*")
            if p.is_file()
        ]
    assert sent == sorted(want)
    left = collect.raw_profile_files(run_dir, range(2, 4), "torch", profile=True)
    assert sorted((e["path"], e["bytes"]) for e in left) == sorted(
        (f"profiles/torch/rank{r}/host_{r}_ascend_pt/{rel}", size)
        for r in (2, 3)
        for rel, size in RAW.items()
    )
    assert collect.raw_profile_files(run_dir, range(2, 4), "torch", profile=False) == []
    header = collect._header({"node": 1, "files": pairs, "left_in_place": left})
    assert header["left_in_place"] == left and len(header["files"]) == len(pairs)
    # what node 0 receives reads to the same event table as the folder it came from
    node0 = tmp_path / "node0"
    for source, dest in pairs:
        (node0 / dest).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(source, node0 / dest)
    for rank in (2, 3):
        rel = f"profiles/torch/rank{rank}/host_{rank}_ascend_pt"
        here, there = read_rank(run_dir / rel, cache=False), read_rank(node0 / rel, cache=False)
        assert here.rank == there.rank == rank - 2
        assert len(here.table) > 0
        pd.testing.assert_frame_equal(here.table.to_frame(), there.table.to_frame())
        assert (
            here.cross_check is not None and there.cross_check is not None
        )  # step_trace_time.csv came along


def test_kineto_profiles_are_sent_whole(tmp_path):
    run_dir = tmp_path / "run"
    ldir = run_folder.launch_dir(run_dir, "torch", run_folder.PROFILE_ROUND)
    ldir.mkdir(parents=True)
    (run_dir / "profiles/torch/rank1").mkdir(parents=True)
    (run_dir / "profiles/torch/rank1/rank1.pt.trace.json.gz").write_bytes(b"t")
    pairs = collect.files_to_send(run_dir, ldir, 1, range(1, 2), "torch", profile=True)
    assert [dest for _, dest in pairs] == ["profiles/torch/rank1/rank1.pt.trace.json.gz"]
    assert collect.raw_profile_files(run_dir, range(1, 2), "torch", profile=True) == []
    assert Path(pairs[0][0]).read_bytes() == b"t"
