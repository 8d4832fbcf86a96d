"""Checks of the per-process-group analysis on a profiled gloo HSDP run (used by test_runner_fsdp.py's HSDP
launch): per rank and group, the collective counts and bytes against what the test reads from the raw
trace itself (the ``fsdpbench::c10d::<kind>::group=<name>::index=<k>`` ranges and the c10d op each one
wraps), against FSDP2's HSDP algorithm (reduce-scatter and all-gather on the shard group, all-reduce on the
replicate group), and the groups' kinds against the ranks that name them in the raw traces."""

from __future__ import annotations

import gzip
import json
import math
import re
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

RANGE = re.compile(r"^fsdpbench::c10d::(\w+)::group=(.*)::index=\d+$")
ITEMSIZE = {"float": 4, "double": 8, "c10::bfloat16": 2, "c10::half": 2, "long int": 8, "int": 4}


def _op_bytes(args: dict[str, Any]) -> float | None:
    """The larger input of a c10d op from its recorded shapes (None: an element type the trace does not say,
    e.g. ``TensorList``)."""
    best = None
    for dims, typ in zip(args.get("Input Dims", []), args.get("Input type", []), strict=False):
        size = ITEMSIZE.get(str(typ).lower())
        if size is None or not dims or not isinstance(dims, list):
            continue
        shapes = dims if all(isinstance(d, list) for d in dims) else [dims]
        n = sum(math.prod(s) for s in shapes)
        best = n * size if best is None else max(best, n * size)
    return best


def raw_groups(trace: Path) -> dict[str, dict[str, Any]]:
    """Per group named by the trace's c10d ranges: ``{kind: count}`` and Σ bytes (None when none known)."""
    events = [e for e in json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"] if e.get("ph") == "X"]
    out: dict[str, dict[str, Any]] = defaultdict(lambda: {"collectives": Counter(), "bytes": None})
    for rng in events:
        m = RANGE.match(rng.get("name", ""))
        if not m:
            continue
        kind, group = m.groups()
        out[group]["collectives"][kind] += 1
        inner = [
            e
            for e in events
            if e["tid"] == rng["tid"]
            and e.get("cat") == "cpu_op"
            and e["name"].startswith("c10d::")
            and rng["ts"] <= e["ts"]
            and e["ts"] + e["dur"] <= rng["ts"] + rng["dur"]
        ]
        size = _op_bytes(min(inner, key=lambda e: e["ts"])["args"]) if inner else None
        if size is not None:
            out[group]["bytes"] = (out[group]["bytes"] or 0) + size
    return dict(out)


def check_hsdp_groups(profiles: Path, layers: int) -> None:
    """The analysis of a 2×2 HSDP run's profiles (4 ranks) split by process group."""
    from fsdpbench.analysis import analyze

    res = analyze([profiles], workers=1)
    assert [r.rank for r in res.ranks] == [0, 1, 2, 3]
    members: dict[str, set[int]] = defaultdict(set)
    for r in res.ranks:
        (trace,) = (profiles / f"rank{r.rank}").glob("*.json.gz")
        raw = raw_groups(trace)
        for group in raw:
            members[group].add(r.rank)
        assert set(r.by_group) == set(raw), (r.rank, r.by_group, raw)
        for group, want in raw.items():
            got = r.by_group[group]
            assert got["collectives"] == dict(want["collectives"]), (r.rank, group)
            assert got["count"] == sum(want["collectives"].values())
            assert got["bytes"] == want["bytes"], (r.rank, group)
            assert got["comm_us"] > 0 and 0 <= got["exposed_us"] <= got["comm_us"] + 1e-6
        # FSDP2's HSDP: per unit (L layers + root) a reduce-scatter in the shard group and an all-reduce in
        # the replicate group; all-gathers (forward, backward re-gather, root once) in the shard group
        by_kind = {tuple(sorted(v["collectives"])): v["collectives"] for v in raw.values()}
        assert by_kind == {
            ("all_gather", "reduce_scatter"): {"all_gather": 2 * layers + 1, "reduce_scatter": layers + 1},
            ("all_reduce",): {"all_reduce": layers + 1},
        }, (r.rank, raw)
    # the ranks that name each group in the raw traces: rows (0,1), (2,3) = shard, columns (0,2), (1,3) = replicate
    want = {g: ("shard" if sorted(m) in ([0, 1], [2, 3]) else "replicate") for g, m in members.items()}
    assert {g: v["kind"] for g, v in res.process_groups.items()} == want
    assert sorted(sorted(m) for m in members.values()) == [[0, 1], [0, 2], [1, 3], [2, 3]]
