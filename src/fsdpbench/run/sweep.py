"""Sweeps: a grid of ``ab`` runs from one TOML file, in one results tree, resumable.

A sweep file has three parts (configs/study.toml is a full example)::

    [sweep]                 # name = the tree's folder under `out`
    name = "study"
    out = "results"

    [base]                  # any option of an `fsdpbench ab --config` file, shared by every cell
    preset = "full"
    nproc = 8
    [base.model]            # model field overrides, as in an ab config
    num_experts = 256

    [grid]                  # default axes for every experiment (optional)
    arms = "torch,hyper"

    [[experiment]]          # one or more; axes are a value or a list of values
    name = "16k-4l"
    seq_len = [8192, 16384] # axes: seq_len, layers, prefetch, mesh, arms
    layers = 4
    rounds = 3              # any other ab option applies to this experiment's cells only

The cells are, experiment by experiment, the product seq_len × layers × prefetch × mesh × arms.
``arms`` is one arm set (a comma string ``"torch,hyper:prefetch=2"`` or a list of specs) or a list of
arm sets (a list of lists or of comma strings). ``prefetch`` and ``mesh`` apply to every arm of the
cell (an arm spec's own ``:prefetch=`` wins).

The tree holds ``sweep.json`` (the cells, their configuration and state; rewritten after every
cell), one ``<cell>_<timestamp>/`` run folder per cell, and ``index.md`` / ``index.html``.
Rerunning skips cells whose run is complete and resumes partial ones (``run_ab(..., resume=dir)``).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import itertools
import logging
import os
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from fsdpbench.config import RunConfig, read_toml
from fsdpbench.errors import ConfigError, FsdpbenchError, InputError, LaunchError
from fsdpbench.results import run_folder
from fsdpbench.results.cells import cell_settings

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
AXES = ("seq_len", "layers", "prefetch", "mesh", "arms")
STATE_FILE = run_folder.SWEEP_STATE
# fields of a cell's resolved config that may differ between reruns without changing what it measures
VOLATILE = ("out", "master_port", "report", "timeout")


@dataclasses.dataclass
class Cell:
    """One point of the grid: an ``ab`` run."""

    name: str
    experiment: str
    params: dict[str, Any]
    """The axis values of this cell (``arms`` as a comma string)."""
    config: RunConfig
    run_dir: Path | None = None
    status: str = "pending"
    """``pending`` (never started), ``running``, ``partial`` (started, not complete), ``done`` or ``failed``."""
    error: str | None = None
    wall_s: float | None = None
    node0_action: str | None = None
    """Several nodes: what node 0 decided for this cell (``NODE0_ACTIONS``); ``None`` on one node."""

    def record(self, tree: Path) -> dict[str, Any]:
        return {
            "name": self.name,
            "experiment": self.experiment,
            "params": self.params,
            "run_dir": os.path.relpath(self.run_dir, tree) if self.run_dir else None,
            "status": self.status,
            "error": self.error,
            "wall_s": self.wall_s,
            "node0_action": self.node0_action,
            "config": comparable_config(self.config),
        }


@dataclasses.dataclass
class Sweep:
    """A parsed sweep file: its name, results tree and cells."""

    name: str
    tree: Path
    cells: list[Cell]
    source: str


def comparable_config(cfg: RunConfig) -> dict[str, Any]:
    """The resolved config without fields that do not change what a cell measures."""
    return {k: v for k, v in cfg.to_dict().items() if k not in VOLATILE}


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else [value]


def _arm_sets(value: Any, where: str) -> list[str | None]:
    """Normalise the ``arms`` axis to a list of comma strings (``None`` = the default arms)."""
    if value is None:
        return [None]
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        # a list of specs is one arm set, unless every item is itself a comma list of several arms
        if len(value) > 1 and all("," in v for v in value):
            return list(value)
        return [",".join(value)]
    if isinstance(value, list) and all(isinstance(v, list | str) for v in value):
        # any nested list makes every item an arm set (a list of specs or one comma string)
        return [",".join(map(str, v)) if isinstance(v, list) else v for v in value]
    raise ConfigError(
        f"{where}: arms must be a string, a list of arm specs, or a list of such lists; got {value!r}"
    )


def _cell_name(exp: str, values: dict[str, Any], varying: set[str], arm_index: int) -> str:
    """The experiment's name, plus the value of each axis that varies within the experiment."""
    parts = [exp]
    for key, short in (("seq_len", "s"), ("layers", "l"), ("prefetch", "p"), ("mesh", "m")):
        if key in varying:
            parts.append(f"{short}{values[key] if values[key] not in (None, '') else 'default'}")
    if "arms" in varying:
        parts.append(f"arms{arm_index}")
    return "-".join(str(p) for p in parts)


def expand(
    spec: dict[str, Any], source: str = "sweep file"
) -> tuple[str, dict[str, Any], list[tuple[str, str, dict[str, Any], dict[str, Any]]]]:
    """Expand a parsed sweep file into cells, without building configs.

    Returns:
        (name, sweep table, [(cell name, experiment name, axis values, ab options for the cell)]).
    """
    unknown = set(spec) - {"sweep", "base", "grid", "experiment"}
    if unknown:
        raise ConfigError(
            f"{source}: unknown table(s) {sorted(unknown)}; use [sweep], [base], [grid], [[experiment]]"
        )
    sweep = dict(spec.get("sweep") or {})
    if set(sweep) - {"name", "out"}:
        raise ConfigError(f"{source}: [sweep] takes name and out, not {sorted(set(sweep) - {'name', 'out'})}")
    name = str(sweep.get("name") or Path(source).stem)
    if not re.fullmatch(r"[A-Za-z0-9._-]+", name):
        raise ConfigError(f"{source}: [sweep] name {name!r} may hold only letters, digits, '.', '_' and '-'")
    base = dict(spec.get("base") or {})
    # an axis given in [base] is a default for every experiment, like one in [grid]
    grid = {**{k: base.pop(k) for k in AXES if k in base}, **dict(spec.get("grid") or {})}
    bad_axes = set(grid) - set(AXES)
    if bad_axes:
        raise ConfigError(
            f"{source}: [grid] has {sorted(bad_axes)}, which are not axes; axes are {', '.join(AXES)}"
        )
    experiments = spec.get("experiment") or [{"name": "grid"}]
    if not isinstance(experiments, list):
        raise ConfigError(f"{source}: experiments are written [[experiment]] (an array of tables)")
    cells: list[tuple[str, str, dict[str, Any], dict[str, Any]]] = []
    seen: dict[str, str] = {}
    for i, exp in enumerate(experiments):
        exp = dict(exp)
        exp_name = str(exp.pop("name", f"exp{i}"))
        if not re.fullmatch(r"[A-Za-z0-9._-]+", exp_name):
            raise ConfigError(
                f"{source}: experiment name {exp_name!r} may hold only letters, digits, '.', '_', '-'"
            )
        axes = {**grid, **{k: v for k, v in exp.items() if k in AXES}}
        options = {**base, **{k: v for k, v in exp.items() if k not in AXES}}
        model = {**(base.get("model") or {}), **(exp.get("model") or {})}
        options.pop("model", None)
        if model:
            options["model"] = model
        # shared arm options may sit in an [arm] table, as in an ab config file
        options.pop("arm", None)
        options.update({**(base.get("arm") or {}), **(exp.get("arm") or {})})
        arm_sets = _arm_sets(axes.get("arms"), f"{source} experiment {exp_name!r}")
        lists = [_as_list(axes.get(k)) for k in ("seq_len", "layers", "prefetch", "mesh")]
        empty = [k for k, v in zip(("seq_len", "layers", "prefetch", "mesh"), lists, strict=True) if not v]
        if empty or not arm_sets:
            raise ConfigError(
                f"{source}: experiment {exp_name!r}: axis {(empty or ['arms'])[0]} is an empty list; "
                "give it at least one value or leave it out"
            )
        varying = {
            k for k, v in zip(("seq_len", "layers", "prefetch", "mesh"), lists, strict=True) if len(v) > 1
        }
        if len(arm_sets) > 1:
            varying.add("arms")
        for seq_len, layers, prefetch, mesh, (arm_i, arms) in itertools.product(*lists, enumerate(arm_sets)):
            values = {"seq_len": seq_len, "layers": layers, "prefetch": prefetch, "mesh": mesh, "arms": arms}
            cell = _cell_name(exp_name, values, varying, arm_i)
            if cell in seen:
                raise ConfigError(
                    f"{source}: cell {cell!r} appears twice (experiments {seen[cell]!r} and {exp_name!r}); "
                    "give the experiments different names"
                )
            seen[cell] = exp_name
            cells.append((cell, exp_name, values, options))
    return name, sweep, cells


def load_sweep(path: str | Path, out: str | Path | None = None, node_rank: int | None = None) -> Sweep:
    """Parse and validate a sweep file; every cell's ``RunConfig`` is built now, so a bad cell fails
    before anything runs.

    Args:
        path: the sweep TOML file.
        out: the folder that holds the tree (overrides ``[sweep] out``; default ``results``).
        node_rank: this node's rank for every cell that runs on several nodes (``--node-rank``; the
            file's own ``node_rank`` otherwise), so that every node can run the same file.
    """
    source = str(path)
    spec = read_toml(source)
    name, sweep_table, raw_cells = expand(spec, source)
    tree = Path(out if out is not None else sweep_table.get("out", "results")) / name
    cells = []
    for cell_name, exp, values, options in raw_cells:
        overrides = {
            **options,
            **{k: v for k, v in values.items() if v is not None},
            "name": cell_name,
            "out": str(tree),
        }
        try:
            cfg = RunConfig.from_sources(None, env={}, overrides=overrides)
            if node_rank is not None and cfg.nnodes > 1:
                cfg = RunConfig.from_sources(None, env={}, overrides={**overrides, "node_rank": node_rank})
        except ConfigError as exc:
            raise ConfigError(f"{source}: cell {cell_name!r}: {exc}") from None
        params = {**values, "arms": ",".join(a.label for a in cfg.arms)}
        cells.append(Cell(name=cell_name, experiment=exp, params=params, config=cfg))
    return Sweep(name=name, tree=tree, cells=cells, source=source)


# --------------------------------------------------------------------------------------------
# State and resume
# --------------------------------------------------------------------------------------------


def find_run_dir(tree: Path, cell: str) -> Path | None:
    """The newest run folder of ``cell`` in ``tree`` (``<cell>_<YYYYmmdd_HHMMSS>``), if any."""
    pattern = re.compile(rf"^{re.escape(cell)}_\d{{8}}_\d{{6}}(_\d+)?$")
    found = sorted(p for p in tree.glob(f"{cell}_*") if p.is_dir() and pattern.match(p.name))
    return found[-1] if found else None


def run_status(run_dir: Path | None) -> str:
    """``done`` when the run's summary lists nothing missing, every arm is ok, every arm was profiled (when
    asked) and ``--rounds auto`` has stopped; ``partial`` when the folder exists otherwise; ``pending`` when
    there is no folder."""
    if run_dir is None or not run_dir.is_dir():
        return "pending"
    summary = run_folder.read_json_if_readable(run_dir / run_folder.SUMMARY)
    if summary is None:
        return "partial"
    arms = summary.get("arms") or {}
    arms_ok = all((a or {}).get("status", "ok") == "ok" for a in arms.values())
    if not arms or summary.get("missing") or not arms_ok:
        return "partial"
    manifest = run_folder.read_json_if_readable(run_dir / run_folder.MANIFEST)
    if manifest is None:
        return "partial"
    return "done" if _profiles_ok(manifest, list(arms)) and _rounds_decided(manifest) else "partial"


def _rounds_decided(manifest: dict[str, Any]) -> bool:
    """With ``--rounds auto``, the run must have stopped (manifest ``rounds_auto.stopped``): a run that
    ended between a round and its check is resumed, and the check may add rounds."""
    if not (manifest.get("config") or {}).get("rounds_auto"):
        return True
    return bool((manifest.get("rounds_auto") or {}).get("stopped"))


def _profiles_ok(manifest: dict[str, Any], arms: list[str]) -> bool:
    """When the run asked for profiles, every arm's profiling launch (round 0, or its own with
    ``--separate-profile``) must have succeeded: the launcher records its profile in the manifest then."""
    if not (manifest.get("config") or {}).get("profile"):
        return True
    profiles = manifest.get("profiles") or {}
    return all(profiles.get(arm) for arm in arms)


def read_state(tree: Path) -> dict[str, Any] | None:
    path = tree / STATE_FILE
    if not path.is_file():
        return None
    try:
        return run_folder.read_json_file(path)
    except InputError as exc:
        raise ConfigError(f"{exc}; move it away to start the sweep afresh") from None


def write_state(sweep: Sweep, command: list[str] | None = None) -> Path:
    """Rewrite ``sweep.json`` atomically."""
    payload = {
        "schema_version": SCHEMA_VERSION,
        "name": sweep.name,
        "source": sweep.source,
        "command": command or [],
        "updated": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "cells": [c.record(sweep.tree) for c in sweep.cells],
    }
    return run_folder.write_json(sweep.tree / STATE_FILE, payload)


_NONE = object()
_FIELD_DEFAULTS = {
    f.name: f.default for f in dataclasses.fields(RunConfig) if f.default is not dataclasses.MISSING
}
"""RunConfig's plain field defaults (what a sweep tree started before a field existed ran with)."""


def check_against_state(sweep: Sweep) -> None:
    """Refuse to resume a tree made from a different configuration of the same cell names."""
    state = read_state(sweep.tree)
    if not state:
        return
    recorded = {c.get("name"): c for c in state.get("cells") or []}
    for cell in sweep.cells:
        old = recorded.get(cell.name)
        if not old or old.get("config") is None:
            continue
        new = orjson.loads(orjson.dumps(comparable_config(cell.config)))
        # a field added since the tree was started (e.g. profile_ranks) that keeps its default changes nothing
        added = {k for k, v in new.items() if k not in old["config"] and v == _FIELD_DEFAULTS.get(k, _NONE)}
        changed = sorted(
            k for k in (set(new) | set(old["config"])) - added if new.get(k) != old["config"].get(k)
        )
        if changed:
            detail = ", ".join(f"{k}: {old['config'].get(k)!r} → {new.get(k)!r}" for k in changed[:4])
            raise ConfigError(
                f"{sweep.tree} holds cell {cell.name!r} run with a different configuration ({detail}); "
                "pass a new --out to start a separate sweep, or restore the original settings to resume it"
            )


# --------------------------------------------------------------------------------------------
# The driver
# --------------------------------------------------------------------------------------------

RunAb = Callable[..., Path]
NodeAgree = Callable[[RunConfig, Path, str, list[Any]], list[Any]]
"""``launcher.node0_decides``: (config, folder, fingerprint, this node's list) → node 0's list."""
SWEEP_PLAN_DIR = ".plan"
"""In each node's tree: the sweep's plan step (its spec, torchrun logs and node 0's list)."""
NODE0_ACTIONS = ("skip", "start", "resume")
"""What node 0 decides for a cell: done already (every node skips it), start afresh, or resume."""


def coordinating_config(cells: list[Cell]) -> RunConfig | None:
    """The config of the first cell that runs on several nodes (its rendezvous address, node rank and
    timeout serve the sweep's plan step); ``None`` when every cell runs on one node. Raises
    ``ConfigError`` when the multi-node cells differ in ``nnodes`` or ``node_rank``."""
    multi = [c for c in cells if c.config.nnodes > 1]
    if not multi:
        return None
    first = multi[0].config
    for cell in multi[1:]:
        if (cell.config.nnodes, cell.config.node_rank) != (first.nnodes, first.node_rank):
            raise ConfigError(
                f"cells {multi[0].name!r} (nnodes {first.nnodes}, node_rank {first.node_rank}) and "
                f"{cell.name!r} (nnodes {cell.config.nnodes}, node_rank {cell.config.node_rank}) differ; "
                "a sweep runs every multi-node cell on the same nodes: give nnodes once in [base] and "
                "this node's rank with --node-rank"
            )
    return first


def sweep_fingerprint(cells: list[Cell]) -> str:
    """A digest of the cells a sweep runs (names and configurations, without the options that may
    differ between nodes: ``launcher.PLAN_FINGERPRINT_IGNORES`` but the name), the same on every node."""
    import hashlib

    from fsdpbench.run.launcher import PLAN_FINGERPRINT_IGNORES

    ignored = set(PLAN_FINGERPRINT_IGNORES) - {"name"}
    payload = [[c.name, {k: v for k, v in c.config.to_dict().items() if k not in ignored}] for c in cells]
    return hashlib.sha256(orjson.dumps(payload, option=orjson.OPT_SORT_KEYS)).hexdigest()


def node0_plan(cells: list[Cell]) -> list[list[str]]:
    """``[[cell, action], ...]`` from this node's view of its cells (node 0's is the one that counts):
    ``skip`` a done cell, ``resume`` a partial or failed one that has a run folder, else ``start``."""
    return [
        [
            c.name,
            "skip"
            if c.status == "done"
            else "resume"
            if c.status in ("partial", "failed") and c.run_dir
            else "start",
        ]
        for c in cells
    ]


def agree_on_cells(
    sweep: Sweep, selected: list[Cell], coordinator: RunConfig, agree: NodeAgree | None
) -> dict[str, str]:
    """Several nodes: node 0's action for each selected cell, the same on every node (``agree``, the
    plan step of ``collect.py``, sends node 0's list to the others). A cell that runs on one node runs
    on node 0 only. Raises ``LaunchError`` when the nodes run different sweeps or cannot meet."""
    if agree is None:
        from fsdpbench.run.launcher import node0_decides as agree
    mine = node0_plan(selected)
    agreed = agree(coordinator, sweep.tree / SWEEP_PLAN_DIR, sweep_fingerprint(selected), mine)
    actions = {str(name): str(action) for name, action in agreed}
    if set(actions) != {c.name for c in selected} or not set(actions.values()) <= set(NODE0_ACTIONS):
        raise LaunchError(f"node 0 sent a cell list that is not this sweep's: {agreed!r}")
    for cell in selected:
        cell.node0_action = actions[cell.name]
        if coordinator.node_rank and cell.config.nnodes == 1:
            cell.node0_action = "skip"  # a one-node cell runs on node 0 only
    return actions


def run_sweep(
    sweep: Sweep,
    *,
    only: str | None = None,
    run_ab: RunAb | None = None,
    console: Any = None,
    command: list[str] | None = None,
    write_index: bool = True,
    agree: NodeAgree | None = None,
) -> list[Cell]:
    """Run every cell that is not complete: pending cells start, partial ones resume.

    A cell that fails is recorded (``status = failed`` with its error) and the sweep goes on; the
    index report is rewritten after every cell. Ctrl-C stops after recording the state.

    Cells on several nodes (docs/multi-node.md): node 0 decides which cells run and how (``skip``,
    ``start``, ``resume``) and the other nodes follow its list, never their own folders' state (which
    hold no steps); there a cell is ``done`` when its ``run_ab`` returned (node 0 holds its results).

    Args:
        sweep: from ``load_sweep``.
        only: a glob over cell names; other cells are left as they are.
        run_ab: the launcher's ``run_ab`` (injectable for tests).
        console: a rich Console for progress (passed on to ``run_ab``); ``None`` logs instead.
        command: the command line, recorded in ``sweep.json``.
        write_index: rewrite index.md/index.html after each cell (node 0 only on several nodes).
        agree: ``launcher.node0_decides`` (injectable for tests), used when a cell has ``nnodes > 1``.

    Returns:
        The cells, with their final status.
    """
    if run_ab is None:
        from fsdpbench.run.launcher import run_ab as _run_ab

        run_ab = _run_ab
    check_against_state(sweep)
    for cell in sweep.cells:
        cell.run_dir = find_run_dir(sweep.tree, cell.name)
        cell.status = run_status(cell.run_dir)
    _restore_errors(sweep)
    write_state(sweep, command)
    selected = [c for c in sweep.cells if only is None or fnmatch.fnmatchcase(c.name, only)]
    if only is not None and not selected:
        raise ConfigError(f"--only {only!r} matches no cell; cells: {', '.join(c.name for c in sweep.cells)}")
    coordinator = coordinating_config(selected)
    node = coordinator.node_rank if coordinator is not None else 0
    if coordinator is not None:
        agree_on_cells(sweep, selected, coordinator, agree)
        write_state(sweep, command)
    write_index = write_index and node == 0  # a follower's tree holds no steps: node 0's index is the one

    def say(message: str) -> None:
        if console is not None:
            console.print(message, markup=False, highlight=False)
        else:
            log.info("%s", message)

    for i, cell in enumerate(selected, 1):
        prefix = f"[sweep {i}/{len(selected)}] {cell.name}"
        if cell.node0_action == "skip" and node:
            cell.status, cell.error = "done", None
            write_state(sweep, command)
            say(f"{prefix}: node 0 skips it ({'done there' if cell.config.nnodes > 1 else 'one-node cell'})")
            continue
        if (cell.node0_action is None and cell.status == "done") or cell.node0_action == "skip":
            say(f"{prefix}: done already ({cell.run_dir.name}), skipped")
            continue
        resume = cell.run_dir if cell.status in ("partial", "failed") and cell.run_dir else None
        if cell.node0_action is not None:  # node 0's word, whatever this node's folder says
            resume = cell.run_dir if cell.node0_action == "resume" and cell.run_dir else None
        say(f"{prefix}: {'resuming ' + resume.name if resume else 'starting'} ({_describe(cell)})")
        cell.status, cell.error = "running", None  # what the index shows meanwhile
        write_state(sweep, command)
        if write_index:
            _index(sweep)
        started = time.monotonic()
        try:
            run_dir = run_ab(cell.config, resume=resume, console=console, command=command)
            cell.run_dir = Path(run_dir)
            if node:  # run_ab returned, so every launch passed node 0's verdict; node 0 has the steps
                cell.status, cell.error = "done", None
            else:
                if cell.config.report:
                    _cell_report(cell.run_dir, say)
                cell.status = run_status(cell.run_dir)
                cell.error = None if cell.status == "done" else _why_partial(cell.run_dir)
                if cell.status != "done":
                    cell.status = "failed"
        except KeyboardInterrupt:
            cell.run_dir = find_run_dir(sweep.tree, cell.name)
            cell.status = "partial" if cell.run_dir else "pending"
            cell.error = "interrupted"
            write_state(sweep, command)
            raise
        except FsdpbenchError as exc:
            cell.run_dir = find_run_dir(sweep.tree, cell.name)
            cell.status, cell.error = "failed", str(exc)
            if cell.run_dir is not None and cell.config.report and not node:
                _cell_report(cell.run_dir, say)  # it names what is missing and shows the rest
        except Exception as exc:  # one broken cell must not lose hours of finished ones
            log.exception("cell %s failed unexpectedly", cell.name)
            cell.run_dir = find_run_dir(sweep.tree, cell.name)
            cell.status, cell.error = "failed", f"{type(exc).__name__}: {exc}"
        cell.wall_s = round(time.monotonic() - started, 1)
        say(
            f"{prefix}: {cell.status}"
            + (f" — {cell.error}" if cell.error else "")
            + f" ({cell.wall_s:.0f} s)"
        )
        write_state(sweep, command)
        if write_index:
            _index(sweep)
    if write_index:
        _index(sweep)
    return sweep.cells


def _cell_report(run_dir: Path, say: Callable[[str], Any]) -> None:
    """The cell's own report; a failure here is a warning (the run's results are on disk)."""
    try:
        from fsdpbench.report import write_report

        write_report(run_dir)
    except Exception as exc:
        say(
            f"warning: the report of {run_dir} could not be written ({type(exc).__name__}: {exc}); "
            f"retry with fsdpbench report {run_dir}"
        )


def _restore_errors(sweep: Sweep) -> None:
    state = read_state(sweep.tree) or {}
    recorded = {c.get("name"): c for c in state.get("cells") or []}
    for cell in sweep.cells:
        old = recorded.get(cell.name) or {}
        if cell.status != "done" and old.get("status") == "failed":
            cell.status, cell.error = "failed", old.get("error")
        cell.wall_s = old.get("wall_s")


def _why_partial(run_dir: Path) -> str:
    summary = run_folder.read_json_if_readable(run_dir / run_folder.SUMMARY)
    if summary is None:
        return f"the run wrote no {run_folder.SUMMARY}"
    bad = [
        f"{a}: {s.get('status')}"
        for a, s in (summary.get("arms") or {}).items()
        if s.get("status", "ok") != "ok"
    ]
    missing = [
        f"{m.get('arm')} round {m.get('round')} ({m.get('why')})" for m in summary.get("missing") or []
    ]
    return "; ".join(bad + missing[:4]) or "incomplete"


def _describe(cell: Cell) -> str:
    return ", ".join(f"{k}={v}" for k, v in cell.params.items() if v not in (None, ""))


def _index(sweep: Sweep) -> None:
    try:
        from fsdpbench.report.index import write_index

        write_index(sweep.tree)
    except Exception:  # the index is a view; the runs themselves are safe on disk
        log.warning("could not write the sweep index of %s", sweep.tree, exc_info=True)


DRY_RUN_HEADERS = ("cell", "mesh", "seq_len", "layers", "prefetch", "arms", "rounds", "profiled", "state")


def describe_cells(sweep: Sweep) -> list[list[str]]:
    """Rows for the dry-run table (``DRY_RUN_HEADERS``): cell, its settings, arms, current state."""
    rows = []
    for cell in sweep.cells:
        settings = cell_settings(cell.config.to_dict())
        rows.append(
            [
                cell.name,
                settings["mesh"],
                settings["seq_len"],
                settings["layers"],
                settings["prefetch"],
                cell.params["arms"],
                settings["rounds"],
                settings["profiled"],
                run_status(find_run_dir(sweep.tree, cell.name)),
            ]
        )
    return rows


def main_command() -> list[str]:
    """The command line as typed (for sweep.json)."""
    return ["fsdpbench", *sys.argv[1:]] if sys.argv and sys.argv[0] else []
