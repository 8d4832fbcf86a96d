"""One rank's profile → its event table, through the columnar cache beside the trace."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fsdpbench.trace.discover import Source, find_sources
from fsdpbench.trace.rank import RankTrace


def read_rank(
    source: Source | str | Path, *, cache: bool | None = None, key: dict[str, Any] | None = None
) -> RankTrace:
    """Read one rank's profile (format from the path when given a path).

    Args:
        source: a rank profile, or the path of one.
        cache: read and write the columnar cache beside the trace file or folder (:mod:`fsdpbench.trace.cache`);
            None: unless the ``FSDPBENCH_NO_CACHE`` environment variable is set (``--no-cache``).
        key: the cache key of the trace (:func:`fsdpbench.trace.cache.trace_key`) when the caller
            already took it (before reading); None: taken here.
    """
    if not isinstance(source, Source):
        found = find_sources(source)
        if len(found) != 1:
            from fsdpbench.errors import InputError

            raise InputError(f"{source}: holds {len(found)} rank profiles; pass one of them")
        source = found[0]
    from fsdpbench.trace import cache as table_cache

    path = Path(source.path)
    if not (table_cache.enabled() if cache is None else cache):
        key = None
    elif key is None:
        try:
            key = table_cache.trace_key(path)
        except OSError:
            key = None  # the reader says what is wrong with the file
    if key is not None:
        cached = table_cache.load(path, key)
        if cached is not None:
            return cached
    if source.format == "ascend":
        from fsdpbench.trace.ascend import read_ascend

        trace = read_ascend(path)
    else:
        from fsdpbench.trace.kineto import read_kineto  # the decoder's imports only on a cache miss

        trace = read_kineto(path)
    if key is not None:
        table_cache.store(path, trace, key)
    return trace
