"""``--profile-ranks``: which ranks run the profiler (docs/multi-node.md, "Profile a chosen few").

A spec is ``all`` (every rank, the default), a comma list of ranks and inclusive ranges (``0-7``,
``0,8,16``, ``0-3,8``), or ``per-node:K`` (the first K local ranks of every node: ranks
``node * nproc + 0 .. K-1``). Ranks are global (``RANK``), as ``profiles/<arm>/rank<k>`` names them.
"""

from __future__ import annotations

from fsdpbench.errors import ConfigError

ALL = "all"
PER_NODE = "per-node:"
OPTION = "--profile-ranks"


def profiled_ranks(spec: str, world_size: int, nproc: int) -> list[int]:
    """The sorted global ranks that ``spec`` profiles in a world of ``world_size`` ranks, ``nproc`` per node.

    Raises:
        ConfigError: naming ``--profile-ranks``, the spec and what is wrong (not a rank, a rank outside
            the world, a range whose end comes before its start, ``per-node:K`` with K outside 1..nproc).
    """
    text = str(spec).strip().lower()
    if text in ("", ALL):
        return list(range(world_size))
    if text.startswith(PER_NODE):
        k = _integer(text[len(PER_NODE) :], spec, "per-node:K needs a count K")
        if not 1 <= k <= nproc:
            raise ConfigError(
                f"{OPTION} {spec!r}: per-node:K needs 1 <= K <= --nproc ({nproc} ranks per node), got {k}"
            )
        return [node * nproc + local for node in range(world_size // nproc) for local in range(k)]
    ranks: set[int] = set()
    for item in text.split(","):
        item = item.strip()
        if not item:
            raise ConfigError(f"{OPTION} {spec!r}: an empty item; give e.g. 0-7, 0,8,16 or per-node:2")
        first, dash, last = item.partition("-")
        low = _integer(first, spec, f"{item!r} is not a rank or a range A-B")
        high = _integer(last, spec, f"{item!r} is not a rank or a range A-B") if dash else low
        if high < low:
            raise ConfigError(f"{OPTION} {spec!r}: the range {item!r} ends before it starts")
        if high >= world_size:
            raise ConfigError(
                f"{OPTION} {spec!r}: rank {high} is outside the world of {world_size} ranks (0..{world_size - 1})"
            )
        ranks.update(range(low, high + 1))
    return sorted(ranks)


def _integer(text: str, spec: str, why: str) -> int:
    text = text.strip()
    if not text.isdigit():
        raise ConfigError(f"{OPTION} {spec!r}: {why}; give e.g. 0-7, 0,8,16 or per-node:2")
    return int(text)
