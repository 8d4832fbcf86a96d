"""Orchestration: one fresh ``torchrun`` per arm-round, interleaved, into one results folder.

Plays pyperf's ``Manager``: every command line is built explicitly from the config, the environment
passed to the ranks is recorded, a launch that runs past ``--timeout`` has its whole process group
killed, and a launch without all its step records is a failure. After every launch ``summary.json`` is
rewritten, so a crash or Ctrl-C leaves a summary of what exists; ``--resume`` runs what is missing.
Torch-free (the ranks import torch, not this process).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from fsdpbench.config import RunConfig
from fsdpbench.errors import ConfigError, FsdpbenchError, InputError, LaunchError
from fsdpbench.report.console import print_summary
from fsdpbench.results import run_folder
from fsdpbench.run import collect, failures, summarize
from fsdpbench.run import rounds as rounds_rule
from fsdpbench.run.ascend_parse import npu_profile_path_problem, parse_launch_profiles
from fsdpbench.run.interpreters import arm_interpreter, interpreter_environment, probe_arms
from fsdpbench.run.plan import (
    PLAN_FINGERPRINT_IGNORES,
    extend_plan,
    free_port,
    interleaved_order,
    launch_plan,
    plan_fingerprint,
    plan_ports,
    rendezvous_address,
    torchrun_command,
    verdict_plan,
)
from fsdpbench.run.process_exit import kill_process_group

log = logging.getLogger(__name__)

POLL_S = 0.2


# --------------------------------------------------------------------------------------------
# the ranks' environment (the plan itself: run/plan.py)
# --------------------------------------------------------------------------------------------


RECORDED_ENV_PREFIXES = (
    "OMP_",
    "MKL_",
    "NCCL_",
    "HCCL_",
    "ASCEND_",
    "CUDA_",
    "PYTORCH_",
    "TORCH_",
    "HYPER_PARALLEL_",
    "FSDPBENCH_",
    "TASK_QUEUE_",
    "CPU_AFFINITY",
    "DS_",
)
"""Environment variables that change how the ranks run; the manifest records their values."""


def worker_environment(cfg: RunConfig | None = None) -> dict[str, str]:
    """The environment given to the ranks: ours, with one thread per rank unless set, and unbuffered.

    With a deepspeed arm, ``TORCH_EXTENSIONS_DIR`` (where DeepSpeed JIT-builds its ops) defaults to
    ``<out>/.cache/torch_extensions``: out of the user's home, reused by later runs into the same ``--out``.
    """
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    env["PYTHONUNBUFFERED"] = "1"
    if cfg is not None and any(a.backend == "deepspeed" for a in cfg.arms):
        env.setdefault("TORCH_EXTENSIONS_DIR", str((Path(cfg.out) / ".cache" / "torch_extensions").resolve()))
    return env


def recorded_environment(cfg: RunConfig | None = None) -> dict[str, str]:
    """The performance-relevant part of ``worker_environment()`` (for the manifest): the prefixes above
    and the NPU/GPU variables of ``device.behaviour_environment``."""
    from fsdpbench.device import behaviour_environment

    env = worker_environment(cfg)
    return dict(
        sorted(
            {
                **{k: v for k, v in env.items() if k.startswith(RECORDED_ENV_PREFIXES)},
                **behaviour_environment(env),
            }.items()
        )
    )


# --------------------------------------------------------------------------------------------
# the run
# --------------------------------------------------------------------------------------------


class _Progress:
    """Live line per launch (arm, round, step, last step time), tailing steps.jsonl."""

    def __init__(self, console: Any, total: int) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[last]}"),
            console=console,
            transient=False,
        )
        self.overall = self.progress.add_task("launches", total=total, last="")
        self.task: Any = None

    def __enter__(self) -> _Progress:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.progress.__exit__(*exc)

    def add(self, launches: int) -> None:
        """Count ``launches`` more (``--rounds auto`` added a round)."""
        if launches:
            self.progress.update(self.overall, total=self.progress.tasks[self.overall].total + launches)

    def start(self, label: str, steps: int) -> None:
        self.task = self.progress.add_task(label, total=steps, last="starting ranks…")

    def step(self, record: dict[str, Any]) -> None:
        self.progress.update(
            self.task,
            completed=record["step"] + 1,
            last=f"step {record['step']} ({record['kind']}): {record['time_ms']:.1f} ms",
        )

    def finish(self, ok: bool, wall_s: float) -> None:
        self.progress.update(self.task, last=f"{'done' if ok else 'FAILED'} in {wall_s:.1f} s")
        self.progress.advance(self.overall)


class _StepTail:
    """Reads the step records appended to steps.jsonl since the last call."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = path.stat().st_size if path.exists() else 0

    def new(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = f.read()
        end = data.rfind(b"\n") + 1
        self.offset += end
        return run_folder.parse_jsonl(data[:end])[0]


class Run:
    """State of one results folder while it is being filled."""

    def __init__(self, cfg: RunConfig, run_dir: Path, manifest: dict[str, Any], console: Any) -> None:
        self.cfg, self.run_dir, self.manifest, self.console = cfg, run_dir, manifest, console
        self.plan = launch_plan(manifest["order"], [a.label for a in cfg.arms], cfg.separate_launches)

    # ---- bookkeeping
    def done(self) -> set[tuple[str, int]]:
        return {
            (i["arm"], i["round"])
            for i in self.manifest["order"]
            if run_folder.launch_ok(self.run_dir, i["arm"], i["round"])
        }

    def flops_per_token(self) -> float | None:
        return (self.manifest.get("environment") or {}).get("flops_per_token")

    def write_manifest(self) -> None:
        run_folder.write_json(self.run_dir / run_folder.MANIFEST, self.manifest)

    def write_summary(self) -> dict[str, Any]:
        summary = summarize.summarize_run(
            self.manifest,
            run_folder.read_step_records(self.run_dir),
            done=self.done(),
            flops_per_token=self.flops_per_token(),
        )
        from fsdpbench.analysis import derived  # the analysis side (pandas): only when used

        for arm, timeline in derived.memory_timelines(self.run_dir, list(summary.arms)).items():
            summary.arms[arm].memory_timeline = timeline
        summary.write(self.run_dir / run_folder.SUMMARY)
        return summary.to_dict()

    def next_auto_round(self, console: Any, summary: dict[str, Any]) -> list[tuple[str, int]]:
        """``--rounds auto``, after a complete round (``summary``: the one just written, not written again): the
        launches of one more interleaved round, added to the plan and the manifest, or none (the decision is then
        the manifest's ``rounds_auto``)."""
        launches = self.manifest.get("launches") or []
        rounds = self.cfg.rounds
        decision = rounds_rule.check(
            summary["comparisons"],
            parity_valid=bool((summary.get("parity") or {}).get("valid", True)),
            rounds=rounds,
            ci_target_pct=self.cfg.ci_target,
            max_rounds=self.cfg.max_rounds,
            elapsed_s=sum(float(x["wall_s"]) for x in launches),
            round_s=sum(
                float(x["wall_s"])
                for x in {(x["arm"], x["round"]): x for x in launches if x["round"] == rounds - 1}.values()
            ),
            max_time_s=self.cfg.max_time,
        )
        console.print(f"--rounds auto: {decision.why}")
        if decision.stopped:
            self.manifest["rounds_auto"] = decision.to_dict()
            self.write_manifest()
            return []
        labels = [a.label for a in self.cfg.arms]
        added = [
            i
            for i in interleaved_order(labels, rounds + 1, self.cfg.order, self.cfg.seed)
            if i["round"] == rounds
        ]
        self.cfg.rounds = rounds + 1
        self.manifest["config"]["rounds"] = rounds + 1
        self.manifest["order"].extend(added)
        self.manifest["rounds_auto"] = decision.to_dict()
        self.plan = launch_plan(self.manifest["order"], labels, self.cfg.separate_launches)
        self.write_manifest()
        return [(i["arm"], i["round"]) for i in added]

    def profiled(self, round_: int) -> bool:
        """Whether this launch profiles its arm: a separate profile launch (``PROFILE_ROUND``), or the
        first round, after its timed steps (``--rounds auto`` does not know the last round in advance, and
        a run stopped early still has its profiles)."""
        if round_ == run_folder.PROFILE_ROUND:
            return True
        return self.cfg.profile and not self.cfg.separate_profile and round_ == run_folder.PROFILED_ROUND

    # ---- one launch
    def launch(self, arm: str, round_: int, progress: _Progress | None) -> None:
        """Run one torchrun launch (a timed round, or ``run_folder.PROFILE_ROUND``) to completion; raise
        ``LaunchError`` if it fails (status.json says why)."""
        profile = self.profiled(round_)
        ldir = run_folder.launch_dir(self.run_dir, arm, round_)
        if ldir.exists():  # an earlier, failed attempt: keep it aside, never overwrite
            ldir.rename(ldir.with_name(f"{ldir.name}.failed_{datetime.now():%Y%m%d_%H%M%S_%f}"))
        ldir.mkdir(parents=True)
        run_folder.drop_steps(self.run_dir, arm, round_, keep_to=ldir / "discarded_steps.jsonl")
        if profile and run_folder.set_aside_profiles(self.run_dir, arm, ldir / "discarded_profiles"):
            self.manifest.get("profiles", {}).pop(arm, None)
        spec = {
            "config": self.cfg.to_dict(),
            "arm": arm,
            "round": round_,
            "run_dir": str(self.run_dir.resolve()),
            "launch_dir": str(ldir.resolve()),
            "profile": profile,
        }
        spec_path = ldir / run_folder.LAUNCH_SPEC
        run_folder.write_json(spec_path, spec)
        arm_cfg = next(a for a in self.cfg.arms if a.label == arm)
        cmd = torchrun_command(
            self.cfg, spec_path, ldir / "logs", self._ports(arm, round_)[0], python=arm_interpreter(arm_cfg)
        )
        if round_ == run_folder.PROFILE_ROUND:
            expected = self.cfg.profile_step + self.cfg.profile_steps
        else:
            after = run_folder.PROFILE_AFTER_TIMED + self.cfg.profile_steps - 1 if profile else 0
            expected = self.cfg.warmup + self.cfg.steps + after
        started = datetime.now().isoformat(timespec="seconds")
        tail = _StepTail(self.run_dir / run_folder.STEPS)
        if progress:
            progress.start(
                f"{arm} {'profile' if round_ == run_folder.PROFILE_ROUND else f'round {round_}'}"
                + (" + profile" if profile and round_ != run_folder.PROFILE_ROUND else ""),
                expected,
            )
        t0 = time.monotonic()
        spawned = time.time()
        error: str | None = None
        rc: int | None = None
        seen = 0
        with open(ldir / run_folder.LAUNCH_LOG, "wb") as out:
            env = interpreter_environment(arm_cfg, worker_environment(self.cfg))
            proc = subprocess.Popen(
                cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
            try:
                while rc is None:
                    try:
                        rc = proc.wait(timeout=POLL_S)
                    except subprocess.TimeoutExpired:
                        pass
                    for rec in tail.new():
                        if rec.get("arm") == arm and rec.get("round") == round_:
                            seen += 1
                            if progress:
                                progress.step(rec)
                    if rc is None and time.monotonic() - t0 > self.cfg.timeout:
                        kill_process_group(proc)
                        rc = proc.returncode
                        error = (
                            f"timed out after {self.cfg.timeout:g} s (a rank hung or is too slow); the whole "
                            f"process group was killed — raise --timeout if the run is just slow"
                        )
            except BaseException:
                kill_process_group(proc)
                rc = proc.returncode
                self._write_status(ldir, arm, round_, rc, started, t0, "interrupted")
                raise
        exited = time.time()
        seen += sum(1 for r in tail.new() if r.get("arm") == arm and r.get("round") == round_)
        timed_out = error is not None
        if error is None and rc != 0:
            error = failures.explain(ldir, rc, node=self.cfg.node_rank, nodes=self.cfg.nnodes > 1)
        if error is None and seen < expected and self.cfg.node_rank == 0:
            error = f"only {seen} of {expected} step records were written (is node 0's rank 0 on this host?)"
        if profile and error is None and self._device_type(ldir) == "npu" and self._local_profiled_ranks():
            # after torchrun has exited and outside --timeout: msprof's parse takes minutes per rank
            # with the memory step's own torch_npu profile (worker.record_memory_step), whose failed parse
            # leaves the arm's memory_timeline an error, not the launch
            error = parse_launch_profiles(
                arm_interpreter(arm_cfg),
                run_folder.profile_dir(self.run_dir, arm),
                run_folder.memory_step_npu_dir(self.run_dir, arm, 0).parent,
                self._local_profiled_ranks(),
                env,
                ldir,
                self.cfg.ascend_parse_timeout,
            )
        decided: dict[str, Any] | None = None
        if self.cfg.nnodes > 1 and profile and error is None and not self.cfg.collect_traces:
            self._analyze_local_ranks(arm)  # their compact results travel instead of the traces
        if self.cfg.nnodes > 1:  # node 0 gets every node's files and decides; the others follow
            error, decided = self._collect(arm, round_, ldir, rc, error, timed_out)
        failure = self._record_failure(arm, round_, ldir, error, decided)
        stamps = run_folder.read_json_if_readable(ldir / run_folder.LAUNCH_TIMING)
        parts = run_folder.launch_parts(
            stamps if isinstance(stamps, dict) else None, spawned, exited, time.time()
        )
        self._write_status(ldir, arm, round_, rc, started, t0, error, failure, parts)
        if progress:
            progress.finish(error is None, time.monotonic() - t0)
        env_path = ldir / run_folder.LAUNCH_ENVIRONMENT
        if env_path.exists():
            facts = run_folder.read_json_file(env_path)
            runtime = facts.pop("arm_runtime", None)
            if runtime:  # what this arm ran with: dtypes after the device default, optimizer path
                self.manifest.setdefault("arm_runtime", {})[arm] = runtime
            if not self.manifest.get("environment"):
                self.manifest["environment"] = facts
            elif facts.get("hyper_parallel"):  # the first launch may have been a torch arm
                self.manifest["environment"]["hyper_parallel"] = facts["hyper_parallel"]
            if facts.get("backend"):  # each arm's own backend facts (e.g. DeepSpeed's resolved config)
                self.manifest.setdefault("backends", {})[arm] = facts["backend"]
        self.manifest["launches"].append(
            {
                "arm": arm,
                "round": round_,
                "kind": run_folder.launch_kind(round_),
                "rc": rc,
                "wall_s": round(time.monotonic() - t0, 3),
                "parts_s": parts,
            }
        )
        if profile and error is None:
            self.manifest.setdefault("profiles", {})[arm] = f"{run_folder.PROFILES}/{arm}"
        self.write_manifest()
        if error is not None:
            where = "profile launch" if round_ == run_folder.PROFILE_ROUND else f"round {round_}"
            raise LaunchError(f"arm {arm!r} {where}: {error}; logs in {ldir}")

    def _ports(self, arm: str, round_: int) -> tuple[int | None, int | None]:
        """This launch's (torchrun, collect step) ports from the plan; (None, None) on one node."""
        if not (self.cfg.nnodes > 1 or self.cfg.rdzv_endpoint):
            return None, None
        return plan_ports(rendezvous_address(self.cfg)[1], self.plan, arm, round_)

    def _device_type(self, ldir: Path) -> str:
        node_env = run_folder.LAUNCH_NODE_ENVIRONMENT.format(node=self.cfg.node_rank)
        facts = (
            run_folder.read_json_if_readable(ldir / node_env)
            or run_folder.read_json_if_readable(ldir / run_folder.LAUNCH_ENVIRONMENT)
            or self.manifest.get("environment")
            or {}
        )
        return facts.get("device_type") or self.cfg.device

    def _analyze_local_ranks(self, arm: str) -> None:
        """Several nodes, after a profiled launch (and the Ascend parse): the per-rank part of the analysis
        of this node's ranks, each rank's compact result written beside its trace
        (``analyze --ranks-only``), so that the collect step sends those and the traces stay here. A rank
        that cannot be analysed gets none, and its trace is sent as before."""
        profiles = run_folder.profile_dir(self.run_dir, arm)
        folders = [profiles / f"rank{r}" for r in self._local_ranks() if (profiles / f"rank{r}").is_dir()]
        if not folders:
            return
        from fsdpbench.analysis.ranks_only import (
            analyze_ranks,  # the analysis side: only on a profiled launch
        )

        t0 = time.monotonic()
        try:
            written = analyze_ranks(folders)
        except FsdpbenchError as exc:
            log.warning(
                "node %d: its ranks were not analysed (%s); their traces are sent", self.cfg.node_rank, exc
            )
            return
        for w in written:
            if w.error:
                log.warning("rank %d: not analysed on its node (%s); its trace is sent", w.rank, w.error)
        log.info(
            "node %d: %d rank(s) analysed in %.1f s; compact results %d bytes for %d bytes of traces",
            self.cfg.node_rank,
            sum(1 for w in written if not w.error),
            time.monotonic() - t0,
            sum(w.result_bytes or 0 for w in written),
            sum(w.trace_bytes or 0 for w in written),
        )

    def _local_ranks(self) -> range:
        first = self.cfg.node_rank * self.cfg.nproc
        return range(first, first + self.cfg.nproc)

    def _local_profiled_ranks(self) -> list[int]:
        """This node's ranks that ``--profile-ranks`` profiles (the only ones with a profile to parse)."""
        profiled = set(self.cfg.profiled_ranks)
        return [r for r in self._local_ranks() if r in profiled]

    def _write_status(
        self,
        ldir: Path,
        arm: str,
        round_: int,
        rc: int | None,
        started: str,
        t0: float,
        error: str | None,
        failure: dict[str, Any] | None = None,
        parts: dict[str, float] | None = None,
    ) -> None:
        run_folder.write_json(
            ldir / run_folder.STATUS,
            {
                "arm": arm,
                "round": round_,
                "kind": run_folder.launch_kind(round_),
                "rc": rc,
                "started": started,
                "ended": datetime.now().isoformat(timespec="seconds"),
                "wall_s": time.monotonic() - t0,
                "error": error,
                "failure": failure,
                "parts_s": parts,
            },
        )

    # ---- failures and the other nodes
    def _record_failure(
        self, arm: str, round_: int, ldir: Path, error: str | None, decided: dict[str, Any] | None = None
    ) -> dict[str, Any] | None:
        """The failed ranks, first cause first (``failures.failure_record``; node 0's ``decided`` one on
        several nodes), kept in the manifest's ``failures`` for summary.json; None when it succeeded."""
        if error is None:
            return None
        failure = (
            decided
            or failures.failure_record(ldir, self.cfg.node_rank)
            or {"first_cause": None, "consequences": []}
        )
        self.manifest.setdefault("failures", []).append(
            {"arm": arm, "round": round_, "kind": run_folder.launch_kind(round_), "error": error, **failure}
        )
        return failure

    def _collect_step(self, folder: Path, spec: dict[str, Any], port: int | None) -> dict[str, Any] | str:
        return collect_step(self.cfg, folder, spec, port)

    def _collect(
        self, arm: str, round_: int, ldir: Path, rc: int | None, error: str | None, timed_out: bool
    ) -> tuple[str | None, dict[str, Any] | None]:
        """After a launch on several nodes: send this node's files of it to node 0 (node 0: receive every
        other node's) and return node 0's verdict on the launch and its failure record (``collect.py``)."""
        node = self.cfg.node_rank
        profile = self.profiled(round_)
        spec = {
            "op": "launch",
            "node": node,
            "run_dir": str(self.run_dir.resolve()),
            "launch_dir": str(ldir.resolve()),
            "files": []
            if node == 0
            else collect.files_to_send(self.run_dir, ldir, node, self._local_ranks(), arm, profile),
            "left_in_place": []
            if node == 0
            else collect.raw_profile_files(self.run_dir, self._local_ranks(), arm, profile),
            "max_bytes": collect.max_bytes(),
            "report": {"node": node, "rc": rc, "error": error, "timed_out": timed_out},
            "fingerprint": plan_fingerprint(self.manifest),
            "result": str((ldir / collect.COLLECT_RESULT).resolve()),
            "timeout": self.cfg.timeout,
        }
        result = self._collect_step(ldir / collect.COLLECT_DIR, spec, self._ports(arm, round_)[1])
        if isinstance(result, str):
            return (f"{error}; {result}" if error else result), None
        if node == 0:
            self._record_collected(arm, round_, result)
        return result["error"], result.get("failure")

    def _record_collected(self, arm: str, round_: int, result: dict[str, Any]) -> None:
        """Node 0: what each node sent for this launch (and left in place), for summary.json."""
        kept = [c for c in self.manifest.get("collected", []) if (c["arm"], c["round"]) != (arm, round_)]
        for node, sent in sorted(result.get("nodes", {}).items()):
            files = sent.get("files") or []
            kept.append(
                {
                    "arm": arm,
                    "round": round_,
                    "node": int(node),
                    "host": sent.get("host"),
                    "files": sum(1 for f in files if f.get("ok")),
                    "bytes": sum(f["bytes"] for f in files if f.get("ok")),
                    "failed_check": [f["path"] for f in files if not f.get("ok")],
                    "left_in_place": sent.get("left_in_place") or [],
                }
            )
        self.manifest["collected"] = kept

    def agree_on_todo(self, todo: list[tuple[str, int]]) -> list[tuple[str, int]]:
        """Several nodes: node 0's to-do list, sent to every node (which checks that it runs the same
        plan); raises ``LaunchError`` when the nodes disagree or cannot meet."""
        folder = self.run_dir / run_folder.LAUNCHES / collect.PLAN_DIR
        agreed = node0_decides(self.cfg, folder, plan_fingerprint(self.manifest), [list(t) for t in todo])
        return [(arm, int(round_)) for arm, round_ in agreed]


def npu_profile_paths(cfg: RunConfig, run_dir: Path | None) -> None:
    """Refuse (one line) a profiled run on NPU whose profile folders torch_npu's profiler would refuse."""
    from fsdpbench.device import npu_installed

    if not cfg.profile or not (cfg.device == "npu" or (cfg.device == "auto" and npu_installed())):
        return
    problem = npu_profile_path_problem(cfg.out, cfg.name, [a.label for a in cfg.arms], run_dir)
    if problem:
        raise ConfigError(problem)


def collect_step(
    cfg: RunConfig, folder: Path, spec: dict[str, Any], port: int | None
) -> dict[str, Any] | str:
    """Run ``fsdpbench.run.collect`` with ``spec`` under torchrun (one process per node) in ``folder``; the
    result every node got from node 0, or why there is none."""
    folder.mkdir(parents=True, exist_ok=True)
    spec_path = run_folder.write_json(folder / run_folder.LAUNCH_SPEC, spec)
    cmd = torchrun_command(cfg, spec_path, folder / "logs", port, module="fsdpbench.run.collect", nproc=1)
    rc, timed_out = _run_to_end(cmd, folder / run_folder.LAUNCH_LOG, worker_environment(cfg), cfg.timeout)
    result = run_folder.read_json_if_readable(spec["result"])
    if isinstance(result, dict):
        return result
    why = f"timed out after {cfg.timeout:g} s" if timed_out else failures.explain(folder, rc)
    return f"the collect step with the other nodes failed ({why}; its log: {folder / run_folder.LAUNCH_LOG})"


def node0_decides(cfg: RunConfig, folder: Path, fingerprint: str, todo: list[Any]) -> list[Any]:
    """The plan step (``collect.py``'s ``plan`` op, on the base port): every node sends ``fingerprint``;
    node 0 checks they agree and sends its ``todo`` (any JSON list), which every node returns. Raises
    ``LaunchError`` when the nodes' fingerprints differ or they cannot meet. ``folder`` holds the step's
    spec, logs and result on this node."""
    spec = {
        "op": "plan",
        "node": cfg.node_rank,
        "fingerprint": fingerprint,
        "todo": todo,
        "result": str((folder / collect.COLLECT_RESULT).resolve()),
        "timeout": cfg.timeout,
    }
    (folder / collect.COLLECT_RESULT).unlink(missing_ok=True)
    result = collect_step(cfg, folder, spec, rendezvous_address(cfg)[1])
    if isinstance(result, str):
        raise LaunchError(f"node {cfg.node_rank} could not get the plan from node 0: {result}")
    if result["error"]:
        raise LaunchError(result["error"])
    return list(result["todo"])


def _run_to_end(
    cmd: list[str], log_path: Path, env: dict[str, str], timeout: float
) -> tuple[int | None, bool]:
    """Run ``cmd`` in its own process group, output to ``log_path``; kill the group after ``timeout``
    seconds. Returns (exit code, timed out)."""
    with open(log_path, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            return proc.wait(timeout=timeout), False
        except subprocess.TimeoutExpired:
            kill_process_group(proc)
            return proc.returncode, True
        except BaseException:
            kill_process_group(proc)
            raise


def _environment_stub(cfg: RunConfig) -> dict[str, Any]:
    return {"world_size": cfg.world_size, "nnodes": cfg.nnodes, "nproc_per_node": cfg.nproc}


def run_ab(
    cfg: RunConfig,
    *,
    resume: Path | None = None,
    console: Any = None,
    command: list[str] | None = None,
    max_rounds: int | None = None,
) -> Path:
    """Run every arm-round of ``cfg`` (interleaved) and the profiling launches; return the run folder.

    Args:
        cfg: the resolved run configuration (ignored when ``resume`` is given: the folder's is used).
        resume: an existing run folder; only its missing arm-rounds (and profiles) are run.
        console: a ``rich.console.Console`` for progress and tables (a new one on stderr when None).
        command: the command line to record in the manifest (``sys.argv`` when None).
        max_rounds: with ``resume`` of a ``--rounds auto`` run, its new ``--max-rounds`` (``extend_plan``).
    Raises:
        LaunchError: a launch failed or timed out (the folder keeps everything done so far).
    """
    from rich.console import Console

    console = console or Console(stderr=True)
    if resume is not None:
        run_dir = Path(resume)
        manifest = run_folder.read_json_file(run_dir / run_folder.MANIFEST)
        if not isinstance(manifest, dict) or not isinstance(manifest.get("config"), dict):
            raise InputError(
                f"{run_dir / run_folder.MANIFEST}: no 'config'; is this an fsdpbench run folder?"
            )
        if "separate_profile" not in manifest["config"]:
            manifest["config"]["separate_profile"] = True  # a run from before profiles rode in round 0
        cfg = RunConfig.from_dict(manifest["config"], str(run_dir / run_folder.MANIFEST), "$.config")
        if max_rounds is not None:
            extend_plan(manifest, cfg, max_rounds, console)
    npu_profile_paths(cfg, resume)
    if resume is None:
        interpreters = probe_arms(
            cfg.arms, worker_environment(cfg)
        )  # refuse a bad interpreter before launching
        run_dir = run_folder.create_run_dir(cfg.out, cfg.name)
        manifest = {
            "schema_version": run_folder.SCHEMA_VERSION,
            "name": cfg.name,
            "created": datetime.now().isoformat(timespec="seconds"),
            "command": list(command if command is not None else ["fsdpbench", *sys.argv[1:]]),
            "config": cfg.to_dict(),
            "arms": [a.options() for a in cfg.arms],
            "order": interleaved_order([a.label for a in cfg.arms], cfg.rounds, cfg.order, cfg.seed),
            "environment": None,
            "environment_variables": recorded_environment(cfg),
            "interpreters": interpreters,
            "launches": [],
            "profiles": {},
            "profiled_ranks": cfg.profiled_ranks if cfg.profile else [],
        }
        if cfg.rounds_auto:
            manifest["verdict_plan"] = verdict_plan(cfg)
        run_folder.write_json(run_dir / run_folder.MANIFEST, manifest)
    run = Run(cfg, run_dir, manifest, console)
    done = run.done()
    todo: list[tuple[str, int]] = [
        (i["arm"], i["round"]) for i in manifest["order"] if (i["arm"], i["round"]) not in done
    ]
    if cfg.separate_launches:
        todo += [
            (a.label, run_folder.PROFILE_ROUND)
            for a in cfg.arms
            if not run_folder.launch_ok(run_dir, a.label, run_folder.PROFILE_ROUND)
        ]
    console.print(
        f"[bold]fsdpbench[/] {cfg.name}: {len(cfg.arms)} arm(s) × {cfg.rounds} round(s), "
        f"{cfg.world_size} rank(s), preset {cfg.preset}, {cfg.model.num_hidden_layers} layers, "
        f"seq {cfg.seq_len} → {run_dir}"
    )
    try:
        if cfg.nnodes > 1:  # node 0 decides what runs (fresh or resumed); the others follow its list
            todo = run.agree_on_todo(todo)
        if resume is not None:
            console.print(f"resuming: {len(todo)} launch(es) left")
        if cfg.rounds_auto and not todo and not (manifest.get("rounds_auto") or {}).get("stopped"):
            todo = run.next_auto_round(console, run.write_summary())  # the run ended before deciding
        with _Progress(console, len(todo)) as progress:
            while todo:
                for arm, round_ in todo:
                    run.launch(arm, round_, progress)
                    summary = run.write_summary()  # once per launch: the decision below reads it
                todo = run.next_auto_round(console, summary) if cfg.rounds_auto else []
                progress.add(len(todo))
    finally:
        if not manifest.get("environment"):
            manifest["environment"] = _environment_stub(cfg)
            run.write_manifest()
        summary = run.write_summary()
    print_summary(console, summary)
    return run_dir


def write_report_safely(run_dir: Path, console: Any) -> None:
    """Write the run's report; a failure there is a warning, never a lost run."""
    from fsdpbench.report import write_report

    node = (
        (run_folder.read_json_if_readable(Path(run_dir) / run_folder.MANIFEST) or {}).get("config") or {}
    ).get("node_rank")
    if node:  # its folder holds only its own ranks' files; node 0's holds every rank's
        console.print(
            f"node {node}: no report here; node 0's run folder has every rank's results and the report"
        )
        return
    try:
        write_report(run_dir)
    except Exception as exc:  # noqa: BLE001 - the run's results are already on disk
        console.print(
            f"[yellow]warning: the report could not be written ({type(exc).__name__}: {exc}); "
            f"the results in {run_dir} are complete — retry with fsdpbench report {run_dir}[/]"
        )


__all__ = [
    "PLAN_FINGERPRINT_IGNORES",
    "extend_plan",
    "free_port",
    "interleaved_order",
    "launch_plan",
    "plan_fingerprint",
    "plan_ports",
    "rendezvous_address",
    "run_ab",
    "torchrun_command",
    "verdict_plan",
    "write_report_safely",
]
