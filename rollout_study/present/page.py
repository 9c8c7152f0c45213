"""The HTML page around an executed notebook (study.html, report.html).

nbconvert's lab page inlines JupyterLab's whole stylesheet, about 250 KB, into every page: half of what the
published reports' HTML weighed (8.7 of 17 MiB), and the device calls carry the working tree under a 64 MiB limit.
The basic template gives the cells alone; this page holds them with a stylesheet of a few lines (the tables'
alignment comes with them, from notebook.table_html; study.html, which shows its code, gets pygments' colours
too). No script and no network: a page opens offline, its figures beside it. A table wider than the page scrolls
in its place (as GitHub shows a markdown table), not the whole page: the kernels table's long names took an
all-engines report 47 pixels past a 1,280-pixel window, and 11 of the 38 published pages at 1,024. Printed, a
scrolling table shows its visible part alone: there the tables wrap to the paper (PRINT), and code lines too.
"""
from __future__ import annotations

import html
import re

# A table wider than the page scrolls in its place; the contents list under the title (index.py's page too)
WIDE_TABLES = "table { display: block; width: max-content; max-width: 100%; overflow-x: auto; }"
# Printed (or saved as PDF), a scrolling table is cut at the paper's edge: there a table wraps to the page, its
# numbers whole, a cell with a word past notebook.LONG_WORD characters (a compiled kernel's name) anywhere in it
PRINT = """@media print {
body { max-width: none; margin: 0; padding: 0; }
table { display: table; width: auto; max-width: 100%; font-size: 10px; }
th, td { padding: 1px 4px; overflow-wrap: break-word; }
td.n { white-space: nowrap; }
td.w { overflow-wrap: anywhere; }
pre { white-space: pre-wrap; overflow-wrap: anywhere; }
img, tr { break-inside: avoid; }
h1, h2, h3 { break-after: avoid; }
a.anchor-link { display: none; }
}"""
CONTENTS = "nav.contents { font-size: 14px; margin: 0.6em 0 1em; }\nnav.contents ul { margin: 0.2em 0; }"
STYLE = f"""
body {{ font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; font-size: 15px; line-height: 1.45;
       color: #1f2328; max-width: 1280px; margin: 2em auto; padding: 0 1em; }}
table {{ border-collapse: collapse; margin: 0.6em 0; font-size: 13px; }}
{WIDE_TABLES}
th, td {{ border: 1px solid #d0d7de; padding: 3px 7px; vertical-align: top; }}
th {{ background: #f6f8fa; }}
tbody tr:nth-child(even) {{ background: #fafbfc; }}
img {{ max-width: 100%; height: auto; }}
code, pre {{ font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 0.92em; }}
pre {{ background: #f6f8fa; padding: 0.6em; overflow-x: auto; }}
.input_area pre {{ border-left: 3px solid #d0d7de; }}
.output_stderr pre, .output_error pre {{ background: #fff1f0; }}
a.anchor-link {{ visibility: hidden; margin-left: 0.3em; text-decoration: none; }}
h1:hover > a.anchor-link, h2:hover > a.anchor-link, h3:hover > a.anchor-link {{ visibility: visible; }}
{CONTENTS}
{PRINT}
""".strip()
SECTION = re.compile(r"<h2(?P<attributes>[^>]*)>(?P<inner>.*?)</h2>", re.S)
ID = re.compile(r"""(?:^|\s)id=(["'])(.*?)\1""")  # not data-id=; the value HTML-escaped, as written
# Two sections or more: a one-model sweep report's second one starts about 12,000 pixels down its page
CONTENTS_FROM = 2


def code_style() -> str:
    """Pygments' colours for the code cells' highlighting (about 5 KB), for a page that shows its code."""
    from pygments.formatters import HtmlFormatter

    return HtmlFormatter(style="default").get_style_defs(".highlight")


def with_contents(cells: str) -> str:
    """`cells` with a unique id on every section heading (h2) and, where there are CONTENTS_FROM or more, their list
    under the page's title. A sweep report runs to about 150,000 pixels (130 printed pages), and its model sections,
    which the notebook's code writes (markdown cells alone get ids from nbconvert), had no anchor to link to. A
    heading keeps the id it has unless an earlier heading holds it (nbconvert gives two "## Notes" one id)."""
    taken = {html.unescape(found.group(2)) for found in ID.finditer(cells)}
    claimed, sections = set(), []

    def unique(stem: str) -> str:
        anchor, n = stem, 0
        while anchor in taken:
            n += 1
            anchor = f"{stem}-{n}"
        taken.add(anchor)
        return anchor

    def anchored(found: re.Match) -> str:
        attributes, inner = found.group("attributes"), found.group("inner")
        name = " ".join(html.unescape(re.sub(r"<[^>]+>", "", inner)).replace("\u00b6", "").split())
        given = ID.search(attributes)
        anchor = html.unescape(given.group(2)) if given else None
        if anchor is None or anchor in claimed:
            new = unique(re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-") or "section")
            if given:  # its own pilcrow link follows it
                attributes = ID.sub(f' id="{html.escape(new)}"', attributes, count=1)
                inner = inner.replace(f'href="#{given.group(2)}"', f'href="#{html.escape(new)}"')
            else:
                attributes += f' id="{html.escape(new)}"'
            anchor = new
        claimed.add(anchor)
        sections.append((anchor, name))
        return f"<h2{attributes}>{inner}</h2>"

    cells = SECTION.sub(anchored, cells)
    if len(sections) < CONTENTS_FROM:
        return cells
    items = "".join(f'<li><a href="#{html.escape(a)}">{html.escape(n)}</a></li>' for a, n in sections)
    contents = f'<nav class="contents"><b>Contents</b><ul>{items}</ul></nav>'
    title_end = cells.find("</h1>")  # under the title where it opens the page, else first
    at = title_end + len("</h1>") if 0 <= title_end < cells.find("<h2") else 0
    return cells[:at] + contents + cells[at:]


def page(title: str, cells: str, with_code: bool = False) -> str:
    """A whole page: `cells`, the basic template's HTML of a notebook's cells, under `title`, with its contents."""
    style = f"{STYLE}\n{code_style()}" if with_code else STYLE
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head><meta charset="utf-8">\n'
            f'<meta name="viewport" content="width=device-width, initial-scale=1.0">\n'
            f"<title>{html.escape(title)}</title>\n<style>\n{style}\n</style>\n</head>\n<body>\n"
            f"{with_contents(cells)}\n</body>\n</html>\n")
