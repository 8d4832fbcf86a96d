"""Small helpers shared by the rules' texts and figures."""

from __future__ import annotations


def capital(text: str) -> str:
    """``text`` with its first letter upper-case."""
    return text[:1].upper() + text[1:]
