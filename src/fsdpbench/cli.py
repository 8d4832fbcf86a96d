"""The one entry point: ``fsdpbench <subcommand>``.

Each subcommand lives in its own module, which exposes ``add_arguments(parser)`` and
``main(args) -> int``. Only the chosen subcommand's module is imported, so ``fsdpbench analyze``
never pays for (or needs) torch.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import logging
import os
import sys

from fsdpbench import __version__
from fsdpbench.errors import FsdpbenchError

# name → (module, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "run": ("fsdpbench.commands.run", "run one arm (one or more rounds) and summarise it"),
    "ab": ("fsdpbench.commands.ab", "interleaved A/B benchmark of several arms, with verdict and report"),
    "sweep": ("fsdpbench.commands.sweep", "a grid of ab runs from a TOML file, with an index report"),
    "model": ("fsdpbench.commands.model", "parameters, FLOPs, memory and comm bytes of the workload"),
    "analyze": ("fsdpbench.commands.analyze", "overlap, collectives, ops and syncs from profiler traces"),
    "diff": ("fsdpbench.commands.diff", "compare two profiles: differences, findings, what-if estimates"),
    "report": ("fsdpbench.commands.report", "write report.md and a self-contained report.html for a run"),
    "cache": ("fsdpbench.commands.cache", "list or remove the analysis caches kept beside traces"),
}

_TRACE_READERS = ("analyze", "diff", "report")  # the subcommands that read traces (and their cache)

RUN_EXTRA = "run"
"""The extra that installs the run side's torch: ``pip install 'fsdpbench[run]'`` (pyproject.toml)."""
_NEEDS_TORCH = ("run", "ab", "sweep", "model")  # analyze, diff, report and cache never import torch


def torch_missing() -> bool:
    """Whether this interpreter cannot import torch (looked up, not imported: importing takes seconds)."""
    try:
        return importlib.util.find_spec("torch") is None
    except (ImportError, ValueError):  # an import hook that refuses it, a broken half-installed package
        return True


def build_parser(chosen: str | None) -> argparse.ArgumentParser:
    """The top-level parser; only ``chosen`` gets its full argument list."""
    parser = argparse.ArgumentParser(prog="fsdpbench", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"fsdpbench {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="SUBCOMMAND")
    for name, (module, help_text) in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name == chosen:
            importlib.import_module(module).add_arguments(p)
            if name in _TRACE_READERS:
                p.add_argument(
                    "--no-cache",
                    action="store_true",
                    help="read every trace afresh: neither read nor write the caches beside it (hidden "
                    "'.TRACE.fsdpbench.*' files; see or remove them with 'fsdpbench cache list|clear PATH', "
                    "docs/caches.md)",
                )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv``, run the subcommand, and turn known errors into one line and an exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    chosen = next((a for a in argv if a in SUBCOMMANDS), None)
    parser = build_parser(chosen)
    args = parser.parse_args(argv)
    # Progress and results go to the console; log records are warnings, and bookkeeping (which cached
    # analysis a diff used, ...) only with -v.
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    if args.command is None:
        parser.print_help()
        return 0
    if args.command in _NEEDS_TORCH and torch_missing():
        print(
            f"fsdpbench {args.command}: error: torch is not installed; the run side (ab, run, sweep, model) "
            f"needs it: pip install 'fsdpbench[{RUN_EXTRA}]' (analyze, diff, report and cache work without it)",
            file=sys.stderr,
        )
        return 2
    if getattr(args, "no_cache", False):
        os.environ["FSDPBENCH_NO_CACHE"] = "1"  # read by trace.read_rank, here and in worker processes
    try:
        return int(importlib.import_module(SUBCOMMANDS[args.command][0]).main(args) or 0)
    except FsdpbenchError as exc:
        print(f"fsdpbench {args.command}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except (ValueError, FileNotFoundError) as exc:
        if args.verbose:
            raise
        print(f"fsdpbench {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"fsdpbench {args.command}: interrupted; results written so far are kept", file=sys.stderr)
        return 130


_QUICK_EXIT = ("analyze", "diff")
"""Subcommands that only read traces and write their output with ``with`` blocks: once stdout and
stderr are flushed there is nothing left to clean up, so they skip the interpreter's teardown (freeing
every module and object: ~50 ms of a cold ``analyze`` of four 60k-kernel ranks)."""


def run() -> None:
    """The console entry point: :func:`main`, then exit with its code."""
    code = main()
    watched = sys.getprofile() is not None or sys.gettrace() is not None  # cProfile, coverage: let them write
    if not watched and next((a for a in sys.argv[1:] if a in SUBCOMMANDS), None) in _QUICK_EXIT:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except OSError:  # a closed pipe (``| head``): what was written is all that can be
            code = code or 1
        logging.shutdown()
        os._exit(code)
    raise SystemExit(code)


if __name__ == "__main__":
    run()
