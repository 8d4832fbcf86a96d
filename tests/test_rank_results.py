"""``analyze --ranks-only`` writes each rank's compact result beside its trace; a plain ``analyze`` of the folder
then joins the ranks from them without a trace. References: one ``analyze`` of the same traces, the files
on disk (which ranks got a result, the traces' sizes by ``os.stat``), and edits the test makes itself."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import orjson
import pytest

from fsdpbench.analysis import analyze
from fsdpbench.analysis.ranks_only import analyze_ranks, launcher_share, parse_ranks
from fsdpbench.errors import ConfigError, InputError
from fsdpbench.trace.synthetic import make_trace, write_trace
from helpers import run_cli

RANKS = 4
SUFFIX = ".fsdpbench-rank"


def _ranks(folder: Path) -> Path:
    folder.mkdir(parents=True)
    for rank in range(RANKS):
        write_trace(
            folder / f"rank{rank}.json.gz",
            make_trace(rank=rank, world_size=RANKS, device_events=600, seed=3, skew_ns=40_000 * rank),
        )
    return folder


def _without_traces(folder: Path) -> None:
    """Leave only the compact results: the traces and every hidden cache gone."""
    for p in list(folder.iterdir()):
        if not p.name.endswith(SUFFIX):
            p.unlink()


def _json(path: Path) -> dict:
    doc = orjson.loads(path.read_bytes())
    doc.pop("sources")  # the folder given on the command line
    return doc


@pytest.mark.timeout(300)
def test_ranks_only_over_two_halves_then_analyze_equals_one_analyze_of_the_whole(tmp_path):
    whole, split = _ranks(tmp_path / "whole"), _ranks(tmp_path / "split")
    one = run_cli(
        "analyze", str(whole), "--json", str(tmp_path / "whole.json"), env={"FSDPBENCH_NO_CACHE": "1"}
    )
    assert one.returncode == 0, one.stderr
    first = run_cli("analyze", str(split), "--ranks-only", "--ranks", "0-1")
    assert first.returncode == 0, first.stderr
    # the first host wrote ranks 0 and 1 only, and said how large each is against its trace
    assert sorted(p.name for p in split.glob(f"*{SUFFIX}")) == [f"rank{r}.json.gz{SUFFIX}" for r in (0, 1)]
    size0 = os.stat(split / "rank0.json.gz").st_size
    assert f"rank 0: rank0.json.gz ({size0 / 1024:.2f} KiB)" in " ".join(first.stdout.split())
    second = run_cli("analyze", str(split), "--ranks-only", "--ranks", "2,3", "--workers", "1")
    assert second.returncode == 0, second.stderr
    _without_traces(split)  # the join must not need them
    with pytest.raises(InputError, match="every rank there is a compact result alone"):
        analyze_ranks([split], workers=1)
    joined = run_cli("analyze", str(split), "--json", str(tmp_path / "split.json"))
    assert joined.returncode == 0, joined.stderr
    assert "joined 4 of 4 ranks from their compact results" in " ".join(joined.stdout.split())
    ours, theirs = _json(tmp_path / "split.json"), _json(tmp_path / "whole.json")
    assert theirs["waits"] and theirs["replay"] is not None  # the cross-rank parts are there to compare
    assert ours == theirs


def test_a_compact_result_stands_for_its_trace_only_while_code_step_and_trace_match(tmp_path, monkeypatch):
    folder = _ranks(tmp_path / "ranks")
    written = analyze_ranks([folder], workers=1)
    assert [w.rank for w in written] == [0, 1, 2, 3] and not any(w.error for w in written)
    assert [w.trace_bytes for w in written] == [
        os.stat(folder / f"rank{r}.json.gz").st_size for r in range(4)
    ]
    assert (
        analyze([folder], replay=False).compact_ranks == 0
    )  # --no-cache (the tests' default): measured again
    monkeypatch.delenv("FSDPBENCH_NO_CACHE")
    assert analyze([folder], replay=False).compact_ranks == 4
    # rank 2's trace changed after its result was written (a new mtime): read again, not taken from it
    trace2 = folder / "rank2.json.gz"
    st = trace2.stat()
    os.utime(trace2, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert analyze([folder], replay=False).compact_ranks == 3
    # without its trace, a result written for another step selection is named, never used
    shutil.copy(trace2, tmp_path / "keep.json.gz")
    trace2.unlink()
    result = folder / f"rank2.json.gz{SUFFIX}"
    raw = result.read_bytes()
    cut = raw.index(b"\n")
    result.write_bytes(orjson.dumps({**orjson.loads(raw[:cut]), "step": 7}) + raw[cut:])
    res = analyze([folder], replay=False)
    assert [r.rank for r in res.ranks] == [0, 1, 3]
    assert any(f"{result}: written by another fsdpbench or step selection" in w for w in res.warnings)
    # a damaged one likewise
    result.write_bytes(raw[: cut + 20])
    assert any(f"{result}: damaged compact result" in w for w in analyze([folder], replay=False).warnings)


def test_ranks_lists_are_parsed_and_a_range_with_no_rank_is_refused(tmp_path):
    assert parse_ranks("0-2,8, 10") == {0, 1, 2, 8, 10}
    for bad in ("3-1", "a", "1-", "-2"):
        with pytest.raises(ConfigError, match="--ranks"):
            parse_ranks(bad)
    folder = _ranks(tmp_path / "ranks")
    with pytest.raises(InputError, match=r"no rank of --ranks 9-12 .*ranks found: \[0, 1, 2, 3\]"):
        analyze_ranks([folder], ranks="9-12", workers=1)
    proc = run_cli("analyze", str(folder), "--ranks", "0-1")
    assert proc.returncode != 0 and "--ranks selects the ranks of --ranks-only" in proc.stderr


def test_ranks_share_takes_this_processs_contiguous_share_as_its_launcher_numbers_it(tmp_path, monkeypatch):
    folder = _ranks(tmp_path / "ranks")
    for name in (
        "RANK",
        "WORLD_SIZE",
        "OMPI_COMM_WORLD_RANK",
        "OMPI_COMM_WORLD_SIZE",
        "PMI_RANK",
        "PMI_SIZE",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SLURM_PROCID", "1")  # srun's second task of 3: 4 ranks split 1 / 1 / 2
    monkeypatch.setenv("SLURM_NTASKS", "3")
    assert [w.rank for w in analyze_ranks([folder], ranks="share", workers=1)] == [1]
    monkeypatch.setenv("SLURM_PROCID", "2")
    assert [w.rank for w in analyze_ranks([folder], ranks="share", workers=1)] == [2, 3]
    assert sorted(p.name for p in folder.glob(f"*{SUFFIX}")) == [
        f"rank{r}.json.gz{SUFFIX}" for r in (1, 2, 3)
    ]
    assert launcher_share({"RANK": "3", "WORLD_SIZE": "8", "SLURM_PROCID": "0", "SLURM_NTASKS": "2"}) == (
        3,
        8,
    )
    with pytest.raises(ConfigError, match="--ranks share: started by no launcher"):
        launcher_share({})
