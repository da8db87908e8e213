"""`hetlab report`'s page without Ray (hetlab.views.report): tokens, addresses (private ones too) and
host names that reach any saved file stay out of the page, its HTML and its CSV; host names come
back only with --names; provenance reads back as saved; a notebook that has not run yet gets one
line, not a figure. The report after the course on the practice cluster: tests/test_practice.py."""
import json
import re

import pytest

from hetlab.arithmetic import planner
from hetlab.store import measured
from hetlab.arithmetic.steady import steady
from hetlab.views import report

TOKEN = "a3f9" * 16
ADDRESSES = ("10.4.7.21", "172.16.0.9", "172.31.255.2", "192.168.1.20:6379")
HOSTS = {"desktop": "anas-rtx-tower", "mac": "Anas-MacBook-Air.local"}


def _seed(where):
    """Every file the report reads, each naming its machine and an address or token somewhere."""
    speed = steady([0.1] * 14, 128)
    for n, role in enumerate(("desktop", "mac")):
        measured.save(role, {"device": "cpu", "name": f"card at {ADDRESSES[n]}"}, [1, 64], {"small": [50.0, 900.0]},
                      where=where, speeds={"small": speed})
    runs = {"01": ({"accuracy": 0.99, "epochs": 1, "batch": 128}, {}),
            "02": ({"batch": 128}, {"the pair's ceiling": (1.1, None, f"from {ADDRESSES[2]}", "yours")}),
            "05": ({"engine_s": 0.004, "link_s": 0.001}, {}),
            "06": ({"tuned_split": [50, 14], "efficiency_tuned": 0.9, "efficiency_equal": 0.6}, {}),
            "09": ({"pair_vs_sum": 0.93, "pair_vs_desktop": 1.2, "desktop_samples_per_s": 900.0,
                    "mac_samples_per_s": 200.0, "pair_samples_per_s": 1020.0, "best_accuracy": 0.98,
                    "best_config": {"lr": 0.003, "optimizer": "adam"}},
                   {"pair ÷ desktop, the search": (1.22, 1.2, f"from {TOKEN}", "yours")})}
    for nb, (figures, predictions) in runs.items():
        measured.save_run(nb, figures, simulated=False, predictions=predictions, where=where)
    measured.save_engine(0.004, 0.001, where=where)
    measured.save_figure("link", {"mbit_s": 300.0, "mbit_s_low": 250.0, "mbit_s_high": 320.0, "rtt_ms": 4.0,
                                  "rtt_ms_low": 3.5, "rtt_ms_high": 6.0, "sizes_mb": [1, 16],
                                  "mbit_s_by_size": [200.0, 300.0], "repeats": 3, "echoes": 10}, where)
    measured.save_figure("machines", {"machines": {role: {"hostname": host, "os": f"Linux at {ADDRESSES[3]}",
                                                          "origin": "pair"} for role, host in HOSTS.items()}}, where)
    for p in where.glob("*.json"):                       # each file's host: the machine's own name, or its address
        data = json.loads(p.read_text())
        data["host"] = HOSTS["mac"] if p.stem == "mac" else (ADDRESSES[3] if p.stem == "notebook-09" else HOSTS["desktop"])
        p.write_text(json.dumps(data))


def test_no_token_address_or_host_name_from_any_file_reaches_the_page_html_or_csv(tmp_path):
    _seed(tmp_path)
    page = report.write(tmp_path / "out", tmp_path)
    shown = {p.name: p.read_text() for p in (page, page.with_suffix(".html"), page.parent / "figures.csv")}
    for name, text in shown.items():
        for secret in (TOKEN, *HOSTS.values(), *(a.split(":")[0] for a in ADDRESSES)):
            assert secret not in text, (name, secret)
    text = shown["report.md"]
    assert "measured on desktop" in text and "measured on mac" in text and "(left out)" in text
    assert "| 09 | pair ÷ desktop, the search | 1.22 | 1.2 | 0.98 |" in text
    assert "| 02 | the pair's ceiling | 1.1 | 1.2 (09's pair ÷ desktop) | 1.09 |" in text
    assert "held-out accuracy 98.00%" in text and "lr 0.003, optimizer adam" in text
    assert "test accuracy 99.00%" in text and "not yet measured: run notebook 05" in text    # 05 saved no technique
    with_names = report.write(tmp_path / "named", tmp_path, names=True).read_text()
    assert HOSTS["desktop"] in with_names and not any(a.split(":")[0] in with_names for a in ADDRESSES)


def test_a_practice_or_rehearsal_figure_never_reads_as_your_pairs(tmp_path, monkeypatch):
    monkeypatch.setenv("HETLAB_MEASURED", str(tmp_path))
    line = planner.assumed_devices("small")
    assert "practice" in planner.advise(line, 30_000, planner.GIGABIT, 128).note   # the course's default engine
    measured.save_engine(0.004, simulated=True, where=tmp_path)
    engine = measured.engine_cost(tmp_path)
    assert "simulated" in engine.source and "practice" in engine.source and "not your pair" in engine.source
    assert "practice" in planner.engine_note(engine) and planner.engine_note(0.004) == ""
    monkeypatch.setenv("HETLAB_REHEARSAL", "desktop")
    measured.save_engine(0.004, where=tmp_path)
    assert "rehearsal" in measured.engine_cost(tmp_path).source
    assert measured.load_run("05", tmp_path) is None
    measured.save_run("05", {"engine_s": 0.004}, simulated=False, where=tmp_path)
    assert measured.load_run("05", tmp_path)["origin"] == "rehearsal"
    monkeypatch.delenv("HETLAB_REHEARSAL")
    measured.save_engine(0.004, where=tmp_path)
    assert planner.engine_note(measured.engine_cost(tmp_path)) == ""          # your pair's own: no note
    own = measured.engine_cost()                                              # the caller reads it, the planner no file
    assert planner.advise(line, 30_000, planner.GIGABIT, 128, engine_s=own).note == ""   # the pair's own engine
    measured.save_engine(0.004, simulated=True)
    assert "practice" in planner.advise(line, 30_000, planner.GIGABIT, 128, engine_s=measured.engine_cost()).verdict


def test_a_second_save_of_one_run_adds_to_it_and_a_bad_figure_is_refused(tmp_path):
    measured.save_run("05", {"engine_s": 0.004}, simulated=True, where=tmp_path)
    measured.save_run("05", {}, simulated=True, add=True, where=tmp_path, speeds={"sync": steady([0.1] * 8, 64)})
    run = measured.load_run("05", tmp_path)
    assert run["figures"]["engine_s"] == 0.004 and run["speeds"]["sync"]["windows"] and run["origin"] == "practice"
    measured.save_run("05", {"link_s": 0.001}, simulated=True, where=tmp_path)          # a new run replaces it
    assert "engine_s" not in measured.load_run("05", tmp_path)["figures"]
    with pytest.raises(measured.HetlabError, match="finite"):
        measured.save_run("05", {"engine_s": float("nan")}, simulated=True, where=tmp_path)


def test_nothing_run_yet_gives_one_line_per_section_and_no_figure(tmp_path):
    measured.save_run("09", {"pair_vs_sum": 0.93, "pair_vs_desktop": 1.2, "desktop_samples_per_s": 900.0,
                             "mac_samples_per_s": 200.0, "pair_samples_per_s": 1020.0}, simulated=False, where=tmp_path)
    page = report.write(tmp_path / "out", tmp_path).read_text()
    assert "Not yet measured: run notebook 06." in page and "Not yet described" in page
    alts = re.findall(r"!\[([^\]]*)\]\(([^)]+)\)", page)
    assert {png for _, png in alts} == {"steps.png", "search.png"}
    assert all("simulated" not in alt for alt, png in alts)          # a run on the pair is not simulated
    assert "estimated" in alts[0][0]                                  # no sweep saved: the course's estimates
