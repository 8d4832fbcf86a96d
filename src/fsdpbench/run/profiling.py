"""The worker's profilers: torch.profiler (Kineto) or torch_npu.profiler for the profiled step, torch_npu's memory
profiler for the memory step, and the offline parse of a rank's raw torch_npu profile (``PARSE_NPU_PROFILE``)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

log = logging.getLogger("fsdpbench.run.worker")  # the worker's logger, as before these left worker.py


def profiler_schedule_args(profile_step: int, profile_steps: int = 1) -> dict[str, int]:
    """wait/warmup/active so that step indices ``profile_step`` .. ``profile_step + profile_steps - 1``
    (0-based, ``--profile-steps``) are the recorded ones, in one trace."""
    warmup = 1 if profile_step >= 1 else 0
    return {"wait": profile_step - warmup, "warmup": warmup, "active": profile_steps, "repeat": 1}


def make_profiler(
    device_type: str, out_dir: Path, rank: int, profile_step: int, profile_steps: int = 1
) -> Any:
    """torch.profiler (Kineto ``rank<k>.*.pt.trace.json.gz``) or, on npu, torch_npu.profiler, both on the
    schedule of :func:`profiler_schedule_args`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    sched = profiler_schedule_args(profile_step, profile_steps)
    if device_type == "npu":
        return _npu_profiler(out_dir, rank, sched)
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device_type == "cuda" else [])
    return profile(
        activities=activities,
        schedule=schedule(**sched),
        record_shapes=True,
        on_trace_ready=tensorboard_trace_handler(str(out_dir), worker_name=f"rank{rank}", use_gzip=True),
    )


def _npu_level1(prof: Any) -> Any:
    """torch_npu's Level1 experimental config (kernel details, no data simplification)."""
    return prof._ExperimentalConfig(
        profiler_level=prof.ProfilerLevel.Level1,
        aic_metrics=prof.AiCMetrics.PipeUtilization,
        data_simplification=False,
    )


def _npu_profiler(out_dir: Path, rank: int, sched: dict[str, int]) -> Any:
    import torch_npu

    prof = torch_npu.profiler
    return prof.profile(
        activities=[prof.ProfilerActivity.CPU, prof.ProfilerActivity.NPU],
        schedule=prof.schedule(**sched),
        on_trace_ready=npu_trace_handler(prof, out_dir, rank),
        record_shapes=True,
        experimental_config=_npu_level1(prof),
    )


def npu_memory_profiler(out_dir: Path, rank: int) -> Any:
    """torch_npu's profiler for the memory step: CPU + NPU activity, ``profile_memory=True`` (memory_record,
    operator_memory, npu_module_mem), no schedule (the whole ``with`` block is the one active step), the
    raw data written to ``out_dir`` for the launcher's parse (``analyse_flag=False`` where supported)."""
    import torch_npu

    prof = torch_npu.profiler
    out_dir.mkdir(parents=True, exist_ok=True)
    return prof.profile(
        activities=[prof.ProfilerActivity.CPU, prof.ProfilerActivity.NPU],
        on_trace_ready=npu_trace_handler(prof, out_dir, rank),
        profile_memory=True,
        record_shapes=False,
        experimental_config=_npu_level1(prof),
    )


def npu_trace_handler(npu_profiler: Any, out_dir: Path, rank: int) -> Any:
    """torch_npu's ``tensorboard_trace_handler`` that only exports the raw data (``analyse_flag=False``).

    By default it runs the msprof parse synchronously inside ``prof.step()``, before the step's
    collectives, so faster ranks wait in HCCL for the slowest parser; ``parse_npu_profile`` parses
    after the process group is gone. A torch_npu without ``analyse_flag`` keeps its in-step parse.
    """
    import inspect

    handler = npu_profiler.tensorboard_trace_handler
    if "analyse_flag" not in inspect.signature(handler).parameters:
        log.warning(
            "this torch_npu's tensorboard_trace_handler has no analyse_flag: the profile is parsed "
            "inside the profiled step (upgrade torch_npu to parse after the run)"
        )
        return handler(str(out_dir), worker_name=f"rank{rank}")
    return handler(str(out_dir), worker_name=f"rank{rank}", analyse_flag=False)


PARSE_NPU_PROFILE = "--parse-npu-profile"
"""``python -m fsdpbench.run.worker --parse-npu-profile DIR...``: the launcher's parse step (``parse_npu_profile``
per rank folder), run with the arm's interpreter after torchrun has exited."""


def parse_npu_profile(out_dir: Path) -> None:
    """Parse one rank's raw torch_npu profile into ``*_ascend_pt/ASCEND_PROFILER_OUTPUT`` (needs CANN's
    ``msprof`` on PATH). Run after the launch's workers exit (``PARSE_NPU_PROFILE``), outside its timeout.
    torch_npu swallows parse errors: the launcher checks the outputs."""
    from torch_npu.profiler.profiler import analyse

    analyse(str(out_dir))
