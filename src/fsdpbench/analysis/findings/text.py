"""Small helpers shared by the rules' texts and figures."""

from __future__ import annotations


def share_of(part: float | None, whole: float | None) -> float | None:
    """``part / whole``, or ``None`` when either is unknown or ``whole`` is 0."""
    return part / whole if part is not None and whole else None


def capital(text: str) -> str:
    """``text`` with its first letter upper-case."""
    return text[:1].upper() + text[1:]
