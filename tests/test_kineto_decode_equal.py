"""The typed (msgspec) Kineto decode gives the same columns as the orjson decode, value for value.

The orjson path builds a plain dict per event and reads each field on its own, with none of the
typed path's shortcuts (key coding, per-key kinds, raw ``args`` fields, vectorised flows): it is
the independent reference. Both paths run on every real fixture trace and on synthetic ones, and
every ``Columns`` attribute is compared: ts, dur, corr (bit for bit), the decoded field values per
event, message sizes, thread names, flows and ``distributedInfo``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fsdpbench.trace import kineto_decode
from fsdpbench.trace.synthetic import make_trace, write_trace
from helpers import SHARED

pytest.importorskip("msgspec")

KINETO = SHARED / "fixtures" / "kineto"
FIXTURES = sorted(p.parent.name for p in KINETO.glob("*/*.json.gz")) or ["trace_diff_test"]


def _decode_both(path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any, Any, Any]:
    """(dist, columns) of the typed decode and of the orjson decode; fails if the typed path did not
    read every event itself (a silent fallback would compare orjson with orjson)."""
    seen = []
    add_typed = kineto_decode.Columns._add_typed
    with monkeypatch.context() as m:
        m.setattr(
            kineto_decode.Columns, "_add_typed", lambda self, ev: (seen.append(len(ev)), add_typed(self, ev))
        )
        dist, typed = kineto_decode.decode(path)
    assert seen and typed.x_keys, f"{path.name}: the typed decoder refused the trace"
    with monkeypatch.context() as m:
        m.setattr(kineto_decode, "_TYPED", (None, None))
        ref_dist, ref = kineto_decode.decode(path)
    assert not ref.x_keys
    return dist, typed, ref_dist, ref


def _bits(chunks: list[np.ndarray]) -> np.ndarray:
    a = np.concatenate(chunks) if chunks else np.empty(0)
    return a.view(np.uint64 if a.dtype == np.float64 else a.dtype)


def _same_number(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


def _as_double(flow: tuple[Any, ...]) -> tuple[Any, ...]:
    ph, fid, ts, pid, tid = flow
    return ph, fid, float(ts) if isinstance(ts, int | float) else ts, pid, tid


def assert_same_columns(typed: Any, ref: Any) -> None:
    assert typed.n == ref.n
    for attr in ("ts", "dur", "corr"):
        np.testing.assert_array_equal(_bits(getattr(typed, attr)), _bits(getattr(ref, attr)), err_msg=attr)
    t_fields, r_fields = typed.fields(), ref.fields()
    assert list(t_fields) == list(r_fields) == ["name", "cat", "pid", "tid"]
    for f, (codes, uniques) in t_fields.items():
        ref_codes, ref_uniques = r_fields[f]
        assert len(codes) == len(ref_codes) == typed.n, f
        values = [(type(v), v) for v in map(uniques.__getitem__, codes.tolist())]
        ref_values = [(type(v), v) for v in map(ref_uniques.__getitem__, ref_codes.tolist())]
        assert values == ref_values, f
    assert typed.nbytes.keys() == ref.nbytes.keys()
    assert all(_same_number(typed.nbytes[i], ref.nbytes[i]) for i in ref.nbytes)
    # collective identity: the same identities (NaN sizes compared as NaN) for the same events
    assert typed.ident.keys() == ref.ident.keys() and typed.seq == ref.seq
    for i, code in ref.ident.items():
        got, want = typed.idents[typed.ident[i]], ref.idents[code]
        assert len(got) == len(want) and all(
            _same_number(a, b) if isinstance(b, float) else a == b for a, b in zip(got, want, strict=True)
        ), i
    assert typed.devices == ref.devices
    assert typed.thread_names == ref.thread_names
    # the typed decoder reads a flow's ts as a double, as the reader uses it (orjson keeps an integer
    # ts as an int: ns-integer traces' ts is past 2**53, so compare both as the doubles the reader sees)
    assert [_as_double(f) for f in typed.flows] == [_as_double(f) for f in ref.flows]


@pytest.mark.parametrize("name", FIXTURES)
def test_typed_decode_equals_orjson_decode_on_real_traces(name, shared_fixtures, monkeypatch):
    path = next((shared_fixtures / "fixtures" / "kineto" / name).glob("*.json.gz"))
    dist, typed, ref_dist, ref = _decode_both(path, monkeypatch)
    assert dist == ref_dist
    assert_same_columns(typed, ref)
    assert typed.n > 0


def _with_flows_and_shapes(doc: dict[str, Any]) -> dict[str, Any]:
    """Add what the synthetic generator leaves out and real traces hold: one ac2g flow pair per
    launch (and a flow of another category), CPU ops with recorded shapes, among them collectives
    sized by their Input Dims, and an instant event."""
    events = doc["traceEvents"]
    launches = [e for e in events if e.get("ph") == "X" and e.get("name") == "cudaLaunchKernel"]
    assert launches
    extra: list[dict[str, Any]] = []
    for i, e in enumerate(launches[:500]):
        corr = e["args"]["correlation"]
        extra.append(
            {
                "ph": "s",
                "id": corr,
                "pid": e["pid"],
                "tid": e["tid"],
                "ts": e["ts"],
                "cat": "ac2g",
                "name": "ac2g",
            }
        )
        extra.append(
            {
                "ph": "f",
                "id": corr,
                "pid": 0,
                "tid": 7,
                "ts": e["ts"] + 3,
                "cat": "ac2g",
                "name": "ac2g",
                "bp": "e",
            }
        )
        if i % 50 == 0:
            extra.append(
                {"ph": "s", "id": i, "pid": 1, "tid": 1, "ts": e["ts"], "cat": "fwdbwd", "name": "fwdbwd"}
            )
        shapes = {
            "Input Dims": [[4, 1024], [], [[8], [8, 2]]],
            "Input type": ["float", "Scalar", "c10::bfloat16"],
        }
        name = "record_param_comms" if i % 7 == 0 else "aten::add"
        extra.append(
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": name,
                "pid": 1,
                "tid": 1,
                "ts": e["ts"] - 1,
                "dur": 1,
                "args": shapes,
            }
        )
    extra.append(
        {"ph": "i", "s": "t", "name": "Iteration Start: PyTorch Profiler", "pid": 1, "tid": 1, "ts": 0}
    )
    extra.append({"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": 7}})
    doc["traceEvents"] = (
        [x for pair in zip(events, extra, strict=False) for x in pair]
        + events[len(extra) :]
        + extra[len(events) :]
    )
    return doc


@pytest.mark.parametrize("chunk_bytes", [1 << 20, 20_000])
@pytest.mark.parametrize(
    "kw", [{}, {"categories": "2021", "async_kernels": 5, "orphans": 3, "steps": 2, "ns_integers": True}]
)
def test_typed_decode_equals_orjson_decode_on_synthetic_traces(tmp_path, monkeypatch, kw, chunk_bytes):
    doc = _with_flows_and_shapes(make_trace(device_events=6000, seed=4, **kw))
    path = write_trace(tmp_path / "rank0.json.gz", doc)
    monkeypatch.setattr(kineto_decode, "_CHUNK_BYTES", chunk_bytes)
    dist, typed, ref_dist, ref = _decode_both(path, monkeypatch)
    assert dist == ref_dist
    assert_same_columns(typed, ref)
    assert len(typed.flows) == 1000 and typed.thread_names[(1, 1)] == "7"
    sized = [v for v in typed.nbytes.values() if not math.isnan(v)]
    assert len(sized) > 70  # the synthetic collectives and the record_param_comms sized by Input Dims


def _inflaters() -> list[Any]:
    """zlib, and ISA-L's inflate when installed (the decoder uses it then)."""
    import zlib

    mods = [zlib]
    try:
        from isal import isal_zlib

        mods.append(isal_zlib)
    except ImportError:
        pass
    return mods


@pytest.mark.parametrize("inflate", _inflaters(), ids=lambda m: m.__name__)
def test_gunzip_reads_members_and_zlib_and_reports_bad_files_alike(tmp_path, monkeypatch, inflate):
    """Whichever inflate is installed, concatenated gzip members and a zlib stream read the same
    columns, and a truncated or corrupt file is the same InputError."""
    import gzip
    import zlib

    import orjson

    from fsdpbench.errors import InputError

    monkeypatch.setattr(kineto_decode, "_inflate", inflate)
    monkeypatch.setattr(kineto_decode, "_INFLATE_ERRORS", (zlib.error, inflate.error))
    text = orjson.dumps(make_trace(device_events=3000, seed=6))
    plain = tmp_path / "plain.json"
    plain.write_bytes(text)
    _, ref = kineto_decode.decode(plain)
    half = len(text) // 2
    for name, data in [
        ("members.json.gz", gzip.compress(text[:half]) + gzip.compress(b"") + gzip.compress(text[half:])),
        ("zlib.json.gz", zlib.compress(text)),
    ]:
        path = tmp_path / name
        path.write_bytes(data)
        _, cols = kineto_decode.decode(path)
        assert_same_columns(cols, ref)
    whole = gzip.compress(text)
    bad = bytearray(whole)
    bad[len(bad) // 2 : len(bad) // 2 + 64] = b"\xff" * 64
    for data, message in [
        (
            whole[: len(whole) // 2],
            r"corrupt or truncated gzip \(the stream ends early\); re-export the profile",
        ),
        (bytes(bad), r"corrupt or truncated gzip \((?!the stream).+\); re-export the profile"),
        (gzip.compress(b""), "the file is empty after decompression"),
    ]:
        path = tmp_path / "bad.json.gz"
        path.write_bytes(data)
        with pytest.raises(InputError, match=message):
            kineto_decode.decode(path)


@pytest.mark.parametrize("ph", ["Z", 5, None])
def test_a_phase_outside_the_trace_event_format_is_read_by_the_orjson_path(tmp_path, ph):
    """The typed structs accept only the format's phases; anything else (or a null phase) reads as
    the orjson decode does, skipping that event."""
    import orjson

    doc = make_trace(device_events=200, seed=8)
    doc["traceEvents"].insert(10, {"ph": ph, "name": "odd", "pid": 0, "tid": 7, "ts": 1.0, "dur": 1.0})
    path = tmp_path / "t.json"
    path.write_bytes(orjson.dumps(doc))
    _, cols = kineto_decode.decode(path)
    del doc["traceEvents"][10]
    path.write_bytes(orjson.dumps(doc))
    _, ref = kineto_decode.decode(path)
    assert_same_columns(cols, ref)


@pytest.mark.filterwarnings("ignore:invalid value encountered in cast:RuntimeWarning")  # orjson path, 2**70
@pytest.mark.parametrize("corr", [None, "absent", "no args", 2**70, "7", "null and 2**70"])
def test_odd_correlations_read_as_the_orjson_path_reads_them(tmp_path, monkeypatch, corr):
    """A null correlation, none, or no args at all read -1 on the typed path; values it cannot hold
    (past int64, a string) send the trace to the orjson path."""
    import json

    doc = make_trace(device_events=300, seed=2)
    kernels = [e for e in doc["traceEvents"] if e.get("ph") == "X" and "nccl" in str(e.get("name")).lower()]
    for i, e in enumerate(kernels[:3]):
        if corr == "null and 2**70":
            e["args"]["correlation"] = 2**70 if i == 2 else None  # null first: the TypeError path meets it
        elif corr == "no args":
            del e["args"]
        elif corr == "absent":
            del e["args"]["correlation"]
        else:
            e["args"]["correlation"] = corr
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))  # orjson cannot write an int past 64 bits
    _, cols = kineto_decode.decode(path)
    with monkeypatch.context() as m:
        m.setattr(kineto_decode, "_TYPED", (None, None))
        _, ref = kineto_decode.decode(path)
    assert_same_columns(cols, ref)
    if corr in (None, "absent", "no args"):
        assert cols.x_keys and (np.concatenate(cols.corr) == -1).sum() >= 3
