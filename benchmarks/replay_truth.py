"""Ground truth for the step replay (issue 39): interleaved runs whose counterfactual is measured in the same
run, and the replay's predictions of it.

``delays``: each run is one ``fsdpbench ab --profile`` of ``torch``, ``torch`` with D ms on one rank at one
unit and phase for each D (default 5, 20, 50 ms on rank 2 at layers.1's backward, 4 ranks), and the masking
arm (the largest D there plus 20 ms on rank 1 at the same place). Per run and D it checks:

* causality: the place that determines the delayed arm's step (``replay.critical_excess[0]``: the (rank,
  unit, phase) whose time on the critical path most exceeds the other ranks' at the same unit and phase; over
  ``--profile-steps`` K steps, the median of its per-step excess) is the delayed one (``replay.critical[0]``'s
  place, the largest (rank, unit, phase, kind) on the path, is printed beside it);
* "remove the delay" (``--what-if delay:R:U:P:-D`` on the delayed arm's profile) and "add the delay" (on the
  clean arm's) against the other arm's timed median, within max(10 % of D, 2 % of the step)
  (``calibration.delay_entry``);
* masking: both delays added to the clean arm's profile in one what-if, against the masking arm's timed
  median (within 10 % of the larger delay); the per-rank sum (D + 20) is printed beside it.

Each remove/add entry is also held against the injected change (``injected_ms``: at one unit and phase only
the largest delay counts, as the ranks meet at its collectives; ``within_injected`` with the same
tolerance): on a machine where the timed medians are noisier than the delays, that is the reference left.

``regrouping``: each run is ``fsdpbench ab --profile --arms torch:unit=module,torch`` (2 ranks, as
docs/calibration.md's table); the replay's regroup edit on the unit=module arm's profile against the measured
timed change (within 10 %).

    python benchmarks/replay_truth.py delays --runs 10 --out results/truth   # --profile-steps 5 by default
    python benchmarks/replay_truth.py regrouping --runs 3 --out results/truth
    python benchmarks/replay_truth.py delays --reuse results/truth/delays_*   # analyse runs already made
    python benchmarks/replay_truth.py delays --reuse results/truth/delays_* --analyze-step 2   # one step of them

The figures go to docs/calibration.md ("The replay against known delays").
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from fsdpbench.analysis.compare import calibration
from fsdpbench.results import run_folder

PLACE = (2, "layers.1", "backward")
"""The delayed place by default: (rank, unit, phase)."""
MASK_RANK, MASK_MS = 1, 20.0
"""The masking arm's second delay: this rank, this many ms, at the same unit and phase."""
REGROUP_EDITS = ("regroup:all:unit",)
"""The replay edit that turns the unit=module arm's collectives into one per unit and phase (every type), as
the layer-unit arm issues them (docs/replay.md)."""
TOLERANCE_REGROUP = 0.10
PROFILE_STEPS = 5
"""Profiled steps per arm (``fsdpbench ab --profile-steps``): a delay is in every step, a rank the OS leaves without a
core in some steps only, and the median over 5 steps outvotes a slow rank that holds 2 of them, which 3 steps
did not (docs/calibration.md: 20 ms found 7/10 runs with 3 steps, 10/10 with 5; a run costs ~4 % more)."""


def _ab(
    arms: list[str], out: Path, name: str, nproc: int, rounds: int, extra: list[str], timeout: float
) -> Path:
    cmd = [sys.executable, "-m", "fsdpbench", "ab", "--arms", ",".join(arms), "--profile"]
    cmd += ["--nproc", str(nproc), "--rounds", str(rounds), "--out", str(out), "--name", name, "--no-report"]
    cmd += extra
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return sorted(out.glob(f"{name}_*"))[-1]


STEP: int | None = None
"""``--analyze-step N``: read only ``ProfilerStep#N`` of each profile (``analyze --step N``): the one-step reading
of runs that profiled several steps, to compare with their median over steps on the same traces."""


def replay_of(run: Path, arm: str, edits: list[str]) -> dict[str, Any] | None:
    """The ``replay`` object of ``arm``'s profiles with a ``what_if`` entry per text of ``edits``; a text of
    several edits joined by ``+`` (``calibration.joint_edit``) is one what-if with all of them applied
    (``replay_with_edits``). None (with the note printed) when the analysis has none."""
    return replay_with_edits([run_folder.profile_dir(run, arm)], edits, what=f"{run.name} {arm}")


def replay_with_edits(paths: list[Path], edits: list[str], what: str = "") -> dict[str, Any] | None:
    """``analyze`` of ``paths`` in this process with the single edits as ``--what-if``s, plus one what-if
    per ``+``-joined group of edits, applied together to the same graph (``replay.apply_edit`` in turn,
    then one replay): ``analyze --what-if`` replays each edit on its own. An edit the replay refuses (e.g.
    one it does not have yet) gets a what-if with no prediction and the replay's message as its note."""
    from fsdpbench.analysis.crossrank import replay as rp
    from fsdpbench.analysis.pipeline import analyze
    from fsdpbench.errors import ConfigError
    from fsdpbench.trace import cache

    refused: dict[str, str] = {}
    for text in edits:
        for part in text.split("+"):
            try:
                rp.parse_edit(part)
            except ConfigError as exc:
                refused[text] = str(exc)
    singles = [e for e in edits if "+" not in e and e not in refused]
    res = analyze([str(p) for p in paths], workers=1, what_if=singles, step=STEP)
    if getattr(res, "_replay", None) is None and any("+" in e for e in edits):
        # the replay came from its cache beside the traces (no graph kept): replay again
        os.environ[cache.NO_CACHE_ENV] = "1"
        try:
            res = analyze([str(p) for p in paths], workers=1, what_if=singles, step=STEP)
        finally:
            del os.environ[cache.NO_CACHE_ENV]
    if res.replay is None:
        print(f"{what}: no replay ({res.replay_note})", file=sys.stderr)
        return None
    graph = res._replay[0] if any("+" in e for e in edits) else None
    for text in edits:
        if text in refused:
            res.replay["what_if"].append({"edit": text, "predicted_step_us": None, "note": refused[text]})
            continue
        if "+" not in text or graph is None:
            continue
        edited = graph
        for part in text.split("+"):
            edited = rp.apply_edit(edited, rp.parse_edit(part))
        reading = rp.read(edited, rp.schedule(edited))
        res.replay["what_if"].append(
            {
                "edit": text,
                "predicted_step_us": reading.step_us / rp.n_steps(edited),  # per step, as analyze's what-ifs
                "phases": {p["phase"]: p["us"] for p in reading.by_phase},
                "source": "replay",
                "note": "; ".join(edited.notes[len(graph.notes) :]) or None,
            }
        )
    return res.replay


def _top(replay: dict[str, Any] | None) -> tuple[int, str, str] | None:
    """The place that determines the step: the first (rank, unit, phase) of ``replay.critical_excess`` (its
    time on the critical path beyond the other ranks' at the same unit and phase; docs/replay.md)."""
    rows = (replay or {}).get("critical_excess") or []
    return (int(rows[0]["rank"]), str(rows[0]["unit"]), str(rows[0]["phase"])) if rows else None


def _top_by_min(replay: dict[str, Any] | None) -> tuple[int, str, str] | None:
    """The place whose smallest per-step excess is the largest (``excess_per_step_us``; one step: its
    ``excess_us``): "holds the step up in every profiled step", a reading beside the replay's median."""
    rows = (replay or {}).get("critical_excess") or []
    if not rows:
        return None
    best = max(rows, key=lambda r: min(r.get("excess_per_step_us") or [r["excess_us"]]))
    return int(best["rank"]), str(best["unit"]), str(best["phase"])


def _top_critical(replay: dict[str, Any] | None) -> tuple[int, str, str] | None:
    """The place of ``replay.critical[0]``: the (rank, unit, phase, kind) with the most time on the path."""
    critical = (replay or {}).get("critical") or []
    return (
        (int(critical[0]["rank"]), str(critical[0]["unit"]), str(critical[0]["phase"])) if critical else None
    )


def _excess_of(
    replay: dict[str, Any] | None, place: tuple[int, str, str]
) -> tuple[float | None, int | None, list[float]]:
    """(excess in ms, 1-based position, per-step excess in ms: empty with one step) of ``place`` in
    ``replay.critical_excess``; (None, None, []) if absent."""
    for i, r in enumerate((replay or {}).get("critical_excess") or [], 1):
        if (int(r["rank"]), str(r["unit"]), str(r["phase"])) == place:
            return float(r["excess_us"]) / 1e3, i, [x / 1e3 for x in r.get("excess_per_step_us") or []]
    return None, None, []


def _delay_arms(delays: list[float], place: tuple[int, str, str]) -> dict[str, list[str]]:
    """{arm spec: delay texts} of a delays run: clean, one arm per D, the masking arm."""
    rank, unit, phase = place
    arms = {"torch": []}
    for d in delays:
        arms[f"torch:delay={rank}/{unit}/{phase}/{d:g}"] = [f"{rank}/{unit}/{phase}/{d:g}"]
    big = max(delays)
    masked = [f"{rank}/{unit}/{phase}/{big:g}", f"{MASK_RANK}/{unit}/{phase}/{MASK_MS:g}"]
    arms[f"torch:delay={masked[0]}:delay={masked[1]}"] = masked
    return arms


def _injected_ms(subject: dict[str, Any], counterfactual: dict[str, Any]) -> float | None:
    """The change the injected delays make if every rank is otherwise alike: at one (unit, phase) the ranks
    meet at its collectives, so only the largest delay there counts (the others are masked): Σ over
    places of (the counterfactual's largest − the subject's largest). None when the arms' delays are at
    more than one (unit, phase)."""

    def largest(arm: dict[str, Any]) -> dict[tuple[str, str], float]:
        out: dict[tuple[str, str], float] = {}
        for d in arm.get("delay") or []:
            _, unit, phase, ms = d.split("/")
            out[(unit, phase)] = max(out.get((unit, phase), 0.0), float(ms))
        return out

    a, b = largest(subject), largest(counterfactual)
    places = set(a) | set(b)
    if len(places) > 1:
        return None
    return sum(b.get(p, 0.0) - a.get(p, 0.0) for p in places)


def check_delays(run: Path) -> dict[str, Any]:
    """The delay checks of one run folder (see the module docstring)."""
    manifest = run_folder.read_json_file(run / run_folder.MANIFEST)
    summary = run_folder.read_json_file(run / run_folder.SUMMARY)
    arms = {a["label"]: a for a in manifest["arms"]}
    # nested pairs only: one arm's delays are a subset of the other's (clean ↔ delayed, 50 ↔ 50 + 20)
    pairs = [
        (s, c)
        for s, c in calibration.delay_pairs(arms)
        if set(arms[s].get("delay") or []) <= set(arms[c].get("delay") or [])
        or set(arms[c].get("delay") or []) <= set(arms[s].get("delay") or [])
    ]
    edits: dict[str, list[str]] = {label: [] for label in arms}
    for subject, counterfactual in pairs:
        edits[subject].append(
            calibration.joint_edit(calibration.delay_edits(arms[subject], arms[counterfactual]))
        )
    replays = {label: replay_of(run, label, sorted(set(e))) for label, e in edits.items()}
    profiled = {  # per step: the longest rank's window over the replay's steps (--profile-steps)
        label: (
            max(r["measured_us"] for r in rp["ranks"]) / 1e3 / (rp.get("steps") or 1)
            if rp and rp.get("ranks")
            else None
        )
        for label, rp in replays.items()
    }
    wanted = set(pairs)
    entries = [
        e
        for e in calibration.calibrate_delays(manifest, summary, replays, profiled)
        if (e["subject"], e["counterfactual"]) in wanted
    ]
    for e in entries:
        e["injected_ms"] = _injected_ms(arms[e["subject"]], arms[e["counterfactual"]])
        e["within_injected"] = (
            None
            if e["predicted_ms"] is None or e["injected_ms"] is None
            else abs(e["predicted_ms"] - e["injected_ms"]) <= e["tolerance_ms"]
        )
    tops = {}
    for label, arm in arms.items():
        places = [tuple(d.split("/")[:3]) for d in arm.get("delay") or []]
        if places:  # the largest delay's place should top the path
            big = max(arm["delay"], key=lambda d: float(d.split("/")[3]))
            want = (int(big.split("/")[0]), *big.split("/")[1:3])
            excess, position, per_step = _excess_of(replays[label], want)
            top_rows = (replays[label] or {}).get("critical_excess") or []
            tops[label] = {
                "top": _top(replays[label]),
                "top_excess_ms": float(top_rows[0]["excess_us"]) / 1e3 if top_rows else None,
                "delayed": want,
                "delayed_excess_ms": excess,
                "delayed_position": position,
                "delayed_excess_per_step_ms": per_step,
                "hit": _top(replays[label]) == want,
                "top_critical": _top_critical(replays[label]),
                "hit_critical": _top_critical(replays[label]) == want,
                "hit_min": _top_by_min(replays[label]) == want,
            }
    return {"run": str(run), "entries": entries, "tops": tops}


def check_regrouping(run: Path) -> dict[str, Any]:
    """The replay's regrouping of the unit=module arm against the measured change to the torch arm."""
    manifest = run_folder.read_json_file(run / run_folder.MANIFEST)
    summary = run_folder.read_json_file(run / run_folder.SUMMARY)
    arms = {a["label"]: a for a in manifest["arms"]}
    subject = next(label for label, a in arms.items() if a.get("unit") == "module")
    other = next(label for label, a in arms.items() if a.get("unit", "layer") == "layer")
    edit = calibration.joint_edit(list(REGROUP_EDITS))
    replay = replay_of(run, subject, [edit])
    found = calibration.find_what_if(replay, list(REGROUP_EDITS))
    replayed = calibration.replay_step_us(replay)
    timed = {label: summary["arms"][label]["median_ms"] for label in arms}
    measured = timed[other] - timed[subject]
    predicted = (
        None
        if found is None or replayed is None or found.get("predicted_step_us") is None
        else (float(found["predicted_step_us"]) - replayed) / 1e3
    )
    error = calibration.error_pct(predicted, measured)
    if found is not None and found.get("note"):
        print(f"{run.name} {edit}: {found['note']}", file=sys.stderr)
    other_step = calibration.replay_step_us(replay_of(run, other, []))
    measured_prof = None if other_step is None or replayed is None else (other_step - replayed) / 1e3
    return {
        "run": str(run),
        "subject": subject,
        "counterfactual": other,
        "edit": edit,
        "source": None if found is None else found.get("source"),
        "predicted_ms": predicted,
        "measured_ms": measured,
        "error_pct": error,
        "within": None if error is None else abs(error) <= TOLERANCE_REGROUP * 100,
        "measured_profiled_ms": measured_prof,
        "error_profiled_pct": calibration.error_pct(predicted, measured_prof),
    }


def _fmt(v: Any, spec: str = ".1f") -> str:
    return "—" if v is None else format(v, spec) if isinstance(v, float) else str(v)


def print_delays(results: list[dict[str, Any]]) -> None:
    print(
        "| run | check | edits | source | predicted ms | measured ms (timed) | measured ms (profiled) | "
        "tolerance ms | within | injected ms | within (injected) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for i, r in enumerate(results):
        for e in r["entries"]:
            print(
                f"| {i} | {e['estimate']} | {' + '.join(e['edits'])} | {_fmt(e['source'])} | "
                f"{_fmt(e['predicted_ms'])} | {_fmt(e['measured_ms'])} | {_fmt(e['measured_profiled_ms'])} | "
                f"{_fmt(e['tolerance_ms'])} | {_fmt(e['within'])} | {_fmt(e['injected_ms'])} | "
                f"{_fmt(e['within_injected'])} |"
            )
    print()
    print("| run | arm | top place (critical_excess[0]) | its excess ms | delayed place's excess ms (position) "
          "| its excess per step ms | critical[0]'s place |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    by_arm: dict[str, list[tuple[bool, bool, bool]]] = {}
    for i, r in enumerate(results):
        for label, t in r["tops"].items():
            by_arm.setdefault(label, []).append((bool(t["hit"]), bool(t["hit_critical"]), bool(t["hit_min"])))
            top = "/".join(map(str, t["top"] or ()))
            print(
                f"| {i} | {label} | {top} | {_fmt(t['top_excess_ms'])} | {_fmt(t['delayed_excess_ms'])} "
                f"({_fmt(t['delayed_position'])}) | {', '.join(f'{x:.1f}' for x in t['delayed_excess_per_step_ms'])} "
                f"| {'/'.join(map(str, t['top_critical'] or ()))} |"
            )
    print()
    for label, hits in by_arm.items():
        print(
            f"the delayed place determines the step (critical_excess[0]): {sum(h for h, _, _ in hits)}/{len(hits)} "
            f"runs; critical[0] at the delayed place: {sum(c for _, c, _ in hits)}/{len(hits)}; the largest "
            f"smallest per-step excess at it: {sum(m for _, _, m in hits)}/{len(hits)} ({label})"
        )
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in results:
        for e in r["entries"]:
            groups.setdefault((e["estimate"], f"{e['subject']} → {e['counterfactual']}"), []).append(e)
    for (name, pair), es in groups.items():
        ok = [e for e in es if e["within"]]
        ok_inj = [e for e in es if e.get("within_injected")]
        errs = [abs(e["predicted_ms"] - e["measured_ms"]) for e in es if e["predicted_ms"] is not None]
        med = statistics.median(errs) if errs else None
        pred = ", ".join(_fmt(e["predicted_ms"]) for e in es)
        print(
            f"{name} {pair}: within of the measured (timed) {len(ok)}/{len(es)} runs (median |predicted − "
            f"measured| {_fmt(med)} ms); within of the injected {_fmt(es[0].get('injected_ms'))} ms "
            f"{len(ok_inj)}/{len(es)}; predicted {pred}"
        )


def print_regrouping(results: list[dict[str, Any]]) -> None:
    print(
        "| run | subject → counterfactual | edit | source | predicted ms | measured ms (timed) | error | "
        "within 10 % | measured ms (profiled) | error |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for i, r in enumerate(results):
        print(
            f"| {i} | {r['subject']} → {r['counterfactual']} | {r['edit']} | {_fmt(r['source'])} | "
            f"{_fmt(r['predicted_ms'])} | {_fmt(r['measured_ms'])} | {_fmt(r['error_pct'], '+.0f')} % | "
            f"{_fmt(r['within'])} | {_fmt(r['measured_profiled_ms'])} | {_fmt(r['error_profiled_pct'], '+.0f')} % |"
        )
    print(f"within 10 %: {sum(bool(r['within']) for r in results)}/{len(results)} runs")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("check", choices=["delays", "regrouping"])
    parser.add_argument("--runs", type=int, default=10, help="interleaved runs to make (default 10)")
    parser.add_argument("--out", type=Path, default=Path("results/replay_truth"), help="where runs go")
    parser.add_argument("--reuse", type=Path, nargs="+", help="analyse these run folders instead of running")
    parser.add_argument("--delays", default="5,20,50", help="delays in ms, comma-separated (default 5,20,50)")
    parser.add_argument(
        "--place",
        default="/".join(map(str, PLACE)),
        help="RANK/UNIT/PHASE of the delays (default 2/layers.1/backward)",
    )
    parser.add_argument("--nproc", type=int, help="ranks (default 4 for delays, 2 for regrouping)")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds per arm per run (default 3)")
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument(
        "--profile-steps",
        type=int,
        default=PROFILE_STEPS,
        help=f"fsdpbench ab --profile-steps: consecutive profiled steps per arm (default {PROFILE_STEPS}); the "
        "replay takes each place's median excess over them and the delay edits per step",
    )
    parser.add_argument("--device", help="fsdpbench ab --device (default: its own, auto)")
    parser.add_argument("--layers", type=int, help="fsdpbench ab --layers (default: the preset's)")
    parser.add_argument("--json", type=Path, help="also write every check here")
    parser.add_argument(
        "--analyze-step",
        type=int,
        metavar="N",
        help="read only profiled step N of each arm (ProfilerStep#N, analyze --step N): with --reuse, the "
        "one-step reading of runs made with several profiled steps",
    )
    args = parser.parse_args(argv)
    results = []
    global STEP
    STEP = args.analyze_step
    if args.reuse:
        runs: list[Path] = list(args.reuse)
    else:
        runs = []
        args.out.mkdir(parents=True, exist_ok=True)
        for i in range(args.runs):
            if args.check == "delays":
                rank, unit, phase = args.place.split("/")
                specs = _delay_arms([float(d) for d in args.delays.split(",")], (int(rank), unit, phase))
                arms, nproc = list(specs), args.nproc or 4
            else:
                arms, nproc = ["torch:unit=module", "torch"], args.nproc or 2
            extra = ["--seq-len", str(args.seq_len), "--profile-steps", str(args.profile_steps)]
            extra += ["--device", args.device] if args.device else []
            extra += ["--layers", str(args.layers)] if args.layers else []
            run = _ab(arms, args.out, f"{args.check}{i}", nproc, args.rounds, extra, timeout=3600)
            print(f"run {i}: {run}", file=sys.stderr)
            runs.append(run)
    for run in runs:
        results.append(check_delays(run) if args.check == "delays" else check_regrouping(run))
    (print_delays if args.check == "delays" else print_regrouping)(results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
