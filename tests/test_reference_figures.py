"""docs/reference-figures.md stays reachable and its exact figures stay true.

Every notebook's first cell links its section (an anchor per notebook), the README links the
page, and the figures the page calls exact (parameter and byte counts, the planner's arithmetic
on the assumed speeds) are recomputed here from the library: if a model or the planner changes,
this fails and the page gets new numbers. Times and accuracies are not checked: they vary.
"""
import json
from pathlib import Path

import pytest

from hetlab.arithmetic import estimates, planner, steptime
from hetlab.core.models import count_params, make_model

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "docs" / "reference-figures.md").read_text(encoding="utf-8")
NOTEBOOKS = sorted((ROOT / "notebooks").glob("0[0-9]_*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name[:2])
def test_each_notebook_links_its_own_section(path):
    first = json.loads(path.read_text(encoding="utf-8"))["cells"][0]
    number = path.name[:2]
    assert first["cell_type"] == "markdown"
    assert f"(../docs/reference-figures.md#{number})" in "".join(first["source"])
    assert f'<a id="{number}"></a>\n## {number} · ' in PAGE


def test_the_readme_links_the_page():
    assert "(docs/reference-figures.md)" in (ROOT / "README.md").read_text(encoding="utf-8")


def test_exact_figures_on_the_page_are_what_the_library_computes():
    small, classic = (count_params(make_model(name)) for name in ("small", "classic"))
    wifi, gigabit = planner.WIFI, planner.GIGABIT
    pair, classic_pair = planner.assumed_devices("small"), planner.assumed_devices("classic")
    engine = estimates.ENGINE_S                     # the page's planner figures use the practice cost
    figures = [
        f"{small:,}", f"{classic:,}",
        f"{planner.exchange_bytes(small, 4) // 2:,} B",                      # one fp32 copy: 116,264 B
        f"{planner.exchange_bytes(small, 4):,} B",                           # gradient up + weights down
        f"{planner.exchange_seconds(small, wifi) * 1e3:.2f} ms",
        f"{planner.exchange_seconds(small, gigabit) * 1e3:.2f} ms",
        f"{planner.exchange_seconds(small, wifi, 2) / 8 * 1e3:.2f}",
        f"{planner.exchange_seconds(small, gigabit, 2) / 8 * 1e3:.2f} ms",
        f"t_d(128) = {pair[0](128) * 1e3:.2f} ms",
        f"{planner.exchange_seconds(classic, wifi) * 1e3:.1f} ms per exchange",
        f"ceiling at 128: {steptime.ceiling(*pair, 128):.2f}×, at 8,192: {steptime.ceiling(*pair, 8192):.2f}×",
    ]
    for link, name in ((wifi, "Wi-Fi"), (gigabit, "gigabit")):
        best = planner.advise(pair, small, link, 128, engine_s=engine).best
        figures.append(f"{name}: {best.name}, {best.batch_sizes[0]}:{best.batch_sizes[1]}")
        best = planner.advise(classic_pair, classic, link, 8192, engine_s=engine).best
        figures.append(f"classic at 8,192, {name}: {best.name}, {best.batch_sizes[0]}:{best.batch_sizes[1]}")
    missing = [f for f in figures if f not in PAGE]
    assert not missing, f"docs/reference-figures.md lacks (or has other numbers than) {missing}"
