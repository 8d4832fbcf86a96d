"""The calibration table of a profiled run with more columns than diff.md's: each what-if estimate next to
the change its counterfactual arm measured (analysis/compare/calibration.py), and with ``--reanalyze`` the
regrouping estimate priced with other α–β fits (the subject's own per-call fits, with and without the
idle-time term, and the fastest rank's calls), to see which model calibrates best.

Diffs every pair of arms the run's calibration covers (``calibration.calibration_pairs``), then prints one row
per estimate and each arm's profiled/timed step ratio::

    fsdpbench ab --arms torch,torch:unit=module,torch:prefetch=1 --profile --nproc 2 --rounds 3 --seq-len 128
    python benchmarks/calibration_table.py results/<run> [--json FILE]

A run with arms that differ in ``delay=`` alone also gets the replay's "remove/add the delay" table
(``replay_truth.check_delays``: the step replay's what-ifs against the other arm's timed step).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from fsdpbench.analysis import derived
from fsdpbench.analysis.compare import calibration
from fsdpbench.analysis.compare.diff import diff_analyses
from fsdpbench.analysis.estimate import whatif, whatif_units
from fsdpbench.results import run_folder


def _fmt(value: float | None, spec: str) -> str:
    return "—" if value is None else format(value, spec)


def _min_over_ranks_fits(analysis: object) -> dict[str, whatif.AlphaBetaFit]:
    """α–β fits of each type's k-th call at its shortest duration over the ranks: the rank that arrived
    last waited least, so its duration is closest to the collective's own cost (others add their wait)."""
    import numpy as np

    tables = [r.collective_events for r in analysis.ranks if r.collective_events is not None]
    fits = {}
    for kind in sorted(set().union(*(set(t["type"].astype(str)) for t in tables))):
        calls = [t[t["type"].astype(str) == kind].sort_values("start_ns") for t in tables]
        n = min(len(c) for c in calls)
        dur = np.vstack(
            [(c["end_ns"].to_numpy(float)[:n] - c["start_ns"].to_numpy(float)[:n]) / 1e3 for c in calls]
        )
        fits[kind] = whatif.fit_alpha_beta(calls[0]["bytes"].to_numpy()[:n], dur.min(axis=0))
    return fits


def _mean_wait_us(analysis: Any) -> float | None:
    """The mean over ranks of the step's waiting for the last rank (``waits.ranks[].wait_us``)."""
    waits = analysis.waits
    ranks = (waits or {}).get("ranks") or []
    waits = [r["wait_us"] for r in ranks if r.get("wait_us") is not None]
    return sum(waits) / len(waits) if waits else None


def _add_wait_parts(entries: list[dict], diffs: list[dict], analyses: dict) -> None:
    """On each regrouping entry: the estimate's wait part (``wait_delta_us``) and the measured change of
    the mean wait (counterfactual − subject), in ms; None where either is unknown."""
    estimates = {}
    for d in diffs:
        for f in d.get("findings") or []:
            if f.get("id") == "fragmentation" and f.get("estimate"):
                estimates[(d["base"], d["test"], "regrouping")] = f["estimate"]
                estimates[(d["base"], d["test"], "one_bucket_per_layer")] = (
                    f["estimate"].get("one_bucket_per_layer") or {}
                )
    for e in entries:
        est = estimates.get((e["base"], e["test"], e["estimate"]))
        if est is not None:
            e.update(_wait_part(est, e, analyses))


def _wait_part(est: dict, entry: dict, analyses: dict) -> dict:
    """``predicted_wait_ms`` (the estimate's ``wait_delta_us``) and ``measured_wait_ms`` of an entry."""
    before = _mean_wait_us(analyses[entry["subject"]])
    after = _mean_wait_us(analyses[entry["counterfactual"]])
    wait = est.get("wait_delta_us")
    return {
        "predicted_wait_ms": None if wait is None else wait / 1e3,
        "measured_wait_ms": None if before is None or after is None else (after - before) / 1e3,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="a run folder written by `fsdpbench ab --profile`")
    parser.add_argument("--json", type=Path, help="also write the entries and distortion here")
    parser.add_argument(
        "--reanalyze", action="store_true", help="read the traces again (per-call α–β fits need the events)"
    )
    args = parser.parse_args(argv)
    manifest = run_folder.read_json_file(args.run / run_folder.MANIFEST)
    analyses = derived.ensure_analysis(args.run, reanalyze=args.reanalyze)
    summary = run_folder.read_json_file(args.run / run_folder.SUMMARY)
    arms = {a["label"]: a for a in manifest["arms"]}
    num_layers = ((manifest.get("config") or {}).get("model") or {}).get("num_hidden_layers")
    diffs = []
    for base, test in calibration.calibration_pairs(arms):  # the pairs the run's own calibration covers
        result = diff_analyses(
            analyses[base],
            analyses[test],
            base_label=base,
            test_label=test,
            base_arm=arms[base],
            test_arm=arms[test],
            context={"num_layers": num_layers},
        )
        diffs.append(result.to_dict())
    out = calibration.calibrate_run(manifest, summary, diffs)
    _add_wait_parts(out["entries"], diffs, analyses)
    if args.reanalyze:  # an independent prediction: α from the subject's own per-call fits only
        by_pair = {(d["base"], d["test"]): d for d in diffs}
        extra = []
        for e in out["entries"]:
            if e["estimate"] != "regrouping":
                continue
            d = by_pair[(e["base"], e["test"])]
            side, other = ("base", "test") if e["subject"] == d["base"] else ("test", "base")
            per_type = {r["type"]: (r[f"{side}_count"], r[f"{side}_time_us"]) for r in d["collectives"]}
            targets = {r["type"]: r[f"{other}_count"] for r in d["collectives"]}
            fits = {
                src: {t: whatif.AlphaBetaFit.from_dict(f) for t, f in v.items()}
                for src, v in d["fits"].items()
            }
            own = {t: (side, f) for t, f in fits.get(side, {}).items() if f.ok}
            low = {t: (side, f) for t, f in _min_over_ranks_fits(analyses[e["subject"]]).items() if f.ok}
            # the diff's own entry already has its fits with and without the idle term (predicted_ms and
            # predicted_comm_only_ms); these variants price the removed calls with other fits
            candidates = [(src, fits.get(src, {})) for src in (side, "pooled", "aggregate", other)]
            chosen = {t: c for t in per_type if (c := whatif.choose_fit(t, *candidates)) is not None}
            variants = {  # name: (fits, with the idle-time term)
                # as the diff prices it (its per-unit row repeats the diff's entry); step totals is what a
                # trace without fsdpbench's ranges gets
                "the diff's fits + idle scaling": (chosen, True),
                "own per-call fits only": (own, False),
                "own per-call fits + idle scaling": (own, True),
                "own per-call fits, min over ranks": (low, False),
            }
            mean = d["side_by_side"]["mean"][side]
            breakdown = {k: mean.get(k) for k in ("step_time_us", "compute_us", "comm_us", "exposed_comm_us")}
            subject_data = analyses[e["subject"]].record().to_dict()
            other_data = analyses[e["counterfactual"]].record().to_dict()
            for name, (fit_for, idle) in variants.items():
                est = whatif.estimate_regrouping(
                    per_type,
                    targets,
                    fit_for,
                    **breakdown,
                    free_us=mean.get("free_us") if idle else None,
                    waits=whatif.step_waits(subject_data),
                ).to_dict()
                ests = [(f"{name}, step totals", est)]
                per_unit = whatif_units.estimate_regrouping_units(  # the same fits, per (unit, phase)
                    subject_data,
                    whatif_units.unit_counts(other_data),
                    fit_for,
                    types=per_type,
                    **breakdown,
                    free_us=mean.get("free_us") if idle else None,
                )
                if per_unit is not None:
                    ests.append((f"{name}, per unit", per_unit.to_dict()))
                for label, est in ests:
                    pseudo = {**d, "findings": [{"id": "fragmentation", "estimate": est}]}
                    for entry in calibration.calibrate_diff(
                        pseudo, arms, {a: v.get("median_ms") for a, v in summary["arms"].items()}
                    ):
                        if entry["estimate"] == "regrouping":
                            extra.append(
                                {
                                    **entry,
                                    **_wait_part(est, entry, analyses),
                                    "estimate": f"regrouping ({label})",
                                }
                            )
        out["entries"] += extra
    print(
        "| estimate | subject → counterfactual | predicted ms | measured ms (timed) | error | "
        "measured ms (profiled) | error (profiled) | predicted × timed/profiled | error | "
        "component: predicted / measured ms (profiled) | error | wait part: predicted / measured ms | "
        "independent fit | basis |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for e in out["entries"]:
        print(
            f"| {e['estimate']} | {e['subject']} → {e['counterfactual']} | {_fmt(e['predicted_ms'], '.1f')} | "
            f"{_fmt(e['measured_ms'], '.1f')} | {_fmt(e['error_pct'], '+.0f')} % | "
            f"{_fmt(e['measured_profiled_ms'], '.1f')} | {_fmt(e['error_profiled_pct'], '+.0f')} % | "
            f"{_fmt(e['predicted_timed_ms'], '.1f')} | {_fmt(e['error_timed_pct'], '+.0f')} % | "
            f"{e.get('component', '—')}: {_fmt(e.get('predicted_component_ms'), '.1f')} / "
            f"{_fmt(e.get('measured_component_ms'), '.1f')} | {_fmt(e.get('error_component_pct'), '+.0f')} % | "
            f"{_fmt(e.get('predicted_wait_ms'), '.1f')} / {_fmt(e.get('measured_wait_ms'), '.1f')} | "
            f"{e.get('independent', '—')} | {e.get('basis', '—')} |"
        )
    print()
    for arm, ratio in out["distortion"]["ratio"].items():
        print(f"{arm}: profiled/timed step = {_fmt(ratio, '.2f')}")
    for w in out["distortion"]["warnings"]:
        print(f"warning: {w}")
    if calibration.delay_pairs(arms):  # known delays: the replay's remove/add against the other arm
        from replay_truth import check_delays, print_delays

        checked = check_delays(args.run)
        out["delays"] = checked
        print()
        print_delays([checked])
    if args.json:
        args.json.write_text(json.dumps(out, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
