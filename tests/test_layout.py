"""The source layout's rules (DESIGN.md "Layout", docs/architecture.md), read from the files with ``ast``:
rooms import only downward, no circle of files, no file over ``MAX_LINES`` lines."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "fsdpbench"

ROOM_ORDER: tuple[frozenset[str], ...] = (
    frozenset({"__main__", "cli"}),
    frozenset({"commands"}),
    frozenset({"run"}),
    frozenset({"backends"}),
    frozenset({"model", "device"}),
    frozenset({"report"}),
    frozenset({"analysis"}),
    frozenset({"analysis.compare"}),
    frozenset({"analysis.findings"}),
    frozenset({"analysis.crossrank"}),
    frozenset({"analysis.estimate"}),
    frozenset({"analysis.rank"}),
    frozenset({"analysis.output"}),
    frozenset({"trace"}),
    frozenset({"config", "results"}),
    frozenset({"fmt", "errors", "records", "__init__"}),
)
"""Rooms from the top (the face) to the bottom; a module imports only from its own room or a lower one.
``config`` is plain data (arms, shapes, the run's options; no torch) that the analysis reads, so it sits low;
``records`` (the JSON records' one encode/decode, when it exists) sits with the other leaves.
``analysis.<sub>`` are the rooms inside analysis/ (its top level, the pipeline and its caches,
is ``analysis``): a module of analysis/<sub>/ is in that room."""

ALL_ROOMS: frozenset[str] = frozenset().union(*ROOM_ORDER)
MAX_LINES = 800


def module_name(path: Path, src: Path = SRC) -> str:
    """``fsdpbench.run.worker`` for ``src/fsdpbench/run/worker.py`` (a package is its ``__init__``)."""
    parts = list(path.relative_to(src).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(package: Path = PACKAGE) -> dict[str, Path]:
    """Every module of the package by its dotted name."""
    return {module_name(p, package.parent): p for p in sorted(package.rglob("*.py"))}


def imports_of(path: Path, known: dict[str, Path], src: Path = SRC) -> set[str]:
    """The fsdpbench modules ``path`` imports (at any depth: lazy imports count too). ``from a.b import c``
    is the module ``a.b.c`` when that is a module, else ``a.b``; a submodule's import is not counted as its
    package's ``__init__`` (Python runs that too, but a package importing its own parts is no circle)."""
    name = module_name(path, src)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
                origin = f"{base}.{node.module}" if node.module else base
            else:
                origin = node.module or ""
            for alias in node.names:
                child = f"{origin}.{alias.name}"
                found.add(child if child in known else origin)
    return {m for m in found if m in known and m != name}


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """``{module: modules it imports}`` over the package."""
    known = modules(package)
    return {name: imports_of(path, known, package.parent) for name, path in known.items()}


def room(module: str) -> str:
    """The room of ``fsdpbench.<room>...``, or ``<room>.<sub>`` where ROOM_ORDER names that sub-room
    (analysis/ holds rooms of its own); a top-level module is its own room."""
    parts = module.split(".")
    if len(parts) > 2 and f"{parts[1]}.{parts[2]}" in ALL_ROOMS:
        return f"{parts[1]}.{parts[2]}"
    return parts[1] if len(parts) > 1 else "__init__"


def test_every_folder_of_a_room_with_sub_rooms_is_a_room() -> None:
    """A room that holds rooms (analysis/) holds no folder that ROOM_ORDER does not name: a new folder there
    would otherwise count as its parent's top, unchecked."""
    parents = {r.split(".")[0] for r in ALL_ROOMS if "." in r}
    folders = {
        f"{p.parent.parent.name}.{p.parent.name}"
        for r in parents
        for p in (PACKAGE / r).glob("*/__init__.py")
    }
    assert not folders - ALL_ROOMS, (
        f"folders that are not rooms: {sorted(folders - ALL_ROOMS)}: add to ROOM_ORDER"
    )


def rank(room_name: str) -> int:
    """Position of ``room_name`` in ``ROOM_ORDER`` (0 = top)."""
    for i, rooms in enumerate(ROOM_ORDER):
        if room_name in rooms:
            return i
    raise AssertionError(
        f"room {room_name!r} is not in ROOM_ORDER: place it there and in docs/architecture.md"
    )


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_checker_sees_a_circle_and_an_upward_import(tmp_path: Path) -> None:
    """The graph reader and the circle finder on a hand-made package: a -> b -> c -> a is one circle, d alone;
    a relative import and a lazy import inside a function both count."""
    pkg = tmp_path / "fsdpbench"
    (pkg / "trace").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "trace" / "__init__.py").write_text("")
    (pkg / "trace" / "a.py").write_text("from . import b\n")
    (pkg / "trace" / "b.py").write_text("def f():\n    from fsdpbench.trace.c import x\n")
    (pkg / "trace" / "c.py").write_text("import fsdpbench.trace.a\nx = 1\n")
    (pkg / "trace" / "d.py").write_text("from fsdpbench.report import y\n")
    graph = import_graph(pkg)
    assert graph["fsdpbench.trace.a"] == {"fsdpbench.trace.b"}
    assert graph["fsdpbench.trace.b"] == {"fsdpbench.trace.c"}
    assert graph["fsdpbench.trace.c"] == {"fsdpbench.trace.a"}
    assert graph["fsdpbench.trace.d"] == set()  # fsdpbench.report is not a module of this package
    assert cycles(graph) == [["fsdpbench.trace.a", "fsdpbench.trace.b", "fsdpbench.trace.c"]]


def test_report_imports_nothing_from_run() -> None:
    graph = import_graph()
    reaching = sorted(
        f"{m} -> {t}"
        for m, targets in graph.items()
        if room(m) == "report"
        for t in targets
        if room(t) == "run"
    )
    assert not reaching, "report/ reads the run folder through results/, never run/: " + "; ".join(reaching)


def test_rooms_import_only_downward() -> None:
    graph = import_graph()
    upward = sorted(
        f"{m} -> {t}" for m, targets in graph.items() for t in targets if rank(room(t)) < rank(room(m))
    )
    assert not upward, "imports of a higher room: " + "; ".join(upward)


def test_no_circle_of_files() -> None:
    found = cycles(import_graph())
    assert not found, "circles of imports: " + "; ".join(" -> ".join(c) for c in found)


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_file_over_the_line_limit(path: Path) -> None:
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES, f"{path.relative_to(SRC)}: {lines} lines (at most {MAX_LINES}): split it"
