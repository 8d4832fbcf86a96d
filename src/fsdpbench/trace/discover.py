"""Find the rank traces under the paths a user gives, and tell their format from the path."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from fsdpbench.errors import InputError

ASCEND_SUFFIX = "_ascend_pt"
ASCEND_OUTPUT = "ASCEND_PROFILER_OUTPUT"
RANK_RESULT_SUFFIX = ".fsdpbench-rank"
"""A rank's compact result beside its trace (analysis/rank_result.py): ``rank3.json.gz.fsdpbench-rank``."""


@dataclass(frozen=True)
class Source:
    """One rank's profile: a Kineto file or an Ascend ``*_ascend_pt`` folder (text or db export)."""

    path: Path
    format: str  # "kineto" | "ascend"


def _is_ascend_folder(p: Path) -> bool:
    return p.is_dir() and (p.name.endswith(ASCEND_SUFFIX) or (p / ASCEND_OUTPUT).is_dir())


def _is_kineto_name(p: Path) -> bool:
    name = p.name.lower()
    return name.endswith(".json.gz") or (name.endswith(".json") and ("trace" in name or "rank" in name))


def find_sources(path: str | Path) -> list[Source]:
    """The rank profiles under ``path``: a trace file, a rank folder, or a folder of ranks.

    Raises:
        InputError: the path does not exist, holds no profile, or mixes Kineto and Ascend profiles.
    """
    p = Path(path)
    if not p.exists():
        raise InputError(f"{p}: no such file or folder")
    if p.is_file() and p.name.endswith(RANK_RESULT_SUFFIX):  # a rank's compact result: the rank it stands for
        return [_result_source(p)]
    if p.is_file():
        name = p.name.lower()
        if name.endswith((".json", ".json.gz", ".gz")):
            return [Source(p, "kineto")]
        if name.startswith("ascend_pytorch_profiler") and name.endswith(".db"):
            if p.parent.name == ASCEND_OUTPUT:  # a torch_npu db export: its rank folder holds the rest
                return [Source(p.parent.parent, "ascend")]
            raise InputError(
                f"{p}: a torch_npu profiler database outside its {ASCEND_OUTPUT}/ folder; pass the "
                f"*{ASCEND_SUFFIX} folder it came from (the rank is read from its profiler_info_<rank>.json)"
            )
        raise InputError(
            f"{p}: not a trace (expected a Kineto .json/.json.gz file, a *{ASCEND_SUFFIX} folder or its "
            f"{ASCEND_OUTPUT}/ascend_pytorch_profiler_<rank>.db)"
        )
    if _is_ascend_folder(p):
        return [Source(p, "ascend")]
    ascend = sorted(
        {q for q in p.rglob(f"*{ASCEND_SUFFIX}") if q.is_dir()}
        | {q.parent for q in p.rglob(ASCEND_OUTPUT) if q.is_dir()}
    )
    kineto = sorted(
        q
        for q in p.rglob("*")
        if q.is_file()
        and _is_kineto_name(q)
        and not any(part.endswith(ASCEND_SUFFIX) for part in q.relative_to(p).parts)
    )
    kineto = [q for q in kineto if not q.name.endswith(RANK_RESULT_SUFFIX)]
    # ranks whose trace is elsewhere (on its node) and whose compact result is here
    results = [_result_source(q) for q in sorted(p.rglob(f"*{RANK_RESULT_SUFFIX}")) if q.is_file()]
    absent = [r for r in results if not r.path.exists()]
    ascend = sorted({*ascend, *(r.path for r in absent if r.format == "ascend")})
    kineto = sorted({*kineto, *(r.path for r in absent if r.format == "kineto")})
    if ascend and kineto:
        raise InputError(
            f"{p}: mixed formats: {len(kineto)} Kineto trace(s) (e.g. {kineto[0]}) and {len(ascend)} Ascend "
            f"folder(s) (e.g. {ascend[0]}); analyse one kind at a time"
        )
    if not ascend and not kineto:
        raise InputError(
            f"{p}: no profiles found (looked for *.json.gz, *trace*.json and *rank*.json files, *{ASCEND_SUFFIX} folders and "
            f"*{RANK_RESULT_SUFFIX} compact results)"
        )
    return [Source(q, "ascend") for q in ascend] or [Source(q, "kineto") for q in kineto]


def _result_source(result: Path) -> Source:
    """The rank a compact result stands for: its trace's path (there or not) and format (from the name)."""
    trace = result.with_name(result.name[: -len(RANK_RESULT_SUFFIX)])
    return Source(trace, "ascend" if trace.name.endswith(ASCEND_SUFFIX) else "kineto")


def find_all(paths: Sequence[str | Path]) -> list[Source]:
    """:func:`find_sources` over several paths, rejecting a mix of formats and duplicates."""
    if not paths:
        raise InputError("no input paths given")
    found: list[Source] = []
    seen: set[Source] = set()
    for path in paths:
        for s in find_sources(path):
            if s not in seen:
                seen.add(s)
                found.append(s)
    formats = {s.format for s in found}
    if len(formats) > 1:
        raise InputError(
            "mixed formats among the inputs: "
            + ", ".join(f"{s.path} ({s.format})" for s in found[:4])
            + "; analyse Kineto and Ascend profiles separately"
        )
    return found
