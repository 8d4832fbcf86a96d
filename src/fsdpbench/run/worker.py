"""What each rank runs under torchrun: build → shard → load weights → warmup → timed steps → [profiled
steps and the memory step].

``python -m fsdpbench.run.worker SPEC.json`` — the launcher writes the spec (the resolved run config,
the arm label, the round (``run_folder.PROFILE_ROUND`` for a separate profile launch), whether it
profiles, and the folders). Rank 0 writes ``timing.json`` (its stage stamps) at the end and appends one record per step to
``steps.jsonl`` (the slowest rank's time via all_reduce MAX). Any rank that fails writes
``error_rank<k>.json`` in the launch folder so the launcher can say what went wrong.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gc
import logging
import math
import os
import signal
import sys
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

import fsdpbench.device as dev
from fsdpbench.backends import Backend, get_backend
from fsdpbench.config import Arm, RunConfig
from fsdpbench.errors import ConfigError
from fsdpbench.results import run_folder
from fsdpbench.results.phases import MARKED_PHASES
from fsdpbench.run import memory
from fsdpbench.run.delays import UnitDelays
from fsdpbench.run.environment import arm_runtime, environment_facts
from fsdpbench.run.phase_marks import PhaseMarks
from fsdpbench.run.process_exit import exit_without_teardown
from fsdpbench.run.profile_marks import ProfileMarks, decoder_units, restore_collectives, wrap_collectives
from fsdpbench.run.profiling import PARSE_NPU_PROFILE, make_profiler, npu_memory_profiler, parse_npu_profile
from fsdpbench.run.tokens import rank_batch

log = logging.getLogger("fsdpbench.run.worker")

FAULT_ENV = "FSDPBENCH_FAULT"
"""Test hook: ``KIND:ARM:ROUND:RANK:STEP`` with KIND crash, hang or oom injects that failure."""

COLLECTIVES = {
    "all_gather_single": "all_gather",
    "all_gather_into_tensor": "all_gather",
    "_all_gather_base": "all_gather",
    "all_gather": "all_gather",
    "all_gather_coalesced": "all_gather",
    "reduce_scatter_single": "reduce_scatter",
    "reduce_scatter_tensor": "reduce_scatter",
    "_reduce_scatter_base": "reduce_scatter",
    "reduce_scatter": "reduce_scatter",
    "all_reduce": "all_reduce",
    "all_reduce_coalesced": "all_reduce",
    "reduce": "reduce",
    "broadcast": "broadcast",
    "all_to_all_single": "all_to_all",
    "all_to_all": "all_to_all",
    "gather": "gather",
    "scatter": "scatter",
    "barrier": "barrier",
}
"""c10d functions counted by ``--count-collectives``: every spelling that some torch ≥ 2.6 has (the
``*_single`` functions are new; older torch implements ``all_gather_into_tensor`` itself and
``_all_gather_base`` forwards to it). Those missing from the installed torch are skipped; a wrapper
that calls another wrapped spelling counts once (``CollectiveCounter``)."""


# --------------------------------------------------------------------------------------------
# building blocks (also used by tests and benchmarks/harness_overhead.py)
# --------------------------------------------------------------------------------------------


def apply_activation_checkpointing(model: torch.nn.Module) -> None:
    """Checkpoint every decoder layer (non-reentrant), keeping module and parameter names unchanged.

    Done before sharding and identically for every backend: the layer's ``forward`` is wrapped, so
    the FSDP hooks on the layer's ``__call__`` stay outside the recomputed region.
    """
    from torch.utils.checkpoint import checkpoint

    for layer in model.model.layers:
        inner = layer.forward

        @functools.wraps(inner)
        def forward(*args: Any, _inner: Any = inner, **kwargs: Any) -> Any:
            return checkpoint(_inner, *args, use_reentrant=False, **kwargs)

        layer.forward = forward


def build_sharded_model(
    cfg: RunConfig, arm: Arm, backend: Backend, mesh: Any, device: torch.device
) -> torch.nn.Module:
    """Build on meta, checkpoint (ac=full), shard with ``backend``, materialise on ``device`` and fill
    each rank's shards with their initial values, computing only those elements (the same values for
    every arm, mesh and world size: ``model.init``)."""
    from fsdpbench.model import InitialValues, build_model

    model = build_model(cfg.model, device="meta")
    values = InitialValues(
        {name: tuple(p.shape) for name, p in model.named_parameters()}, cfg.seed, cfg.model.initializer_range
    )
    if arm.ac == "full":
        apply_activation_checkpointing(model)
    model = backend.apply(model, mesh, arm)
    model = backend.materialize(model, device)
    backend.load_params(model, values)
    return model


def make_optimizer(cfg: RunConfig, params: list[torch.nn.Parameter]) -> torch.optim.Optimizer:
    """SGD (no momentum: exact parity checks) or AdamW, with ``cfg.lr`` and ``foreach`` passed explicitly.

    Left unset, PyTorch chooses per parameter type and device (``_default_to_fused_or_foreach``): the
    batched kernels for plain tensors on CUDA/NPU, the per-parameter loop on CPU and for parameter types
    outside ``torch.optim.optimizer._foreach_supported_types`` (hyper_parallel's DTensor), so arms would
    differ. ``cfg.optimizer_impl`` fixes one implementation for every arm.
    """
    foreach = cfg.optimizer_impl == "foreach"
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(params, lr=cfg.lr, foreach=foreach)
    return torch.optim.AdamW(params, lr=cfg.lr, foreach=foreach)


OPTIMIZER_KERNELS: dict[str, tuple[str, ...]] = {
    "torch.optim.sgd": ("_single_tensor_sgd", "_multi_tensor_sgd", "_fused_sgd"),
    "torch.optim.adam": ("_single_tensor_adam", "_multi_tensor_adam", "_fused_adam"),
    "torch.optim.adamw": ("_single_tensor_adamw", "_multi_tensor_adamw", "_fused_adamw"),
}
"""The functions through which ``torch.optim.sgd``/``adam``/``adamw`` run one step: per parameter,
foreach (multi-tensor) or fused. ``optimizer_path`` reads which one ran (names missing from a torch are
skipped)."""
OPTIMIZER_PATH_NAMES = {"single": "per-parameter", "multi": "foreach", "fused": "fused"}


@contextlib.contextmanager
def optimizer_path(seen: set[str]) -> Any:
    """Within the block, add to ``seen`` the implementation (``per-parameter``, ``foreach``, ``fused``) of
    every torch.optim step that runs: what actually ran, whichever library wraps the optimizer."""
    import importlib

    saved: list[tuple[Any, str, Any]] = []
    for module_name, names in OPTIMIZER_KERNELS.items():
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        for name in names:
            orig = getattr(module, name, None)
            if orig is None:
                continue
            kind = OPTIMIZER_PATH_NAMES[name.split("_")[1]]

            def wrapped(*args: Any, _orig: Any = orig, _kind: str = kind, **kwargs: Any) -> Any:
                seen.add(_kind)
                return _orig(*args, **kwargs)

            saved.append((module, name, orig))
            setattr(module, name, wrapped)
    try:
        yield seen
    finally:
        for module, name, orig in reversed(saved):
            setattr(module, name, orig)


class CollectiveCounter:
    """Counts c10d collectives by type by wrapping ``torch.distributed`` and its c10d module.

    Each outermost call counts once: a per-thread depth skips the inner spelling when one wrapped
    function forwards to another (``all_gather_into_tensor`` → ``all_gather_single`` on torch 2.13,
    ``_all_gather_base`` → ``all_gather_into_tensor`` on torch 2.6).
    """

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self._saved: list[tuple[Any, str, Any]] = []
        self._local = threading.local()

    def install(self) -> None:
        self._saved += wrap_collectives(COLLECTIVES, self._wrap)

    def _wrap(self, orig: Any, kind: str) -> Any:
        local = self._local

        @functools.wraps(orig)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            depth = getattr(local, "depth", 0)
            if depth == 0:
                self.counts[kind] += 1
            local.depth = depth + 1
            try:
                return orig(*args, **kwargs)
            finally:
                local.depth = depth

        return wrapped

    def take(self) -> dict[str, int]:
        """The counts since the last call, then reset."""
        out = dict(self.counts)
        self.counts.clear()
        return out

    def uninstall(self) -> None:
        restore_collectives(self._saved)


@dataclasses.dataclass(frozen=True, slots=True)
class StepOutcome:
    """What ``StepRunner.train`` hands to ``StepRunner.record``."""

    elapsed_ms: float
    loss: torch.Tensor
    collectives: dict[str, int] | None
    phases_ms: dict[str, float] | None = None
    """This rank's forward, backward and optimizer times (``PhaseMarks.read``); None when not recorded."""


@dataclasses.dataclass
class StepRunner:
    """One launch's training loop body on this rank: ``train(i)`` trains on batch i, ``record(i, ...)``
    does fsdpbench's bookkeeping for it (``run_steps`` keeps the latter out of the profiled step)."""

    cfg: RunConfig
    arm: Arm
    backend: Backend
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    device_type: str
    device: torch.device
    rank: int
    world: int
    replicas: int
    """Size of the HSDP replicate axis (1 for FSDP): grads are counted once per replica group."""
    round_: int
    """The launch's round; ``run_folder.PROFILE_ROUND`` for the profile launch."""
    steps_path: Path
    counter: CollectiveCounter | None = None
    spec: dict[str, Any] | None = None
    """The launch spec, for the ``FSDPBENCH_FAULT`` test hook (None: no faults)."""
    clock: Callable[[], float] = time.perf_counter
    """Seconds, read just after the device sync before and after each step (tests pass a fake one)."""
    phase_times: bool = True
    """Mark the phase boundaries of every step (docs/phases.md); off only to measure their cost."""
    phase_clock: Callable[[], float] = time.perf_counter
    """The host clock of the phase marks on CPU (tests pass a fake one)."""
    profile_marks: ProfileMarks | None = None
    """The named unit, phase and collective ranges of the profiled step (``run_steps`` installs them)."""
    delays: UnitDelays | None = None
    """The arm's ``delay=`` sleeps on this rank, hooked for the whole launch (``run``); the root's backward
    one is called from ``train``."""

    def __post_init__(self) -> None:
        self.params = list(self.model.parameters())
        self.marks = PhaseMarks(self.device_type, self.phase_clock) if self.phase_times else None
        self.reduce_dtype = torch.float32 if self.device_type == "npu" else torch.float64
        self._next: tuple[int, torch.Tensor] | None = None
        self.optimizer_ran: list[str] | None = None
        """The torch.optim implementations the first step ran (``optimizer_path``), sorted."""

    def batch(self, step: int) -> torch.Tensor:
        cfg = self.cfg
        return rank_batch(
            cfg.seed,
            step,
            rank=self.rank,
            world_size=self.world,
            batch_size=cfg.batch_size,
            seq_len=cfg.seq_len,
            vocab_size=cfg.model.vocab_size,
        ).to(self.device)

    def step(self, step: int) -> dict[str, Any] | None:
        """``train`` then ``record``: one step without a profiler (rank 0 gets the record, others None)."""
        return self.record(step, self.train(step))

    def train(self, step: int, ranges: ProfileMarks | None = None) -> StepOutcome:
        """Train one step (forward, backward, optimizer step), timed between device syncs.

        Only this is the profiled work: the batch was prepared by the previous ``record`` and the
        bookkeeping (metric all-reduces, grad norm, host reads) waits for ``record``. The phase
        boundaries are marked inside (``PhaseMarks``: events on the compute stream, no added sync) and
        read after the closing sync.
        """
        ids = self._next[1] if self._next is not None and self._next[0] == step else self.batch(step)
        self._next = None
        self.optimizer.zero_grad(set_to_none=True)
        dev.reset_peak_memory(self.device_type)
        if self.counter:
            self.counter.take()
        dev.synchronize(self.device_type)
        t0 = self.clock()
        if self.spec:
            _inject_fault(self.spec, self.rank, step)
        marks = self.marks
        if marks:
            marks.mark(0)
        loss = self.model(ids, labels=ids).loss
        if marks:
            marks.mark(1)
        with ranges.backward() if ranges else contextlib.nullcontext():
            if self.delays:
                self.delays.root_backward()
            self.backend.backward(loss)
        if marks:
            marks.mark(2)
        if self.optimizer_ran is None:  # the first step (never a timed or profiled one) says what ran
            with optimizer_path(set()) as seen:
                self.backend.optimizer_step(self.optimizer)
            self.optimizer_ran = sorted(seen)
        else:
            with ranges.optimizer() if ranges else contextlib.nullcontext():
                self.backend.optimizer_step(self.optimizer)
        if marks:
            marks.mark(3)
        dev.synchronize(self.device_type)
        elapsed_ms = (self.clock() - t0) * 1e3
        counts = self.counter.take() if self.counter else None
        phases = marks.read() if marks else None
        return StepOutcome(elapsed_ms=elapsed_ms, loss=loss, collectives=counts, phases_ms=phases)

    def record(self, step: int, outcome: StepOutcome) -> dict[str, Any] | None:
        """fsdpbench's bookkeeping after ``train``; rank 0 gets the record (appended to steps.jsonl).

        The slowest rank's time and memory (all_reduce MAX); every rank's float32 loss and squared
        grad-norm share, all-gathered and summed on the host in float64 (``math.fsum``: correctly
        rounded, independent of the rank order, unlike a float32 all-reduce); every rank's own step time
        and phase times (all-gathered); the next step's batch, so that its copy stays out of
        the next ``train``. Last, a barrier aligns the ranks, so the next step's clock starts when the
        slowest rank's bookkeeping is done (rank 0 writes the record) and no rank starts early; it runs
        before the profiler's step boundary (``run_steps``), so it never enters a profiled step (with
        ``--profile-steps`` K > 1 it enters each recorded step but the last: ``run_steps``).
        """
        alloc, reserved = dev.peak_memory(self.device_type)
        rss = dev.peak_rss_bytes()
        rd = self.reduce_dtype
        maxes = torch.tensor(
            [outcome.elapsed_ms, alloc or 0, reserved or 0, rss or 0], dtype=rd, device=self.device
        )
        mine = torch.stack(
            [
                outcome.loss.detach().float().reshape(()),
                self.backend.local_grad_sq(self.params).to(self.device, torch.float32).reshape(()),
            ]
        )
        every = torch.empty(self.world * 2, dtype=torch.float32, device=self.device)
        dist.all_reduce(maxes, op=dist.ReduceOp.MAX)  # the slowest rank's time and memory
        (getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor)(every, mine)
        split = None
        if outcome.phases_ms is not None:  # [own step time, forward, backward, optimizer] of every rank
            own = [outcome.elapsed_ms, *(outcome.phases_ms[p] for p in MARKED_PHASES)]
            split = torch.empty(self.world * len(own), dtype=rd, device=self.device)
            (getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor)(
                split, torch.tensor(own, dtype=rd, device=self.device)
            )
            split = split.view(self.world, len(own))
        self._next = (step + 1, self.batch(step + 1))
        record = None
        if self.rank == 0:
            record = self._write_record(
                step, outcome, maxes.tolist(), every.view(self.world, 2), alloc, reserved, rss, split
            )
        dist.barrier()
        return record

    def _write_record(
        self,
        step: int,
        outcome: StepOutcome,
        m: list[float],
        every: torch.Tensor,
        alloc: int | None,
        reserved: int | None,
        rss: int | None,
        split: torch.Tensor | None = None,
    ) -> dict[str, Any]:
        losses, grad_sq = every.cpu().double().unbind(1)
        if self.round_ == run_folder.PROFILE_ROUND or step >= self.cfg.warmup + self.cfg.steps:
            kind = "profile"  # a profile launch's steps, or those after a profiled round's timed steps
        else:
            kind = "warmup" if step < self.cfg.warmup else "timed"
        record = {
            "arm": self.arm.label,
            "round": self.round_,
            "step": step,
            "kind": kind,
            "time_ms": m[0],
            "loss": math.fsum(losses.tolist()) / self.world,
            "grad_norm": (math.fsum(grad_sq.tolist()) / self.replicas) ** 0.5,
            "tokens": self.world * self.cfg.batch_size * self.cfg.seq_len,
            "mem_allocated_bytes": int(m[1]) if alloc is not None else None,
            "mem_reserved_bytes": int(m[2]) if reserved is not None else None,
            "mem_peak_rss_bytes": int(m[3]) if rss is not None else None,
            "mem_peak_rss_since": dev.peak_rss_since(),
            "world_size": self.world,
        }
        if outcome.collectives is not None:
            record["collectives"] = outcome.collectives
        if split is not None:
            record.update(phase_fields(split.cpu().double().tolist(), self.marks.clock_kind))  # type: ignore[union-attr]
        run_folder.append_step(self.steps_path, record)
        log.info(
            "%s round %s step %d: %.1f ms loss %.6f", self.arm.label, self.round_, step, m[0], record["loss"]
        )
        return record


def phase_fields(per_rank: list[list[float]], clock_kind: str) -> dict[str, Any]:
    """steps.jsonl's ``rank_time_ms``, ``phases_ms`` and ``phase_clock`` from ``[step, forward, backward,
    optimizer]`` ms per rank: the remainder is each rank's step time minus its three marked phases."""
    phases: dict[str, list[float]] = {
        p: [row[i + 1] for row in per_rank] for i, p in enumerate(MARKED_PHASES)
    }
    phases["remainder"] = [row[0] - math.fsum(row[1:]) for row in per_rank]
    return {"rank_time_ms": [row[0] for row in per_rank], "phases_ms": phases, "phase_clock": clock_kind}


def run_steps(
    runner: StepRunner,
    n_steps: int,
    prof: Any = None,
    profile_step: int | None = None,
    *,
    first: int = 0,
    profile_steps: int = 1,
) -> dict[int, float]:
    """Steps ``first`` .. ``n_steps - 1`` of ``runner``; with a profiler, ``ProfilerStep#k`` holds
    ``train(k)`` (``k`` counted from the profiler's start) and, for every profiled step but the last of
    several, ``record(k)``.

    The profiled steps are ``P`` = ``profile_step`` .. ``profile_step + profile_steps - 1``. The profiler's
    step span runs from one ``prof.step()`` to the next, and the schedule stops the recording at the
    ``prof.step()`` that ends the last recorded step. So ``prof.step()`` follows the bookkeeping on every
    step except the last profiled one, where it comes right after ``train``: the recorded window opens
    after ``record(P0-1)`` and closes before ``record(P_last)``. With one profiled step (the default) it
    holds only ``train(P)``; with several, each but the last also holds its own bookkeeping (the spans are
    contiguous: it must fall in one of them, and there the steps' windows are alike). The runner's
    ``profile_marks`` are installed around each ``train(P)`` (also when ``prof`` is None: a rank that
    ``--profile-ranks`` leaves out trains the profiled steps as the profiled ranks do, without the
    profiler). Returns each step's end (``time.time()``, after its bookkeeping), for the launch's timing.
    """
    ended: dict[int, float] = {}
    profiled = range(profile_step, profile_step + profile_steps) if profile_step is not None else range(0)
    last = profiled[-1] if profiled else None
    for step in range(first, n_steps):
        # an unprofiled rank (``--profile-ranks``) runs the profiled steps with the same ranges, without ``prof``
        ranges = runner.profile_marks if step in profiled else None
        if ranges is None:
            outcome = runner.train(step)
        else:  # the named ranges exist in the profiled steps only
            ranges.delay = profile_delay(runner.spec, runner.rank)
            ranges.install(COLLECTIVES)
            try:
                outcome = runner.train(step, ranges)
            finally:
                ranges.uninstall()
        if prof is not None and step == last:
            prof.step()
        runner.record(step, outcome)
        if prof is not None and step != last:
            prof.step()
        ended[step] = time.time()
    return ended


def live_at_start(runner: StepRunner) -> dict[str, int]:
    """Bytes of the tensors live before the memory step, by category (each storage once, in the first
    category that holds it): parameters (as stored: sharded where the backend shards them), gradients
    (none after ``zero_grad(set_to_none=True)``), optimizer states, the prepared batch."""
    params = list(runner.model.parameters())
    groups = {
        "parameters": params,
        "gradients": [p.grad for p in params],
        "optimizer_states": [
            v
            for state in (getattr(runner.optimizer, "state", None) or {}).values()
            if isinstance(state, dict)
            for v in state.values()
            if isinstance(v, torch.Tensor) and v.dim() > 0
        ],
        "batch": [runner._next[1]] if runner._next is not None else [],
    }
    seen: set[int] = set()
    out: dict[str, int] = {}
    for name, tensors in groups.items():
        fresh = []
        for t in tensors:
            if t is None:
                continue
            local = t.to_local() if hasattr(t, "to_local") else t
            if local.untyped_storage().data_ptr() not in seen:
                seen.add(local.untyped_storage().data_ptr())
                fresh.append(local)
        out[name] = memory.storage_bytes(fresh)
    return out


def record_memory_step(runner: StepRunner, step: int, run_dir: Path, profiled: bool = True) -> None:
    """One more step after the profiled one, recorded with ``profile_memory=True`` and fsdpbench's ranges
    (docs/memory.md): its Chrome trace and the bytes live at its start go to ``run_folder.memory_step_files``;
    on npu torch_npu's profile goes to ``run_folder.memory_step_npu_dir`` instead of the Chrome trace. Not timed, not in steps.jsonl; the gradients are freed before it, so no tensor live at its start is
    freed inside it (the CPU events cannot see those frees). A rank that ``--profile-ranks`` leaves out
    (``profiled`` False) trains the step unrecorded and writes nothing: the other ranks' collectives need it."""
    from torch.profiler import ProfilerActivity, profile

    runner.optimizer.zero_grad(set_to_none=True)
    if not profiled:
        runner.train(step)
        return
    live = live_at_start(runner)
    trace, live_path = run_folder.memory_step_files(run_dir, runner.arm.label, runner.rank)
    trace.parent.mkdir(parents=True, exist_ok=True)
    marks = ProfileMarks(runner.model, decoder_units(runner.model))
    marks.install(COLLECTIVES)
    try:
        if runner.device_type == "npu":
            # torch_npu's profiler: memory_record/operator_memory + the ranges in trace_view.json, raw here,
            # parsed by the launcher after torchrun exits (run_folder.memory_step_npu_dir)
            npu_dir = run_folder.memory_step_npu_dir(run_dir, runner.arm.label, runner.rank)
            with npu_memory_profiler(npu_dir, runner.rank):
                runner.train(step, marks)
        else:
            with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
                runner.train(step, marks)
    finally:
        marks.uninstall()
    if runner.device_type == "npu":
        run_folder.write_json(live_path, {"live_at_start_bytes": live, "device_type": "npu", "step": step})
        return
    prof.export_chrome_trace(str(trace))
    device_type = 1 if runner.device_type == "cuda" else memory.CPU_DEVICE_TYPE  # Kineto's Device Type
    run_folder.write_json(live_path, {"live_at_start_bytes": live, "device_type": device_type, "step": step})


# --------------------------------------------------------------------------------------------
# the run
# --------------------------------------------------------------------------------------------


def _inject_fault(spec: dict[str, Any], rank: int, step: int) -> None:
    fault = os.environ.get(FAULT_ENV)
    if not fault:
        return
    if fault.startswith("delay:"):
        return  # the profiled step's delay: profile_delay
    kind, arm, round_, f_rank, f_step = fault.split(":")
    if (arm, int(round_), int(f_rank), int(f_step)) != (spec["arm"], spec["round"], rank, step):
        return
    if kind == "hang":
        log.warning("injected hang at step %d", step)
        while True:
            time.sleep(1)
    if kind == "oom":
        raise torch.OutOfMemoryError("injected: out of memory (FSDPBENCH_FAULT)")
    if kind == "kill":  # dies like an OOM-killed or crashed process: no error file, no exception
        log.warning("injected SIGKILL at step %d", step)
        os.kill(os.getpid(), signal.SIGKILL)
    raise RuntimeError(f"injected crash at step {step} ({FAULT_ENV})")


def profile_delay(spec: dict[str, Any] | None, rank: int) -> tuple[str, str, float] | None:
    """The debug delay ``FSDPBENCH_FAULT=delay:ARM:ROUND:RANK:UNIT:PHASE:MS`` for this launch and rank:
    (unit, phase, seconds), or None. It sleeps this rank at the start of ``UNIT``'s ``PHASE`` (``forward``
    or ``backward``) range in the profiled step (docs/attribution.md); a test hook, never an arm option."""
    fault = os.environ.get(FAULT_ENV, "")
    if not fault.startswith("delay:") or spec is None:
        return None
    parts = fault.split(":")
    if len(parts) != 7 or parts[5] not in ("forward", "backward"):
        raise ConfigError(
            f"{FAULT_ENV}={fault!r}: a delay is delay:ARM:ROUND:RANK:UNIT:PHASE:MS with PHASE forward or backward"
        )
    _, arm, round_, f_rank, unit, phase, ms = parts
    try:
        round_n, rank_n, seconds = int(round_), int(f_rank), float(ms) / 1000.0
    except ValueError:
        raise ConfigError(f"{FAULT_ENV}={fault!r}: ROUND and RANK must be integers, MS a number") from None
    if (arm, round_n, rank_n) != (spec["arm"], spec["round"], rank):
        return None
    return unit, phase, seconds


def run(spec: dict[str, Any]) -> None:
    """One launch on this rank (see the module docstring)."""
    rank, world, local_rank = (
        int(os.environ["RANK"]),
        int(os.environ["WORLD_SIZE"]),
        int(os.environ["LOCAL_RANK"]),
    )
    stamps: dict[str, float] = {"entered": time.time()}
    cfg = RunConfig.from_dict(
        spec["config"], str(Path(spec["launch_dir"]) / run_folder.LAUNCH_SPEC), "$.config"
    )
    arm = next(a for a in cfg.arms if a.label == spec["arm"])
    round_ = spec["round"]
    profile_launch = round_ == run_folder.PROFILE_ROUND
    # profiled: a profile launch of its own, or a timed round that profiles after its timed steps
    profile = profile_launch or bool(spec.get("profile"))
    run_dir, launch_dir = Path(spec["run_dir"]), Path(spec["launch_dir"])
    profile_dir = run_folder.profile_dir(run_dir, arm.label) / f"rank{rank}"

    device_type = dev.resolve_device_type(cfg.device)
    device = dev.set_device(device_type, local_rank)
    # bfloat16 parameters by default on NPU/GPU (RunConfig.param_dtype_for); the label stays the arm's
    arm = dataclasses.replace(arm, param_dtype=cfg.param_dtype_for(arm, device_type))
    backend = get_backend(arm.backend)
    backend.setup(device_type)
    backend.init_process_group(device_type, timedelta(seconds=max(60.0, cfg.timeout)))
    try:
        mesh_shape = arm.mesh_shape(world)
        mesh = backend.init_mesh(device_type, mesh_shape)
        replicas = mesh_shape[0] if len(mesh_shape) == 2 else 1
        stamps["process_group"] = time.time()
        model = build_sharded_model(cfg, arm, backend, mesh, device)
        model, optimizer = backend.make_training(model, functools.partial(make_optimizer, cfg))
        facts: dict[str, Any] = {}
        if local_rank == 0:  # every node records its own environment; rank 0's goes to the manifest
            from fsdpbench.model import flops_per_token

            facts = environment_facts(device_type, backend, world)
            facts["flops_per_token"] = float(flops_per_token(cfg.model, cfg.seq_len))
            facts["arm_runtime"] = arm_runtime(cfg, arm, device_type, optimizer, device)
            node = int(os.environ.get("GROUP_RANK", 0))
            run_folder.write_json(launch_dir / run_folder.LAUNCH_NODE_ENVIRONMENT.format(node=node), facts)
            if rank == 0:
                run_folder.write_json(launch_dir / run_folder.LAUNCH_ENVIRONMENT, facts)

        counter = CollectiveCounter() if cfg.count_collectives else None
        if counter:
            counter.install()
        # the arm's delay= sleeps: hooked before any step, so every timed and profiled step has them
        delays = UnitDelays(arm.delays(), rank)
        if delays:
            delays.install(model, decoder_units(model))
            log.info("delay on this rank: %s", ", ".join(d.spec() for d in delays.delays))
        runner = StepRunner(
            cfg=cfg,
            arm=arm,
            backend=backend,
            model=model,
            optimizer=optimizer,
            device_type=device_type,
            device=device,
            rank=rank,
            world=world,
            replicas=replicas,
            round_=round_,
            steps_path=run_dir / run_folder.STEPS,
            counter=counter,
            spec=spec,
            profile_marks=ProfileMarks(model, decoder_units(model))
            if profile and cfg.profile_ranges
            else None,
            delays=delays or None,
        )
        n_timed = 0 if profile_launch else cfg.warmup + cfg.steps
        gc.collect()
        stamps["model"] = time.time()
        gc.disable()  # no collector pauses inside timed steps (torchtitan does the same)
        ended = run_steps(runner, n_timed)
        stamps["warmup"] = ended.get(cfg.warmup - 1, stamps["model"])
        stamps["timed"] = ended.get(n_timed - 1, stamps["warmup"])
        if cfg.dump_params:  # the parameters after the timed steps, before any profiled step trains further
            full = backend.full_state_dict(model)
            if rank == 0:
                torch.save(full, launch_dir / "final_params.pt")
            del full
        # --profile-ranks: the launch's other ranks train the profiled and memory steps without a profiler
        profiled_here = profile and rank in cfg.profiled_ranks
        if profile:
            # after the timed steps, which ran without a profiler (docs/methodology.md); a profile launch of
            # its own records from step profile_step, a profiled round from the second step after its timed
            # ones; --profile-steps K records K consecutive steps from there
            profile_at = cfg.profile_step if profile_launch else n_timed + run_folder.PROFILE_AFTER_TIMED - 1
            k = cfg.profile_steps
            if profiled_here:
                with make_profiler(device_type, profile_dir, rank, profile_at - n_timed, k) as prof:
                    run_steps(runner, profile_at + k, prof, profile_at, first=n_timed, profile_steps=k)
            else:
                run_steps(runner, profile_at + k, None, profile_at, first=n_timed, profile_steps=k)
        verified = backend.verify_prefetch()  # raises when a patch of the library changed the chains
        if profile:  # on npu: a torch_npu profile of its own (docs/memory.md)
            record_memory_step(runner, profile_at + cfg.profile_steps, run_dir, profiled=profiled_here)
        stamps["profile"] = time.time()
        gc.enable()
        if local_rank == 0:
            facts["arm_runtime"]["optimizer_ran"] = runner.optimizer_ran
            facts["arm_runtime"][run_folder.PREFETCH_VERIFIED] = verified
            run_folder.write_json(launch_dir / run_folder.LAUNCH_NODE_ENVIRONMENT.format(node=node), facts)
            if rank == 0:
                run_folder.write_json(launch_dir / run_folder.LAUNCH_ENVIRONMENT, facts)
        if counter:
            counter.uninstall()
        delays.remove()
        dist.barrier()
    finally:
        try:
            backend.close()
        finally:
            dist.destroy_process_group()
    if rank == 0:  # where this launch's time went (the launcher adds the start and the teardown)
        run_folder.write_json(launch_dir / run_folder.LAUNCH_TIMING, {**stamps, "closed": time.time()})
    # an NPU profile is parsed by the launcher after torchrun exits (``parse_npu_profile``)


def _write_error(launch_dir: Path, rank: int, exc: BaseException) -> None:
    try:
        oom = dev.is_out_of_memory(exc)
    except Exception:  # noqa: BLE001 - never mask the original error
        oom = False
    run_folder.write_json(
        launch_dir / run_folder.LAUNCH_ERROR.format(rank=rank),
        {
            "rank": rank,
            "type": type(exc).__name__,
            "message": str(exc).strip().splitlines()[0][:500] if str(exc).strip() else "",
            "oom": oom,
            "time": time.time(),
            "traceback": traceback.format_exc()[-4000:],
        },
    )


def main(argv: list[str] | None = None) -> int:
    """Entry point under torchrun: ``python -m fsdpbench.run.worker SPEC.json``."""
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == PARSE_NPU_PROFILE:  # run by the launcher after torchrun exits
        logging.basicConfig(level=logging.INFO)
        for folder in argv[1:]:
            parse_npu_profile(Path(folder))
        return 0
    spec = run_folder.read_json_file(argv[0])
    rank = int(os.environ.get("RANK", 0))
    logging.basicConfig(level=logging.INFO, format=f"[rank{rank}] %(levelname)s %(name)s: %(message)s")
    try:
        run(spec)
    except BaseException as exc:
        _write_error(Path(spec["launch_dir"]), rank, exc)
        raise
    return 0


if __name__ == "__main__":
    # an exception still propagates from main, so torchrun records it as before
    exit_without_teardown(main())
