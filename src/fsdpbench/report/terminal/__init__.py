"""The terminal room: what every command prints, as rich tables that fit the console (:mod:`.fit`).

``analyze`` (:mod:`.analyze`: per rank, collectives, groups, op types, syncs, waits; :mod:`.units`:
``--units`` and ``--explain``; :mod:`.replay`: ``--critical-path`` and ``--what-if``), ``diff``
(:mod:`.diff`), the end of ``ab``/``run`` (:mod:`.summary`, with ``report.console``) and ``sweep``'s
overview (:mod:`.sweep`). The commands only parse their arguments and call these. Names load lazily,
so that ``fsdpbench analyze`` imports only what it prints.
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "render_diff": "diff",
    "render_analysis": "analyze",
    "render_units": "units",
    "render_explain": "units",
    "explain_rows": "units",
    "render_replay": "replay",
    "print_overview": "sweep",
    "print_phase_table": "summary",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
