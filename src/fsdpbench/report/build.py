"""Turn a loaded run (``RunData``) into report blocks: verdict, missing pieces, step times,
throughput, profile figures, diagnosis, configuration, and the commands to reproduce.

Every section is built on its own: one that fails (a field of an unexpected shape) becomes a note
in "Missing pieces" and the others still appear.
"""

from __future__ import annotations

import logging
import shlex
from collections.abc import Callable
from typing import Any

import numpy as np

from fsdpbench.analysis.findings import finite
from fsdpbench.fmt import MISSING, fmt, fmt_bytes, fmt_pct, fmt_sig, speed_text
from fsdpbench.report import figures
from fsdpbench.report.blocks import Banner, Block, Bullets, Code, Details, Figure, Heading, Para, Table
from fsdpbench.report.diff_md import (
    CALIBRATION_HEADER,
    CALIBRATION_NOTE,
    FIT_HEADER,
    FIT_SOURCES,
    calibration_rows,
    fit_rows,
)
from fsdpbench.report.estimate import estimate_lines, subject_timed_scale
from fsdpbench.report.load import RunData
from fsdpbench.report.phases import phase_section
from fsdpbench.report.profile import profile_section
from fsdpbench.report.replay import replay_section
from fsdpbench.report.top_findings import top_findings_section
from fsdpbench.results import run_folder
from fsdpbench.results.summary import ArmSummary

log = logging.getLogger(__name__)

MAX_SENSIBLE_ROUNDS = 30
"""Above this many rounds for a ±1% CI, the report advises a quieter machine instead."""


def build_report(data: RunData) -> tuple[str, list[Block]]:
    """The report's title and blocks. Notes for failed sections are appended to ``data.missing``."""
    name = (data.manifest or {}).get("name") or data.run_dir.name
    title = f"fsdpbench report — {name}"
    sections: list[tuple[str, Callable[[RunData], list[Block]]]] = [
        ("verdict", _verdict),
        ("top findings", top_findings_section),
        ("verdict notes", _verdict_notes),
        ("step times", _step_times),
        ("phase times", phase_section),
        ("throughput", _throughput),
        ("profile", profile_section),
        ("critical path", replay_section),
        ("diagnosis", _diagnosis),
        ("configuration", _configuration),
        ("reproduce", _reproduce),
    ]
    built: list[list[Block]] = []
    for label, fn in sections:
        try:
            built.append(fn(data))
        except Exception as exc:  # a report must never die on one odd field
            log.warning("report section %s failed", label, exc_info=True)
            data.missing.append(f"the {label} section could not be built ({type(exc).__name__}: {exc}).")
            built.append([])
    # the first screen: the verdict and its CI, the top findings, then the verdict's notes and what is missing
    blocks = built[0] + built[1] + built[2] + _missing(data) + [b for part in built[3:] for b in part]
    return title, blocks


def _missing(data: RunData) -> list[Block]:
    if not data.missing:
        return []
    return [
        Heading("Missing pieces"),
        Banner(
            "warning",
            f"{len(data.missing)} piece(s) of this run are missing or failed; the rest is shown below.",
        ),
        Bullets(list(dict.fromkeys(data.missing))),
    ]


def _sci(value: Any) -> str:
    f = finite(value)
    return MISSING if f is None else f"{f:.2g}"


def _profiled(cfg: dict) -> str:
    """``, profiled`` (``, 3 steps profiled`` with ``--profile-steps 3``), or nothing for an unprofiled run."""
    if not cfg.get("profile"):
        return ""
    k = int(cfg.get("profile_steps") or 1)
    return f", {k} steps profiled" if k > 1 else ", profiled"


def _glance(data: RunData) -> Para:
    """One line: what ran, where, how often."""
    manifest = data.manifest or {}
    cfg = manifest.get("config") or {}
    env = manifest.get("environment") or {}
    model = cfg.get("model") or {}
    bits = [f"`{data.run_dir.name}`"]
    if manifest.get("created"):
        bits.append(str(manifest["created"]).replace("T", " "))
    if env.get("world_size"):
        bits.append(
            f"{env['world_size']} × {env.get('device_name') or env.get('device_type', MISSING)} "
            f"({env.get('process_group_backend', MISSING)})"
        )
    if cfg:
        bits.append(
            f"preset {cfg.get('preset', MISSING)}, {model.get('num_hidden_layers', MISSING)} layers, "
            f"seq {cfg.get('seq_len', MISSING)}, {cfg.get('rounds', MISSING)} round(s) × {cfg.get('steps', MISSING)} "
            f"timed steps{_profiled(cfg)}"
        )
    if data.arms:
        bits.append("arms " + ", ".join(f"`{a}`" for a in data.arms))
    return Para(" · ".join(bits))


def _verdict(data: RunData) -> list[Block]:
    """The header line, the parity-failed banner, the verdict and its table of ratios and CIs."""
    blocks: list[Block] = [_glance(data), Heading("Verdict")]
    summary = data.summary
    parity = summary.parity if summary else None
    if parity is not None and parity.valid is False:
        reason = parity.reason or (
            f"losses differ by up to {_sci(parity.max_abs_diff)} (abs) / "
            f"{_sci(parity.max_rel_diff)} (rel), tolerance {parity.tolerance}"
        )
        blocks.append(
            Banner(
                "error",
                f"COMPARISON INVALID — the arms did not compute the same thing (parity failed: {reason}). "
                "The timings below are shown for debugging only; do not read them as an A/B result.",
            )
        )
    verdict = summary.verdict if summary else None
    blocks.append(
        Para(f"**{verdict}**" if verdict else "**No verdict yet** — the summary is missing or incomplete.")
    )
    comparisons = summary.comparisons if summary else []
    arms_stats = summary.arms if summary else {}
    if comparisons:
        rows = []
        for c in comparisons:
            base, test = c.base or MISSING, c.test or MISSING
            ci = c.ci95 or (None, None)
            rows.append(
                [
                    f"{test} vs {base}",
                    fmt(_median_ms(arms_stats, base), 1),
                    fmt(_median_ms(arms_stats, test), 1),
                    fmt(c.ratio, 3),
                    f"{fmt(ci[0], 3)} – {fmt(ci[1], 3)}" if len(ci) == 2 and None not in ci else MISSING,
                    speed_text(finite(c.ratio)),
                    "**no CI: cannot tell yet**"
                    if c.ratio is not None and not c.ci95
                    else {True: "yes", False: "**not significant**"}.get(c.significant, MISSING),
                    str(c.rounds_needed_1pct if c.rounds_needed_1pct is not None else MISSING),
                ]
            )
        blocks.append(
            Table(
                [
                    "comparison",
                    "base median (ms)",
                    "test median (ms)",
                    "ratio test/base",
                    "95% CI of ratio",
                    "test vs base",
                    "significant",
                    "rounds for ±1% CI",
                ],
                rows,
            )
        )
    return blocks


def _verdict_notes(data: RunData) -> list[Block]:
    """Under the top findings: how the ratio is made, the parity result, the run's time and the warnings."""
    blocks: list[Block] = []
    summary = data.summary
    parity = summary.parity if summary else None
    comparisons = summary.comparisons if summary else []
    if comparisons:
        blocks.append(
            Para(
                "Ratio = exp of the crossover mean of the per-round log ratios log(test / base): both arms launch "
                "back to back in a round, in a counterbalanced order, and the rounds where the test ran first and "
                "those where it ran second weigh the same. Intervals: "
                + "; ".join(f"{c.test} vs {c.base}: {c.interval_name}" for c in comparisons)
                + ' (docs/methodology.md). Below 1 the test arm is faster. "1.25× slower (+25.0%)": '
                "the slower arm takes 1.25× the faster one's time; the % is the test arm's step-time change."
            )
        )
    if parity is not None:
        if parity.valid:
            blocks.append(
                Banner(
                    "ok",
                    f"Parity holds: losses match over {_or_missing(parity.steps_compared)} step(s) "
                    f"({_or_missing(parity.mode)}, max abs diff {_sci(parity.max_abs_diff)}).",
                )
            )
    elif data.summary is not None:
        blocks.append(
            Banner("warning", "No parity result in the summary: the arms' losses were not compared.")
        )
    blocks.extend(_run_time(data))
    blocks.extend(_warnings(data))
    return blocks


PART_NAMES = {
    "start": "interpreter and imports",
    "process_group": "backend and process-group set-up",
    "model": "model build + init + sharding",
    "warmup": "warm-up steps",
    "timed": "timed steps",
    "profile": "profiled and memory steps",
    "teardown": "teardown",
    "after": "profile parse and collect",
}
"""The report's words for ``run_folder.LAUNCH_PARTS``."""


def _run_time(data: RunData) -> list[Block]:
    """Where the launches' time went (summary.json ``launch_time``) and why ``--rounds auto`` stopped."""
    from fsdpbench.results.run_folder import launch_time_line

    summary = data.summary
    blocks: list[Block] = []
    auto = summary.rounds_auto if summary else None
    if auto and auto.stopped:
        blocks.append(Para(f"`--rounds auto` {auto.why}."))
    line = launch_time_line(summary.launch_time if summary else None)
    if line and summary and summary.launch_time:
        parts = summary.launch_time.get("parts_s") or {}
        total = summary.launch_time.get("wall_s") or 0.0
        split = ", ".join(
            f"{PART_NAMES.get(p, p)} {fmt(s, 1)} s ({fmt_pct(s / total if total else None)})"
            for p, s in parts.items()
            if s
        )
        blocks.append(Para(f"Time: {line[0].upper()}{line[1:]}: {split}."))
    return blocks


def _median_ms(arms: dict[str, ArmSummary], arm: str) -> float | None:
    stats = arms.get(arm)
    return stats.median_ms if stats is not None else None


def _or_missing(value: object) -> str:
    return MISSING if value is None else str(value)


def _warnings(data: RunData) -> list[Block]:
    """Instability and failure warnings, pyperf-style: say what is wrong and what to do."""
    out: list[Block] = []
    summary = data.summary
    if summary is None:
        return out
    n_rounds = (data.manifest or {}).get("config", {}).get("rounds") if data.manifest else None
    for arm, stats in summary.arms.items():
        status = stats.status or "ok"
        if status != "ok":
            errors = [s.get("error") for s in data.statuses if s.get("arm") == arm and s.get("error")]
            detail = f": {errors[-1]}" if errors else ""
            out.append(
                Banner("warning", f"Arm `{arm}` has status **{status}**{detail}. See `launches/{arm}/`.")
            )
        med, p10, p90 = (finite(x) for x in (stats.median_ms, stats.p10_ms, stats.p90_ms))
        if med and p10 is not None and p90 is not None and (p90 - p10) / med >= 0.10:
            out.append(
                Banner(
                    "warning",
                    f"Arm `{arm}` is unstable: p10–p90 spans {100 * (p90 - p10) / med:.0f}% of its median. "
                    "Quiet the machine, add warmup steps, or run more rounds.",
                )
            )
    for c in summary.comparisons:
        needed = c.rounds_needed_1pct
        if isinstance(needed, int) and isinstance(n_rounds, int) and needed > n_rounds:
            advice = (
                f"rerun with `--rounds {needed}` for a tighter answer"
                if needed <= MAX_SENSIBLE_ROUNDS
                else "rounds vary too much for that to be practical: quiet the machine (no other jobs, "
                "fixed clocks) or run more steps per round first"
            )
            out.append(
                Banner(
                    "info",
                    f"`{c.test}` vs `{c.base}`: a ±1% CI would need about {needed} rounds "
                    f"(this run has {n_rounds}); {advice}.",
                )
            )
    for item in summary.missing:
        data.missing.append(f"arm `{item.arm}` round {item.round}: {item.why}.")
    return out


def _step_times(data: RunData) -> list[Block]:
    blocks: list[Block] = [Heading("Step time per arm and round")]
    steps = data.steps
    if steps is None or "time_ms" not in steps:
        blocks.append(Para("No step times: `steps.jsonl` is missing or empty."))
        return blocks
    timed = steps[steps.get("kind", "timed") == "timed"] if "kind" in steps else steps
    if timed.empty:
        blocks.append(Para("No timed steps yet (only warmup or profiling steps were recorded)."))
        return blocks
    arms = [a for a in data.arms if a in set(timed["arm"])] or list(dict.fromkeys(timed["arm"]))
    samples: dict[str, dict[int, list[float]]] = {}
    rows = []
    for (arm, rnd), group in timed.groupby(["arm", "round"], sort=True):
        values = group["time_ms"].astype(float).dropna().tolist()
        samples.setdefault(arm, {})[int(rnd)] = values
    for arm in arms:
        for rnd, values in sorted(samples.get(arm, {}).items()):
            v = np.asarray(values)
            rows.append([arm, str(rnd), str(v.size), fmt(np.median(v), 1), fmt(v.min(), 1), fmt(v.max(), 1)])
    blocks.append(
        Figure(
            "step_times",
            figures.step_times(arms, samples),
            "Every timed step (warmup and profiling steps excluded); the box spans all rounds.",
        )
    )
    blocks.append(Table(["arm", "round", "timed steps", "median (ms)", "min (ms)", "max (ms)"], rows))
    return blocks


def _throughput(data: RunData) -> list[Block]:
    blocks: list[Block] = [Heading("Throughput, MFU and memory")]
    arms_stats = data.summary.arms if data.summary else {}
    if not arms_stats:
        blocks.append(Para("No per-arm statistics: `summary.json` is missing."))
        return blocks
    rows = []
    for arm in [a for a in data.arms if a in arms_stats] + [a for a in arms_stats if a not in data.arms]:
        s = arms_stats[arm]
        rows.append(
            [
                arm,
                _or_missing(s.status),
                fmt(s.median_ms, 1),
                fmt(s.p10_ms, 1),
                fmt(s.p90_ms, 1),
                fmt(s.tokens_per_s_per_device, 1),
                fmt_sig(s.tflops_per_device),
                fmt_pct(s.mfu),
                fmt_bytes(s.peak_mem_allocated_bytes),
                fmt_bytes(s.peak_mem_reserved_bytes),
                fmt_bytes(s.peak_rss_bytes),
            ]
        )
    blocks.append(
        Table(
            [
                "arm",
                "status",
                "median (ms)",
                "p10 (ms)",
                "p90 (ms)",
                "tokens/s/device",
                "TFLOP/s/device",
                "MFU",
                "peak mem allocated",
                "peak mem reserved",
                "peak resident set",
            ],
            rows,
        )
    )
    blocks.append(
        Para(
            "Medians are over the per-round medians of timed steps. MFU is left blank on devices without a known "
            "peak (CPU). Peak mem allocated/reserved are the device allocator's (blank on CPU, which has none); "
            "peak resident set is the process's host memory high-water mark (Linux VmHWM), max over ranks, reset "
            'before each step (marked "since process start" in summary.json where it could not be reset) — on '
            "CPU it is the peak memory, and it includes the interpreter and libraries."
        )
    )
    return blocks


def _diagnosis(data: RunData) -> list[Block]:
    blocks: list[Block] = [Heading("Diagnosis: findings and what-if estimates")]
    diffs = data.diff_results
    if not diffs:
        why = (
            "this run has fewer than two profiled arms"
            if len(data.analysis or {}) < 2
            else "the diff is missing (see Missing pieces)"
        )
        blocks.append(Para(f"No diff: {why}."))
        return blocks
    for d in diffs:
        blocks.append(Heading(f"{d.test} vs {d.base}", 3))
        for warning in d.warnings:
            blocks.append(Banner("warning", str(warning)))
        distortion = (d.distortion or {}).get("ratio")
        ratio = distortion or {}
        if any(v is not None for v in ratio.values()):
            shown = ", ".join(f"{arm} {fmt(r, 2)}" for arm, r in ratio.items())
            blocks.append(
                Para(
                    f"Profiled/timed step (profiler distortion): {shown}. The findings and estimates below "
                    "come from the profiled step."
                )
            )
        findings = d.findings
        if not findings:  # in the diff's own ranking
            blocks.append(Para("No finding fired: the two profiles show no difference the rules flag."))
        for i, f in enumerate(findings, 1):
            items = [
                f"**{key}**: {getattr(f, key)}" for key in ("evidence", "cause", "action") if getattr(f, key)
            ]
            scale = subject_timed_scale(f, distortion)
            items.extend(estimate_lines(f.estimate, details=True, timed_scale=scale))
            blocks.append(Para(f"**{i}. [{(f.severity or MISSING).upper()}] {f.title or f.id}**"))
            blocks.append(Bullets(items))
        entries = [e for e in d.calibration if isinstance(e, dict)]
        if entries:
            blocks.append(Para("**Calibration: estimates vs the measured counterfactual arm**"))
            blocks.append(Table(CALIBRATION_HEADER, calibration_rows(entries)))
            blocks.append(Para(CALIBRATION_NOTE))
        rows = fit_rows(d.fits)
        if rows:
            blocks.append(Table(FIT_HEADER, rows))
            blocks.append(
                Para("α + β·bytes fitted to the collectives; the estimates above rest on it. " + FIT_SOURCES)
            )
    if (data.run_dir / "diff.md").is_file():
        blocks.append(Para("The full side-by-side tables are in [diff.md](diff.md)."))
    return blocks


def _flatten(prefix: str, value: Any, out: list[list[str]]) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            _flatten(f"{prefix}.{k}" if prefix else str(k), v, out)
    elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        out.append([prefix, f"{len(value)} item(s)"])
    else:
        out.append([prefix, MISSING if value is None else str(value)])


def _folded(what: str, pairs: list[list[str]], columns: int = 3) -> Table:
    """key/value pairs laid out ``columns`` pairs per row, so a long list stays short on the page."""
    per_col = -(-len(pairs) // columns)
    cols = [pairs[i * per_col : (i + 1) * per_col] for i in range(columns)]
    rows = []
    for i in range(per_col):
        row: list[str] = []
        for col in cols:
            row.extend(col[i] if i < len(col) else ["", ""])
        rows.append(row)
    return Table([what, "value"] * columns, rows, numeric=False)


def _configuration(data: RunData) -> list[Block]:
    blocks: list[Block] = [Heading("Configuration and environment")]
    manifest = data.manifest
    if not manifest:
        blocks.append(Para("Unknown: `manifest.json` is missing."))
        return blocks
    arms = manifest.get("arms") or []
    runtime = manifest.get("arm_runtime") or {}
    if arms:
        keys = [k for k in arms[0] if k != "label" and any(a.get(k) not in ("", {}, None) for a in arms)]
        blocks.append(
            Table(
                ["arm", *keys],
                [
                    [
                        a.get("label", MISSING),
                        *(_arm_option_cell(a, k, runtime.get(a.get("label"))) for k in keys),
                    ]
                    for a in arms
                ],
                numeric=False,
            )
        )
    ran = _what_ran_table(manifest.get("backends") or {})
    if ran is not None:
        blocks.append(ran)
    runtime = _runtime_table(manifest.get("arm_runtime") or {})
    if runtime is not None:
        blocks.append(runtime)
    interpreters = manifest.get("interpreters") or {}
    if interpreters:
        blocks.append(_interpreter_table(interpreters))
    config = dict(manifest.get("config") or {})
    model = config.pop("model", None)
    rows: list[list[str]] = []
    _flatten("", {k: v for k, v in config.items() if k != "arms"}, rows)
    if rows:
        blocks.append(_folded("setting", rows))
    env_rows: list[list[str]] = []
    _flatten("", manifest.get("environment") or {}, env_rows)
    if env_rows:
        blocks.append(_folded("environment", env_rows))
    if isinstance(model, dict):
        model_rows: list[list[str]] = []
        _flatten("", model, model_rows)
        blocks.append(
            Details(
                f"Model shape ({config.get('preset', MISSING)} preset with overrides)",
                [_folded("model field", model_rows)],
            )
        )
    order = manifest.get("order") or []
    launches = {(x.get("arm"), x.get("round"), x.get("kind")): x for x in manifest.get("launches") or []}
    statuses = {(s.get("arm"), s.get("round"), s.get("kind")): s for s in data.statuses}
    rows = []
    for key in list(launches) + [k for k in statuses if k not in launches]:
        launch = {**launches.get(key, {}), **statuses.get(key, {})}
        rows.append(
            [
                str(key[0]),
                str(key[1]),
                str(key[2]),
                str(launch.get("rc", MISSING)),
                fmt(launch.get("wall_s"), 1),
                str(launch.get("error") or ""),
            ]
        )
    if rows:
        blocks.append(
            Details(
                f"Launches ({len(rows)}; interleaved order of {len(order)} timed launches)",
                [Table(["arm", "round", "kind", "rc", "wall (s)", "error"], rows, numeric=False)],
            )
        )
    return blocks


def _option_text(value: Any) -> str:
    """An arm option for the table: dicts (``kw``, ``env``, backend knobs) as ``NAME=VALUE`` pairs."""
    if isinstance(value, dict):
        return " ".join(f"{k}={v}" for k, v in value.items())
    return str(value)


def _arm_option_cell(arm: dict[str, Any], key: str, ran: Any) -> str:
    """An arm option as configured, or, for ``param_dtype``, what the launch ran with where that differs
    (on NPU/GPU an arm that sets none takes the device default, ``arm_runtime``)."""
    value = _option_text(arm.get(key, MISSING))
    if key == "param_dtype" and isinstance(ran, dict) and ran.get("param_dtype") not in (None, arm.get(key)):
        return f"{ran['param_dtype']} ({ran.get('param_dtype_source') or 'as run'}; option {value})"
    return value


def _what_ran_table(backends: dict[str, Any]) -> Table | None:
    """Per arm what its launch recorded it ran (``manifest.backends``): the sharding call, torch_npu's
    FSDP2 patches, each prefetch direction in words and the ``kw.`` keywords as typed."""
    rows: list[list[str]] = []
    for label, facts in backends.items():
        if not isinstance(facts, dict):
            continue
        call = facts.get("fully_shard") or facts.get("api") or facts.get("library") or MISSING
        patches = [
            name
            for name, key in (
                ("import", "torch_npu_import_patch"),
                ("fully_shard", "torch_npu_enhance_patch"),
            )
            if facts.get(key)
        ]
        if facts.get("mem_cache") == "on":
            patches.append("mem cache on")
        if facts.get("torch_npu_skip_custom_post_forward"):
            patches.append(
                f"forward-prefetch backup off on {len(facts['torch_npu_skip_custom_post_forward'])} units"
            )
        prefetch = facts.get("prefetch") if isinstance(facts.get("prefetch"), dict) else {}
        rows.append(
            [
                str(label),
                str(call),
                ", ".join(patches) or ("none" if facts.get("torch_npu_import_patch") is False else "—"),
                str(prefetch.get("forward", MISSING)),
                str(prefetch.get("backward", MISSING)),
                _option_text(facts.get("kw") or {}) or "—",
            ]
        )
    if not rows:
        return None
    header = ["arm", "sharding call", "torch_npu patches", "forward prefetch", "backward prefetch", "kw."]
    return Table(header, rows, numeric=False)


RUNTIME_HEADER = [
    "arm",
    "param dtype",
    "optimizer",
    "experts",
    "K-grouped mm",
    "gated deltanet",
    "fp32 matmul",
    "prefetch lists",
    "environment",
]


def _runtime_table(runtime: dict[str, Any]) -> Table | None:
    """Per arm what it actually ran with (``manifest.arm_runtime``, docs/fairness.md): the parameter dtype
    and where it came from, the optimizer's ``foreach`` and the torch.optim path its first step took, the
    experts' back-end, whether NPU's K-grouped matmul passed its check (and in which dtype), the gated
    deltanet's kernel (on NPU the chunked PyTorch path in float32), torch's float32 matmul precision (and
    torch_npu's HF32 switch), whether the prefetch lists were still the plan's after the steps, and the set
    variables that change NPU/GPU behaviour."""
    rows: list[list[str]] = []
    for label, facts in runtime.items():
        if not isinstance(facts, dict):
            continue
        dtype = str(facts.get("param_dtype", MISSING))
        if facts.get("param_dtype_source"):
            dtype += f" ({facts['param_dtype_source']})"
        ran = facts.get("optimizer_ran")
        optimizer = f"foreach={_runtime_value(facts.get('optimizer_foreach'))}, ran " + (
            ", ".join(str(r) for r in ran) if isinstance(ran, list) and ran else MISSING
        )
        k_grouped = (
            {True: "yes", False: "no (per-expert fallback)", None: "—"}.get(
                facts["npu_k_grouped_matmul"], MISSING
            )
            if "npu_k_grouped_matmul" in facts
            else MISSING
        )
        if facts.get("npu_k_grouped_probe_dtype") and facts.get("npu_k_grouped_matmul") is not None:
            k_grouped += f" (checked in {facts['npu_k_grouped_probe_dtype']})"
        fp32 = str(facts.get("float32_matmul_precision", MISSING))
        if facts.get("npu_matmul_allow_hf32") is not None:
            fp32 += f", HF32 {'on' if facts['npu_matmul_allow_hf32'] else 'off'}"
        lists = {True: "as set (checked after the steps)", None: "not checked"}.get(
            facts.get(run_folder.PREFETCH_VERIFIED), MISSING
        )
        environment = facts.get("environment")
        rows.append(
            [
                str(label),
                dtype,
                optimizer,
                str(facts.get("experts_impl", MISSING)),
                k_grouped,
                str(facts.get("deltanet_impl", MISSING)),
                fp32,
                lists if run_folder.PREFETCH_VERIFIED in facts else MISSING,
                _option_text(environment) if isinstance(environment, dict) and environment else "—",
            ]
        )
    return Table(RUNTIME_HEADER, rows, numeric=False) if rows else None


def _runtime_value(value: Any) -> str:
    """``None`` (left to PyTorch) as ``unset``, everything else as written."""
    return "unset" if value is None else str(value)


def _library_text(facts: Any) -> str:
    if not isinstance(facts, dict):
        return MISSING
    commit = facts.get("commit")
    return f"{facts.get('version') or MISSING}" + (f" @ {str(commit)[:10]}" if commit else "")


def _interpreter_table(interpreters: dict[str, Any]) -> Table:
    """Each arm's interpreter and library versions/commits, arms side by side (``manifest.interpreters``)."""
    labels = list(interpreters)
    rows = [
        ["interpreter", *(str(interpreters[a].get("interpreter", MISSING)) for a in labels)],
        ["python", *(str(interpreters[a].get("python", MISSING)) for a in labels)],
    ]
    names = sorted(
        {n for a in labels for n in (interpreters[a].get("libraries") or {})},
        key=lambda n: (
            ("torch", "fsdpbench", "deepspeed", "hyper_parallel").index(n)
            if n in ("torch", "fsdpbench", "deepspeed", "hyper_parallel")
            else 9
        ),
    )
    for name in names:
        rows.append(
            [name, *(_library_text((interpreters[a].get("libraries") or {}).get(name)) for a in labels)]
        )
    return Table(["per arm", *labels], rows, numeric=False)


def _reproduce(data: RunData) -> list[Block]:
    blocks: list[Block] = [Heading("Reproduce")]
    command = (data.manifest or {}).get("command")
    lines = []
    if command:
        lines.append("# the run (same configuration, a new results folder):")
        lines.append(shlex.join(str(c) for c in command) if isinstance(command, list) else str(command))
    else:
        blocks.append(Para("The original command line is unknown (`manifest.json` is missing)."))
    run = shlex.quote(str(data.run_dir))
    lines += [
        "# finish missing rounds of this run:",
        f"fsdpbench ab --resume {run}",
        "# the analysis, the diff and this report from the saved files:",
        f"fsdpbench analyze {shlex.quote(str(data.run_dir / 'profiles'))}/<arm>",
        f"fsdpbench diff {run}",
        f"fsdpbench report {run}",
    ]
    blocks.append(Code("\n".join(lines)))
    return blocks
