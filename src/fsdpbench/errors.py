"""Errors that the CLI turns into one clear line (no traceback)."""

from __future__ import annotations


class FsdpbenchError(Exception):
    """Base class: the message names the file, rank or option at fault and what to do."""

    exit_code = 2


class ConfigError(FsdpbenchError, ValueError):
    """A bad option, preset, field or value."""


class InputError(FsdpbenchError):
    """A file or folder that cannot be read or is not what it should be."""


class LaunchError(FsdpbenchError):
    """A launch that failed: a crashed or hung rank, a missing dependency, out of memory."""

    exit_code = 1
