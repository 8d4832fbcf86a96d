"""Tables that fit the terminal without cutting a number or a row label.

A table that fits the console's width is printed as it is. One that does not is split by columns into
parts no wider than the console: every part repeats the row-label columns (the first ``labels`` ones) and
takes as many of the other columns as fit, in their order; the title gets ", continued" after the first
part and the caption goes under the last. Only the columns named ``wrap`` (lists and sentences) may wrap,
at spaces; every other cell is kept on one line, whole — rich never shortens it to "…".
"""

from __future__ import annotations

import copy
import dataclasses
import io
from collections.abc import Collection
from typing import Any

CONTINUED = ", continued"
"""What the title of every part after the first ends with."""


def natural_width(table: Any) -> int:
    """The width ``table`` takes when nothing is wrapped or cut."""
    from rich.console import Console
    from rich.measure import Measurement

    wide = Console(width=10_000)
    return Measurement.get(wide, wide.options, table).maximum


def _column_widths(table: Any) -> list[tuple[int, int]]:
    """``(fewest, most)`` columns each column of ``table`` needs, padding included: a column that may not
    wrap needs its widest cell whatever happens, one that may needs its longest word."""
    from rich.console import Console

    wide = Console(width=10_000)
    out = []
    for col in table.columns:
        m = table._measure_column(wide, wide.options, col)  # rich's own measure, as its layout uses it
        out.append((m.maximum if col.no_wrap else m.minimum, m.maximum))
    return out


def _frame(table: Any, count: int) -> int:
    """The columns the borders of a table of ``count`` columns take."""
    return (2 if table.box and table.show_edge else 0) + (count - 1 if table.box else 0)


def _drawn_whole(table: Any, width: int) -> bool:
    """Whether rich draws ``table`` within ``width`` columns with no cell or header cut to "…"."""
    from rich.console import Console

    out = io.StringIO()
    Console(file=out, width=width, color_system=None, force_terminal=False, legacy_windows=False).print(table)
    cells = [str(c) for col in table.columns for c in [col.header, *col._cells]]
    drawn = out.getvalue()
    return drawn.count("…") == sum(c.count("…") for c in cells) and all(
        len(line) <= width for line in drawn.splitlines()
    )


def _fits(
    table: Any, keep: list[int], widths: list[tuple[int, int]], width: int, wrap: Collection[str]
) -> bool:
    frame = _frame(table, len(keep))
    if sum(widths[i][1] for i in keep) + frame <= width:
        return True
    if sum(widths[i][0] for i in keep) + frame > width:
        return False
    if sum(str(table.columns[i].header) in wrap for i in keep) <= 1:
        return True  # the one wrapping column gets what the others leave, at least its longest word
    # rich narrows several wrapping columns alike, maybe one below its longest word: draw it and look
    return _drawn_whole(_part(table, keep, wrap, None, None), width)


def _part(table: Any, keep: list[int], wrap: Collection[str], title: Any, caption: Any) -> Any:
    part = copy.copy(table)
    part.columns = [
        dataclasses.replace(
            col,
            no_wrap=col.no_wrap or str(col.header) not in wrap,
            overflow="ellipsis",  # a cut shows (and is refused), never folded or cropped unseen
            _cells=list(col._cells),
        )
        for i, col in enumerate(table.columns)
        if i in keep
    ]
    for i, col in enumerate(part.columns):
        col._index = i
    part.title, part.caption = title, caption
    return part


def fitted_parts(table: Any, width: int, *, labels: int = 1, wrap: Collection[str] = ()) -> list[Any]:
    """``table`` as one or more tables no wider than ``width`` (module docstring).

    Args:
        table: a filled ``rich.table.Table``.
        width: the console's width in columns.
        labels: how many leading columns label the rows (repeated in every part).
        wrap: headers of the columns whose cells may wrap at spaces (lists, sentences); the others never wrap.

    Returns:
        ``[table]`` (its columns set not to wrap, unless in ``wrap``) when it fits, else its parts in order.
        A part that holds one column beside the labels and is still too wide is kept as it is.
    """
    count = len(table.columns)
    whole = _part(table, list(range(count)), wrap, table.title, table.caption)
    widths = _column_widths(whole)
    if count <= labels or _fits(table, list(range(count)), widths, width, wrap):
        return [whole]
    label_cols = list(range(labels))
    parts: list[list[int]] = [[]]
    for i in range(labels, count):
        if parts[-1] and not _fits(table, label_cols + parts[-1] + [i], widths, width, wrap):
            parts.append([])
        parts[-1].append(i)
    title = table.title
    continued = f"{title}{CONTINUED}" if isinstance(title, str) else title
    return [
        _part(
            table,
            label_cols + cols,
            wrap,
            title if i == 0 else continued,
            table.caption if i == len(parts) - 1 else None,
        )
        for i, cols in enumerate(parts)
    ]


def print_fitted(console: Any, table: Any, *, labels: int = 1, wrap: Collection[str] = ()) -> None:
    """Print ``table`` on ``console`` as :func:`fitted_parts` splits it for the console's width."""
    for part in fitted_parts(table, console.width, labels=labels, wrap=wrap):
        console.print(part)
