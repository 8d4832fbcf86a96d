"""Check that cutting the README down lost nothing: every old heading and line is still findable.

    python scripts/check_docs_moved.py            # against the README of commit f1b6e31 (1,264 lines)
    python scripts/check_docs_moved.py --rev REV  # against another commit's README

Each heading of the old README must be a heading of a docs/ page or of the new README (exit 1 if not).
Each line of the old README (outside code fences, 25 characters or more) is looked for word for word,
whitespace collapsed and links' `docs/` prefix dropped, in the new README and docs/*.md together; the
lines no page holds are listed, so that a reader can check each was reworded rather than dropped.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OLD_REV = "f1b6e31"  # the last commit with the long README
MIN_LINE = 25


def headings(text: str) -> list[str]:
    """The heading texts of a markdown document (fenced code skipped), without the leading #s."""
    out, fence = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fence = not fence
        elif not fence and re.match(r"#{1,6} ", line):
            out.append(line.lstrip("#").strip())
    return out


def prose_lines(text: str) -> list[str]:
    """Lines outside code fences, whitespace collapsed, table separators and short lines dropped."""
    out, fence = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fence = not fence
            continue
        flat = " ".join(line.split())
        if fence or len(flat) < MIN_LINE or re.fullmatch(r"[|\-: ]+", flat) or flat.startswith("#"):
            continue
        out.append(flat)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--rev", default=OLD_REV, help=f"the commit whose README is the reference (default {OLD_REV})"
    )
    parser.add_argument("--quiet", action="store_true", help="only the counts, not the lines no page holds")
    args = parser.parse_args(argv)
    old = subprocess.run(
        ["git", "show", f"{args.rev}:README.md"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    pages = {p.name: p.read_text(encoding="utf-8") for p in sorted((REPO / "docs").glob("*.md"))}
    doc_headings = {h for text in pages.values() for h in headings(text)}
    corpus = " ".join(" ".join(t.split()) for t in [readme.replace("](docs/", "]("), *pages.values()])

    lost_headings = [h for h in headings(old) if h not in doc_headings and h not in headings(readme)]
    old_lines = prose_lines(old.replace("](docs/", "]("))  # links moved into docs/ lose the prefix
    reworded = [line for line in old_lines if line not in corpus]
    print(f"old README ({args.rev}): {len(old.splitlines())} lines, {len(headings(old))} headings")
    print(
        f"headings found in docs/ or the README: {len(headings(old)) - len(lost_headings)}/{len(headings(old))}"
    )
    for h in lost_headings:
        print(f"  MISSING heading: {h}")
    print(f"lines found word for word: {len(old_lines) - len(reworded)}/{len(old_lines)}")
    if not args.quiet:
        for line in reworded:
            print(f"  not word for word: {line[:150]}")
    return 1 if lost_headings else 0


if __name__ == "__main__":
    sys.exit(main())
