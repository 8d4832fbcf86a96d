"""Does sharing the step replay's what-ifs with a forked child pay? ``replay_step`` on the same analysis (the
ranks read once, the graphs pickled), alternated with ``share`` (``fanout.share``, two processes) and without;
per run the main process's wall and CPU seconds and the forked child's CPU seconds. Usage::

    python benchmarks/replay_share.py PATH [--what-if EDIT ...] [--rounds 4]

``--what-if`` defaults to ``scale:all_gather:0.5``, ``straggler:remove``, ``scale:compute:0.8`` (``replay_step``
shares only when there are what-ifs and the graph holds ``SHARE_MIN_TASKS`` tasks or more). The figures:
docs/benchmarks.md, "The cost round".
"""

from __future__ import annotations

import argparse
import functools
import os
import pickle
import time
from typing import Any

DEFAULT_EDITS = ["scale:all_gather:0.5", "straggler:remove", "scale:compute:0.8"]


def _analysis(path: str, edits: list[str]) -> Any:
    """The Analysis of ``path`` as ``replay_step`` receives it (read in one process, no cache)."""
    from fsdpbench.analysis.crossrank import replay as rp
    from fsdpbench.analysis.pipeline import analyze
    from fsdpbench.trace import cache

    kept: dict[str, Any] = {}
    real = rp.replay_step

    def capture(res: Any, edits: Any = (), share: Any = None) -> None:
        kept["res"] = res

    rp.replay_step = capture  # the pipeline imports it from the module at call time
    os.environ[cache.NO_CACHE_ENV] = "1"
    try:
        analyze([path], workers=1, what_if=edits)
    finally:
        rp.replay_step = real
        del os.environ[cache.NO_CACHE_ENV]
    if "res" not in kept:
        raise SystemExit(f"{path}: the analysis did not reach the replay")
    return kept["res"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("path")
    ap.add_argument("--what-if", action="append", dest="edits")
    ap.add_argument("--rounds", type=int, default=4)
    args = ap.parse_args()
    edits = args.edits or DEFAULT_EDITS
    from fsdpbench.analysis import fanout
    from fsdpbench.analysis.crossrank import replay as rp

    blob = pickle.dumps(_analysis(args.path, edits))
    share = functools.partial(fanout.share, processes=2)
    order = [("serial", None), ("shared", share), ("shared", share), ("serial", None)]
    for rnd in range(args.rounds):
        for name, sh in order if rnd % 2 == 0 else order[::-1]:
            res = pickle.loads(blob)
            t0, w0, c0 = time.process_time(), time.perf_counter(), os.times()
            out = rp.replay_step(res, edits, sh)
            c1 = os.times()
            child = c1.children_user + c1.children_system - c0.children_user - c0.children_system
            steps = [row.get("predicted_step_us") for row in (out or {}).get("what_if", [])]
            print(
                f"{name:7s} wall {time.perf_counter() - w0:.3f} s  main CPU {time.process_time() - t0:.3f} s  "
                f"child CPU {child:.3f} s  predicted {steps}"
            )


if __name__ == "__main__":
    main()
