"""The step replay's regrouping against the arm it predicts (issue 39; docs/calibration.md, "The step replay's
regrouping").

For each run folder of ``fsdpbench ab --arms torch:unit=module,torch --nproc 4 --profile --rounds 1 ...``: the
replayed change of ``regroup:all:unit`` on the ``unit=module`` arm's profiled step (predicted − replayed step)
against the measured change of the profiled step (the ``torch`` arm's − the ``unit=module`` arm's, the longest
rank of each), and, for reference, the timed medians' change (summary.json). Prints a markdown table.

    python benchmarks/replay_regroup_check.py results/run1_* results/run2_* results/run3_*
"""

from __future__ import annotations

import argparse
from pathlib import Path

import orjson

from fsdpbench.analysis import analyze

EDIT = "regroup:all:unit"


def check(run: Path, subject: str, counterfactual: str) -> str:
    """One table row: the measured and replayed change of ``run``'s profiled step, and the timed change."""
    mod = analyze([run / "profiles" / subject], what_if=[EDIT])
    base = analyze([run / "profiles" / counterfactual])
    # per step (--profile-steps K: each replay's window over its steps), as predicted_step_us
    m = max(r["measured_us"] for r in mod.replay["ranks"]) / 1e3 / mod.replay["steps"]
    b = max(r["measured_us"] for r in base.replay["ranks"]) / 1e3 / base.replay["steps"]
    row = mod.replay["what_if"][0]
    pred = (row["predicted_step_us"] - mod.replay["step_us"]) / 1e3
    arms = orjson.loads((run / "summary.json").read_bytes())["arms"]
    tm, tb = arms[subject]["median_ms"], arms[counterfactual]["median_ms"]
    meas, timed = b - m, tb - tm
    return (
        f"| {run.name} | {m:,.1f} | {b:,.1f} | {meas:,.1f} | {pred:,.1f} | {(pred - meas) / abs(meas) * 100:+.1f} % "
        f"| {tm:,.1f} → {tb:,.1f} ({timed:,.1f}) | {(pred - timed) / abs(timed) * 100:+.1f} % |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("runs", nargs="+", type=Path, help="run folders of the A/B above")
    parser.add_argument(
        "--subject", default="torch-unitmodule", help="the arm regrouped (default %(default)s)"
    )
    parser.add_argument("--counterfactual", default="torch", help="the arm it predicts (default %(default)s)")
    args = parser.parse_args()
    print(
        f"| run | {args.subject} profiled step (ms) | {args.counterfactual} profiled step | measured change | "
        f"replayed `{EDIT}` | error | timed medians (change) | error vs timed |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for run in args.runs:
        print(check(run, args.subject, args.counterfactual))


if __name__ == "__main__":
    main()
