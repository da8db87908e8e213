"""The learner's own words in the report (``hetlab report``): blocks the learner writes, kept across rewrites.

Each block sits between ``<!-- your words: ID -->`` and ``<!-- end of your words -->`` in
``report.md``. When ``hetlab report`` writes the page again with new figures, it reads the old page
first and puts each written block back where it belongs; a block still holding the placeholder
shows as unwritten. Beside the fixed blocks, the report asks about the learner's own figures (``ask``:
why this efficiency, why this ratio), one block per technique and prediction, kept the same way.
"""
from __future__ import annotations

import re
from pathlib import Path

UNWRITTEN = "*(unwritten: replace this line with your own words)*"
UNANSWERED = "*(unanswered: replace this line with your answer, from the figures above)*"
_EMPTY = (UNWRITTEN, UNANSWERED)
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
    return {key: text.strip() for key, text in found if text.strip() and text.strip() not in _EMPTY}


def block(key: str, kept: dict[str, str]) -> list[str]:
    """The lines of one block: its question, then the learner's text (or the placeholder)."""
    return [f"**{QUESTIONS[key]}**", "", f"<!-- your words: {key} -->", kept.get(key, UNWRITTEN),
            "<!-- end of your words -->", ""]


def key(*parts: str) -> str:
    """A block's id from words that stay the same across rewrites ("why", "05", "async")."""
    return "-".join(re.sub(r"[^a-z0-9]+", "-", str(p).lower()).strip("-") for p in parts)


def ask(key_: str, question: str, kept: dict[str, str]) -> list[str]:
    """A question about the learner's own figures, then their answer (or "unanswered")."""
    return [f"**{question}**", "", f"<!-- your words: {key_} -->", kept.get(key_, UNANSWERED),
            "<!-- end of your words -->", ""]


def unwritten(text: str) -> list[str]:
    """The ids of the blocks of a page still unwritten or unanswered."""
    return [key for key, body in _BLOCK.findall(text) if body.strip() in _EMPTY]
