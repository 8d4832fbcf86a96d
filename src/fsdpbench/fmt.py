"""The one number formatter: every table, sentence and finding text of fsdpbench goes through it.

Data stay in base units (µs, bytes) and 0–1 ratios; only here do they become text. A missing value
is ``MISSING`` (an em dash, never 0, "n/a", "?" or "null"); bytes use binary units (KiB, MiB, GiB:
memory and message sizes alike); negative numbers take the typographic minus sign "−".

A top-level module, not ``report/``, because ``analysis/`` writes finding texts with it and the layers
import only downward (report → analysis → trace): analysis may not import report.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

MISSING = "—"
"""The glyph of a missing or undefined value everywhere (tables, sentences, terminal)."""


def _missing(value: float | None) -> bool:
    return value is None or not math.isfinite(value)


def _minus(text: str) -> str:
    return text.replace("-", "−")


def fmt(value: float | None, digits: int = 1, unit: str = "") -> str:
    """A number with ``digits`` decimals, thousands separators and a unit suffix: ``"1,234.5 ms"``."""
    return MISSING if _missing(value) else _minus(f"{value:,.{digits}f}{unit}")


def fmt_sig(value: float | None, significant: int = 3) -> str:
    """A number with ``significant`` significant digits (small throughputs stay readable, not 0.000)."""
    return MISSING if _missing(value) else _minus(f"{value:#.{significant}g}".rstrip("."))


def fmt_pct(ratio: float | None, digits: int = 1) -> str:
    """A 0–1 ratio as a percentage: ``0.123`` → ``"12.3%"``."""
    return MISSING if _missing(ratio) else _minus(f"{100 * ratio:.{digits}f}%")


def fmt_points(delta: float | None) -> str:
    """A change of a 0–1 ratio in percentage points, signed: ``-0.05`` → ``"−5.0 pts"``."""
    return MISSING if _missing(delta) else _minus(f"{delta * 100:+.1f} pts")


def fmt_us(value: float | None, *, signed: bool = False) -> str:
    """µs as ``"12.3 ms"`` (≥ 1 ms) or ``"640 µs"``; ``signed`` prints ``+``/``−``/``±`` in front."""
    if _missing(value):
        return MISSING
    sign = ("+" if value > 0 else "−" if value < 0 else "±") if signed else ("−" if value < 0 else "")
    mag = abs(value)
    return sign + (f"{mag / 1e3:.1f} ms" if mag >= 1000 else f"{mag:.0f} µs")


def fmt_us_as_ms(value: float | None, digits: int = 2) -> str:
    """µs as a bare number of ms for a column whose header says "(ms)": ``12345`` → ``"12.35"``."""
    return MISSING if _missing(value) else _minus(f"{value / 1000:,.{digits}f}")


def fmt_count(value: float | None, *, signed: bool = False) -> str:
    """A per-rank count: integral values without decimals, means over ranks with one; ``signed`` for deltas."""
    if _missing(value):
        return MISSING
    sign = "+" if signed else ""
    return _minus(f"{value:{sign}.0f}" if float(value).is_integer() else f"{value:{sign}.1f}")


def fmt_bytes(value: float | None) -> str:
    """Bytes in binary units: ``"512 B"``, ``"4.00 KiB"``, ``"1.57 GiB"``."""
    if _missing(value):
        return MISSING
    f = float(value)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(f) < 1024:
            return _minus(f"{f:.0f} B" if unit == "B" else f"{f:.2f} {unit}")
        f /= 1024
    return _minus(f"{f:.2f} TiB")


def fmt_x(ratio: float | None, digits: int = 1) -> str:
    """A ratio as a multiple: ``10.33`` → ``"10.3×"``."""
    return MISSING if _missing(ratio) else f"{ratio:.{digits}f}×"


def _speed(time_ratio: float) -> tuple[str, str]:
    """``("1.25× slower", "+25.0%")`` for a time ratio test / base."""
    pct = _minus(f"{(time_ratio - 1) * 100:+.1f}%") if time_ratio != 1 else "±0.0%"
    if time_ratio > 1:
        return f"{time_ratio:.2f}× slower", pct
    if time_ratio < 1:
        return f"{1 / time_ratio:.2f}× faster", pct
    return "as fast", pct


def speed_text(time_ratio: float | None) -> str:
    """``"1.25× slower (+25.0%)"``: ``speed_phrase`` without the names, for a table cell."""
    if _missing(time_ratio) or time_ratio <= 0:
        return MISSING
    multiple, pct = _speed(time_ratio)
    return f"{multiple} ({pct})"


def speed_phrase(
    test: str,
    base: str,
    time_ratio: float,
    ci95: tuple[float, float] | None = None,
    *,
    ci_name: str = "95% CI",
) -> str:
    """``"hyper is 2.70× slower than torch (+170.0%)"``: the one way fsdpbench says how two arms compare.

    Args:
        test, base: the arms' labels.
        time_ratio: test time / base time (step time, or any duration): above 1 the test arm is slower.
        ci95: an optional confidence interval of ``time_ratio``, shown in the phrase's own direction.
        ci_name: what the interval is ("95 % CI (paired t, 3 rounds)").

    Returns:
        The ratio of the slower arm's time to the faster one's first (as pyperf says "1.28x slower"), then
        the change of the test arm's time relative to the base arm's, ``(time_ratio − 1) · 100`` % — the
        one meaning of "x%" (docs/methodology.md, "How to read a comparison"). A ratio of exactly 1 reads "as fast as".
    """
    multiple, pct = _speed(time_ratio)
    shown = (
        ci95 if time_ratio > 1 else None if ci95 is None or time_ratio == 1 else (1 / ci95[1], 1 / ci95[0])
    )
    ci = "" if shown is None else f"; {ci_name} {shown[0]:.2f}×–{shown[1]:.2f}×"
    return f"{test} is {multiple} {'as' if time_ratio == 1 else 'than'} {base} ({pct}{ci})"


def shorten_middle(text: str, width: int, head: int | None = None) -> str:
    """``text`` cut to ``width`` characters by replacing its middle with "…" (kernel names differ at both
    ends); ``head``: the characters kept before the "…" (default half)."""
    if len(text) <= width:
        return text
    head = width // 2 if head is None else head
    return text[:head] + "…" + text[len(text) - (width - 1 - head) :]


def shorten_unique(texts: Sequence[str], width: int) -> list[str]:
    """Each of ``texts`` cut to ``width`` by :func:`shorten_middle`, distinct texts kept distinct: where
    two would shorten alike, their cut moves (the head grows or shrinks, one shift for all of them)
    until they differ; where no cut tells them apart, each gets its position in the list (``#2``)."""
    out = [shorten_middle(t, width) for t in texts]
    clash: dict[str, list[int]] = {}
    for i, short in enumerate(out):
        clash.setdefault(short, []).append(i)
    for idx in clash.values():
        distinct = sorted({texts[i] for i in idx})
        if len(distinct) < 2:
            continue
        half = width // 2
        heads = sorted(range(1, width - 1), key=lambda h: (abs(h - half), h))
        for h in heads:
            cut = {t: shorten_middle(t, width, h) for t in distinct}
            if len(set(cut.values())) == len(distinct):
                for i in idx:
                    out[i] = cut[texts[i]]
                break
        else:
            for i in idx:
                tag = f"#{distinct.index(texts[i]) + 1}"
                out[i] = shorten_middle(texts[i], max(width - len(tag), 2)) + tag
    return out
