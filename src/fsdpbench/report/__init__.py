"""Reports: one page per run (``write_report``) and one index per sweep (``write_index``).

The report side never imports torch. ``write_report`` (:mod:`fsdpbench.report.write`) fills in what a
run folder lacks before it writes: ``analysis.json`` from the profiles (when absent or older than them),
``diff.json`` / ``diff.md`` (when absent or older than the analysis), then ``report.md`` with
``figures/*.svg`` beside it and a self-contained ``report.html``. Any piece that is missing or fails is
named in the report's "Missing pieces" section; the rest is still shown. :mod:`fsdpbench.report.load`
reads a run folder, :mod:`fsdpbench.report.build` turns it into blocks.
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "RunData": "load",
    "load_run": "load",
    "render": "write",
    "timeline_from_analysis": "write",
    "write_index": "write",
    "write_report": "write",
}
"""Names loaded on first use: the terminal room (``report.terminal``) is imported by ``fsdpbench analyze``,
which must not pay for the report's pandas and figures."""

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
