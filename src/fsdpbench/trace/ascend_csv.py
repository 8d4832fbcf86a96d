"""Reading torch_npu's CSV exports (``ASCEND_PROFILER_OUTPUT/*.csv``): rows of the wrong width set aside with a
warning, columns found under any of their names, times as nanoseconds; errors name the file and column."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import numpy as np
import pandas as pd

from fsdpbench.errors import InputError
from fsdpbench.trace.table import us_strings_to_ns


def read_csv(path: Path, warnings: list[str]) -> pd.DataFrame:
    """The CSV as strings. A row whose field count differs from the header's (torch_npu has written
    a ``FlashAttentionScore`` row without its Duration) is left out and named in ``warnings`` with its
    file and line, rather than read with its columns shifted
    (docs/analysis-definitions.md, "Part of a group, a bad row, a fallback window")."""
    try:
        text = path.read_bytes()
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if not text.strip():
        raise InputError(f"{path}: the file is empty; re-export the profile")
    try:
        try:
            df = _parse_csv(text)
        except pd.errors.ParserError:  # a row longer than the header (or a broken file)
            df = None
        # pandas pads a short row with empty cells: only for an empty last cell (or a long row) are the
        # records counted, so a well-formed file costs one parse
        if df is None or (len(df.columns) > 1 and bool((df.iloc[:, -1].str.strip() == "").any())):
            kept = _without_ragged_rows(path, text, warnings)
            if df is None or kept is not text:
                df = _parse_csv(kept)
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError) as exc:
        raise InputError(f"{path}: not a readable CSV ({' '.join(str(exc).split())})") from None
    df.columns = [str(c).strip() for c in df.columns]
    return df


def _parse_csv(text: bytes) -> pd.DataFrame:
    return pd.read_csv(io.BytesIO(text), dtype=str, keep_default_na=False, skipinitialspace=True)


def _without_ragged_rows(path: Path, text: bytes, warnings: list[str]) -> bytes:
    """``text`` without the records whose field count differs from the header's, each named (file,
    line, field counts, the row's Name) in ``warnings``; ``text`` itself when there is none. pandas
    cannot tell them: it pads a short row with empty cells, shifting what follows the gap."""
    lines = text.decode("utf-8-sig").splitlines(keepends=True)
    reader = csv.reader(lines, skipinitialspace=True)
    try:
        header = [h.strip() for h in next(reader)]
        width = len(header)
        bad = [(reader.line_num, r) for r in reader if r and len(r) != width]
    except csv.Error as exc:
        raise InputError(f"{path}: not a readable CSV (line {reader.line_num}: {exc})") from None
    if not bad:
        return text
    name_at = next((header.index(n) for n in ("Name", "Op Name") if n in header), None)
    drop: set[int] = set()
    for last_line, record in bad:
        # a quoted cell may span lines: the record ends at last_line and starts after the previous one
        first = last_line - sum(c.count("\n") for c in record)
        drop.update(range(first, last_line + 1))
        what = f" ({record[name_at].strip()})" if name_at is not None and name_at < len(record) else ""
        said = (
            f"{path} line {first}: {len(record)} fields where the header has {width}{what}; the row is "
            "left out (its columns cannot be told apart)"
        )
        warnings.append(said)
    return "".join(line for i, line in enumerate(lines, 1) if i not in drop).encode()


def find_column(df: pd.DataFrame, path: Path, *names: str) -> pd.Series | None:
    """The first of ``names`` that ``df`` has (torch_npu renamed columns across versions); None if none."""
    for n in names:
        if n in df.columns:
            return df[n].astype(str).str.strip().str.strip('"').str.strip()
    return None


def required_column(df: pd.DataFrame, path: Path, *names: str) -> pd.Series:
    """``find_column``, or an ``InputError`` naming ``path`` and the names looked for."""
    col = find_column(df, path, *names)
    if col is None:
        raise InputError(
            f"{path}: missing column {names[0]!r} (columns found: {', '.join(df.columns[:12])}…); "
            "is this a torch_npu kernel_details.csv?"
        )
    return col


def time_column(col: pd.Series, path: Path, what: str) -> np.ndarray:
    """A column of microsecond strings as int64 nanoseconds; ``InputError`` naming ``path`` and ``what``."""
    try:
        return us_strings_to_ns(col)
    except (ValueError, OverflowError) as exc:
        raise InputError(f"{path}: column {what!r}: {exc}") from None
