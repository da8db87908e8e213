"""Every notebook's first output names this kernel's machine and its role, and notebooks 03–09 stop in one
line where this machine is not the head of the pair asked for (issue 70, item 3): ``hetlab.pair.this_kernel``.

Nothing is faked: the pair is a real ``pair.json`` in a figures folder of the test's own, and this machine's
addresses are its own. The one thing that cannot exist here is the other machine: it gets an address of TEST-NET-2 (RFC 5737)
that this machine does not hold (checked). No Ray starts: the line is read before any."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hetlab import pair as pairs
from hetlab.cluster.joining import addresses_here
from hetlab.errors import HetlabError
from hetlab.store import saved_pair
from hetlab.vocab import ADDRESS_ENV, MEASURED_ENV, RAY_ADDRESS_ENV

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
ELSEWHERE, FARTHER = "198.51.100.10", "198.51.100.11"   # the other machine, and a third address
MINE = sorted(addresses_here())
assert ELSEWHERE not in MINE and FARTHER not in MINE


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.setenv(MEASURED_ENV, str(tmp_path))
    monkeypatch.delenv(ADDRESS_ENV, raising=False)
    monkeypatch.delenv(RAY_ADDRESS_ENV, raising=False)
    return tmp_path


needs_an_address = pytest.mark.skipif(not MINE, reason="this machine holds no address but loopback")


def test_with_no_pair_nothing_stops_and_the_line_names_this_machine(folder, capsys):
    for notebook in ("00", "05", "09"):
        line = pairs.this_kernel(notebook)
        assert line.startswith("this kernel: ") and "practice cluster" in line
    assert capsys.readouterr().out.count("this kernel: ") == 3


@needs_an_address
def test_a_notebook_from_03_on_stops_in_one_line_on_the_mac_of_the_saved_pair(folder, capsys):
    saved_pair.save(ELSEWHERE, MINE[0])               # this machine is the Mac; the desktop is the head
    for notebook in pairs.ON_THE_HEAD:
        with pytest.raises(HetlabError) as stopped:
            pairs.this_kernel(notebook)
        line = str(stopped.value)
        assert "\n" not in line and f"the head, the desktop ({ELSEWHERE})" in line and "the Mac" in line
        assert f"ssh -N -L 8889:127.0.0.1:8888 USER@{ELSEWHERE}" in line and "JupyterLab" in line
    for notebook in ("00", "01", "02"):                 # each machine runs these itself
        assert pairs.this_kernel(notebook).startswith("this kernel: ")
    assert "the Mac, not the head of your pair" in capsys.readouterr().out


@needs_an_address
def test_on_the_head_nothing_stops_and_the_line_says_so(folder):
    saved_pair.save(MINE[0], ELSEWHERE)
    assert "the desktop, the head of your pair" in pairs.this_kernel("07")


@needs_an_address
def test_it_keys_on_the_head_not_on_the_macs_role(folder, monkeypatch):
    """A Mac can be the head (docs/windows.md): the head's address decides, not the role of this machine."""
    monkeypatch.setenv(ADDRESS_ENV, f"{MINE[0]}:6379")
    saved_pair.save(ELSEWHERE, MINE[0])                 # this machine is the pair's Mac ...
    assert "the head of your pair" in pairs.this_kernel("05")   # ... and the head asked for: it goes on
    monkeypatch.setenv(ADDRESS_ENV, f"{ELSEWHERE}:6379")
    with pytest.raises(HetlabError, match="not on this machine"):
        pairs.this_kernel("05")


def test_the_practice_cluster_asked_for_beside_a_saved_pair_stops_nothing(folder, monkeypatch):
    saved_pair.save(ELSEWHERE, FARTHER)
    monkeypatch.setenv(ADDRESS_ENV, "local")
    assert "practice cluster" in pairs.this_kernel("08")


def first_code(path: Path) -> str:
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return "".join(next(c for c in cells if c["cell_type"] == "code")["source"])


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_notebooks_first_output_is_this_kernel(path):
    code = [line for line in first_code(path).splitlines() if line.strip() and not line.startswith("%")]
    assert code[:2] == ["from hetlab.pair import this_kernel", f'this_kernel("{path.name[:2]}")'
                        + code[1][len(f'this_kernel("{path.name[:2]}")'):]], code[:2]


@needs_an_address
def test_each_notebook_from_03_on_stops_at_its_first_cell_on_the_mac(tmp_path):
    """The first code cell of 03–09, run as written in a fresh Python on this machine as the saved pair's
    Mac: each stops there with the one line, before anything else runs."""
    saved_pair.save(ELSEWHERE, MINE[0], where=tmp_path)
    script = "\n".join([
        "import json, sys",
        "from hetlab.errors import HetlabError",
        "for path in sys.argv[1:]:",
        "    cells = json.load(open(path, encoding='utf-8'))['cells']",
        "    code = ''.join(next(c for c in cells if c['cell_type'] == 'code')['source'])",
        "    code = '\\n'.join(l for l in code.splitlines() if not l.startswith('%'))",
        "    try:",
        "        exec(compile(code, path, 'exec'), {})",
        "        print('WENT ON', path)",
        "    except HetlabError as e:",
        "        print('STOPPED', path, str(e))",
    ])
    env = {k: v for k, v in os.environ.items() if k not in (ADDRESS_ENV, RAY_ADDRESS_ENV)}
    env.update({MEASURED_ENV: str(tmp_path), "PYTHONPATH": str(ROOT)})
    later = [str(p) for p in NOTEBOOKS if p.name[:2] in pairs.ON_THE_HEAD]
    out = subprocess.run([sys.executable, "-c", script, *later], env=env, cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    stopped = [line for line in out.stdout.splitlines() if line.startswith("STOPPED")]
    assert len(stopped) == len(later) == 7 and "WENT ON" not in out.stdout, out.stdout
    assert all(f"USER@{ELSEWHERE}" in line for line in stopped)


@needs_an_address
def test_a_machine_whose_address_moved_is_told_the_way_on_not_sent_elsewhere(folder):
    """Neither saved address is this machine's: its address moved overnight (day two)."""
    saved_pair.save(ELSEWHERE, FARTHER) if pairs.guess_role() == "desktop" else saved_pair.save(FARTHER, ELSEWHERE)
    with pytest.raises(HetlabError) as stopped:
        pairs.this_kernel("05")
    assert "holds neither address of the saved pair" in str(stopped.value) and ELSEWHERE in str(stopped.value)
    assert "run notebook 04 again" in str(stopped.value)
