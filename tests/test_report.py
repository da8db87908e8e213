"""`hetlab report`'s page without Ray (hetlab.views.report): addresses and token-like strings that
reach a saved file (a machine named by its address) stay out of the page, and a notebook that
has not run yet gets one line, not a figure. The practice-cluster report: tests/test_practice.py."""
import json
import re

from hetlab.arithmetic import measured
from hetlab.views import report


def test_an_address_or_token_in_a_saved_file_stays_out_of_the_page(tmp_path):
    token = "a3f9" * 16
    saved = measured.save_run("09", {"pair_vs_sum": 0.93, "pair_vs_desktop": 1.2, "desktop_samples_per_s": 900.0,
                                     "mac_samples_per_s": 200.0, "pair_samples_per_s": 1020.0}, simulated=False,
                              predictions={"pair ÷ desktop, the search": (1.22, 1.2, f"from {token}")}, where=tmp_path)
    data = json.loads(saved.read_text())
    data["host"] = "192.168.1.20:6379"                      # a machine that names itself by its address
    saved.write_text(json.dumps(data))
    page = report.write(tmp_path / "out", tmp_path).read_text()
    assert "192.168" not in page and token not in page and "(left out)" in page
    assert "| 09 | pair ÷ desktop, the search | 1.22 | 1.2 | 0.98 |" in page
    assert "Not yet measured: run notebook 06." in page
    alts = re.findall(r"!\[([^\]]*)\]\(([^)]+)\)", page)
    assert {png for _, png in alts} == {"steps.png", "predictions.png", "search.png"}
    assert all("simulated" not in alt for alt, png in alts)          # a run on the pair is not simulated
    assert "estimated" in alts[0][0]                                  # no sweep saved: the course's estimates
