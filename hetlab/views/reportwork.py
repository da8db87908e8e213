"""The learner's own work in the report: each graded exercise's last result (``hetlab.store.graded``),
and ``missing``: what a hand-in still lacks (``hetlab report --check``): sections not yet measured,
questions unanswered, exercises not passed.
"""
from __future__ import annotations

import re
from pathlib import Path

from hetlab.course.exercises import EXERCISES
from hetlab.store import graded
from hetlab.views import reportwords
from hetlab.views.reportprivate import clean

RIGHT = "right"


def exercises(page) -> None:
    """One row per graded exercise of the course: its last result on each machine, or "not run"."""
    results = graded.load(page.source)
    page.add("| notebook | exercise | machine | result | when |", "|---|---|---|---|---|")
    for name, ex in sorted(EXERCISES.items(), key=lambda item: (item[1].notebook, item[0])):
        mine = [r for r in results.values() if r["exercise"] == name]
        if not mine:
            page.add(f"| {ex.notebook} | `{name}` | — | not run: run its check cell in notebook {ex.notebook} | — |")
        for r in sorted(mine, key=lambda r: r["role"]):
            page.add(f"| {ex.notebook} | `{name}` | {r['role']} | {r['status']}: {clean(r['line'])} "
                     f"| {str(r.get('date', ''))[:10]} |")
            page.row("exercises", f"{name} on the {r['role']}", r["status"], f"graded on {r['role']}, {r.get('date', '')}")
    passed = {r["exercise"] for r in results.values() if r["status"] == RIGHT}
    page.add("", f"Passed: {len(passed)} of {len(EXERCISES)}. Each grader tries your function on random inputs "
             "against hetlab's own and names the typical mistake it made; the last result on each machine is kept.", "")


def missing(page_text: str, source: str | Path) -> list[str]:
    """What the written page still lacks, one line each: sections not measured, unanswered
    questions, exercises not passed."""
    lines = []
    for line in page_text.splitlines():
        found = re.search(r"[Nn]ot yet (?:measured|described|saved)[^|]*", line)
        if found and not line.startswith("| notebook |"):
            head = line.split("|")[1].strip() if line.startswith("|") else ""
            lines.append(f"not measured: {head + ': ' if head else ''}{found.group(0).strip().rstrip('.')}")
    for key in reportwords.unwritten(page_text):
        lines.append(f"unanswered: your words '{key}' in report.md")
    results = graded.load(source)
    passed = {r["exercise"] for r in results.values() if r["status"] == RIGHT}
    for name, ex in sorted(EXERCISES.items(), key=lambda item: (item[1].notebook, item[0])):
        if name not in passed:
            lines.append(f"exercise not passed: {name} (notebook {ex.notebook})")
    return lines
