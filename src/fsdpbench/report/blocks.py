"""A report as a list of blocks, rendered twice: to markdown (figures beside it) and to one
self-contained HTML page (figures inline as SVG, CSS inline, no scripts, no external URL).

Inline text in blocks may use three markdown forms, which both renderers understand:
``**bold**``, ```code``` and ``[text](relative/link)``.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field
from pathlib import Path

from fsdpbench.results import run_folder

# --------------------------------------------------------------------------------------------
# Blocks
# --------------------------------------------------------------------------------------------


@dataclass
class Heading:
    text: str
    level: int = 2


@dataclass
class Para:
    text: str


@dataclass
class Banner:
    """A loud box: ``kind`` is ``error`` (invalid comparison), ``warning``, ``info`` or ``ok``."""

    kind: str
    text: str


@dataclass
class Table:
    headers: list[str]
    rows: list[list[str]]
    numeric: bool = True
    """Right-align every column but the first."""


@dataclass
class Figure:
    """``svg`` is the figure's SVG text; ``name`` is its file stem under ``figures/``."""

    name: str
    svg: str
    caption: str


@dataclass
class Code:
    text: str


@dataclass
class Bullets:
    items: list[str]


@dataclass
class Details:
    """Collapsed in HTML (``<details>``), inline in markdown."""

    summary: str
    blocks: list = field(default_factory=list)


Block = Heading | Para | Banner | Table | Figure | Code | Bullets | Details

# --------------------------------------------------------------------------------------------
# Markdown
# --------------------------------------------------------------------------------------------

_BANNER_MD = {"error": "🛑", "warning": "⚠️", "info": "ℹ️", "ok": "✅"}


def _md_cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def blocks_markdown(title: str, blocks: list[Block], figure_dir: str = "figures") -> str:
    """Markdown text; figures are referenced as ``{figure_dir}/{name}.svg`` (written by the caller)."""
    out = [f"# {title}", ""]
    for block in blocks:
        out.extend(_block_md(block, figure_dir))
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def _block_md(block: Block, figure_dir: str) -> list[str]:
    if isinstance(block, Heading):
        return ["#" * block.level + " " + block.text]
    if isinstance(block, Para):
        return [block.text]
    if isinstance(block, Banner):
        icon = _BANNER_MD.get(block.kind, "")
        return [f"> {icon} **{block.kind.upper()}**: {block.text}"]
    if isinstance(block, Table):
        head = "| " + " | ".join(_md_cell(h) for h in block.headers) + " |"
        rule = (
            "|"
            + "|".join("---" if i == 0 or not block.numeric else "---:" for i in range(len(block.headers)))
            + "|"
        )
        body = ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in block.rows]
        return [head, rule, *body]
    if isinstance(block, Figure):
        return [f"![{block.caption}]({figure_dir}/{block.name}.svg)", "", f"*{block.caption}*"]
    if isinstance(block, Code):
        return ["```", block.text.rstrip("\n"), "```"]
    if isinstance(block, Bullets):
        return [f"- {item}" for item in block.items]
    if isinstance(block, Details):
        lines = [f"**{block.summary}**", ""]
        for inner in block.blocks:
            lines.extend(_block_md(inner, figure_dir))
            lines.append("")
        return lines[:-1]
    raise TypeError(f"unknown report block {type(block).__name__}")


# --------------------------------------------------------------------------------------------
# HTML
# --------------------------------------------------------------------------------------------

_CSS = """
body{font-family:-apple-system,"Segoe UI","DejaVu Sans",Helvetica,Arial,sans-serif;margin:0;
 color:#1d2330;background:#f6f7f9;line-height:1.45}
main{max-width:1180px;margin:0 auto;padding:20px 28px 60px;background:#fff;min-height:100vh}
h1{font-size:1.55em;margin:.2em 0 .4em}h2{font-size:1.25em;border-bottom:2px solid #e3e6eb;
 padding-bottom:.2em;margin-top:1.8em}h3{font-size:1.05em;margin-top:1.3em}
table{border-collapse:collapse;margin:.6em 0 1em;font-size:.92em}
th,td{border:1px solid #d9dde3;padding:4px 9px;vertical-align:top}
th{background:#eef1f5;text-align:left}td.n{text-align:right;font-variant-numeric:tabular-nums}
tr:nth-child(even) td{background:#fafbfc}
code,pre{font-family:"DejaVu Sans Mono",Menlo,Consolas,monospace;font-size:.88em}
code{background:#f0f2f5;padding:0 3px;border-radius:3px}
pre{background:#f0f2f5;padding:10px 12px;border-radius:4px;overflow-x:auto;white-space:pre-wrap;
 word-break:break-all}
.banner{padding:12px 16px;border-radius:6px;margin:.8em 0;font-size:1.02em;border-left:7px solid}
.banner.error{background:#fde8e8;border-color:#c62828;color:#7f1010;font-size:1.15em;font-weight:600}
.banner.warning{background:#fff6e0;border-color:#e0a000;color:#5c4300}
.banner.info{background:#e8f1fd;border-color:#3b78c4;color:#163d6b}
.banner.ok{background:#e6f5ea;border-color:#2e8b47;color:#124d23}
figure{margin:1em 0 1.4em}figure svg{max-width:100%;height:auto}
figcaption{font-size:.88em;color:#555;margin-top:.2em}
details{margin:.6em 0}summary{cursor:pointer;font-weight:600}
.verdict{font-size:1.3em;font-weight:650;margin:.3em 0 .6em}
"""

_INLINE = re.compile(r"`([^`]+)`|\*\*([^*]+)\*\*|\[([^\]]+)\]\(([^)\s]+)\)")


def inline_html(text: str) -> str:
    """Escape ``text`` and turn ``code``, **bold** and [links](relative) into HTML.

    Links with a scheme (``http:``, ``file:``…) stay plain text: the page must make no request.
    """
    out, pos = [], 0
    for m in _INLINE.finditer(text):
        out.append(html.escape(text[pos : m.start()]))
        code, bold, label, href = m.groups()
        if code is not None:
            out.append(f"<code>{html.escape(code)}</code>")
        elif bold is not None:
            out.append(f"<strong>{html.escape(bold)}</strong>")
        elif re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", href) or href.startswith("//"):
            out.append(html.escape(f"{label} ({href})"))
        else:
            out.append(f'<a href="{html.escape(href, quote=True)}">{html.escape(label)}</a>')
        pos = m.end()
    out.append(html.escape(text[pos:]))
    return "".join(out)


def blocks_html(title: str, blocks: list[Block]) -> str:
    """One self-contained HTML page (UTF-8, inline CSS and SVG)."""
    body = "\n".join(_block_html(b) for b in blocks)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1"><title>{html.escape(title)}</title>'
        f"<style>{_CSS}</style></head>\n<body><main>\n<h1>{html.escape(title)}</h1>\n{body}\n</main></body></html>\n"
    )


def anchor(heading: str) -> str:
    """The ``id`` the HTML page gives a heading of this text (``torch-prefetch1 vs torch`` →
    ``torch-prefetch1-vs-torch``; markdown viewers such as GitHub's make the same of such labels)."""
    return re.sub(r"[^a-z0-9]+", "-", heading.lower()).strip("-")


def _block_html(block: Block) -> str:
    if isinstance(block, Heading):
        level = min(max(block.level, 2), 4)
        return f'<h{level} id="{anchor(block.text)}">{inline_html(block.text)}</h{level}>'
    if isinstance(block, Para):
        return f"<p>{inline_html(block.text)}</p>"
    if isinstance(block, Banner):
        return f'<div class="banner {html.escape(block.kind)}" role="alert">{inline_html(block.text)}</div>'
    if isinstance(block, Table):
        head = "".join(f"<th>{inline_html(h)}</th>" for h in block.headers)
        rows = []
        for row in block.rows:
            cells = "".join(
                f'<td class="n">{inline_html(str(c))}</td>'
                if i and block.numeric
                else f"<td>{inline_html(str(c))}</td>"
                for i, c in enumerate(row)
            )
            rows.append(f"<tr>{cells}</tr>")
        return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    if isinstance(block, Figure):
        # HTML5 knows the SVG namespaces; dropping the declarations leaves the page without a single URL
        svg = re.sub(r'\s+xmlns(:xlink)?="[^"]*"', "", block.svg, count=2)
        return (
            f'<figure id="fig-{html.escape(block.name)}">{svg}'
            f"<figcaption>{inline_html(block.caption)}</figcaption></figure>"
        )
    if isinstance(block, Code):
        return f"<pre>{html.escape(block.text)}</pre>"
    if isinstance(block, Bullets):
        return "<ul>" + "".join(f"<li>{inline_html(i)}</li>" for i in block.items) + "</ul>"
    if isinstance(block, Details):
        inner = "\n".join(_block_html(b) for b in block.blocks)
        return f"<details><summary>{inline_html(block.summary)}</summary>\n{inner}\n</details>"
    raise TypeError(f"unknown report block {type(block).__name__}")


def render(folder: Path, stem: str, title: str, blocks: list) -> list[Path]:
    """Write ``{stem}.md`` + ``figures/*.svg`` and ``{stem}.html`` under ``folder``; return their paths."""
    written: list[Path] = []
    figs = [b for b in _walk(blocks) if isinstance(b, Figure)]
    fig_dir = folder / run_folder.FIGURES
    if figs:
        fig_dir.mkdir(exist_ok=True)
    for fig in figs:
        written.append(
            run_folder.write_atomic(
                fig_dir / f"{fig.name}.svg", '<?xml version="1.0" encoding="utf-8"?>\n' + fig.svg
            )
        )
    written.append(run_folder.write_atomic(folder / f"{stem}.md", blocks_markdown(title, blocks)))
    written.append(run_folder.write_atomic(folder / f"{stem}.html", blocks_html(title, blocks)))
    return written


def _walk(blocks: list):
    for b in blocks:
        yield b
        yield from _walk(getattr(b, "blocks", []) or [])
