"""Is the step replay unchanged between two fsdpbench sources? ``analyze --json --critical-path`` with what-ifs
(``--what-if``, default: ``scale:all_gather:0.5``, ``straggler:remove``, ``scale:compute:0.8``) of each input,
run once with ``PYTHONPATH=BEFORE`` and once with ``PYTHONPATH=AFTER`` (each a checkout's ``src``), then the
``replay`` objects (keys sorted) and the replayed step's Perfetto files compared byte for byte. Usage::

    python benchmarks/replay_equal.py --before /tmp/base/src --after src --out /tmp/eq PATH [PATH …]
    python benchmarks/replay_equal.py --before /tmp/base/src --after src --out /tmp/eq --what-if regroup:all:1 PATH

Prints one line per input (``same`` / ``DIFF`` / ``no replay``) and exits 1 when any differs. An input that
``analyze`` refuses (a folder it cannot read) is reported with its error and skipped.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson

DEFAULT_EDITS = ["scale:all_gather:0.5", "straggler:remove", "scale:compute:0.8"]


def _run(src: Path, path: Path, out: Path, edits: list[str]) -> tuple[bytes | None, bytes | None, str]:
    """(the ``replay`` object as sorted JSON, the Perfetto file's bytes, the error) of one analyze."""
    out.mkdir(parents=True, exist_ok=True)
    js, trace = out / "analysis.json", out / "replay.perfetto.json"
    cmd = [sys.executable, "-m", "fsdpbench", "analyze", str(path), "--no-cache", "--json", str(js)]
    cmd += ["--critical-path", "--replay-trace", str(trace)]
    for e in edits:
        cmd += ["--what-if", e]
    env = {**os.environ, "PYTHONPATH": str(src), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0 or not js.exists():
        return None, None, (done.stderr.strip().splitlines() or ["no output"])[-1]
    doc: dict[str, Any] = orjson.loads(js.read_bytes())
    replay = orjson.dumps(doc.get("replay"), option=orjson.OPT_SORT_KEYS)
    return replay, trace.read_bytes() if trace.exists() else None, ""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="+", type=Path, help="traces or folders analyze takes")
    ap.add_argument("--before", type=Path, required=True, help="the src folder of the reference fsdpbench")
    ap.add_argument("--after", type=Path, required=True, help="the src folder of the fsdpbench to check")
    ap.add_argument("--out", type=Path, required=True, help="where both runs' outputs are kept")
    ap.add_argument("--what-if", action="append", default=[], help="an edit (repeatable; default: three)")
    args = ap.parse_args()
    edits = args.what_if or DEFAULT_EDITS
    differs = False
    for i, path in enumerate(args.paths):
        a = _run(args.before.resolve(), path, args.out / f"{i}_before", edits)
        b = _run(args.after.resolve(), path, args.out / f"{i}_after", edits)
        if a[2] or b[2]:
            print(f"error      {path}: {a[2] or b[2]}")
            continue
        if a[0] == b"null" and b[0] == b"null":
            print(f"no replay  {path}")
            continue
        same = a[0] == b[0] and a[1] == b[1]
        differs |= not same
        what = "" if same else (" (replay)" if a[0] != b[0] else " (Perfetto file)")
        print(f"{'same' if same else 'DIFF':10} {path}{what}")
    return 1 if differs else 0


if __name__ == "__main__":
    raise SystemExit(main())
