"""What does ``fsdpbench analyze`` cost on one very large rank, and on many ranks?

Two measurements, each ``fsdpbench analyze --no-cache`` in a fresh subprocess, with wall time, CPU time
and peak memory from :func:`analyze_speed.measure` (the process tree's PSS and RSS sampled every 20 ms,
and the largest single process's RSS):

* ``--kernels N [N …]``: one rank of N device kernels (one ``cudaLaunchKernel`` and one CPU op per
  kernel, 5 % NCCL collectives with Kineto's identity args and a ``record_param_comms`` op carrying
  their ``Seq``, fsdpbench's unit/phase ranges over the step), written to ``DIR/k<N>/rank0.json.gz``
  block by block (the generator never holds the whole trace). Beside it: the floor (``gzip`` +
  ``orjson.loads`` of the whole file, one process) and HTA 0.5.0's default analysis
  (``TraceAnalysis`` + overlap + temporal breakdown) where it finishes within ``--hta-timeout``.
* ``--scale R [R …]``: R small ranks of ``--rank-kernels`` kernels each, analysed with ``--workers 2``;
  the time per rank and the largest single process's RSS show whether time is linear in ranks and
  memory flat per worker, and the JSON's ``waits`` says how many collectives were matched across all R.

``--src DIR`` (repeatable) runs the analysis with ``PYTHONPATH=DIR`` as well (e.g. an
older checkout's ``src``), interleaved with the current one, for before/after tables. Usage::

    python benchmarks/large_trace.py --dir /tmp/big --kernels 1000000 4000000 [--hta] [--floor]
    python benchmarks/large_trace.py --dir /tmp/scale --scale 4 64 [--rank-kernels 20000]
    python benchmarks/large_trace.py --dir /tmp/scale --scale 64 256 1024 --join

``--scale … --join`` measures the join instead (issue 41): per rank count R, rank 0 of an R-rank world is
generated and analysed alone (``analyze --ranks-only``, the per-rank part a cluster's host runs), ranks
1 … R-1 are its compact result renumbered (synthetic ranks: the same events and clock, every collective
matched across all R), then ``analyze`` of the folder from the compact results alone, without and with
the step replay: wall and CPU time and the (single) process's peak RSS, each per rank, and the CPU per
rank against the first count's (1.00 = linear).

Generated traces are kept in ``--dir`` (reused when present): delete them when done (1M kernels is
about 45 MB gzipped, 0.45 GB of JSON; 4M kernels 186 MB and 1.8 GB).
"""

from __future__ import annotations

import argparse
import gzip
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
from analyze_speed import measure  # noqa: E402

BLOCK = 100_000  # device kernels generated (and held) at a time
UNITS = 8  # FSDP units the ranges name: layers.0 … layers.7


def _block_events(rank: int, world: int, kernels: int, block: int, first_seq: int) -> tuple[list[dict], int]:
    """One block of ``kernels`` device kernels (:func:`fsdpbench.trace.synthetic.make_trace`, the same
    collectives on every rank for the same ``block``), with a CPU op around each launch, a
    ``record_param_comms`` op with ``Seq`` around each collective's launch and fsdpbench's ranges;
    times start at 0 µs of the block. Returns the events and the collectives' count."""
    from fsdpbench.trace.synthetic import make_trace

    trace = make_trace(rank=rank, world_size=world, device_events=kernels, seed=1 + 7 * block)
    events = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["cat"] != "user_annotation"]
    device = {e["args"]["correlation"]: e for e in events if e["cat"] != "cuda_runtime"}
    t0 = min(e["ts"] for e in events)
    out: list[dict] = []
    seq = first_seq
    for e in events:
        e["ts"] = round(e["ts"] - t0, 3)
        out.append(e)
        if e["cat"] != "cuda_runtime":
            continue
        kernel = device[e["args"]["correlation"]]
        op: dict[str, Any] = {
            "ph": "X",
            "cat": "cpu_op",
            "name": "aten::mm",
            "pid": 0,
            "tid": 1,
            "ts": round(e["ts"] - 0.5, 3),
            "dur": 2.5,
            "args": {"External id": e["args"]["correlation"]},
        }
        if "Group size" in kernel["args"]:
            a = kernel["args"]
            op["name"] = "record_param_comms"
            op["args"] = {
                "Collective name": kernel["name"].split("_")[1].lower(),
                "dtype": a["dtype"],
                "In msg nelems": a["In msg nelems"],
                "Out msg nelems": a["Out msg nelems"],
                "Group size": world,
                "Process Group Name": "0",
                "Process Group Ranks": str(list(range(world))),
                "Seq": seq,
            }
            seq += 1
        out.append(op)
    # fsdpbench's ranges on the launching thread: forward of each unit over the block's first 40 %,
    # backward (last unit first) over the next 55 %, the optimizer over the rest
    span = max(e["ts"] + e["dur"] for e in out if e["cat"] == "cuda_runtime")
    cuts = [("forward", u, 0.40 * span * u / UNITS, 0.40 * span / UNITS) for u in range(UNITS)]
    cuts += [
        ("backward", UNITS - 1 - u, 0.40 * span + 0.55 * span * u / UNITS, 0.55 * span / UNITS)
        for u in range(UNITS)
    ]
    for phase, unit, ts, dur in cuts:
        out.append(_range(f"fsdpbench::{phase}::layers.{unit}", ts, dur))
    out.append(_range("fsdpbench::optimizer", 0.95 * span, 0.05 * span))
    return out, seq - first_seq


def _range(name: str, ts: float, dur: float) -> dict[str, Any]:
    return {
        "ph": "X",
        "cat": "user_annotation",
        "name": name,
        "pid": 0,
        "tid": 1,
        "ts": round(ts, 3),
        "dur": round(dur, 3),
    }


def write_rank(path: Path, rank: int, world: int, kernels: int) -> int:
    """Write one rank of ``kernels`` device kernels as gzipped Kineto JSON, ``BLOCK`` kernels at a time
    (blocks one after the other in time, one ``ProfilerStep#3`` over all); return the JSON's size."""
    base = 1_000_000_000.0  # µs: a monotonic clock's magnitude
    blocks = math.ceil(kernels / BLOCK)
    size = 0
    with gzip.open(path, "wb", compresslevel=1) as f:

        def put(b: bytes) -> None:
            nonlocal size
            f.write(b)
            size += len(b)

        head = {
            "schemaVersion": 1,
            "deviceProperties": [{"id": 0, "name": "Synthetic GPU"}],
            "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world},
        }
        put(orjson.dumps(head)[:-1].replace(b'"rank":', b'"rank": ', 1) + b',"traceEvents":[')
        meta = [
            {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "python"}},
            {"ph": "M", "name": "thread_name", "pid": 0, "tid": 1, "args": {"name": "thread 1 (python)"}},
        ]
        put(orjson.dumps(meta)[1:-1])
        offset, seq = base, 0
        for b in range(blocks):
            events, n_coll = _block_events(rank, world, min(BLOCK, kernels - b * BLOCK), b, seq)
            seq += n_coll
            end = 0.0
            for e in events:
                e["ts"] = round(e["ts"] + offset, 3)
                end = max(end, e["ts"] + e["dur"])
            put(b"," + orjson.dumps(events)[1:-1])
            # the next block starts on a whole second, the same on every rank
            offset = math.ceil((end + 1_000) / 1e6) * 1e6
            del events
        step = _range("ProfilerStep#3", base - 1.0, offset - base)
        put(b"," + orjson.dumps(step) + b"]}")
    return size


def generate(folder: Path, ranks: int, kernels: int) -> int:
    """Write ``ranks`` ranks into ``folder`` unless they are there; return the JSON bytes of rank 0."""
    folder.mkdir(parents=True, exist_ok=True)
    size_file = folder / "json_bytes"
    if size_file.exists() and len(list(folder.glob("rank*.json.gz"))) == ranks:
        return int(size_file.read_text())
    t0 = time.perf_counter()
    # in a child process: a process forked from this one would start with the generator's memory
    # (its ru_maxrss would count it)
    code = "import sys; sys.path.insert(0, sys.argv[1]); import large_trace as g; from pathlib import Path; "
    code += "print(g.write_rank(Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])))"
    here = str(Path(__file__).resolve().parent)

    def one(r: int) -> int:
        args = [here, str(folder / f"rank{r}.json.gz"), str(r), str(ranks), str(kernels)]
        done = subprocess.run([sys.executable, "-c", code, *args], check=True, capture_output=True, text=True)
        return int(done.stdout)

    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(2) as pool:  # two ranks written at a time
        sizes = list(pool.map(one, range(ranks)))
    size = sizes[0]
    size_file.write_text(str(size))
    print(
        f"generated {ranks} × {kernels} kernels ({size / 2**20:.0f} MB of JSON a rank) in {time.perf_counter() - t0:.0f} s → {folder}",
        flush=True,
    )
    return size


def _timed(
    name: str, cmd: list[str], env: dict[str, str] | None, timeout: float | None = None
) -> dict[str, Any]:
    """:func:`measure` of ``cmd`` (under coreutils ``timeout`` when given); ``{"error": …}`` when it fails
    or runs out of time."""
    if timeout:
        cmd = ["timeout", str(int(timeout)), *cmd]
    try:
        return measure(cmd, env=env)
    except SystemExit as exc:
        text = str(exc).strip().splitlines()
        why = "did not finish in time" if "rc 124" in str(exc) else (text[-1] if text else "failed")
        print(f"  {name}: {why}", flush=True)
        return {"error": why}


def _analyze_cmd(folder: Path, workers: int, json_path: Path | None = None) -> list[str]:
    out = str(json_path) if json_path else os.devnull
    return [
        sys.executable,
        "-m",
        "fsdpbench",
        "analyze",
        str(folder),
        "--no-cache",
        "--workers",
        str(workers),
        "--json",
        out,
    ]


def _envs(srcs: list[Path]) -> dict[str, dict[str, str]]:
    """The analysis' environment per label: this checkout (as imported now), then each ``--src``."""
    import fsdpbench

    here = str(Path(fsdpbench.__file__).resolve().parents[1])
    base = {"OMP_NUM_THREADS": "1", "FSDPBENCH_NO_CACHE": ""}
    envs = {"fsdpbench analyze": {**base, "PYTHONPATH": here}}
    for src in srcs:
        envs[f"fsdpbench analyze ({src})"] = {**base, "PYTHONPATH": str(src.resolve())}
    return envs


def _row(name: str, r: dict[str, Any], extra: str = "") -> None:
    if "error" in r:
        print(f"{name:52} {r['error']}")
        return
    print(
        f"{name:52} {r['wall_s']:8.2f} {r['cpu_s']:8.2f} {r['peak_pss_mb']:10.0f} {r['peak_rss_mb']:10.0f} "
        f"{r['max_proc_rss_mb']:10.0f}{extra}"
    )


HEADER = f"{'':52} {'wall s':>8} {'CPU s':>8} {'PSS MB':>10} {'RSS MB':>10} {'proc MB':>10}"


def large(args: argparse.Namespace) -> dict[str, Any]:
    """One rank per ``--kernels``: the analysis (each ``--src`` too, interleaved), the floor, HTA."""
    me = [sys.executable, str(Path(__file__).resolve().parent / "analyze_speed.py"), "--child"]
    out: dict[str, Any] = {}
    for kernels in args.kernels:
        folder = args.dir / f"k{kernels}"
        size = generate(folder, 1, kernels)
        envs = _envs(args.src)
        tries: dict[str, list[dict[str, Any]]] = {name: [] for name in envs}
        for _ in range(args.repeat):
            for name, env in envs.items():
                tries[name].append(_timed(name, _analyze_cmd(folder, 1), env))
        runs = {name: min(t, key=lambda r: r.get("wall_s", math.inf)) for name, t in tries.items()}
        if args.floor and kernels <= args.floor_max:
            runs["gzip + orjson.loads (1 proc)"] = _timed("floor", [*me, "orjson", str(folder), "1"], None)
        if args.hta and kernels <= args.hta_max:
            runs["HTA 0.5.0 load+overlap+breakdown"] = _timed(
                "HTA", [*me, "hta", str(folder)], None, timeout=args.hta_timeout
            )
        print(
            f"\none rank, {kernels} kernels, {size / 2**20:.0f} MB of JSON (uptime: {os.getloadavg()[0]:.2f})"
        )
        print(HEADER + f" {'RSS/JSON':>9}")
        for name, r in runs.items():
            _row(name, r, f" {r['peak_rss_mb'] * 2**20 / size:9.2f}" if "error" not in r else "")
        out[str(kernels)] = {"json_bytes": size, "runs": runs}
    return out


def scale(args: argparse.Namespace) -> dict[str, Any]:
    """``--scale`` rank counts of ``--rank-kernels`` each, ``--workers 2``, interleaved across counts."""
    envs = _envs(args.src)
    folders = {ranks: args.dir / f"r{ranks}x{args.rank_kernels}" for ranks in args.scale}
    for ranks, folder in folders.items():
        generate(folder, ranks, args.rank_kernels)
    tries: dict[tuple[int, str], list[dict[str, Any]]] = {}
    waits: dict[tuple[int, str], Any] = {}
    for _ in range(args.repeat):
        for ranks, folder in folders.items():
            for name, env in envs.items():
                doc = args.dir / f"r{ranks}.{len(waits)}.json"
                tries.setdefault((ranks, name), []).append(_timed(name, _analyze_cmd(folder, 2, doc), env))
                if doc.exists():
                    w = orjson.loads(doc.read_bytes()).get("waits") or {}
                    waits[(ranks, name)] = {
                        "match": w.get("match"),
                        "instances": w.get("instances"),
                        "ranks_matched": len(w.get("ranks", [])),
                        "unmatched": sum(r.get("unmatched", 0) for r in w.get("ranks", [])),
                    }
                    doc.unlink()
    out: dict[str, Any] = {}
    print(f"\n{args.rank_kernels} kernels a rank, --workers 2 (uptime: {os.getloadavg()[0]:.2f})")
    print(HEADER + f" {'s/rank':>8}  waits")
    first: dict[str, float] = {}
    for (ranks, name), t in tries.items():
        r = min(t, key=lambda x: x.get("wall_s", math.inf))
        w = waits.get((ranks, name), {})
        _row(f"{name}, {ranks} ranks", r, f" {r.get('wall_s', math.nan) / ranks:8.3f}  {w}")
        out[f"{ranks} {name}"] = {"ranks": ranks, "run": r, "waits": w}
        if "wall_s" in r:
            first.setdefault(name, r["wall_s"])
            if r["wall_s"] != first[name]:
                print(f"{'':52} {r['wall_s'] / first[name]:.2f}× the time of the first count")
    return out


def _ranks_only_cmd(folder: Path, workers: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "fsdpbench",
        "analyze",
        str(folder),
        "--ranks-only",
        "--workers",
        str(workers),
    ]


def _join_cmd(folder: Path, json_path: Path, replay: bool) -> list[str]:
    cmd = [sys.executable, "-m", "fsdpbench", "analyze", str(folder), "--json", str(json_path)]
    return cmd if replay else [*cmd, "--no-replay"]


def clone_results(folder: Path, ranks: int) -> None:
    """Ranks 1 … ``ranks``-1 as rank 0's compact result renumbered (the same events on the same clock, so
    every collective matches across all ranks with no wait): written as results without traces, which the
    join reads like any other. Only the header changes: it names the rank a result stands for."""
    src = (folder / f"rank0.json.gz{RESULT}").read_bytes()
    cut = src.index(b"\n")
    header = orjson.loads(src[:cut])
    for r in range(1, ranks):
        head = {**header, "rank": r, "trace": {**header["trace"], "name": f"rank{r}.json.gz"}}
        (folder / f"rank{r}.json.gz{RESULT}").write_bytes(orjson.dumps(head) + src[cut:])


RESULT = ".fsdpbench-rank"


def join_scale(args: argparse.Namespace) -> dict[str, Any]:
    """``--scale … --join``: per rank count R, rank 0 of an R-rank world generated and analysed alone
    (``analyze --ranks-only``: the per-rank part, timed), ranks 1 … R-1 cloned from its compact result
    (:func:`clone_results`), then the join alone (``analyze`` of the folder from the compact results: one
    process, no trace read), without and with the step replay, ``--repeat`` times interleaved (fastest kept)."""
    folders = {ranks: args.dir / f"join{ranks}x{args.rank_kernels}" for ranks in args.scale}
    here = str(Path(__file__).resolve().parents[1] / "src")
    env = {"OMP_NUM_THREADS": "1", "PYTHONPATH": os.environ.get("PYTHONPATH") or here}
    out: dict[str, Any] = {}
    for ranks, folder in folders.items():
        folder.mkdir(parents=True, exist_ok=True)
        trace = folder / "rank0.json.gz"
        row: dict[str, Any] = {"ranks": ranks, "trace_bytes": 0}
        if not trace.exists():
            write_rank(trace, 0, ranks, args.rank_kernels)
        # every run writes the compact results again, with the code it measures: the join skips results
        # that another fsdpbench wrote ("written by another fsdpbench"), and would then match nothing
        for stale in folder.glob(f"rank*.json.gz{RESULT}"):
            stale.unlink()
        # the per-rank part writes only the compact result (no hidden caches beside the trace)
        row["ranks_only"] = _timed(
            "ranks-only", _ranks_only_cmd(folder, 1), {**env, "FSDPBENCH_NO_CACHE": "1"}
        )
        clone_results(folder, ranks)
        row["trace_bytes"] = trace.stat().st_size
        row["result_bytes"] = (folder / f"rank0.json.gz{RESULT}").stat().st_size
        out[str(ranks)] = row
    for _ in range(args.repeat):
        for ranks, folder in folders.items():
            for replay in (False, True) if ranks <= args.replay_max else (False,):
                doc = args.dir / f"join{ranks}.json"
                name = "join + replay" if replay else "join"
                r = _timed(name, _join_cmd(folder, doc, replay), {**env, "FSDPBENCH_NO_CACHE": ""})
                best = out[str(ranks)].get(name)
                if best is None or r.get("wall_s", math.inf) < best.get("wall_s", math.inf):
                    out[str(ranks)][name] = r
                if doc.exists():
                    w = orjson.loads(doc.read_bytes()).get("waits") or {}
                    out[str(ranks)]["waits"] = {
                        "match": w.get("match"),
                        "instances": w.get("instances"),
                        "ranks_matched": len(w.get("ranks", [])),
                    }
                    doc.unlink()
    print(f"\n{args.rank_kernels} kernels a rank (uptime: {os.getloadavg()[0]:.2f})")
    print(f"{'':30} {'wall s':>8} {'CPU s':>8} {'proc MB':>8} {'ms/rank':>8} {'MB/rank':>8} {'CPU×':>6}")
    first: dict[str, float] = {}
    for ranks_key, row in out.items():
        ranks = int(ranks_key)
        share = row["result_bytes"] / row["trace_bytes"]
        print(
            f"{ranks} ranks: a rank's compact result {row['result_bytes'] / 2**10:.0f} KiB for its "
            f"{row['trace_bytes'] / 2**20:.2f} MiB trace ({100 * share:.1f} %); waits {row.get('waits')}"
        )
        for name in ("ranks_only", "join", "join + replay"):
            r = row.get(name)
            if not r or "error" in r:
                continue
            n = 1 if name == "ranks_only" else ranks  # the per-rank part ran on rank 0 alone
            per_cpu = r["cpu_s"] / n
            if name != "ranks_only":
                first.setdefault(name, per_cpu)
            r["ms_per_rank"] = 1000 * r["wall_s"] / n
            r["cpu_ms_per_rank"] = 1000 * per_cpu
            r["mb_per_rank"] = r["max_proc_rss_mb"] / n
            linear = f"{per_cpu / first[name]:6.2f}" if name in first else ""
            print(
                f"  {name + (' (rank 0)' if n == 1 else ''):28} {r['wall_s']:8.2f} {r['cpu_s']:8.2f} "
                f"{r['max_proc_rss_mb']:8.0f} {r['ms_per_rank']:8.2f} {r['mb_per_rank']:8.2f} {linear}"
            )
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", type=Path, required=True, help="where the traces are generated (and reused)")
    ap.add_argument(
        "--kernels", type=int, nargs="*", default=[], help="one rank of each of these kernel counts"
    )
    ap.add_argument("--scale", type=int, nargs="*", default=[], help="rank counts for the scaling run")
    ap.add_argument("--rank-kernels", type=int, default=20_000, help="kernels per rank of the scaling run")
    ap.add_argument(
        "--src",
        type=Path,
        action="append",
        default=[],
        help="also analyse with PYTHONPATH=DIR (an older checkout's src), interleaved",
    )
    ap.add_argument(
        "--join",
        action="store_true",
        help="with --scale: the per-rank part (analyze --ranks-only) once, then time and memory of the join "
        "alone (analyze of the folder from the compact results), without and with the replay",
    )
    ap.add_argument(
        "--replay-max",
        type=int,
        default=256,
        help="with --join: the join with the step replay only up to this many ranks (default 256: the replay "
        "holds every rank's graph, ~23 MB a rank of 20k kernels, which 1,024 ranks would not fit in 24 GB)",
    )
    ap.add_argument("--repeat", type=int, default=1, help="interleaved rounds (fastest kept)")
    ap.add_argument("--floor", action="store_true", help="time gzip + orjson.loads of the file (one process)")
    ap.add_argument(
        "--floor-max", type=int, default=1_000_000, help="no floor above this many kernels (memory)"
    )
    ap.add_argument("--hta", action="store_true", help="time HTA's default analysis")
    ap.add_argument("--hta-max", type=int, default=1_000_000, help="no HTA above this many kernels (memory)")
    ap.add_argument("--hta-timeout", type=float, default=900.0, help="seconds before HTA is stopped")
    ap.add_argument("--json", type=Path, help="also write the figures as JSON")
    args = ap.parse_args()
    doc: dict[str, Any] = {}
    if args.kernels:
        doc["large"] = large(args)
    if args.scale:
        doc["scale"] = join_scale(args) if args.join else scale(args)
    if args.json:
        args.json.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
