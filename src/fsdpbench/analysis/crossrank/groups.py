"""Communication per process group: HSDP's shard group (intra-node) and replicate group (inter-node) apart.

Each communication event gets its process group:

* from the trace's own identity fields (NCCL/RCCL ``Process Group Name``; ``table.group``);
* else, in a CPU/gloo trace of an fsdpbench run, from the ``fsdpbench::c10d::<kind>::group=<name>::index=<k>``
  range around the c10d call that launched it (:mod:`fsdpbench.run.profile_marks`): the k-th gloo worker span
  is the k-th collective launch (the reader's own pairing), and the launch lies in one such range;
* else it has no group (``""``, shown as ``?``).

Per rank and group (over the analysed steps): ``comm_us`` = |∪ the group's communication|,
``exposed_us`` = that minus its overlap with ∪ compute, ``count``, ``bytes`` (Σ known sizes),
``algbw_gbps`` (Σ known bytes / Σ their durations; GB/s = 1e9 B/s) and ``collectives`` ({type: count}).
Two groups' communication may overlap each other, so their ``comm_us`` may sum to more than the rank's.

Each group gets a kind (:func:`group_kinds`) from its ranks, said by the trace (NCCL ``Process Group
Ranks``) or, where it is silent (gloo), the analysed ranks whose trace names the group: all the ranks →
``world``; consecutive ranks (stride 1, as a mesh R×S's shard dimension lays them out, within a node) →
``shard``; ranks at one stride > 1 (the replicate dimension, across nodes) → ``replicate``; otherwise
``other``. Without ranks the group's name or description decides (``shard``/``replicate`` in it; ``0``,
the default group, is ``world``), else ``unknown``.

A group's size comes from the trace where it says one (NCCL ``Process Group Ranks``, an Ascend export's
communication matrix; ``?`` from the ranks' ``distributedInfo`` world size when no collective names a
group). A named group of which fewer ranks were analysed is ``unknown`` (its layout cannot be told from
part of it), and :func:`partial_groups` lists it: waits and stragglers over it cover part of the group,
and say so (:func:`coverage_text`). When the analysis saw part of the world (``--profile-ranks``, or traces
left out; :func:`ranks_seen` from the traces' ``distributedInfo.world_size``), a group whose ranks the trace
does not say is ``unknown`` (rule ``analysed ranks, part of the world``), except the default group ``0``,
which is the whole world (rule :data:`DEFAULT_GROUP_RULE`); the waits, stragglers and the step replay then
cover the analysed ranks only and say "k of N ranks".
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from fsdpbench.trace.rank import UNNAMED_GROUP

if TYPE_CHECKING:
    import numpy as np

    from fsdpbench.trace import intervals as iv
    from fsdpbench.trace.table import EventTable

# numpy and the table are imported where a rank is measured: group_kinds and summary_rows run on a fully
# cached analysis, which never imports numpy (see analysis/pipeline.py)

RANGE_PREFIX = "fsdpbench::c10d::"
_RANGE_GROUP = re.compile(r"::group=(.*)::index=\d+$")
UNKNOWN = UNNAMED_GROUP
"""Shown for communication whose group the trace does not tell."""


def _range_groups(t: EventTable) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The fsdpbench c10d ranges of the table: starts, ends and group names, by start."""
    import numpy as np

    cats = t.name.categories
    group_of = {
        i: m.group(1)
        for i, c in enumerate(cats)
        if c.startswith(RANGE_PREFIX) and (m := _RANGE_GROUP.search(c))
    }
    if not group_of:
        return np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, object)
    codes = np.fromiter(group_of, np.int64, len(group_of))
    idx = np.flatnonzero(np.isin(t.name.codes, codes) & ~t.device)
    idx = idx[np.argsort(t.start_ns[idx], kind="stable")]
    names = np.array([group_of[int(c)] for c in t.name.codes[idx]], dtype=object)
    return t.start_ns[idx], t.end_ns[idx], names


def event_groups(events: EventTable | Any) -> tuple[np.ndarray, np.ndarray, str | None]:
    """(indices of the communication events by start, their group names (``""``: unknown), a warning
    or None) of one rank's table (see the module docstring for where a group comes from)."""
    import numpy as np

    from fsdpbench.trace.table import as_table

    t = as_table(events)
    comm = np.flatnonzero(t.device & t.category.mask("comm"))
    comm = comm[np.argsort(t.start_ns[comm], kind="stable")]
    names = t.identity(comm)["group"] if comm.size else np.empty(0, object)
    missing = names == ""
    if not missing.any():
        return comm, names, None
    r_start, r_end, r_group = _range_groups(t)
    if r_start.size == 0:
        return comm, names, None
    # the collective launches on the host (a CPU trace's c10d ops the reader paired with the spans)
    said = np.array([c != "" for c in t.collective.categories] + [False])[t.collective.codes]
    launch = np.flatnonzero(~t.device & said & ~t.category.mask("comm"))
    launch = launch[np.argsort(t.start_ns[launch], kind="stable")]
    if launch.size != comm.size:  # the reader could not pair them either (it warns about the types)
        return (
            comm,
            names,
            f"{int(missing.sum())} collectives without a process group: {comm.size} communication spans but "
            f"{launch.size} collective launches; per-group figures name them '{UNKNOWN}'",
        )
    k = np.searchsorted(r_start, t.start_ns[launch], side="right") - 1
    inside = (k >= 0) & (r_end[np.maximum(k, 0)] >= t.end_ns[launch])
    names = np.where(missing, np.where(inside, r_group[np.maximum(k, 0)], ""), names)
    left = int((names == "").sum())
    warning = (
        f"{left} collectives launched outside every fsdpbench c10d range; per-group figures name them '{UNKNOWN}'"
        if left
        else None
    )
    return comm, names, warning


def group_metrics(
    events: EventTable | Any, compute: iv.Intervals | None = None
) -> tuple[dict[str, dict[str, Any]], str | None]:
    """Per process group of the table's communication: ``comm_us, exposed_us, count, bytes, algbw_gbps,
    collectives`` (module docstring), and the warning of :func:`event_groups`.

    Args:
        events: one rank's events of the analysed step(s).
        compute: ∪ compute of the same events (computed when not given).
    """
    import numpy as np

    from fsdpbench.trace import intervals as iv
    from fsdpbench.trace.table import as_table

    t = as_table(events)
    idx, names, warning = event_groups(t)
    if compute is None:
        sel = t.device & t.category.mask("compute")
        compute = iv.union(t.start_ns[sel], t.end_ns[sel])
    out: dict[str, dict[str, Any]] = {}
    if idx.size == 0:
        return out, warning
    start, end = t.start_ns[idx], t.end_ns[idx]
    nbytes = t.bytes[idx]
    types = t.collective[idx].strings("other")
    for name in sorted(set(names.tolist())):
        mine = names == name
        m = iv.union(start[mine], end[mine])
        comm_ns = iv.length(m)
        exposed_ns = comm_ns - iv.intersection_length(m, compute)
        b = nbytes[mine]
        known = ~np.isnan(b)
        dur = (end[mine] - start[mine])[known]
        kinds, counts = np.unique(
            np.where(types[mine] == "", "other", types[mine]).astype(str), return_counts=True
        )
        out[name or UNKNOWN] = {
            "comm_us": comm_ns / 1000.0,
            "exposed_us": exposed_ns / 1000.0,
            "count": int(mine.sum()),
            "bytes": int(b[known].sum()) if known.any() else None,
            "algbw_gbps": float(b[known].sum() / dur.sum()) if known.any() and dur.sum() > 0 else None,
            "collectives": dict(zip(kinds.tolist(), counts.tolist(), strict=True)),
        }
    return out, warning


def _kind_of_ranks(ranks: Sequence[int], world: int | None) -> str:
    r = sorted(int(x) for x in ranks)
    if world is not None and len(r) == world and world > 1:
        return "world"
    if len(r) < 2:
        return "other"
    steps = {b - a for a, b in zip(r[:-1], r[1:], strict=True)}
    if steps == {1}:
        return "shard"
    if len(steps) == 1:
        return "replicate"
    return "other"


def _kind_of_name(name: str, description: str | None) -> str:
    text = f"{name} {description or ''}".lower()
    if "replicate" in text:
        return "replicate"
    if "shard" in text:
        return "shard"
    if name == "0":
        return "world"
    return "unknown"


def group_kinds(ranks: Sequence[Any]) -> dict[str, dict[str, Any]]:
    """``{group: {kind, ranks, rule, size}}`` over the analysed ranks (:class:`RankMetrics` with ``rank``,
    ``by_group``, ``groups`` and ``world_size``): ``ranks`` as the trace says them, else the analysed ranks
    naming the group (``rule``: ``trace ranks`` or ``analysed ranks``), ``kind`` by the module docstring's
    rule (``rule``: ``group name`` when no ranks are known). ``size``: the group's rank count where the
    trace says it (its ranks, an Ascend matrix); ``?`` when no collective names a group, the ranks'
    common ``world_size`` (then ``world``, rule :data:`WORLD_SIZE_RULE`). A named group of which fewer
    ranks were analysed than its size is ``unknown`` (rule ``analysed ranks, part of the group``)."""
    world = len(ranks) or None
    seen = ranks_seen(ranks)
    partial_world = seen["world_size"] if _partial(seen) else None  # --profile-ranks: part of the world
    said: dict[str, list[int]] = {}
    desc: dict[str, str | None] = {}
    size: dict[str, int] = {}
    members: dict[str, set[int]] = {}
    worlds = {
        getattr(r, "world_size", None) for r in ranks if UNKNOWN in (getattr(r, "by_group", None) or {})
    }
    if len(worlds) == 1 and None not in worlds:  # the size of the world the unnamed collectives ran in
        size[UNKNOWN] = int(worlds.pop())
    for r in ranks:
        for name, info in (getattr(r, "groups", None) or {}).items():
            if info.get("ranks") and name not in said:
                said[name] = [int(x) for x in info["ranks"]]
            if info.get("size"):
                size[name] = max(size.get(name, 0), int(info["size"]))
            desc.setdefault(name, info.get("description"))
        for name in getattr(r, "by_group", None) or {}:
            members.setdefault(name, set()).add(int(r.rank))
    out: dict[str, dict[str, Any]] = {}
    for name in sorted(members):
        n = len(said[name]) if name in said else size.get(name)
        got = sorted(members[name])
        if name == UNKNOWN and n and set(members) == {UNKNOWN}:  # no group named: distributedInfo's world
            out[name] = {"kind": "world", "ranks": list(range(n)), "rule": WORLD_SIZE_RULE}
        elif name == UNKNOWN:
            out[name] = {"kind": "unknown", "ranks": None, "rule": None}
        elif name in said:
            out[name] = {
                "kind": _kind_of_ranks(said[name], world),
                "ranks": said[name],
                "rule": "trace ranks",
            }
        elif partial_world and not n and name == DEFAULT_GROUP:  # the default group: the whole world
            out[name] = {"kind": "world", "ranks": list(range(partial_world)), "rule": DEFAULT_GROUP_RULE}
            n = partial_world
        elif partial_world and not n:  # part of the world analysed: the group's size and layout unknown
            out[name] = {"kind": "unknown", "ranks": got, "rule": "analysed ranks, part of the world"}
        elif n and n > len(got):  # part of the group analysed: its layout cannot be told
            out[name] = {"kind": "unknown", "ranks": got, "rule": "analysed ranks, part of the group"}
        elif len(got) > 1 or world == 1:
            out[name] = {"kind": _kind_of_ranks(got, world), "ranks": got, "rule": "analysed ranks"}
        else:
            out[name] = {
                "kind": _kind_of_name(name, desc.get(name)),
                "ranks": got,
                "rule": "group name",
            }
        out[name]["size"] = n or None
    return out


WORLD_SIZE_RULE = "distributedInfo world_size (the trace names no group)"
DEFAULT_GROUP = "0"
"""c10d's name of the default process group (every rank of the world)."""
DEFAULT_GROUP_RULE = "default group 0: distributedInfo world_size"


def ranks_seen(ranks: Sequence[Any]) -> dict[str, Any]:
    """``{"analysed": [ranks], "world_size": N}``: the ranks the analysis saw and the world they ran in (the
    traces' common ``distributedInfo.world_size``; None where no trace says one or they disagree). Fewer
    analysed than ``world_size`` (``--profile-ranks``, or traces left out): the others are not seen."""
    worlds = {getattr(r, "world_size", None) for r in ranks} - {None}
    return {
        "analysed": sorted(int(r.rank) for r in ranks),
        "world_size": int(worlds.pop()) if len(worlds) == 1 else None,
    }


def _partial(seen: dict[str, Any] | None) -> bool:
    return bool(seen and seen.get("world_size") and len(seen.get("analysed") or []) < seen["world_size"])


def compact_ranks(ranks: Sequence[int]) -> str:
    """``0-3,8,10-11``: sorted unique ``ranks`` with runs of consecutive ranks as ranges."""
    parts: list[str] = []
    rs = sorted(set(int(r) for r in ranks))
    i = 0
    while i < len(rs):
        j = i
        while j + 1 < len(rs) and rs[j + 1] == rs[j] + 1:
            j += 1
        parts.append(str(rs[i]) if i == j else f"{rs[i]}-{rs[j]}")
        i = j + 1
    return ",".join(parts)


def seen_text(seen: dict[str, Any] | None) -> str | None:
    """``"2 of 4 ranks (0,2)"`` when the analysis saw part of the world (None when all, or unknown)."""
    if not _partial(seen):
        return None
    got = seen["analysed"]  # type: ignore[index]
    return f"{len(got)} of {seen['world_size']} ranks ({compact_ranks(got)})"  # type: ignore[index]


def partial_groups(kinds: dict[str, dict[str, Any]], ranks: Sequence[Any]) -> list[dict[str, Any]]:
    """The process groups of which fewer ranks were analysed than the profiler says they have:
    ``[{group, analysed, size}]`` (``analysed``: the ranks whose communication names the group). Over
    such a group the last arrival at a collective may be a rank outside the analysis, so waits and
    stragglers cover part of it only."""
    out = []
    for name, info in kinds.items():
        n = info.get("size")
        analysed = sorted(int(r.rank) for r in ranks if name in (getattr(r, "by_group", None) or {}))
        if n and len(analysed) < n:
            out.append({"group": name, "analysed": analysed, "size": int(n)})
    return out


def coverage_text(partial: Sequence[dict[str, Any]], seen: dict[str, Any] | None = None) -> str | None:
    """``"2 of 8 ranks: the last arrival may be outside"`` for the partial groups, led by the world's
    ``"2 of 4 ranks (0,2)"`` (:func:`seen_text`) when the analysis saw part of it (None when neither). A
    group of the world's size with the same ranks analysed is not said twice."""
    world = seen_text(seen)
    n_seen = len((seen or {}).get("analysed") or [])
    if world:
        size = seen["world_size"]  # type: ignore[index]
        partial = [p for p in partial if not (p["size"] == size and len(p["analysed"]) == n_seen)]
    if not partial and not world:
        return None
    parts = [world] if world else []
    parts += [
        f"{len(p['analysed'])} of {p['size']} ranks"
        + (f" of group {p['group']}" if len(partial) > 1 or p["group"] != UNKNOWN or world else "")
        for p in partial
    ]
    return "; ".join(parts) + ": the last arrival may be outside"


def _mean(values: list[float | None]) -> float | None:
    v = [float(x) for x in values if x is not None]
    return sum(v) / len(v) if v else None


def _by_group(rank: Any) -> dict[str, Any]:
    """A rank's ``by_group``: of a :class:`RankMetrics` or of its dict in the Analysis JSON."""
    got = rank.get("by_group") if isinstance(rank, dict) else getattr(rank, "by_group", None)
    return got or {}


def summary_rows(ranks: Sequence[Any], kinds: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per process group, shard groups first, then replicate, world, other: ``group, kind,
    ranks`` (members), ``n_ranks`` (analysed ranks with its communication), ``count_min``/``count_max``
    per rank, and the mean over those ranks of ``comm_us, exposed_us, bytes, algbw_gbps``."""
    order = {"shard": 0, "replicate": 1, "world": 2, "other": 3, "unknown": 4}
    rows = []
    for name, info in kinds.items():
        per = [g[name] for g in map(_by_group, ranks) if name in g]
        if not per:
            continue
        counts = [int(p["count"]) for p in per]
        rows.append(
            {
                "group": name,
                "kind": info.get("kind"),
                "ranks": info.get("ranks"),
                "size": info.get("size"),
                "n_ranks": len(per),
                "count_min": min(counts),
                "count_max": max(counts),
                **{
                    k: _mean([p.get(k) for p in per])
                    for k in ("comm_us", "exposed_us", "bytes", "algbw_gbps")
                },
            }
        )
    return sorted(rows, key=lambda r: (order.get(str(r["kind"]), 9), r["group"]))
