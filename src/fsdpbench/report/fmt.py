"""Number formatting for reports. Data stay in base units and 0–1 ratios; only here do they become
text (ms, %, KiB…), with an em dash for a missing value (never 0)."""

from __future__ import annotations

import math
from typing import Any


def as_float(value: Any) -> float | None:
    """``value`` as a float, or ``None`` for missing, boolean, non-numeric or NaN values."""
    if value is None or isinstance(value, bool):
        return None
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) else f


def fmt(value: Any, digits: int = 1, unit: str = "") -> str:
    """A number with ``digits`` decimals and a unit, or an em dash for missing values."""
    f = as_float(value)
    if f is None:
        return "—"
    return f"{f:,.{digits}f}{unit}"


def fmt_sig(value: Any, significant: int = 3) -> str:
    """A number with ``significant`` significant digits (small throughputs stay readable, not 0.000)."""
    f = as_float(value)
    return "—" if f is None else f"{f:#.{significant}g}".rstrip(".")


def fmt_pct(ratio: Any, digits: int = 1) -> str:
    f = as_float(ratio)
    return "—" if f is None else f"{100 * f:.{digits}f}%"


def fmt_bytes(value: Any) -> str:
    f = as_float(value)
    if f is None:
        return "—"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(f) < 1024 or unit == "TiB":
            return f"{f:.0f} {unit}" if unit == "B" else f"{f:.2f} {unit}"
        f /= 1024
    return "—"


def fmt_us_as_ms(value: Any) -> str:
    f = as_float(value)
    return "—" if f is None else f"{f / 1000:,.2f}"


# --------------------------------------------------------------------------------------------
# The report
# --------------------------------------------------------------------------------------------
