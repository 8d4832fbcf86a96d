"""The documentation stays true: docs/cli.md is the current --help, links resolve, the README stays short.

No launches: these read the repository's files and build the argument parsers only.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
from pathlib import Path

import pytest

from fsdpbench.cli import SUBCOMMANDS, build_parser

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
README = REPO / "README.md"
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cli_md_is_the_current_help():
    """docs/cli.md says what scripts/cli_docs.py renders now (run it after changing an option).

    Whitespace is collapsed first: argparse's line wrapping differs between Python versions, its words do not.
    """
    rendered = _script("cli_docs").render()
    current = (DOCS / "cli.md").read_text(encoding="utf-8")
    assert current.split() == rendered.split(), "docs/cli.md is stale: run `python scripts/cli_docs.py`"


@pytest.mark.parametrize("name", list(SUBCOMMANDS))
def test_cli_md_names_every_option_of_every_subcommand(name):
    """Each option string argparse knows for the subcommand (read from the parser's actions) is in docs/cli.md."""
    parser = build_parser(name)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[name]
    options = [s for a in sub._actions if a.help != argparse.SUPPRESS for s in a.option_strings]
    assert options, name
    section = (
        (DOCS / "cli.md").read_text(encoding="utf-8").split(f"## `fsdpbench {name}`", 1)[1].split("\n## ")[0]
    )
    missing = [s for s in options if not re.search(rf"(?<![\w-]){re.escape(s)}(?![\w-])", section)]
    assert not missing, f"fsdpbench {name}: {missing} not in docs/cli.md"


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    anchors, fence = set(), False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fence = not fence
        elif not fence and re.match(r"#{1,6} ", line):
            anchors.add(_slug(line.lstrip("#")))
    return anchors


def _links(path: Path) -> list[str]:
    text, fence, out = path.read_text(encoding="utf-8"), False, []
    for line in text.splitlines():
        if line.startswith("```"):
            fence = not fence
        elif not fence:
            out += LINK.findall(line)
    return out


@pytest.mark.parametrize("page", [README, *sorted(DOCS.glob("*.md"))], ids=lambda p: p.name)
def test_every_relative_link_and_anchor_resolves(page):
    broken = []
    for target in _links(page):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        dest = (page.parent / file_part).resolve() if file_part else page
        if not dest.exists():
            broken.append(target)
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(target)
    assert not broken, f"{page.name}: {broken}"


def test_readme_is_short_and_shows_the_test_command_ci_runs():
    """The README fits in 250 lines and holds the pytest command the Makefile's `test` runs (CI: make test)."""
    readme = README.read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 250
    makefile = (REPO / "Makefile").read_text(encoding="utf-8").splitlines()
    after = makefile[makefile.index("\t# the README's test command:") + 1]
    command = after[after.index("python -m pytest") :]
    assert f"`{command}`" in readme
    assert re.search(r"^make test$", (REPO / ".ci" / "run").read_text(encoding="utf-8"), re.M)


def test_readme_names_the_fast_subset_by_a_declared_marker():
    assert '-m "not distributed"' in README.read_text(encoding="utf-8")
    assert re.search(r'^\s*"distributed:', (REPO / "pyproject.toml").read_text(encoding="utf-8"), re.M)


def test_readme_picture_is_a_small_png_in_the_repository():
    picture = DOCS / "img" / "report.png"
    assert "docs/img/report.png" in README.read_text(encoding="utf-8")
    blob = picture.read_bytes()
    assert blob[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(blob) < 200 * 1024


def test_readme_picture_was_drawn_by_the_current_figure_code():
    """The picture follows the report: the hash of report/figures.py kept beside the PNG when it was drawn
    (hashed here with hashlib, independently of the script) equals the file's hash now."""
    import hashlib

    kept = (DOCS / "img" / "report.png.source").read_text(encoding="utf-8").split()
    figures = REPO / kept[1]
    assert kept[1] == "src/fsdpbench/report/figures.py"
    assert kept[0] == hashlib.sha256(figures.read_bytes()).hexdigest(), (
        "the report's figure code changed since docs/img/report.png was drawn: "
        "run `make readme-figure` (or python scripts/readme_figure.py --run RUN_DIR) and commit both files"
    )


def test_readme_terminal_sample_is_what_ab_prints_now():
    """The README's "What it prints" block is ``print_summary``'s output now for the run figures kept in
    docs/img/terminal_sample.json (scripts/readme_terminal.py writes both): a change to what `fsdpbench ab`
    prints at the end fails here until the block is written again."""
    script = _script("readme_terminal")
    sample = json.loads((DOCS / "img" / "terminal_sample.json").read_text(encoding="utf-8"))
    block = script.readme_block(README.read_text(encoding="utf-8"))
    assert block.splitlines()[-1] == sample["run_dir"]  # the last line: the run folder, on stdout
    assert block == script.render(sample), (
        "README.md's terminal sample is not what `fsdpbench ab` prints now: run python scripts/readme_terminal.py "
        "(or --run RUN_DIR for a fresh run's figures) and commit README.md"
    )


def test_docs_index_lists_every_page():
    index = (DOCS / "index.md").read_text(encoding="utf-8")
    listed = {t for t in _links(DOCS / "index.md") if not re.match(r"[a-z]+:", t)}
    missing = [p.name for p in DOCS.glob("*.md") if p.name != "index.md" and p.name not in listed]
    assert not missing, f"docs/index.md does not list {missing}"
    assert index
