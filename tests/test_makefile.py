"""The Makefile's own settings: JupyterLab without the news pop-up, and the full-mode notebook run.
Pure file checks against the installed JupyterLab's schema; nothing is started."""
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTIFICATION = "@jupyterlab/apputils-extension:notification"


def recipe(target: str) -> str:
    text = (ROOT / "Makefile").read_text()
    match = re.search(rf"^{re.escape(target)}:.*\n((?:\t.*\n)+)", text, re.M)
    assert match, f"no {target} target in the Makefile"
    return match.group(1)


def test_lab_settings_turn_the_news_prompt_off():
    overrides = json.loads((ROOT / "jupyter" / "settings" / "overrides.json").read_text())
    assert overrides[NOTIFICATION]["fetchNews"] == "false"   # "none" (the default) asks in a pop-up
    plugin, name = NOTIFICATION.split(":")
    schema = json.loads((Path(sys.prefix) / "share" / "jupyter" / "lab" / "schemas" / plugin /
                         f"{name}.json").read_text())
    assert "false" in [choice["const"] for choice in schema["properties"]["fetchNews"]["oneOf"]]
    assert set(overrides[NOTIFICATION]) <= set(schema["properties"])
    text = (ROOT / "Makefile").read_text()
    assert "LAB_SETTINGS := $(CURDIR)/jupyter/settings" in text
    assert "--LabApp.app_settings_dir='$(LAB_SETTINGS)'" in recipe("lab")


def test_test_full_runs_the_notebooks_in_full_mode_with_long_cell_timeouts():
    full = recipe("test-full")
    assert "HETLAB_QUICK=0" in full and "$(NOTEBOOKS)" in full and "--nbval-current-env" in full
    assert "--nbval-cell-timeout=$(CELL_TIMEOUT)" in full and "--nbval-output-timeout=" in full
    assert "test-full" not in recipe("test")
