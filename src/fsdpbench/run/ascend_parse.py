"""Ascend profile output: the profiler's path rule, checked before launching, and the offline parse (one
subprocess per rank folder, in parallel, each with a time limit).

torch_npu's profiler refuses an output path with any character outside ``[./_\\-\\s~0-9a-zA-Z]`` (and CJK
ideographs), longer than 4096 characters or with a component over 255 (``torch_npu/utils/_path_manager.py``
``_input_path_common_check``, lines 157-173 at v2.7.1-7.2.0 and v2.9.0-26.1.0), and its
``tensorboard_trace_handler`` swallows the error (``@no_exception_func``, torch_npu/profiler/profiler.py line
170 at v2.7.1-7.2.0): the profile is lost and the launch fails later for another reason. On NPU
``npu_profile_path_problem`` checks ``--out``, the run name and every arm label first.

torch_npu's ``analyse(path)`` parses every ``*_ascend_pt`` folder one level below ``path``, one process per
folder (``torch_npu/profiler/profiler.py`` ``analyse``; msprof export per folder), so one call per rank folder
is its natural unit. The launcher runs ``python -m fsdpbench.run.worker --parse-npu-profile <rank folder>``
(the arm's interpreter; this module never imports torch) for every rank folder of the profiled step and of
the memory step at once, at most one per core, after torchrun has exited. A parse still running after
``--ascend-parse-timeout`` seconds is killed with its process group; the launch's error names its folder,
and the folders that were parsed keep their output.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from fsdpbench.run.process_exit import kill_process_group

ASCEND_PARSE_LOG = "ascend_parse.log"
"""In a profile launch's folder: the profiled step's parse, each rank folder's output under its own header."""
ASCEND_MEMORY_PARSE_LOG = "ascend_memory_parse.log"
"""In a profile launch's folder: the memory step's parse, as ``ASCEND_PARSE_LOG``."""
ASCEND_REQUIRED = ("kernel_details.csv", "trace_view.json")
"""Files each rank's ``*_ascend_pt/ASCEND_PROFILER_OUTPUT`` must hold after torch_npu's parse: without
CANN's msprof the parse fails inside torch_npu (caught there, rc 0) and leaves no device kernels."""
POLL_S = 0.05
NPU_PATH_RULE = re.compile(r"(\.|/|_|-|\s|[~0-9a-zA-Z]|[\u4e00-\u9fa5])+")
"""torch_npu's own pattern (``re.fullmatch`` on the real path; ``_path_manager.py`` line 165)."""
NPU_PATH_MAX, NPU_NAME_MAX = 4096, 255
"""torch_npu's ``MAX_PATH_LENGTH`` and ``MAX_FILE_NAME_LENGTH`` (``_path_manager.py`` lines 12-13)."""


def npu_profile_path_problem(
    out: str | Path, name: str, labels: list[str], run_dir: Path | None = None
) -> str | None:
    """Why torch_npu's profiler would refuse the profile folders of a run into ``out`` named ``name``
    with arms ``labels`` (``run_dir``: the folder of a resumed run), in one line; None when it would not."""
    where = Path(run_dir if run_dir is not None else Path(out) / f"{name}_20260101_000000").expanduser()
    real = os.path.realpath(where)
    allowed = "letters, digits, '.', '/', '_', '-', '~' and spaces"
    rule = "torch_npu's profiler (torch_npu/utils/_path_manager.py) accepts only " + allowed
    for label in labels:
        if not NPU_PATH_RULE.fullmatch(label) or "/" in label or len(label) > NPU_NAME_MAX:
            return (
                f"arm label {label!r}: {rule} in a profile folder name, up to {NPU_NAME_MAX} characters; "
                "it would lose the profile; give the arm a label=... of those characters"
            )
    bad = sorted({c for c in real if not NPU_PATH_RULE.fullmatch(c)})
    if bad:
        flag = "--name" if run_dir is None and any(c in name for c in bad) else "--out"
        shown = name if flag == "--name" else os.path.realpath(Path(run_dir or out).expanduser())
        return (
            f"{flag} {shown!r}: {rule} in the profile's path (it has {' '.join(repr(c) for c in bad)}); "
            f"it would lose the profile; choose a {flag} of those characters"
        )
    longest = max((len(label) for label in labels), default=0)
    if (
        len(real) + len(f"/profiles/{'x' * longest}/rank0000/x_ascend_pt/ASCEND_PROFILER_OUTPUT")
        > NPU_PATH_MAX
    ):
        return f"--out {real!r}: the profile's paths would exceed torch_npu's {NPU_PATH_MAX} characters; use a shorter --out"
    return None


@dataclass(frozen=True, slots=True)
class FolderParse:
    """One rank folder's parse: its exit code (None: killed), wall seconds and output."""

    folder: Path
    rc: int | None
    wall_s: float
    output: bytes

    @property
    def killed(self) -> bool:
        return self.rc is None


def parse_folders(
    python: str, folders: list[Path], env: dict[str, str], timeout_s: float, jobs: int | None = None
) -> list[FolderParse]:
    """Parse each of ``folders`` in its own ``python -m fsdpbench.run.worker --parse-npu-profile`` process,
    at most ``jobs`` at a time (default: one per core), each killed after ``timeout_s`` seconds.

    Returns:
        One ``FolderParse`` per folder, in the order given.
    """
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(folders) or 1))
    pending = deque(folders)
    running: dict[subprocess.Popen, tuple[Path, float, object]] = {}
    done: dict[Path, FolderParse] = {}
    try:
        while pending or running:
            while pending and len(running) < jobs:
                folder = pending.popleft()
                out = tempfile.TemporaryFile()
                proc = subprocess.Popen(
                    [python, "-m", "fsdpbench.run.worker", "--parse-npu-profile", str(folder)],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=env,
                    start_new_session=True,
                )
                running[proc] = (folder, time.monotonic(), out)
            time.sleep(POLL_S)
            for proc, (folder, started, out) in list(running.items()):
                rc = proc.poll()
                elapsed = time.monotonic() - started
                if rc is None and elapsed <= timeout_s:
                    continue
                if rc is None:
                    kill_process_group(proc)
                del running[proc]
                out.seek(0)  # type: ignore[attr-defined]
                done[folder] = FolderParse(folder, rc, elapsed, out.read())  # type: ignore[attr-defined]
                out.close()  # type: ignore[attr-defined]
    except BaseException:
        for proc in running:
            kill_process_group(proc)
        raise
    return [done[f] for f in folders]


def _write_log(path: Path, parses: list[FolderParse], timeout_s: float) -> None:
    with open(path, "wb") as log:
        for p in parses:
            how = f"killed after {timeout_s:g} s" if p.killed else f"rc {p.rc} in {p.wall_s:.1f} s"
            log.write(f"== {p.folder}: {how}\n".encode())
            log.write(p.output)


def rank_folders(parent: Path, ranks: Sequence[int]) -> list[Path]:
    """``parent/rank<k>`` for the local ranks that have one."""
    return [parent / f"rank{rank}" for rank in ranks if (parent / f"rank{rank}").is_dir()]


def parse_launch_profiles(
    python: str,
    profile_dir: Path,
    memory_dir: Path,
    ranks: Sequence[int],
    env: dict[str, str],
    launch_dir: Path,
    timeout_s: float,
) -> str | None:
    """Parse a profile launch's rank folders (profiled step under ``profile_dir``, memory step under
    ``memory_dir``) together (``parse_folders``); write the two logs into ``launch_dir``.

    Returns:
        The launch's error, or None: a killed parse of the profiled step names its folder; otherwise
        ``missing_ascend_output``. The memory step's failures stay out of it (its timeline then reports
        the error).
    """
    profile, memory = rank_folders(profile_dir, ranks), rank_folders(memory_dir, ranks)
    if not profile and not memory:
        return missing_ascend_output(profile_dir, ranks)
    parses = parse_folders(python, [*profile, *memory], env, timeout_s)
    _write_log(launch_dir / ASCEND_PARSE_LOG, parses[: len(profile)], timeout_s)
    if memory:
        _write_log(launch_dir / ASCEND_MEMORY_PARSE_LOG, parses[len(profile) :], timeout_s)
    killed = [str(p.folder) for p in parses[: len(profile)] if p.killed]
    if killed:
        return (
            f"the Ascend parse of {', '.join(killed)} was killed after {timeout_s:g} s "
            f"(--ascend-parse-timeout); the other ranks' parsed output is kept. Raise --ascend-parse-timeout "
            f'and rerun the profile with --resume, or parse in place with python -c "from '
            f"torch_npu.profiler.profiler import analyse; analyse('{killed[0]}')\""
        )
    return missing_ascend_output(profile_dir, ranks)


def missing_ascend_output(profile_dir: Path, ranks: Sequence[int]) -> str | None:
    """None when every rank's parsed Ascend profile is there, else one line naming what is missing
    and how to get it (torch_npu writes no done marker: the parsed files are the evidence)."""
    missing = []
    for rank in ranks:
        outputs = sorted((profile_dir / f"rank{rank}").glob("*_ascend_pt/ASCEND_PROFILER_OUTPUT"))
        have = {p.name for out in outputs for p in out.iterdir()} if outputs else set()
        lacking = [name for name in ASCEND_REQUIRED if name not in have]
        if lacking:
            missing.append(f"rank {rank}: {', '.join(lacking)}")
    if not missing:
        return None
    return (
        f"the Ascend profile was not parsed ({'; '.join(missing)} missing under {profile_dir}/rank<k>/"
        f"*_ascend_pt/ASCEND_PROFILER_OUTPUT): torch_npu's parser needs CANN's msprof on PATH — source "
        f"the CANN toolkit (e.g. source /usr/local/Ascend/ascend-toolkit/set_env.sh, or install the "
        f"CANN toolkit package) and rerun the profile with --resume, or parse in place with "
        f"python -c \"from torch_npu.profiler.profiler import analyse; analyse('{profile_dir}/rank0')\""
    )
