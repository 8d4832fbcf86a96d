"""Multi-node bookkeeping through torch.distributed: node 0 decides, the other nodes send their files.

``python -m fsdpbench.run.collect SPEC.json`` runs under torchrun (gloo, one process per node) beside each
launch of a multi-node run, never inside it: after a failure the launch's own process group is broken,
exactly when the other nodes' error files are needed. Two operations:

- ``plan`` (once per ``ab``/``--resume``): every node sends a fingerprint of its plan; node 0 checks
  they agree and sends its to-do list, which the other nodes follow (they never decide on their own
  what is done).
- ``launch`` (after every launch, failed ones included): every other node streams its launch files
  (torchrun's log and per-rank logs, error files, its environment record, and on a profile launch its
  ranks' profiler output as the analysis reads it: for Ascend only the parsed ``ASCEND_PROFILER_OUTPUT``
  and the profiler info/metadata files, the raw ``PROF_*``/``FRAMEWORK`` data staying on its node and
  listed in ``left_in_place``; a rank analysed on its node (the launcher's ``_analyze_local_ranks``, the
  default) sends its compact result ``<trace>.fsdpbench-rank`` instead, its trace listed in
  ``left_in_place`` too, unless ``--collect-traces``) to node 0, in chunks, with the size and SHA-256 of each file checked on
  arrival. Node 0 writes them into its run folder (launch files under ``launches/<arm>/<leaf>/node<k>/``,
  profiles under ``profiles/<arm>/rank<r>/`` as if written there), decides the launch's verdict from
  every node's report and files (``failures.launch_verdict``), and sends it back.

A file larger than ``FSDPBENCH_COLLECT_MAX_BYTES`` (default 4 GiB) is not moved: it stays on its node
and is named in ``collect.json`` and the summary. The launcher writes the spec and reads the result
(``collect.json``); this module imports torch only in ``main``.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import socket
import sys
import time
import traceback
from datetime import timedelta
from pathlib import Path, PurePosixPath
from typing import Any

from fsdpbench.errors import InputError
from fsdpbench.results import run_folder
from fsdpbench.run import failures
from fsdpbench.run.process_exit import exit_without_teardown

log = logging.getLogger("fsdpbench.run.collect")

CHUNK_BYTES = 8 << 20
MAX_BYTES_ENV = "FSDPBENCH_COLLECT_MAX_BYTES"
DEFAULT_MAX_BYTES = 4 << 30
COLLECT_DIR = "collect"
"""The collect step's own torchrun logs and spec, inside the launch folder (never sent)."""
KEPT_ON_NODE = ("discarded_profiles",)
"""Launch-folder entries never sent: an earlier attempt's profiles, set aside (they stay on their node)."""
COLLECT_RESULT = "collect.json"
"""In the launch folder: node 0's verdict, and on node 0 what each node sent (path, bytes, sha256)."""
PLAN_DIR = ".plan"
"""Under ``launches/``: the plan step's spec, logs and result."""


def max_bytes() -> int:
    """The largest file the collect step moves (``FSDPBENCH_COLLECT_MAX_BYTES``)."""
    raw = os.environ.get(MAX_BYTES_ENV, "")
    try:
        return int(raw) if raw.strip() else DEFAULT_MAX_BYTES
    except ValueError:
        raise InputError(f"{MAX_BYTES_ENV}={raw!r} is not a whole number of bytes") from None


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(CHUNK_BYTES):
            h.update(block)
    return h.hexdigest()


ASCEND_SENT = ("ASCEND_PROFILER_OUTPUT",)
"""Inside a rank's ``*_ascend_pt`` folder, the sub-folders sent: the parsed output the analysis reads."""
ASCEND_SENT_FILES = re.compile(r"^profiler_(info(_\d+)?|metadata)\.json$")
"""Inside a ``*_ascend_pt`` folder, the files sent beside it: the profiler's info (the rank) and metadata."""
RAW_PROFILE = (
    "raw profiler data (the analysis reads ASCEND_PROFILER_OUTPUT and the profiler_info/metadata files)"
)


TRACE_KEPT = (
    "profiler trace analysed on its node: its compact result (*.fsdpbench-rank) was sent instead "
    "(--collect-traces sends the trace too)"
)
RANK_RESULT_SUFFIX = ".fsdpbench-rank"
"""A rank's compact result beside its trace (analysis/rank_result.py; the name is trace/discover.py's)."""


def _kept_trace(rank_dir: Path, path: Path) -> bool:
    """Whether ``path`` (a file under ``rank_dir``) stays on its node because its rank was analysed there:
    a file of a trace (a Kineto file, or anything in an ``*_ascend_pt`` folder) with a compact result
    beside it, or a hidden cache of fsdpbench's (``.<trace>.fsdpbench.*``: rebuilt where it is needed)."""
    if path.name.startswith(".") and ".fsdpbench." in path.name:
        return True
    rel = path.relative_to(rank_dir)
    for i in range(len(rel.parts)):
        trace = rank_dir.joinpath(*rel.parts[: i + 1])
        if trace.with_name(trace.name + RANK_RESULT_SUFFIX).is_file():
            return True
    return False


def _ascend_raw(rel: PurePosixPath) -> bool:
    """Whether ``rel`` (under a rank folder) is torch_npu's raw data (``PROF_*``, ``FRAMEWORK``, logs)
    rather than what the analysis reads; files outside any ``*_ascend_pt`` folder are never raw."""
    parts = rel.parts
    at = next((i for i, part in enumerate(parts) if part.endswith("_ascend_pt")), None)
    if at is None or at == len(parts) - 1:
        return False
    inside = parts[at + 1 :]
    if len(inside) == 1:
        return not ASCEND_SENT_FILES.match(inside[0])
    return inside[0] not in ASCEND_SENT


def files_to_send(
    run_dir: Path, ldir: Path, node: int, ranks: range, arm: str, profile: bool
) -> list[list[str]]:
    """``[source path, destination relative to node 0's run folder]`` for this node's files of one
    launch: the launch folder (except the collect step's own files and ``KEPT_ON_NODE``) and, on a
    profiling launch (round 0, or a separate profile launch), the profiler output of this node's ranks that the analysis reads (Ascend: each
    ``*_ascend_pt``'s ``ASCEND_PROFILER_OUTPUT`` and profiler info/metadata; ``raw_profile_files`` lists
    the rest)."""
    pairs: list[list[str]] = []
    leaf = ldir.relative_to(run_dir)
    node_dir = leaf / failures.NODE_DIR.format(node=node)
    for path in sorted(ldir.rglob("*")):
        rel = path.relative_to(ldir)
        if not path.is_file() or rel.parts[0] in (COLLECT_DIR, COLLECT_RESULT, *KEPT_ON_NODE):
            continue
        pairs.append([str(path), (node_dir / rel).as_posix()])
    if profile:
        for rank_dir, path in _profile_files(run_dir, ranks, arm):
            raw = _ascend_raw(PurePosixPath(path.relative_to(rank_dir).as_posix()))
            if not raw and not _kept_trace(rank_dir, path):
                pairs.append([str(path), path.relative_to(run_dir).as_posix()])
    return pairs


def raw_profile_files(run_dir: Path, ranks: range, arm: str, profile: bool) -> list[dict[str, Any]]:
    """``left_in_place`` entries (path, bytes, why) for the raw Ascend profiler data of this node's ranks
    on a profile launch: it stays on its node (``files_to_send`` sends the parsed output)."""
    if not profile:
        return []
    left = []
    for rank_dir, path in _profile_files(run_dir, ranks, arm):
        if path.name.startswith(".") and ".fsdpbench." in path.name:
            continue  # a cache, not data
        raw = _ascend_raw(PurePosixPath(path.relative_to(rank_dir).as_posix()))
        if raw or _kept_trace(rank_dir, path):
            left.append(
                {
                    "path": path.relative_to(run_dir).as_posix(),
                    "bytes": path.stat().st_size,
                    "why": RAW_PROFILE if raw else TRACE_KEPT,
                }
            )
    return left


def _profile_files(run_dir: Path, ranks: range, arm: str) -> list[tuple[Path, Path]]:
    out = []
    for rank in ranks:
        rank_dir = run_folder.profile_dir(run_dir, arm) / f"rank{rank}"
        out += (
            [(rank_dir, p) for p in sorted(rank_dir.rglob("*")) if p.is_file()] if rank_dir.is_dir() else []
        )
    return out


def _header(spec: dict[str, Any]) -> dict[str, Any]:
    """What this node announces: its report, and each file it will send (or leaves in place)."""
    limit = int(spec.get("max_bytes") or DEFAULT_MAX_BYTES)
    files, left = [], list(spec.get("left_in_place") or [])
    for source, dest in spec.get("files") or []:
        path = Path(source)
        try:
            size = path.stat().st_size
        except OSError as exc:
            left.append({"path": dest, "bytes": None, "why": f"unreadable: {exc}"})
            continue
        if size > limit:
            left.append({"path": dest, "bytes": size, "why": f"larger than {MAX_BYTES_ENV}={limit}"})
            continue
        files.append({"source": source, "path": dest, "bytes": size, "sha256": sha256_file(path)})
    return {
        "node": spec["node"],
        "host": socket.gethostname(),
        "report": spec.get("report"),
        "fingerprint": spec.get("fingerprint"),
        "files": files,
        "left_in_place": left,
    }


def _safe_destination(run_dir: Path, rel: str) -> Path:
    parts = PurePosixPath(rel).parts
    if not parts or rel.startswith("/") or ".." in parts:
        raise ValueError(f"refusing to write {rel!r} outside the run folder")
    return run_dir.joinpath(*parts)


def _send_files(header: dict[str, Any], dist: Any, torch: Any) -> None:
    for entry in header["files"]:
        with open(entry["source"], "rb") as f:
            while block := f.read(CHUNK_BYTES):
                dist.send(torch.frombuffer(bytearray(block), dtype=torch.uint8), dst=0)


def _receive_files(run_dir: Path, header: dict[str, Any], src: int, dist: Any, torch: Any) -> list[dict]:
    """Write ``src``'s files under ``run_dir``; each entry gains ``ok`` (size and checksum match)."""
    received = []
    for entry in header["files"]:
        dest = _safe_destination(run_dir, entry["path"])
        dest.parent.mkdir(parents=True, exist_ok=True)
        part = dest.with_name(dest.name + ".part")
        h, left = hashlib.sha256(), entry["bytes"]
        with open(part, "wb") as out:
            while left > 0:
                buf = torch.empty(min(CHUNK_BYTES, left), dtype=torch.uint8)
                dist.recv(buf, src=src)
                data = buf.numpy().tobytes()
                h.update(data)
                out.write(data)
                left -= len(data)
        ok = h.hexdigest() == entry["sha256"] and part.stat().st_size == entry["bytes"]
        if ok:
            part.replace(dest)
        received.append({k: entry[k] for k in ("path", "bytes", "sha256")} | {"ok": ok})
    return received


def _plan_mismatch(spec: dict[str, Any], headers: list[dict[str, Any]]) -> str | None:
    """Why the nodes cannot run together (their plans differ), or None."""
    differ = [str(h["node"]) for h in headers if h.get("fingerprint") != spec.get("fingerprint")]
    if not differ:
        return None
    return (
        f"node(s) {', '.join(differ)} run a different plan than node 0 (other arms, rounds, model or "
        f"options): start every node with the same options (only --node-rank and --out may differ)"
    )


def _plan_result(spec: dict[str, Any], headers: list[dict[str, Any]]) -> dict[str, Any]:
    error = _plan_mismatch(spec, headers)
    return {"todo": [] if error else spec.get("todo") or [], "error": error}


def _launch_result(spec: dict[str, Any], headers: list[dict[str, Any]], received: dict[int, list]) -> dict:
    ldir = Path(spec["launch_dir"])
    reports = [h.get("report") or {"node": h["node"]} for h in headers]
    bad = [f"node {k}: {e['path']}" for k, got in received.items() for e in got if not e["ok"]]
    error = _plan_mismatch(spec, headers) or failures.launch_verdict(ldir, reports, nnodes=len(headers))
    if bad and error is None:
        error = (
            f"collected files failed their size/checksum check ({'; '.join(bad[:4])}); rerun with --resume"
        )
    nodes = {
        str(h["node"]): {
            "host": h["host"],
            "report": h.get("report"),
            "files": received.get(h["node"], []),
            "left_in_place": h["left_in_place"],
        }
        for h in headers[1:]
    }
    return {"error": error, "failure": failures.failure_record(ldir, 0) if error else None, "nodes": nodes}


def run(spec: dict[str, Any]) -> dict[str, Any]:
    """One plan or launch step on this node; returns node 0's result (the same on every node)."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", timeout=timedelta(seconds=float(spec.get("timeout") or 900)))
    try:
        node, world = dist.get_rank(), dist.get_world_size()
        header = _header(spec)
        headers: list[Any] = [None] * world
        dist.gather_object(header, headers if node == 0 else None, dst=0)
        received: dict[int, list] = {}
        if node == 0 and spec["op"] == "launch":
            for src in range(1, world):
                received[src] = _receive_files(Path(spec["run_dir"]), headers[src], src, dist, torch)
        elif node != 0:
            _send_files(header, dist, torch)
        box: list[Any] = [None]
        if node == 0:
            op = spec["op"]
            box[0] = _plan_result(spec, headers) if op == "plan" else _launch_result(spec, headers, received)
        dist.broadcast_object_list(box, src=0)
        return box[0]
    finally:
        dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    """Entry point under torchrun: ``python -m fsdpbench.run.collect SPEC.json``."""
    argv = sys.argv[1:] if argv is None else argv
    spec = run_folder.read_json_file(argv[0])
    logging.basicConfig(level=logging.INFO, format=f"[node{spec.get('node')}] %(levelname)s: %(message)s")
    try:
        result = run(spec)
    except BaseException as exc:  # the launcher names it from this file (failures.explain)
        run_folder.write_json(
            Path(argv[0]).parent / run_folder.LAUNCH_ERROR.format(rank=spec.get("node")),
            {
                "rank": spec.get("node"),
                "type": type(exc).__name__,
                "message": str(exc).strip().splitlines()[0][:500] if str(exc).strip() else "",
                "time": time.time(),
                "traceback": traceback.format_exc()[-4000:],
            },
        )
        raise
    run_folder.write_json(spec["result"], result)
    return 0


if __name__ == "__main__":
    exit_without_teardown(main())
