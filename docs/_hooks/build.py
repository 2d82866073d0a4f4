"""MkDocs build hooks (``hooks:`` in mkdocs.yml). Nothing here touches the network.

* ``include-file``: a line ``<!-- include-file: PATH -->`` in a page is
  replaced by the file at ``PATH`` (relative to the repository root), read at
  every build, so the Benchmarks page always shows the latest result tables.
  A file that does not exist yet becomes a note saying how to produce it.
* Math: ``pymdownx.arithmatex`` (generic mode) leaves ``\\(...\\)`` and
  ``\\[...\\]`` in the HTML; they are converted to MathML here with
  ``latex2mathml``, which browsers render natively (no MathJax, no CDN).
  A formula that does not convert is reported as a warning.
"""
from __future__ import annotations

import html
import logging
import re
from pathlib import Path

from latex2mathml.converter import convert as latex_to_mathml

log = logging.getLogger("mkdocs.hooks.build")

ROOT = Path(__file__).resolve().parents[2]
_INCLUDE = re.compile(r"^<!-- include-file: (?P<path>\S+) -->[ \t]*$", re.MULTILINE)
_INLINE = re.compile(r'<span class="arithmatex">\\\((?P<tex>.*?)\\\)</span>', re.DOTALL)
_BLOCK = re.compile(r'<div class="arithmatex">\\\[(?P<tex>.*?)\\\]</div>', re.DOTALL)


def on_page_markdown(markdown, page, config, files):
    def include(match: re.Match) -> str:
        path = ROOT / match.group("path")
        if not path.is_file():
            log.info("include-file: %s does not exist yet; %s shows a note instead", path, page.file.src_path)
            return (f'!!! note "Not generated yet"\n\n'
                    f"    `{match.group('path')}` does not exist in this checkout yet: "
                    f"run the command above to produce it.\n")
        return _demote_headings(path.read_text(encoding="utf-8"), levels=2)

    return _INCLUDE.sub(include, markdown)


def _demote_headings(text: str, levels: int) -> str:
    """Push the Markdown headings of an included file ``levels`` deeper, so that
    they nest under the section that includes it (code blocks are left alone)."""
    lines, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        elif not fenced and re.match(r"#{1,6} ", line):
            line = "#" * levels + line
        lines.append(line)
    return "\n".join(lines) + "\n"


def _mathml(match: re.Match, display: str, page) -> str:
    tex = html.unescape(match.group("tex")).strip()
    try:
        return latex_to_mathml(tex, display=display)
    except Exception as error:  # noqa: BLE001 - any failure is reported, the build goes on
        log.warning("math on %s does not convert to MathML (%s): %s", page.file.src_path, error, tex)
        return match.group(0)


def on_page_content(html_text, page, config, files):
    html_text = _BLOCK.sub(lambda m: f'<div class="math">{_mathml(m, "block", page)}</div>', html_text)
    return _INLINE.sub(lambda m: _mathml(m, "inline", page), html_text)
