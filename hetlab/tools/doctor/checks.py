"""One finding of the doctor (``hetlab doctor``, notebook 04): what it found and how to fix it.

Its own module so that ``preflight``, ``oschecks`` and ``winchecks`` share it without importing
each other in a circle.
"""
from __future__ import annotations

from dataclasses import dataclass

OK, WARN, FAIL = "ok", "warn", "FAIL"


@dataclass
class Check:
    """One preflight finding; ``fix`` says what to do when ``status`` is not ok."""

    name: str
    status: str    # OK, WARN or FAIL
    detail: str
    fix: str = ""

    @property
    def ok(self) -> bool:
        return self.status != FAIL

    def __str__(self) -> str:
        tail = f"  → {self.fix}" if self.fix and self.status != OK else ""
        return f"[{self.status:>4}] {self.name}: {self.detail}{tail}"
