"""The learner's own words in the report (``hetlab report``): blocks the learner writes, kept across rewrites.

Each block sits between ``<!-- your words: ID -->`` and ``<!-- end of your words -->`` in
``report.md``. When ``hetlab report`` writes the page again with new figures, it reads the old page
first and puts each written block back where it belongs; a block still holding the placeholder
shows as unwritten.
"""
from __future__ import annotations

import re
from pathlib import Path

UNWRITTEN = "*(unwritten: replace this line with your own words)*"
_BLOCK = re.compile(r"<!-- your words: ([\w-]+) -->\n(.*?)\n<!-- end of your words -->", re.S)

# (id, the question): one per notebook's figures, then the two at the end
QUESTIONS = {
    "surprised-01-02": "Each machine alone (notebooks 01, 02): what surprised you?",
    "surprised-05-07-08": "The techniques on the pair (notebooks 05, 07, 08): what surprised you?",
    "surprised-06": "The split (notebook 06): what surprised you?",
    "surprised-09": "The search (notebook 09): what surprised you?",
    "limitations": "Limitations: what these figures cannot tell, and why",
    "would-change": "What you would change, with these two machines or with others",
}


def read(page: Path) -> dict[str, str]:
    """id → the learner's text, from an earlier ``report.md`` (unwritten blocks left out)."""
    if not page.is_file():
        return {}
    found = _BLOCK.findall(page.read_text(encoding="utf-8"))
    return {key: text.strip() for key, text in found if text.strip() and text.strip() != UNWRITTEN}


def block(key: str, kept: dict[str, str]) -> list[str]:
    """The lines of one block: its question, then the learner's text (or the placeholder)."""
    return [f"**{QUESTIONS[key]}**", "", f"<!-- your words: {key} -->", kept.get(key, UNWRITTEN),
            "<!-- end of your words -->", ""]


def unwritten(text: str) -> list[str]:
    """The ids of the blocks of a page still unwritten."""
    return [key for key, body in _BLOCK.findall(text) if body.strip() == UNWRITTEN]
