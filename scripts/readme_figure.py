"""Draw docs/img/report.png, the README's picture of a report, from a real profiled run.

    python scripts/readme_figure.py                 # run `fsdpbench ab --profile` (CPU default, ~3 min), then draw
    python scripts/readme_figure.py --run RUN_DIR   # draw from an existing profiled run folder

The picture is the report's own matplotlib figures (the ones `fsdpbench report` embeds as SVG), caught as
the report draws them and rendered side by side into one small PNG. The run folder is copied first, so an
existing run is left as it was. ``make readme-figure`` runs the first form; rerun it when the report's
figures change (tests/test_docs.py says when: it compares the figure code's hash kept in report.png.source).
"""

from __future__ import annotations

import argparse
import io
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "docs" / "img" / "report.png"
# The report's figures to show, by the name the report gives each (figures.to_svg's ``name``), in order.
WANTED = ("step_times", "breakdown", "collectives", "timeline")
DPI = 80
COLORS = 96  # palette size of the PNG: the figures use a few flat colours, so this keeps it small
MAX_BYTES = 200 * 1024
# The code that draws the pictured figures: its hash is kept beside the PNG (``.source``) and
# tests/test_docs.py fails when it changed since the PNG was drawn, so the picture follows the report.
DRAWN_BY = REPO / "src" / "fsdpbench" / "report" / "figures.py"


def drawing_code_hash() -> str:
    """sha256 of the figure code (``DRAWN_BY``), as kept in ``docs/img/report.png.source``."""
    import hashlib

    return hashlib.sha256(DRAWN_BY.read_bytes()).hexdigest()


def run_profiled_ab(out: Path) -> Path:
    """``fsdpbench ab --profile`` on the embedded default into ``out``; the run folder it printed."""
    cmd = [sys.executable, "-m", "fsdpbench", "ab", "--profile", "--out", str(out)]
    print("running:", " ".join(cmd[1:]), file=sys.stderr)
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=False)
    if proc.returncode != 0:
        sys.exit(
            f"readme_figure: `fsdpbench ab --profile` failed (exit {proc.returncode}); see its output above"
        )
    return Path(proc.stdout.strip().splitlines()[-1])


def capture_report_figures(run_dir: Path) -> dict[str, object]:
    """Run ``fsdpbench report`` on ``run_dir`` in this process, keeping every figure it serialises to SVG."""
    import matplotlib
    from matplotlib.figure import Figure

    from fsdpbench.cli import main as fsdpbench_main

    caught: dict[str, Figure] = {}
    original = Figure.savefig

    def savefig(fig: Figure, fname, *args, **kwargs):
        if kwargs.get("format") == "svg":
            name = str(matplotlib.rcParams.get("svg.hashsalt") or "").removeprefix("fsdpbench-")
            caught.setdefault(name or f"figure{len(caught)}", fig)
        return original(fig, fname, *args, **kwargs)

    Figure.savefig = savefig
    try:
        code = fsdpbench_main(["report", str(run_dir)])
    finally:
        Figure.savefig = original
    if code != 0:
        sys.exit(f"readme_figure: `fsdpbench report {run_dir}` failed (exit {code})")
    return caught


def compose(figures: list) -> bytes:
    """The figures as one PNG: two columns, rows as tall as their taller figure, white between."""
    import matplotlib.image as mpimg
    import numpy as np
    from PIL import Image

    images = []
    for fig in figures:
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight", facecolor="white")
        buf.seek(0)
        images.append(mpimg.imread(buf, format="png")[..., :3])
    gap = 12
    rows = [images[i : i + 2] for i in range(0, len(images), 2)]
    width = max(sum(im.shape[1] for im in row) + gap * (len(row) + 1) for row in rows)
    height = sum(max(im.shape[0] for im in row) for row in rows) + gap * (len(rows) + 1)
    canvas = np.ones((height, width, 3), dtype=np.float32)
    y = gap
    for row in rows:
        x = gap
        for im in row:
            canvas[y : y + im.shape[0], x : x + im.shape[1]] = im
            x += im.shape[1] + gap
        y += max(im.shape[0] for im in row) + gap
    picture = Image.fromarray((canvas * 255).round().astype(np.uint8)).quantize(COLORS)
    out = io.BytesIO()
    picture.save(out, format="PNG", optimize=True)
    return out.getvalue()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--run", type=Path, help="a profiled run folder (default: make one with fsdpbench ab)"
    )
    parser.add_argument(
        "--out", type=Path, default=OUT, help=f"the PNG to write (default {OUT.relative_to(REPO)})"
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="fsdpbench-readme-") as tmp:
        if args.run is None:
            run_dir = run_profiled_ab(Path(tmp) / "results")
        else:
            if not (args.run / "manifest.json").is_file():
                sys.exit(f"readme_figure: {args.run} is not a run folder (no manifest.json)")
            run_dir = Path(tmp) / args.run.name
            shutil.copytree(args.run, run_dir)
        caught = capture_report_figures(run_dir)
        chosen = [caught[name] for name in WANTED if name in caught]
        if not chosen:
            sys.exit(
                f"readme_figure: the report drew none of {WANTED} (it drew {sorted(caught)}); is the run profiled?"
            )
        png = compose(chosen)
    if len(png) > MAX_BYTES:
        sys.exit(
            f"readme_figure: the picture is {len(png) // 1024} KiB, over {MAX_BYTES // 1024} KiB; lower DPI"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(png)
    args.out.with_name(args.out.name + ".source").write_text(
        f"{drawing_code_hash()}  {DRAWN_BY.relative_to(REPO)}\n"
    )
    names = [name for name in WANTED if name in caught]
    print(f"wrote {args.out} ({len(png) // 1024} KiB): {', '.join(names)}; source run {run_dir.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
