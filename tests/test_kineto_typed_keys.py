"""The typed (msgspec) decode codes each event by its (ph, name, cat, pid, tid) key once: the table it
gives must equal the one the plain orjson decode (one dict per event, each field factorized on its
own) gives, on traces with thread names, flows, collectives with sizes and odd values."""

from __future__ import annotations

import orjson
import pandas as pd
import pytest

from fsdpbench.trace import kineto_decode
from fsdpbench.trace.kineto import read_kineto
from fsdpbench.trace.synthetic import make_trace, write_trace

pytest.importorskip("msgspec")


def _both(path, monkeypatch):
    typed = read_kineto(path)
    with monkeypatch.context() as m:
        m.setattr(kineto_decode, "_TYPED", (None, None))
        plain = read_kineto(path)
    return typed, plain


def _same(a, b) -> None:
    pd.testing.assert_frame_equal(a.events, b.events)
    pd.testing.assert_frame_equal(a.steps, b.steps)
    assert (a.warnings, a.rank, a.mode, a.recorded_tasks) == (b.warnings, b.rank, b.mode, b.recorded_tasks)


@pytest.mark.parametrize("kw", [{}, {"categories": "2021", "async_kernels": 5, "orphans": 3, "steps": 2}])
def test_typed_keys_give_the_orjson_table_on_synthetic_traces(tmp_path, monkeypatch, kw):
    path = write_trace(tmp_path / "rank0.json.gz", make_trace(device_events=3000, seed=9, **kw))
    monkeypatch.setattr(kineto_decode, "_CHUNK_BYTES", 20_000)  # keys seen across many chunks
    typed, plain = _both(path, monkeypatch)
    _same(typed, plain)
    assert typed.events["bytes"].notna().sum() > 0  # collective sizes were read


@pytest.mark.parametrize(
    "field, value",
    [
        ("name", ["a", "list"]),  # unhashable: the typed path hands the trace to orjson
        ("pid", "7"),  # a string pid next to integer ones
        ("tid", 7.0),  # a float tid: equal to an integer one, so one key (as dict hashing says)
        ("cat", None),
    ],
)
def test_odd_values_in_keys_give_the_orjson_table(tmp_path, monkeypatch, field, value):
    doc = make_trace(device_events=200, seed=3)
    x = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    x[3][field] = value
    x[40][field] = value
    path = tmp_path / "t.json"
    path.write_bytes(orjson.dumps(doc))
    typed, plain = _both(path, monkeypatch)
    _same(typed, plain)


def test_message_sizes_of_repeated_and_odd_collective_args_match_orjson(tmp_path, monkeypatch):
    """Sizes are computed once per distinct (dtype, In/Out msg nelems): repeated messages, a list
    where a count belongs, and a missing dtype give the same bytes as the per-event orjson path."""
    doc = make_trace(device_events=400, seed=5)
    comm = [e for e in doc["traceEvents"] if e.get("ph") == "X" and "nccl" in str(e.get("name", "")).lower()]
    assert len(comm) > 4 and all("In msg nelems" in e["args"] for e in comm)
    comm[0]["args"]["In msg nelems"] = [1, 2]
    comm[1]["args"].pop("dtype")
    comm[2]["args"]["Out msg nelems"] = "4096"
    path = tmp_path / "t.json"
    path.write_bytes(orjson.dumps(doc))
    typed, plain = _both(path, monkeypatch)
    _same(typed, plain)
    sized = typed.events["bytes"].notna().sum()
    assert 0 < sized <= len(comm) - 2  # the list and the missing dtype give no size
