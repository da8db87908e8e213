"""The report made to share (``hetlab report``): one self-contained HTML file, plots inlined, and the raw
figures as CSV beside the Markdown page. A mail or a course site opens the HTML with nothing else.

The HTML is written from the page's own Markdown (the small part of Markdown the report uses:
headings, paragraphs, lists, tables, images, bold, italics, code), so both say the same.
"""
from __future__ import annotations

import base64
import csv
import html
import re
from pathlib import Path

CSV_COLUMNS = ("section", "figure", "value", "low", "high", "unit", "repeats", "source")


def _inline(text: str, folder: Path) -> str:
    text = html.escape(text, quote=False)

    def image(m):
        png = folder / m.group(2)
        data = base64.b64encode(png.read_bytes()).decode("ascii") if png.is_file() else ""
        return f'<img alt="{html.escape(m.group(1))}" src="data:image/png;base64,{data}">'

    text = re.sub(r"!\[([^\]]*)\]\(([^)]+)\)", image, text)
    text = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", text)
    text = re.sub(r"(?<![\w*])\*(?!\s)(.+?)\*(?!\w)", r"<em>\1</em>", text)
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", text)


def to_html(markdown: str, folder: Path, title: str) -> str:
    """``markdown`` (the report's page) as one HTML document with every PNG of ``folder`` inlined."""
    out, para, rows, items = [], [], [], []

    def flush():
        if para:
            out.append(f"<p>{_inline(' '.join(para), folder)}</p>")
            para.clear()
        if items:
            out.append("<ul>" + "".join(f"<li>{_inline(i, folder)}</li>" for i in items) + "</ul>")
            items.clear()
        if rows:
            head, *body = [r for r in rows if not re.fullmatch(r"\|[-|: ]+\|", r)]
            cells = lambda r: [c.strip() for c in r.strip().strip("|").split("|")]  # noqa: E731
            out.append("<table><tr>" + "".join(f"<th>{_inline(c, folder)}</th>" for c in cells(head)) + "</tr>"
                       + "".join("<tr>" + "".join(f"<td>{_inline(c, folder)}</td>" for c in cells(r)) + "</tr>"
                                 for r in body) + "</table>")
            rows.clear()

    for line in markdown.splitlines():
        if line.startswith("<!--"):
            flush()
            out.append(line)
        elif m := re.match(r"(#{1,4}) (.*)", line):
            flush()
            out.append(f"<h{len(m.group(1))}>{_inline(m.group(2), folder)}</h{len(m.group(1))}>")
        elif line.startswith("|"):
            rows.append(line)
        elif line.startswith("- "):
            items.append(line[2:])
        elif not line.strip():
            flush()
        else:
            para.append(line)
    flush()
    style = ("body{font-family:sans-serif;max-width:60em;margin:2em auto;line-height:1.45}"
             "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #bbb;padding:.25em .5em;"
             "text-align:left;vertical-align:top}img{max-width:100%}code{background:#f3f3f3}")
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title>"
            f"<style>{style}</style></head><body>\n" + "\n".join(out) + "\n</body></html>\n")


def write_csv(rows: list[dict], target: Path) -> Path:
    """The report's figures, one a row (``CSV_COLUMNS``), for a spreadsheet or a grader's script."""
    with target.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: row.get(k, "") for k in CSV_COLUMNS})
    return target
