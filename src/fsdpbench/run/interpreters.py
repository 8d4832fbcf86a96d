"""The Python interpreters that run each arm's ranks: probed before anything launches.

An arm may run in another environment (``python=PATH``: a venv with another torch, hyper_parallel,
deepspeed or fsdpbench checkout). ``probe_arms`` asks every interpreter once, in a subprocess that
imports nothing heavy, for its versions and git commits; the launcher records the answers in the
manifest (``interpreters``) and refuses, before any launch, an interpreter that cannot run the arm.
Torch-free, like the launcher.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fsdpbench.errors import ConfigError

if TYPE_CHECKING:
    from fsdpbench.config import Arm

LIBRARIES = ("torch", "fsdpbench", "deepspeed", "hyper_parallel")
"""Libraries whose version, location and git commit are recorded per interpreter."""
NEEDS = {"deepspeed": "deepspeed", "hyper": "hyper_parallel"}
"""Backend → the optional library its interpreter must have."""
PROBE_TIMEOUT_S = 60.0

# Runs in the probed interpreter: standard library only, and no import of the libraries themselves
# (hyper_parallel patches torch when imported; torch alone takes seconds).
_PROBE = r"""
import importlib.metadata as md, importlib.util, json, os, platform, subprocess, sys

def git_head(folder):
    try:
        out = subprocess.run(["git", "-C", folder, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
    except Exception:
        return None
    return (out.stdout.strip() or None) if out.returncode == 0 else None

def commit_of(dist_name, module_folder):
    # a module outside site-packages (PYTHONPATH, editable install) is its own checkout; else pip's record
    if not set(module_folder.split(os.sep)) & {"site-packages", "dist-packages"}:
        return git_head(module_folder)
    try:
        raw = md.distribution(dist_name).read_text("direct_url.json")
    except md.PackageNotFoundError:
        raw = None
    direct = json.loads(raw) if raw else {}
    commit = (direct.get("vcs_info") or {}).get("commit_id")
    url = direct.get("url") or ""
    return commit or (git_head(url[len("file://"):]) if url.startswith("file://") else None)

facts = {"executable": sys.executable, "python": platform.python_version(), "libraries": {}}
for name in LIBRARIES:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.origin:
        facts["libraries"][name] = None
        continue
    folder = os.path.dirname(spec.origin)
    try:
        version = md.version(name)
    except md.PackageNotFoundError:
        version = None
    facts["libraries"][name] = {"version": version, "location": folder, "commit": commit_of(name, folder)}
print(json.dumps(facts))
"""


# Runs in the arm's interpreter when an arm has kw. options: imports the sharding call (torch; hyper_parallel
# for the hyper arm, which is why it is a subprocess) and prints its keyword parameters with their defaults.
_SIGNATURE_PROBE = r"""
import importlib, inspect, json, os, sys
os.environ["HYPER_PARALLEL_PLATFORM"] = "torch"
module_name, _, attr = TARGET.rpartition(".")
function = getattr(importlib.import_module(module_name), attr)
if inspect.isclass(function):
    function = function.__init__
params, var_keyword = {}, False
for p in inspect.signature(function).parameters.values():
    if p.kind is p.VAR_KEYWORD:
        var_keyword = True
    if p.kind not in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) or p.name == "self":
        continue
    d = p.default
    if d is p.empty:
        kind = "required"
    elif d is None:
        kind = "None"
    elif type(d) in (bool, int, float, str):
        kind = type(d).__name__
    else:
        kind = "object:" + type(d).__name__
    params[p.name] = {"kind": kind, "default": d if type(d) in (bool, int, float, str) else None}
print(json.dumps({"function": TARGET, "file": inspect.getsourcefile(function), "params": params,
                  "var_keyword": var_keyword}))
"""


def _failure_line(python: str, out: subprocess.CompletedProcess[str]) -> str:
    """The last line of a failed probe's stderr; a ``ConfigError`` at once when ``python`` has no torch."""
    last = (out.stderr.strip().splitlines() or ["no output"])[-1]
    if "No module named 'torch'" in last:
        raise ConfigError(f"python={python}: it has no torch; install it there: pip install 'fsdpbench[run]'")
    return last


def sharding_signature(python: str, backend: str, env: dict[str, str]) -> dict[str, Any]:
    """The keyword parameters of ``backend``'s sharding call as interpreter ``python`` has it:
    ``{"function", "file", "params": {name: {"kind", "default"}}, "var_keyword"}`` where ``kind`` is
    ``bool``/``int``/``float``/``str`` (the default's type), ``None``, ``required`` or ``object:TYPE``.

    Raises:
        ConfigError: the call cannot be imported in that interpreter (one line).
    """
    from fsdpbench.config.arms import SHARDING_CALLS

    target = SHARDING_CALLS[backend]
    code = f"TARGET = {target!r}\n{_SIGNATURE_PROBE}"
    try:
        out = subprocess.run(
            [python, "-c", code], capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, env=env
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ConfigError(f"{python}: could not read the signature of {target} ({exc})") from None
    if out.returncode != 0:
        last = _failure_line(python, out)
        raise ConfigError(f"{python}: could not read the signature of {target} ({last})")
    return json.loads(out.stdout.strip().splitlines()[-1])


def type_keywords(arm: Arm, signature: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Type ``arm.kw``'s text values from ``signature`` (``sharding_signature``) and store them in
    ``arm.kw``; returns ``{name: {"value", "typed_as"}}`` for the manifest.

    A value takes the type of the parameter's default (``bool``: true/false/1/0/yes/no/on/off; ``int``:
    ``5e7`` accepted); where the default is None it is passed as the text given.

    Raises:
        ConfigError: a name the call does not take, a required parameter, or a default no command-line
            value can express (an object); one line naming the arm, the keyword and the function.
    """
    from fsdpbench.config.arms import coerce_backend_option

    function, params = signature["function"], signature["params"]
    where = f"arm {arm.label!r}: kw."
    typed: dict[str, Any] = {}
    record: dict[str, dict[str, Any]] = {}
    for name, raw in arm.kw.items():
        info = params.get(name)
        if info is None:
            if not signature.get("var_keyword"):
                raise ConfigError(
                    f"{where}{name}: {function} (in {signature.get('file')}) has no keyword {name}; "
                    f"its keywords: {', '.join(params)}"
                )
            info = {"kind": "None"}
        kind = info["kind"]
        if kind in ("bool", "int", "float", "str"):
            value = coerce_backend_option(
                raw, {"bool": bool, "int": int, "float": float, "str": str}[kind], f"{where}{name}"
            )
            typed_as = f"{kind} (from the default {info['default']!r})"
        elif kind == "None":
            value, typed_as = raw, "the text as given (the default is None)"
        else:
            what = "is required" if kind == "required" else f"defaults to a {kind.split(':', 1)[1]} object"
            raise ConfigError(
                f"{where}{name}: {function}'s {name} {what}, which a command-line value cannot express; "
                "drop it"
            )
        typed[name] = value
        record[name] = {"value": value, "typed_as": typed_as}
    arm.kw = typed
    return record


def arm_interpreter(arm: Arm) -> str:
    """The interpreter that runs ``arm``'s ranks (its ``python`` option, else the launcher's own)."""
    return arm.python or sys.executable


def interpreter_environment(arm: Arm, env: dict[str, str]) -> dict[str, str]:
    """``env`` for ``arm``'s processes: another interpreter does not inherit our ``PYTHONPATH`` (it
    would import this checkout's fsdpbench instead of its own environment's); then the arm's own
    ``env.NAME=VALUE`` variables, which win over the shell's and the launcher's (docs/arms.md)."""
    if arm.python:
        env = {k: v for k, v in env.items() if k != "PYTHONPATH"}
    return {**env, **arm.env} if arm.env else env


def probe(python: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Versions, locations and git commits of ``LIBRARIES`` in interpreter ``python``.

    Raises:
        ConfigError: the interpreter does not exist, does not run, or does not answer.
    """
    path = Path(python)
    if not path.exists():
        raise ConfigError(f"python={python}: no such interpreter; give the path of a venv's bin/python")
    code = f"LIBRARIES = {LIBRARIES!r}\n{_PROBE}"
    try:
        out = subprocess.run(
            [python, "-c", code],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            env=env if env is not None else dict(os.environ),
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ConfigError(
            f"python={python}: could not run it ({exc}); give the path of a working interpreter"
        ) from None
    if out.returncode != 0:
        last = _failure_line(python, out)
        raise ConfigError(f"python={python}: the probe failed ({last}); is it a Python 3.10+ interpreter?")
    return json.loads(out.stdout.strip().splitlines()[-1])


def probe_arms(arms: list[Arm], env: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Probe each arm's interpreter (once per distinct one); ``{arm label: facts}``.

    Raises:
        ConfigError: an interpreter lacks torch or fsdpbench, or the library its backend needs
            (one line naming the arm, the interpreter and what to install there).
    """
    seen: dict[tuple[str, bool], dict[str, Any]] = {}
    out: dict[str, dict[str, Any]] = {}
    for arm in arms:
        python = arm_interpreter(arm)
        key = (python, bool(arm.python))
        if key not in seen:
            seen[key] = probe(python, interpreter_environment(arm, env))
        facts = seen[key]
        libs = facts["libraries"]
        missing = [
            name for name in ("torch", "fsdpbench", NEEDS.get(arm.backend)) if name and not libs.get(name)
        ]
        if missing:
            raise ConfigError(
                f"arm {arm.label!r}: interpreter {python} has no {' or '.join(missing)}; install "
                f"{'them' if len(missing) > 1 else 'it'} in that environment (e.g. {python} -m pip install "
                f"{' '.join('-e <fsdpbench checkout>' if m == 'fsdpbench' else m for m in missing)})"
            )
        out[arm.label] = {"interpreter": python, **facts}
        if arm.kw:
            env_arm = interpreter_environment(arm, env)
            signature = sharding_signature(python, arm.backend, env_arm)
            out[arm.label] = {
                **out[arm.label],
                "sharding_call": {
                    "function": signature["function"],
                    "file": signature["file"],
                    "kw": type_keywords(arm, signature),
                },
            }
    return out
