"""``fsdpbench cache``: list or remove the analysis caches that ``analyze``/``diff``/``report`` keep
beside traces (docs/caches.md).

Every cache is a hidden file in the trace's own folder, named after the trace: ``.rank0.json.gz`` +
``.fsdpbench.npz`` (the event table), ``.fsdpbench.metrics`` (the rank's analysis result) and, beside a
rank set's first trace, ``.fsdpbench.waits`` (the cross-rank waits), ``.fsdpbench.replay`` (the rank's
step-replay graph), ``.fsdpbench.replayed`` (the replay's result, beside a rank set's first trace); ``.fsdpbench-*.tmp`` is one a
write left behind. Removing them is always safe: the next analysis reads the traces again.
"""

from __future__ import annotations

import argparse
import functools
import os
from pathlib import Path

from fsdpbench.errors import InputError
from fsdpbench.fmt import fmt_bytes


@functools.cache
def cache_suffixes() -> tuple[str, ...]:
    """The name endings of the cache files, taken from the modules that write them."""
    from fsdpbench.analysis import result_cache
    from fsdpbench.trace import cache as table_cache

    probe = Path("t")
    paths = (
        table_cache.cache_path(probe),
        result_cache.cache_path(probe),
        result_cache.cross_path(probe),
        result_cache.graph_path(probe),
        result_cache.replayed_path(probe),
    )
    return tuple(p.name.removeprefix(".t") for p in paths)


def is_cache_file(name: str) -> bool:
    """Whether a file called ``name`` is an fsdpbench cache (or a temporary one left behind)."""
    from fsdpbench.trace.cache import TEMP_PREFIX, TEMP_SUFFIX

    if name.startswith(TEMP_PREFIX) and name.endswith(TEMP_SUFFIX):
        return True
    return name.startswith(".") and any(name.endswith(s) and len(name) > len(s) + 1 for s in cache_suffixes())


def find_caches(roots: list[Path]) -> list[tuple[Path, int]]:
    """(path, size in bytes) of every cache file under ``roots`` (folders, searched recursively without
    following links, or single files: a trace, whose caches are looked for beside it, or a cache file)."""
    found: dict[Path, int] = {}
    for root in roots:
        if root.is_dir():
            for folder, dirs, files in os.walk(root):
                dirs.sort()
                for name in sorted(files):
                    if is_cache_file(name):
                        path = Path(folder, name)
                        found[path] = path.lstat().st_size
        elif root.exists():
            candidates = (
                [root]
                if is_cache_file(root.name)
                else [root.with_name(f".{root.name}{s}") for s in cache_suffixes()]
            )
            for path in candidates:
                if path.is_file():
                    found[path] = path.lstat().st_size
        else:
            raise InputError(
                f"{root}: no such file or folder; give a trace, a folder of traces or a run folder"
            )
    return sorted(found.items())


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``fsdpbench cache``."""
    parser.epilog = (
        "analyze, diff and report keep their caches as hidden files beside each trace T (a Kineto file or "
        "an Ascend rank folder): .T.fsdpbench.npz (event table), .T.fsdpbench.metrics (analysis result), "
        ".T.fsdpbench.waits (cross-rank waits, beside a rank set's first trace), .T.fsdpbench.replayed (the replay's result), .T.fsdpbench.replay (the rank's "
        "step-replay graph). Removing them is safe: "
        "the next analysis reads the traces again. --no-cache on analyze/diff/report neither reads nor "
        "writes them. Details: docs/caches.md"
    )
    parser.add_argument(
        "action", choices=("list", "clear"), help="list: show the cache files; clear: remove them"
    )
    parser.add_argument(
        "paths",
        nargs="+",
        type=Path,
        metavar="PATH",
        help="traces, folders of traces or run folders (searched recursively)",
    )


def main(args: argparse.Namespace) -> int:
    caches = find_caches(args.paths)
    total = sum(size for _, size in caches)
    if args.action == "list":
        for path, size in caches:
            print(f"{size:>14,d}  {path}")
        print(
            f"{len(caches)} cache file(s), {total:,d} bytes ({fmt_bytes(total)}); remove them with: "
            f"fsdpbench cache clear {' '.join(str(p) for p in args.paths)}"
        )
        return 0
    removed = 0
    for path, _ in caches:
        try:
            path.unlink()
        except FileNotFoundError:  # removed meanwhile (another clear, a rewrite): nothing left to do
            continue
        except OSError as exc:
            raise InputError(
                f"{path}: cannot remove it ({exc.strerror}); {removed} file(s) removed before it"
            ) from None
        removed += 1
    print(f"removed {removed} cache file(s), {fmt_bytes(total)}; the next analysis reads the traces again")
    return 0
