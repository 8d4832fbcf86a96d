"""``fsdpbench run``: one arm, one or more rounds, and its summary."""

from __future__ import annotations

import argparse

from fsdpbench.commands.ab import add_run_arguments, execute


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_run_arguments(parser, several_arms=False)


def main(args: argparse.Namespace) -> int:
    from fsdpbench.errors import ConfigError

    if args.arms and "," in args.arms:
        raise ConfigError(f"--arm {args.arms!r}: fsdpbench run takes one arm; use fsdpbench ab for several")
    return execute(args, defaults={"arms": args.arms or "torch", "rounds": 1, "name": "run"})
