"""`hetlab report`'s page without Ray (hetlab.views.report): tokens, addresses (private ones too) and
host names that reach any saved file stay out of the page and its HTML; provenance reads back as saved; a notebook that has not run yet gets one line. The report after the course on the practice cluster: tests/test_practice.py."""
import json

import pytest

from hetlab.arithmetic import outcome
from hetlab.store import measured
from hetlab.arithmetic.steady import steady
from hetlab.course.exercises import EXERCISES
from hetlab.tools.cli import main
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


def test_no_token_address_or_host_name_from_any_file_reaches_the_page_or_html(tmp_path):
    _seed(tmp_path)
    page = report.write(tmp_path / "out", tmp_path)
    shown = {p.name: p.read_text() for p in (page, page.with_suffix(".html"))}
    for name, text in shown.items():
        for secret in (TOKEN, *HOSTS.values(), *(a.split(":")[0] for a in ADDRESSES)):
            assert secret not in text, (name, secret)
    text = shown["report.md"]
    assert "measured on desktop" in text and "measured on mac" in text and "(left out)" in text
    assert "| 09 | pair ÷ desktop, the search | 1.22 | 1.2 | 0.98 |" in text
    assert "| 02 | the pair's ceiling | 1.1 | not yet measured | — |" in text        # 02 measures no pair
    assert "held-out accuracy 98.00%" in text and "lr 0.003, optimizer adam" in text
    assert "test accuracy 99.00%" in text and "not yet measured: run notebook 05" in text    # 05 saved no technique


def test_a_practice_figure_or_a_host_playing_a_machine_never_reads_as_your_pairs(tmp_path, monkeypatch):
    monkeypatch.setenv("HETLAB_MEASURED", str(tmp_path))
    measured.save_engine(0.004, simulated=True, where=tmp_path)
    engine = measured.engine_cost(tmp_path)
    assert "simulated" in engine.source and "practice" in engine.source and "not your pair" in engine.source
    monkeypatch.setenv("HETLAB_ORIGIN", "a Linux host playing the desktop")
    measured.save_engine(0.004, where=tmp_path)
    cost = measured.engine_cost(tmp_path)
    assert "a Linux host playing the desktop, not your pair" in cost.source
    assert measured.whose(desktop=cost.source) == "not yours"
    assert measured.load_run("05", tmp_path) is None
    measured.save_run("05", {"engine_s": 0.004}, simulated=False, where=tmp_path)
    run = measured.load_run("05", tmp_path)
    assert run["origin"] == "a Linux host playing the desktop"
    assert "a Linux host playing the desktop, not your pair" in report.run_label(run)
    monkeypatch.delenv("HETLAB_ORIGIN")
    measured.save_engine(0.004, where=tmp_path)
    assert "not your pair" not in measured.engine_cost(tmp_path).source          # your pair's own


def test_a_second_save_of_one_run_adds_to_it_and_a_bad_figure_is_refused(tmp_path):
    measured.save_run("05", {"engine_s": 0.004}, simulated=True, where=tmp_path)
    measured.save_run("05", {}, simulated=True, add=True, where=tmp_path, speeds={"sync": steady([0.1] * 8, 64)})
    run = measured.load_run("05", tmp_path)
    assert run["figures"]["engine_s"] == 0.004 and run["speeds"]["sync"]["windows"] and run["origin"] == "practice"
    measured.save_run("05", {"link_s": 0.001}, simulated=True, where=tmp_path)          # a new run replaces it
    assert "engine_s" not in measured.load_run("05", tmp_path)["figures"]
    with pytest.raises(measured.HetlabError, match="finite"):
        measured.save_run("05", {"engine_s": float("nan")}, simulated=True, where=tmp_path)


def test_nothing_run_yet_gives_one_line_per_section(tmp_path):
    measured.save_run("09", {"pair_vs_sum": 0.93, "pair_vs_desktop": 1.2, "desktop_samples_per_s": 900.0,
                             "mac_samples_per_s": 200.0, "pair_samples_per_s": 1020.0}, simulated=False, where=tmp_path)
    page = report.write(tmp_path / "out", tmp_path).read_text()
    assert "Not yet measured: run notebook 06." in page and "Not yet described" in page
    assert "| desktop | not measured: run notebook 02 there |" in page and "Pair ÷ sum: 0.93" in page
    assert "simulated" not in page.split("## 6")[1].split("## 7")[0]   # a search on the pair is not simulated


def _one_model_run(batch, split):
    """What notebook 07 saves for one model trained on both machines (``RayTrainResult.technique``)."""
    return {"speed": steady([0.1] * 14, batch).as_dict(), "efficiency": 0.7, "sum_alone": 2000.0, "comm_share": 0.2,
            "seconds": 1.4, "accuracy": 0.95, "target": outcome.TARGET,
            **outcome.conditions(split, ("desktop", "mac"), 14, 14 * batch), **outcome.first_crossing([])}


def test_each_technique_row_has_its_conditions_a_quick_run_is_marked_and_time_to_target_is_a_crossing(
        tmp_path, monkeypatch):
    monkeypatch.setenv("HETLAB_QUICK", "1")
    sync = {**_one_model_run(64, [32, 32]), **outcome.first_crossing([(0.5, 0.6), (1.1, 0.93), (1.6, 0.95)],
                                                                    every=5, test_samples=500)}
    local = {**_one_model_run(64, [48, 16]), **outcome.first_crossing([(0.5, 0.6), (1.0, 0.8)], every=5,
                                                                     test_samples=500)}
    measured.save_run("05", {}, simulated=False, where=tmp_path, speeds={"sync": sync, "async": local})
    page = report.write(tmp_path / "out", tmp_path).read_text()
    rows = {line.split(" | ")[0][2:]: line for line in page.splitlines() if line.startswith("| parameter server")}
    assert "batch 64, split 32:32 (desktop, mac), 14 steps, 896 samples, QUICK mode" in rows["parameter server, per-step sync"]
    assert "1.1 s of training (checked every 5 steps on 500 test samples)" in rows["parameter server, per-step sync"]
    assert "not reached in 1.0 s (checked every 5 steps" in rows["parameter server, async"]
    assert all(report.QUICK_MARK in row for row in rows.values())
    assert "not checked during the run" in report.time_to_target(_one_model_run(64, [32, 32]))
    why = report.key("why", "parameter server, per-step sync")       # a question about their own figure
    assert f"<!-- your words: {why} -->\n{report.UNANSWERED}" in page
    mine = "The mac waited for the desktop's messages: the communication share is 20 %."
    (tmp_path / "out" / "report.md").write_text(page.replace(f"{why} -->\n{report.UNANSWERED}", f"{why} -->\n{mine}"))
    again = report.write(tmp_path / "out", tmp_path).read_text()
    assert f"{why} -->\n{mine}" in again and why not in report.unwritten(again)


def test_the_exercises_results_are_in_the_report_and_check_names_what_is_missing(tmp_path, capsys):
    measured.save_graded("samples_per_s", "02", "right", "right: agrees", role="mac", where=tmp_path)
    measured.save_graded("weighted_average", "05", "wrong", "not yet: a plain mean", role="desktop", where=tmp_path)
    measured.keep_graded({"x": {"exercise": "weighted_average", "role": "desktop", "status": "right", "line": "right",
                       "date": "2000-01-01T00:00"}}, tmp_path)                 # older: the later result stays
    measured.save_run("01", {"accuracy": 0.99, "epochs": 1, "batch": 128}, simulated=False, where=tmp_path)
    out = tmp_path / "report"
    assert main(["report", "--measured", str(tmp_path), "--check"]) == 1
    said, page = capsys.readouterr().out, (out / "report.md").read_text()
    assert "| 02 | `samples_per_s` | mac | right: right: agrees |" in page
    assert "| 05 | `weighted_average` | desktop | wrong: not yet: a plain mean |" in page and f"Passed: 1 of {len(EXERCISES)}" in page
    assert "run `hetlab report` again before sending report.html" in said and report.HOW_TO_HAND_IN in page
    assert "exercise not passed: weighted_average (notebook 05)" in said and "samples_per_s (notebook" not in said
    assert "not measured: Not yet measured: run notebook 08's link exercise" in said
    assert "unanswered: your words 'limitations'" in said


def test_a_techniques_conditions_and_time_to_target_come_from_its_own_records():
    """outcome.technique on records as the parameter server writes them (built here: a record is plain
    data): the split desktop first, the global batch, the steps, and the first check at the target."""
    from hetlab.ps.records import StepRecord
    records = [StepRecord(step, worker, b, 0.01, 0.0, 0.0, 0.001, 0.1, step_s=0.02)
               for step in range(12) for worker, b in (("mac", 16), ("desktop", 48))]
    checked = {"checks": [(0.08, 0.5), (0.16, 0.91), (0.24, 0.95)], "every": 4, "test_samples": 1000}
    t = outcome.technique(records, 0.95, checked=checked)
    assert (t["batch"], t["split"], t["roles"], t["steps"], t["samples"]) == (64, [48, 16], ["desktop", "mac"], 12, 768)
    assert (t["time_to_target_s"], t["check_every_steps"], t["check_samples"]) == (0.16, 4, 1000)
    late = outcome.technique(records, 0.95, checked={**checked, "checks": checked["checks"][:1]})
    assert late["time_to_target_s"] is None and late["checked_s"] == 0.08      # not reached in its checks
    assert outcome.technique(records, 0.95)["checks"] == 0                     # read once, at the end
    rounds = outcome.technique(records, 0.95, checked={**checked, "unit": "rounds"})   # local SGD's records
    line = report.conditions(rounds, "full")
    assert "12 rounds, 768 samples" in line and "checked every 4 rounds" in report.time_to_target(rounds)


def test_the_html_is_the_pages_markdown_escaped_with_the_learners_words_in_it(tmp_path):
    """What a learner writes reaches report.html as text (a tag in it is shown, never run); the page's
    tables and headings are HTML ones; the words' markers stay comments, so the HTML reads as the page."""
    measured.save_run("01", {"accuracy": 0.99, "epochs": 1, "batch": 128}, simulated=False, where=tmp_path)
    out = tmp_path / "out"
    page = report.write(out, tmp_path).read_text()
    mine = "The <script>alert(1)</script> tag & **the desktop** waited."
    (out / "report.md").write_text(page.replace(report.UNWRITTEN, mine, 1))
    report.write(out, tmp_path)
    html = (out / "report.html").read_text()
    assert "&lt;script&gt;alert(1)&lt;/script&gt; tag &amp; <strong>the desktop</strong> waited." in html
    assert "<script>" not in html and "<!-- your words: surprised-01-02 -->" in html
    assert "<h2>3 · Each machine alone (notebooks 01, 02)</h2>" in html and "<th>machine</th>" in html
    assert "<title>What my Mac and my desktop did</title>" in html


def test_the_report_shows_the_source_the_learner_wrote_for_each_graded_function(tmp_path, monkeypatch, capsys):
    """Issue 70: a teacher reads the learner's code, not only "passed". check keeps what was written
    (a function's source, a class's methods when the class's own cannot be found), the report prints it."""
    from hetlab.course import grading

    def tasks_wall_time(n_tasks, slots, seconds):
        waves = -(-n_tasks // slots)          # the learner's own way to round up
        return waves * seconds

    monkeypatch.setenv("HETLAB_MEASURED", str(tmp_path))
    grading.check("tasks_wall_time", tasks_wall_time)
    (kept,) = measured.load_graded().values()
    assert kept["status"] == "right" and "waves = -(-n_tasks // slots)" in kept["source"]
    namespace = {}
    exec("class Worker:\n    def gradient(self):\n        return 1\n", namespace)   # no file holds its source
    assert "could not be read" in grading.written(namespace["Worker"])
    from hetlab.core.stream import Stream
    assert "def take(self, size" in grading.written(Stream)                        # a class a file holds
    measured.save_run("01", {"accuracy": 0.99, "epochs": 1, "batch": 128}, simulated=False, where=tmp_path)
    out = tmp_path / "report"
    main(["report", "--measured", str(tmp_path)])
    page = (out / "report.md").read_text()
    assert "What you wrote for `tasks_wall_time` (notebook 03" in page and "    waves = -(-n_tasks // slots)" in page
    assert "waves = -(-n_tasks // slots)" in (out / "report.html").read_text()


def test_each_guess_is_kept_beside_what_was_measured_and_check_names_those_not_typed(tmp_path, monkeypatch, capsys):
    """Issue 70: a "Predict first" guess is typed in a cell, kept, and shown beside the figure the
    notebook then measured; `hetlab report --check` lists each question still without a guess."""
    from hetlab.course import guesses
    monkeypatch.setenv("HETLAB_MEASURED", str(tmp_path))
    guesses.guess("05-desktop-idle", 0.5)
    guesses.measured_as("05-desktop-idle", 0.71)
    guesses.measured_as("03-two-tasks-s", 1.04)     # measured, with no guess typed
    guesses.guess("02-best-batch", None)            # the committed cell: nothing kept
    said = capsys.readouterr().out
    assert "measured 0.71; you guessed 0.5" in said and "measured 1.04; no guess typed above" in said
    with pytest.raises(measured.HetlabError, match="give a number"):
        guesses.guess("05-desktop-idle", "most of it")
    with pytest.raises(measured.HetlabError, match="no question"):
        guesses.guess("05-idle", 0.5)
    measured.save_run("01", {"accuracy": 0.99, "epochs": 1, "batch": 128}, simulated=False, where=tmp_path)
    out = tmp_path / "report"
    assert main(["report", "--measured", str(tmp_path), "--check"]) == 1
    page, said = (out / "report.md").read_text(), capsys.readouterr().out
    assert "| 05 | the share of each step the desktop sits idle, equal split | 0.5 | 0.71 |" in page
    assert "| 03 | seconds for two one-second tasks | no guess typed | 1.04 |" in page
    assert "no guess typed: seconds for two one-second tasks (notebook 03" in said
    assert "no guess typed: the share of each step the desktop sits idle" not in said
