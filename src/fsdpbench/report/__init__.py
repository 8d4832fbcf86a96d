"""Reports: one page per run (``write_report``) and one index per sweep (``write_index``).

The report side never imports torch. ``write_report`` (:mod:`fsdpbench.report.write`) fills in what a
run folder lacks before it writes: ``analysis.json`` from the profiles (when absent or older than them),
``diff.json`` / ``diff.md`` (when absent or older than the analysis), then ``report.md`` with
``figures/*.svg`` beside it and a self-contained ``report.html``. Any piece that is missing or fails is
named in the report's "Missing pieces" section; the rest is still shown. :mod:`fsdpbench.report.load`
reads a run folder, :mod:`fsdpbench.report.build` turns it into blocks.
"""

from fsdpbench.report.load import RunData, load_run
from fsdpbench.report.write import render, timeline_from_analysis, write_index, write_report

__all__ = ["RunData", "load_run", "render", "timeline_from_analysis", "write_index", "write_report"]
