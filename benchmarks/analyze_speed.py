"""How fast and lean is ``fsdpbench analyze`` next to HolisticTraceAnalysis and a bare JSON decode?

Generates an 8-rank GPU-like Kineto trace (default 200k device events per rank, plus one
``cudaLaunchKernel`` per kernel, gzipped; ``--shape real``: ``--events`` events per rank in all, the
host operators of a real trace around ~1/5.4 as many device events) in a temporary folder, then times, each in its own fresh
subprocess:

* ``fsdpbench analyze DIR`` (the CLI: discovery, parallel reading, all metrics, tables, JSON), cold
  (``--no-cache``), a first time with its caches on (``(first)``: the caches beside the traces removed
  before each run, so that it writes them, as a user's first ``analyze`` does), and a second time on
  unchanged traces (reading the caches that a first run wrote beside them);
* HTA: ``TraceAnalysis(trace_dir)`` + ``get_comm_comp_overlap`` + ``get_temporal_breakdown``;
* a bare decode: ``gzip.decompress`` + ``orjson.loads`` (GC off) of every file, with the same number
  of worker processes as fsdpbench (and, for reference, in one process).

Wall time is the subprocess's, CPU time (user + system) its own and its workers' (``os.wait4``; it
moves less than wall time when other jobs share the machine). Peak memory is the largest sum over its
process tree (it and its worker processes) of PSS (shared pages split between the processes that map
them) and, for reference, of RSS (shared pages counted in every process), sampled every 20 ms from
/proc; and, unsampled, the largest RSS any one process of the tree reached (``ru_maxrss``). Usage::

    python benchmarks/analyze_speed.py [--ranks 8] [--events 200000] [--keep DIR] [--skip-hta] [--repeat 2] [--json FILE]
    python benchmarks/analyze_speed.py --split [--ranks 4] [--events 60000] [--skip-hta]            # + main vs workers
    python benchmarks/analyze_speed.py --src /tmp/old/src [--ranks 4] [--events 60000] [--skip-hta] # + an older src
    python benchmarks/analyze_speed.py --shape real --ranks 4 --events 60000 ...   # a real trace's host side
    python benchmarks/analyze_speed.py --decoders [--ranks 1] [--events 60000] [--repeat 3]   # decoders side by side
    python benchmarks/analyze_speed.py --decoders --trace FILE [--trace FILE …]               # … on these traces

With ``--split`` the rounds also run the cold analysis in a process that reports its own CPU time
(the main process: starting Python, imports, discovery, its share of the ranks, the cross-rank waits, the
tables and JSON) apart from that of its forked worker processes (reading and measuring the other ranks),
from ``getrusage`` when the output is written. With ``--src DIR`` the rounds also run the cold analysis
(and the split one) of the fsdpbench under ``DIR`` (an older checkout's ``src``), interleaved with this
one's, and print the ratios of the two.

The machine's other load moves every figure; fsdpbench and the bare decode run ``--repeat`` rounds,
interleaved (fastest of each kept), HTA once (it takes minutes).
Before timing, the bytecode of the fsdpbench the runs import is written (as installing a wheel does), so
a shell with ``PYTHONDONTWRITEBYTECODE`` does not charge every run for compiling fsdpbench's sources.
"""

from __future__ import annotations

import argparse
import compileall
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

PAGE = os.sysconf("SC_PAGE_SIZE")


def _tree_memory(pid: int) -> tuple[int, int]:
    """(RSS, PSS) in bytes summed over ``pid`` and its descendants, from /proc. PSS splits pages
    shared between a parent and its forked workers (libraries, copy-on-write data) fairly, so it is
    the process tree's real footprint; an RSS sum counts shared pages once per process."""
    rss = pss = 0
    stack = [pid]
    while stack:
        p = stack.pop()
        try:
            with open(f"/proc/{p}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Rss:"):
                        rss += int(line.split()[1]) * 1024
                    elif line.startswith("Pss:"):
                        pss += int(line.split()[1]) * 1024
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    stack.extend(int(c) for c in f.read().split())
        except (FileNotFoundError, ProcessLookupError, ValueError, PermissionError):
            continue
    return rss, pss


def _first_run(folder: Path, analyze: list[str]) -> list[str]:
    """``analyze`` with its caches on after the caches beside the traces in ``folder`` are removed (a shell
    that then becomes the analysis: the measured process is the analysis itself)."""
    import shlex

    caches = shlex.quote(str(folder)) + "/.*.fsdpbench.*"
    return ["sh", "-c", f"rm -f {caches}; exec {shlex.join(analyze)}"]


def _compile_measured_package(env: dict[str, str]) -> None:
    """Write the bytecode of the fsdpbench that the timed runs import, as installing a wheel does.

    Under ``PYTHONDONTWRITEBYTECODE`` (set in some shells and containers) an editable checkout keeps
    no ``__pycache__``, and every timed run would compile fsdpbench's sources afresh (~0.05-0.07 CPU s
    of a 4 x 60k cold run) while the bare decode it is compared with compiles nothing of it.
    """
    where = subprocess.run(
        [
            sys.executable,
            "-c",
            "import importlib.util as u; print(u.find_spec('fsdpbench').submodule_search_locations[0])",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        check=True,
    ).stdout.strip()
    compileall.compile_dir(where, quiet=1)  # writes even under PYTHONDONTWRITEBYTECODE


def measure(cmd: list[str], env: dict[str, str] | None = None) -> dict[str, float]:
    """Run ``cmd``; return wall seconds, CPU seconds, and peak memory in MB: the process tree's
    largest sampled PSS and RSS sums (parent + workers, /proc every 20 ms) and, unsampled, the
    largest single process's RSS (``os.wait4``'s ``ru_maxrss``, which covers the child and the
    descendants it waited for)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**os.environ, **(env or {})}
    )
    peak_rss = peak_pss = 0
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        rss, pss = _tree_memory(proc.pid)
        peak_rss, peak_pss = max(peak_rss, rss), max(peak_pss, pss)
        time.sleep(0.02)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode() if proc.stderr else ""
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:4])}… failed (rc {proc.returncode}):\n{err[-2000:]}")
    return {
        "wall_s": wall,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "peak_pss_mb": peak_pss / 2**20,
        "peak_rss_mb": peak_rss / 2**20,
        "max_proc_rss_mb": usage.ru_maxrss / 1024,  # kB on Linux
    }


SHAPES = ("launches", "real")
"""``--shape``: ``launches``, one ``cudaLaunchKernel`` per device event and nothing else on the host
(``--events`` counts device events); ``real``, the host operators of a real trace around them
(``trace/synthetic.py``'s ``host_ops``: ~4.4 host events per device event; ``--events`` counts every event)."""


def generate(folder: Path, ranks: int, events: int, shape: str = "launches") -> int:
    """Write the trace files (``shape``: :data:`SHAPES`); return the bytes written."""
    from fsdpbench.trace.synthetic import device_events_for, make_trace, write_trace

    if shape not in SHAPES:
        raise ValueError(f"shape must be one of {', '.join(SHAPES)} (got {shape!r})")
    real = shape == "real"
    device = device_events_for(events) if real else events
    total = 0
    for r in range(ranks):
        trace = make_trace(rank=r, world_size=ranks, device_events=device, seed=1, host_ops=real)
        total += write_trace(folder / f"rank{r}.json.gz", trace).stat().st_size
    return total


# --- child workloads (run as ``python analyze_speed.py --child NAME DIR [WORKERS]``) ---------------


def _decode(path: str) -> int:
    import gc
    import gzip

    import orjson

    gc.disable()  # the best case for a bare decode (fsdpbench decodes with the GC off too)
    with open(path, "rb") as f:
        return len(orjson.loads(gzip.decompress(f.read()))["traceEvents"])


def child(name: str, folder: str, workers: int) -> None:
    files = sorted(str(p) for p in Path(folder).glob("*.json.gz"))
    if name == "orjson":
        if workers > 1:
            from concurrent.futures import ProcessPoolExecutor

            with ProcessPoolExecutor(workers) as pool:
                list(pool.map(_decode, files))
        else:
            for f in files:
                _decode(f)
    elif name == "hta":
        import logging

        logging.disable(logging.WARNING)
        from hta.trace_analysis import TraceAnalysis

        ta = TraceAnalysis(trace_dir=folder)
        ta.get_comm_comp_overlap(visualize=False)
        ta.get_temporal_breakdown(visualize=False)


_FRESH_DECODE = """
import gc, sys, time
from pathlib import Path
from fsdpbench.trace import kineto_decode
if sys.argv[2] == "zlib":
    import zlib
    kineto_decode._inflate, kineto_decode._INFLATE_ERRORS = zlib, (zlib.error,)
gc.disable()
t0 = time.process_time()
kineto_decode.decode(Path(sys.argv[1]))
print(time.process_time() - t0)
"""


_SPLIT = """
import resource, sys
from fsdpbench.cli import main
folder, workers, out = sys.argv[1:4]
code = main(["analyze", folder, "--no-cache", "--workers", workers, "--json", "/dev/null"])
me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
with open(out, "w") as f:
    f.write(f"{me.ru_utime + me.ru_stime} {kids.ru_utime + kids.ru_stime}")
raise SystemExit(code)
"""
"""``--split``'s child: ``fsdpbench analyze --no-cache`` through :func:`fsdpbench.cli.main` (no other
import before it), writing "MAIN_CPU_S WORKERS_CPU_S" to a file once the analysis is printed (the
workers have exited by then; the interpreter's teardown after it is in neither figure)."""


def _stream_inflate(module: Any, raw: bytes, piece: int = 1 << 16) -> int:
    """Inflate ``raw`` in ``piece``-byte inputs, as the reader does; return the bytes produced."""
    d, n = module.decompressobj(wbits=47), 0
    for i in range(0, len(raw), piece):
        n += len(d.decompress(raw[i : i + piece]))
    return n


def decoders(path: Path, repeat: int) -> dict[str, float]:
    """Best-of-``repeat`` CPU seconds (``time.process_time``) of each way to gunzip and to decode one
    rank's trace, in this process (GC off, as fsdpbench decodes), then of the reader's decode in a
    fresh process per run (imports not counted: the heap and caches are cold, as in ``analyze``'s
    workers). Options whose package is not installed are left out."""
    import gc
    import gzip
    import importlib.util
    import zlib

    import orjson

    from fsdpbench.trace import kineto_decode

    raw = path.read_bytes()
    text = gzip.decompress(raw)
    cases: dict[str, Any] = {
        "gunzip: gzip.decompress": lambda: gzip.decompress(raw),
        "gunzip: zlib streaming (fsdpbench without isal)": lambda: _stream_inflate(zlib, raw),
    }
    if importlib.util.find_spec("isal"):
        from isal import igzip, isal_zlib

        cases["gunzip: isal.igzip.decompress"] = lambda: igzip.decompress(raw)
        cases["gunzip: isal_zlib streaming (fsdpbench with isal)"] = lambda: _stream_inflate(isal_zlib, raw)
    if importlib.util.find_spec("zlib_ng"):
        from zlib_ng import gzip_ng, zlib_ng

        cases["gunzip: zlib_ng.gzip_ng.decompress"] = lambda: gzip_ng.decompress(raw)
        cases["gunzip: zlib_ng streaming"] = lambda: _stream_inflate(zlib_ng, raw)
    cases["decode: orjson.loads"] = lambda: orjson.loads(text)
    if importlib.util.find_spec("msgspec"):
        import msgspec

        # only the fields the reader uses; the others are skipped without building objects
        event = msgspec.defstruct(
            "Event",
            [
                ("ph", str, ""),
                ("name", str, ""),
                ("cat", str, ""),
                ("ts", float | None, None),
                ("dur", float, 0.0),
                ("pid", int | str | None, None),
                ("tid", int | str | None, None),
                ("args", dict[str, Any] | None, None),
            ],
        )
        doc = msgspec.defstruct("Doc", [("traceEvents", list[event])])
        typed = msgspec.json.Decoder(doc)
        cases["decode: msgspec typed structs (args as dicts)"] = lambda: typed.decode(text)
        cases["decode: msgspec.json.decode (untyped)"] = lambda: msgspec.json.decode(text)

    def reader(typed: Any, inflate: Any = None) -> Any:
        def run() -> None:
            kept = kineto_decode._TYPED, kineto_decode._inflate, kineto_decode._INFLATE_ERRORS
            kineto_decode._TYPED = typed
            if inflate is not None:
                kineto_decode._inflate, kineto_decode._INFLATE_ERRORS = inflate, (zlib.error, inflate.error)
            try:
                kineto_decode.decode(path)
            finally:
                kineto_decode._TYPED, kineto_decode._inflate, kineto_decode._INFLATE_ERRORS = kept

        return run

    cases["fsdpbench decode, orjson (gunzip + chunks + columns)"] = reader((None, None))
    fresh = {}
    if kineto_decode._TYPED[1] is not None:
        inflate = kineto_decode._inflate.__name__
        cases[f"fsdpbench decode, msgspec typed, {inflate}"] = reader(kineto_decode._TYPED)
        fresh[f"fsdpbench decode, msgspec typed, {inflate}, fresh process"] = "default"
        if kineto_decode._inflate is not zlib:
            cases["fsdpbench decode, msgspec typed, zlib"] = reader(kineto_decode._TYPED, zlib)
            fresh["fsdpbench decode, msgspec typed, zlib, fresh process"] = "zlib"
    out: dict[str, float] = {}
    gc.disable()
    try:
        for name, fn in cases.items():
            best = float("inf")
            for _ in range(max(repeat, 1)):
                t0 = time.process_time()
                fn()
                best = min(best, time.process_time() - t0)
            out[name] = best
    finally:
        gc.enable()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for name, inflate in fresh.items():
        runs = [
            subprocess.run(
                [sys.executable, "-c", _FRESH_DECODE, str(path), inflate],
                capture_output=True,
                text=True,
                check=True,
                env=env,
            ).stdout
            for _ in range(max(repeat, 1))
        ]
        out[name] = min(float(r) for r in runs)
    return out


def _print_decoders(paths: list[Path], repeat: int, json_path: Path | None, events: int | None) -> int:
    """Print (and write as JSON) :func:`decoders` for each file."""
    import orjson

    files = {}
    for path in paths:
        files[str(path)] = times = decoders(path, repeat)
        print(f"{path} (CPU s, best of {repeat})")
        for name, t in times.items():
            print(f"  {name:64} {t:8.3f}")
    if json_path:
        doc = {"events": events, "decoders_s": next(iter(files.values())), "files": files}
        json_path.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument(
        "--events",
        type=int,
        default=200_000,
        help="events per rank: device events (--shape launches), or all events (--shape real)",
    )
    ap.add_argument(
        "--shape",
        choices=SHAPES,
        default="launches",
        help="launches: one launch call per device event, nothing else on the host; real: the host "
        "operators of a real trace around them (~4.4 host events per device event)",
    )
    ap.add_argument("--keep", type=Path, help="generate into (or reuse) this folder instead of a temp one")
    ap.add_argument("--skip-hta", action="store_true")
    ap.add_argument(
        "--repeat",
        type=int,
        default=2,
        help="runs of fsdpbench and of the bare decode; the fastest is kept (HTA runs once)",
    )
    ap.add_argument("--json", type=Path, help="also write the figures as JSON")
    ap.add_argument(
        "--decoders",
        action="store_true",
        help="only time the gunzip and JSON decode options on rank 0 (CPU time), side by side",
    )
    ap.add_argument(
        "--trace",
        type=Path,
        action="append",
        help="with --decoders: time this trace file instead of a generated rank 0 (repeatable)",
    )
    ap.add_argument(
        "--split",
        action="store_true",
        help="also time the cold analysis split into its main process's CPU time and its workers'",
    )
    ap.add_argument(
        "--src",
        type=Path,
        help="also time the cold analysis of the fsdpbench in this src folder (an older checkout's), interleaved",
    )
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child[0], args.child[1], int(args.child[2]) if len(args.child) > 2 else 1)
        return 0

    import orjson

    if args.decoders and args.trace:
        return _print_decoders(args.trace, args.repeat, args.json, None)
    workers = min(args.ranks, os.cpu_count() or 1)
    with tempfile.TemporaryDirectory(prefix="analyze_speed_") as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        if not sorted(folder.glob("*.json.gz")):
            t0 = time.perf_counter()
            size = generate(folder, args.ranks, args.events, args.shape)
            what = "device events" if args.shape == "launches" else "events (real shape)"
            print(
                f"generated {args.ranks} ranks × {args.events} {what} ({size / 2**20:.0f} MB gzipped) "
                f"in {time.perf_counter() - t0:.1f} s → {folder}"
            )
        if args.decoders:
            return _print_decoders([folder / "rank0.json.gz"], args.repeat, args.json, args.events)
        me = [sys.executable, __file__, "--child"]

        analyze = [sys.executable, "-m", "fsdpbench", "analyze", str(folder), "--json", os.devnull]
        env = {"OMP_NUM_THREADS": "1", "FSDPBENCH_NO_CACHE": ""}
        commands: dict[str, tuple[list[str], dict[str, str] | None]] = {
            "fsdpbench analyze": ([*analyze, "--no-cache"], env),
            "fsdpbench analyze (cached)": (analyze, env),
            "fsdpbench analyze (first)": (_first_run(folder, analyze), env),
            f"orjson.loads ({workers} procs)": ([*me, "orjson", str(folder), str(workers)], None),
            "orjson.loads (1 proc)": ([*me, "orjson", str(folder), "1"], None),
        }
        split_file = Path(tmp) / "split.txt"
        if args.split:
            split_cmd = [sys.executable, "-c", _SPLIT, str(folder), str(workers), str(split_file)]
            commands["fsdpbench analyze (split)"] = (split_cmd, env)
        if args.src:
            src_env = {**env, "PYTHONPATH": str(args.src.resolve())}
            commands["fsdpbench analyze, --src"] = ([*analyze, "--no-cache"], src_env)
            commands["fsdpbench analyze (first), --src"] = (_first_run(folder, analyze), src_env)
            if args.split:
                commands["fsdpbench analyze (split), --src"] = (split_cmd, src_env)
            _compile_measured_package(src_env)
        _compile_measured_package(env)
        measure(analyze, env=env)  # writes the caches the cached runs read
        # interleaved rounds (cold, cached, bare, bare, cold, …), fastest of each kept: a drift in the
        # machine's speed during the run then moves every row alike instead of favouring one
        tries: dict[str, list[dict[str, float]]] = {name: [] for name in commands}
        for _ in range(max(args.repeat, 1)):
            for name, (cmd, cmd_env) in commands.items():
                tries[name].append(measure(cmd, env=cmd_env))
                if name.startswith("fsdpbench analyze (split)"):
                    main_s, workers_s = (float(x) for x in split_file.read_text().split())
                    tries[name][-1].update(main_cpu_s=main_s, workers_cpu_s=workers_s)
        runs = {name: min(t, key=lambda r: r["wall_s"]) for name, t in tries.items()}
        if not args.skip_hta:
            runs["HTA load+overlap+breakdown"] = measure([*me, "hta", str(folder)])
    print(
        f"\n{'':30} {'wall s':>8} {'CPU s':>8} {'peak PSS MB':>12} {'peak RSS MB':>12} {'max proc RSS MB':>16}"
    )
    for name, r in runs.items():
        print(
            f"{name:30} {r['wall_s']:8.2f} {r['cpu_s']:8.2f} {r['peak_pss_mb']:12.0f} {r['peak_rss_mb']:12.0f} "
            f"{r['max_proc_rss_mb']:16.0f}"
        )
    ours = runs["fsdpbench analyze"]
    bare = runs[f"orjson.loads ({workers} procs)"]
    cached = runs["fsdpbench analyze (cached)"]
    ratios: dict[str, float] = {}
    for unit in ("wall", "cpu"):  # CPU seconds move less than wall time on a shared machine
        key = f"{unit}_s"
        ratios[f"vs_orjson_same_procs_{unit}"] = ours[key] / bare[key]
        ratios[f"vs_orjson_1proc_{unit}"] = ours[key] / runs["orjson.loads (1 proc)"][key]
        ratios[f"cached_over_cold_{unit}"] = cached[key] / ours[key]
    print(
        f"\nfsdpbench second run (cache) / cold run: {ratios['cached_over_cold_wall']:.2f}× the wall time, "
        f"{ratios['cached_over_cold_cpu']:.2f}× the CPU time (aim ≤ 0.25×)"
    )
    print(
        f"fsdpbench / bare orjson.loads: {ratios['vs_orjson_same_procs_wall']:.2f}× ({workers} procs), "
        f"{ratios['vs_orjson_1proc_wall']:.2f}× (1 proc) the wall time; "
        f"{ratios['vs_orjson_same_procs_cpu']:.2f}× the CPU time of {workers} procs (aim ≤ 1.0×)"
    )
    for tag, suffix in (("", ""), ("src_", ", --src")):
        split = runs.get(f"fsdpbench analyze (split){suffix}")
        if split is None:
            continue
        for part in ("main", "workers"):
            ratios[f"{tag}{part}_cpu_over_orjson_same_procs"] = split[f"{part}_cpu_s"] / bare["cpu_s"]
        print(
            f"fsdpbench{suffix} cold, split (its fastest run): main process {split['main_cpu_s']:.3f} CPU s "
            f"({ratios[f'{tag}main_cpu_over_orjson_same_procs']:.2f}× the bare decode's CPU), workers "
            f"{split['workers_cpu_s']:.3f} CPU s ({ratios[f'{tag}workers_cpu_over_orjson_same_procs']:.2f}×)"
        )
    if "fsdpbench analyze, --src" in runs:
        other = runs["fsdpbench analyze, --src"]
        for unit in ("wall", "cpu"):
            ratios[f"cold_over_src_cold_{unit}"] = ours[f"{unit}_s"] / other[f"{unit}_s"]
            ratios[f"src_vs_orjson_same_procs_{unit}"] = other[f"{unit}_s"] / bare[f"{unit}_s"]
        print(
            f"fsdpbench cold / --src's cold: {ratios['cold_over_src_cold_wall']:.2f}× the wall time, "
            f"{ratios['cold_over_src_cold_cpu']:.2f}× the CPU time; --src / bare orjson.loads: "
            f"{ratios['src_vs_orjson_same_procs_wall']:.2f}× the wall time, "
            f"{ratios['src_vs_orjson_same_procs_cpu']:.2f}× the CPU time"
        )
    if "fsdpbench analyze (first), --src" in runs:
        first, other = runs["fsdpbench analyze (first)"], runs["fsdpbench analyze (first), --src"]
        for unit in ("wall", "cpu"):
            ratios[f"first_over_src_first_{unit}"] = first[f"{unit}_s"] / other[f"{unit}_s"]
        print(
            f"fsdpbench first run (writing its caches) / --src's: {ratios['first_over_src_first_wall']:.2f}× the "
            f"wall time, {ratios['first_over_src_first_cpu']:.2f}× the CPU time"
        )
    if "HTA load+overlap+breakdown" in runs:
        hta = runs["HTA load+overlap+breakdown"]
        ratios["hta_over_fsdpbench_wall"] = hta["wall_s"] / ours["wall_s"]
        ratios["hta_over_fsdpbench_cpu"] = hta["cpu_s"] / ours["cpu_s"]
        ratios["fsdpbench_over_hta_peak_pss"] = ours["peak_pss_mb"] / hta["peak_pss_mb"]
        ratios["fsdpbench_over_hta_peak_rss"] = ours["peak_rss_mb"] / hta["peak_rss_mb"]
        print(
            f"HTA / fsdpbench: {ratios['hta_over_fsdpbench_wall']:.1f}× the wall time, "
            f"{ratios['hta_over_fsdpbench_cpu']:.1f}× the CPU time (target ≥ 10×)"
        )
        print(
            f"fsdpbench / HTA peak memory: PSS {ratios['fsdpbench_over_hta_peak_pss']:.3f}, "
            f"RSS {ratios['fsdpbench_over_hta_peak_rss']:.3f} (target ≤ 0.25)"
        )
    if args.json:
        args.json.write_bytes(
            orjson.dumps(
                {
                    "ranks": args.ranks,
                    "events": args.events,
                    "shape": args.shape,
                    "workers": workers,
                    "runs": runs,
                    "ratios": ratios,
                },
                option=orjson.OPT_INDENT_2,
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
