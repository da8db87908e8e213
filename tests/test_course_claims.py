"""Claims the course makes that were once wrong (issue 70, item 5): each check reads the text a learner
reads (README, docs, notebooks, hetlab's printed lines) for the corrected claim, and where the claim is
about the installed software, checks it against that software. No Ray started, no notebook run."""
import json
import re
from pathlib import Path

import ray

from hetlab.cluster import raylog

ROOT = Path(__file__).resolve().parents[1]


def markdown(name: str) -> list[str]:
    path = next((ROOT / "notebooks").glob(f"{name}_*.ipynb"))
    return ["".join(c["source"]) for c in json.loads(path.read_text(encoding="utf-8"))["cells"]
            if c["cell_type"] == "markdown"]


def version(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text)[:2])


def test_token_auth_is_said_to_be_a_local_default_since_2_59_not_2_52():
    """Ray's docs: token auth came in 2.52, off by default; 2.59 turned it on for local clusters."""
    places = [ROOT / "README.md", ROOT / "docs" / "troubleshooting.md", ROOT / "hetlab" / "cluster" / "raylog.py"]
    for path in places:
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"(default|since) (since )?(Ray )?2\.52", text), f"{path.name}: says 2.52 turned it on"
    assert "since 2.59" in raylog.NOTICE
    assert version(ray.__version__) >= (2, 59), "the notice explains a default this Ray does not have"


def test_01_labels_the_desktop_cards_bottleneck_an_estimate():
    for cell in markdown("01"):
        if "bottleneck" in cell and ("4070" in cell or "desktop card" in cell):
            assert "estimated" in cell, cell


def test_02_asks_no_one_to_carry_the_macs_file():
    text = "\n".join(markdown("02"))
    assert "you carry nothing" in text
    assert not re.search(r"(?i)copy the mac's .*mac\.json", text)
