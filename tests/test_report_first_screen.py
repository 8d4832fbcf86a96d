"""The report's first screen: the verdict and its CI, then the top three findings (what, where, how much, what
to do, a link to the full finding), checked in the markdown against hand-written lines and in a real browser
(headless Chromium at 1,400 × 900) against the elements' bounding boxes."""

from __future__ import annotations

import html
import json
import os
import shutil
from pathlib import Path

import orjson
import pytest

from fsdpbench.report import write_report
from helpers import CHROMIUM, headless_chromium, make_run

VIEWPORT = (1400, 900)

HEADLINE = {
    "id": "step_time",
    "severity": "info",
    "title": "Profiled step: hyper is 1.20× slower than torch (+20.0%)",
    "evidence": "step 100.0 ms → 120.0 ms",
    "cause": "the findings below attribute the difference",
    "action": "none: read the findings below for the causes",
}
FRAGMENTATION = {
    "id": "fragmentation",
    "severity": "high",
    "title": "hyper's collectives are 10.3× more fragmented",
    "evidence": "all_gather 124 vs 12 (10.3×), same bytes",
    "cause": "per-parameter collectives",
    "action": "bucket per module",
    "estimate": {
        "label": "estimate",
        "step_time_delta_us": -15_000.0,
        "source": "replay",
        "edit": "regroup:all_gather:12",
        "basis": "units",
        # gains: layers.1 backward 1.0 + 0.5 ms (transfer + wait saved) < layers.0 forward 2.0 ms
        "per_unit": [
            {
                "unit": "layers.1",
                "phase": "backward",
                "exposed_saved_us": 1000.0,
                "exposed_wait_saved_us": 500.0,
            },
            {"unit": "layers.0", "phase": "forward", "exposed_saved_us": 2000.0},
        ],
    },
}
STRAGGLER = {
    "id": "straggler",
    "severity": "medium",
    "title": "rank 1 is a straggler in hyper",
    "evidence": "rank 1 compute 60.0 ms vs 50.0 ms",
    "cause": "one rank computes longer",
    "action": "find why rank 1 computes longer",
    "estimate": {
        "label": "estimate",
        "step_time_delta_us": -4_000.0,
        "source": "closed form",
        "changed": [
            {"rank": 1, "unit": "layers.2", "phase": "forward", "kind": "compute", "delta_us": -4000.0}
        ],
    },
}
PREFETCH = {
    "id": "prefetch_change",
    "severity": "info",
    "title": "Prefetch=1 exposes 3.0 ms less communication than prefetch=0",
    "evidence": "prefetch=0 (torch) vs prefetch=1 (hyper)",
    "cause": "explicit prefetch",
    "action": "keep prefetch=1",
    "estimate": {"label": "measured", "exposed_comm_delta_us": -3000.0, "step_time_delta_us": None},
}
FOURTH = {
    "id": "host_bound",
    "severity": "info",
    "title": "hyper is host-bound",
    "evidence": "idle",
    "cause": "host",
    "action": "cut host work",
}

EXPECTED_LINES = [
    "- **[HIGH] hyper's collectives are 10.3× more fragmented** — where: layers.0 forward — how much: step time "
    "−15.0 ms (estimate, replayed, profiled step) — do: bucket per module — [finding 2 below](#hyper-vs-torch)",
    "- **[MEDIUM] rank 1 is a straggler in hyper** — where: rank 1 layers.2 forward compute — how much: step time "
    "−4.0 ms (estimate, closed form, profiled step) — do: find why rank 1 computes longer — "
    "[finding 3 below](#hyper-vs-torch)",
    "- **[INFO] Prefetch=1 exposes 3.0 ms less communication than prefetch=0** — how much: exposed comm −3.0 ms "
    "(measured) — do: keep prefetch=1 — [finding 4 below](#hyper-vs-torch)",
]
"""Written by hand from the findings above: the headline (pinned first) is left out, the fourth cause too."""


def _with_findings(run: Path, findings: list[dict]) -> None:
    diff = orjson.loads((run / "diff.json").read_bytes())
    diff["findings"] = findings
    stamp = (run / "diff.json").stat()
    (run / "diff.json").write_bytes(orjson.dumps(diff))
    os.utime(run / "diff.json", ns=(stamp.st_atime_ns, stamp.st_mtime_ns))  # still fresh: reused as is


def test_the_top_three_findings_come_right_after_the_verdict_and_its_ci(tmp_path):
    run = make_run(tmp_path)
    _with_findings(run, [HEADLINE, FRAGMENTATION, STRAGGLER, PREFETCH, FOURTH])
    write_report(run)
    lines = (run / "report.md").read_text().splitlines()
    top = lines.index("### Top findings: what to do first")
    table_end = max(i for i, line in enumerate(lines[:top]) if line.startswith("| hyper vs torch |"))
    assert lines.index("## Verdict") < table_end < top
    assert lines[table_end + 1 : top] == [""]  # nothing between the verdict's table and the top findings
    assert lines[top + 2 : top + 5] == EXPECTED_LINES
    assert lines[top + 6].startswith("Ratio = exp of the crossover mean")  # then the rest, as before
    full = [i for i, line in enumerate(lines) if line.startswith("**") and ". [" in line]
    assert [lines[i] for i in full[1:4]] == [
        "**2. [HIGH] hyper's collectives are 10.3× more fragmented**",
        "**3. [MEDIUM] rank 1 is a straggler in hyper**",
        "**4. [INFO] Prefetch=1 exposes 3.0 ms less communication than prefetch=0**",
    ]
    assert lines[full[0] - 2] == "### hyper vs torch"  # the link's target, below
    assert '<h3 id="hyper-vs-torch">hyper vs torch</h3>' in (run / "report.html").read_text()


def test_a_diff_whose_only_finding_is_the_headline_says_no_cause_was_found(tmp_path):
    run = make_run(tmp_path)
    _with_findings(run, [HEADLINE])
    write_report(run)
    md = (run / "report.md").read_text()
    assert (
        "### Top findings: what to do first\n\nno rule found a cause beyond the step-time headline.\n" in md
    )


def test_a_run_without_a_diff_has_no_top_findings_block(tmp_path):
    run = make_run(tmp_path, profiled=False)
    write_report(run)
    assert "Top findings" not in (run / "report.md").read_text()


RECTS_SCRIPT = """<script>
window.addEventListener("load", () => {
  const texts = %s;
  const out = {viewport: [window.innerWidth, window.innerHeight]};
  for (const [key, text] of Object.entries(texts)) {
    const el = [...document.querySelectorAll("p, li")].find((e) => e.textContent.includes(text));
    out[key] = el ? el.getBoundingClientRect().toJSON() : null;
  }
  const pre = document.createElement("pre");
  pre.id = "rects";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""
"""Added to a copy of report.html (the report itself has no script): writes where the elements holding each
text are, in CSS pixels of the first viewport, into the DOM that ``--dump-dom`` prints."""


@pytest.mark.distributed
@pytest.mark.timeout(600)
@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium (Debian package chromium) is not installed")
def test_verdict_and_first_finding_are_inside_the_first_viewport_of_a_real_report(profiled_ab_run, tmp_path):
    run = tmp_path / profiled_ab_run.name
    shutil.copytree(profiled_ab_run, run)  # the fixture is shared: write into a copy
    write_report(run)
    verdict = orjson.loads((run / "summary.json").read_bytes())["verdict"]
    findings = orjson.loads((run / "diff.json").read_bytes())["findings"]
    first = next(f for f in findings if f["id"] not in ("step_time", "invalid_comparison"))
    page = (run / "report.html").read_text()
    probe = run / "probe.html"
    probe.write_text(
        page.replace(
            "</body>", RECTS_SCRIPT % json.dumps({"verdict": verdict, "first": first["title"]}) + "</body>"
        )
    )
    proc = headless_chromium(
        tmp_path, probe.resolve().as_uri(), f"--window-size={VIEWPORT[0]},{VIEWPORT[1]}", "--dump-dom"
    )
    start = proc.stdout.find('<pre id="rects">')
    assert start >= 0, proc.stderr[-2000:]
    rects = json.loads(
        html.unescape(proc.stdout[start + len('<pre id="rects">') : proc.stdout.index("</pre>", start)])
    )
    # the page lays out by width alone; headless Chromium's window of 1,400 × 900 leaves a viewport of
    # 1,400 × (900 − its own bars): what fits that fits 900 px too
    width, height = rects["viewport"]
    assert width == VIEWPORT[0] and 0 < height <= VIEWPORT[1], rects["viewport"]
    for key in ("verdict", "first"):
        box = rects[key]
        assert box is not None, f"no element holds the {key} text"
        assert 0 <= box["top"] and box["bottom"] <= height, (key, box, height)
        assert 0 <= box["left"] and box["right"] <= VIEWPORT[0], (key, box)
    assert rects["verdict"]["bottom"] <= rects["first"]["top"]  # the verdict first, then the finding


def test_several_diffs_get_their_top_findings_each_under_their_pair(tmp_path):
    run = make_run(tmp_path)
    diff = orjson.loads((run / "diff.json").read_bytes())
    stamp = (run / "diff.json").stat()
    other = {**diff, "test": "hyper2", "findings": [HEADLINE, STRAGGLER]}
    (run / "diff.json").write_bytes(orjson.dumps([{**diff, "findings": [FRAGMENTATION]}, other]))
    os.utime(run / "diff.json", ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    write_report(run)
    lines = (run / "report.md").read_text().splitlines()
    top = lines.index("### Top findings: what to do first")
    assert lines[top + 2 : top + 9] == [
        "**hyper vs torch**",
        "",
        EXPECTED_LINES[0].replace("finding 2 below", "finding 1 below"),
        "",
        "**hyper2 vs torch**",
        "",
        EXPECTED_LINES[1].replace("finding 3 below](#hyper-vs-torch)", "finding 2 below](#hyper2-vs-torch)"),
    ]
    page = (run / "report.html").read_text()
    assert '<h3 id="hyper-vs-torch">' in page and '<h3 id="hyper2-vs-torch">' in page
