"""How the test process ends (conftest.py's ``pytest_unconfigure``): with pytest's own exit status,
after the exit functions, without the interpreter's teardown (which once crashed a green run with
exit 139). Each case runs pytest in a subprocess on a one-test file in ``tmp_path``, with the
checkout's conftest loaded as a plugin; a module-level object says when the teardown ran."""
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROBE = '''import atexit, os


class Loud:
    def __del__(self, write=os.write):
        write(1, b"interpreter teardown ran\\n")


KEPT = Loud()
atexit.register(lambda write=os.write: write(1, b"exit function ran\\n"))


def test_probe():
    assert {ok}
'''


def run_probe(tmp_path: Path, ok: bool, with_conftest: bool = True) -> subprocess.CompletedProcess:
    test = tmp_path / "test_probe.py"
    test.write_text(PROBE.format(ok=ok))
    plugin = ["-p", "conftest"] if with_conftest else []
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *plugin, str(test)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("ok, status", [(True, 0), (False, 1)])
def test_the_run_ends_with_pytests_status_after_the_exit_functions_and_no_teardown(tmp_path, ok, status):
    done = run_probe(tmp_path, ok)
    assert done.returncode == status, done.stdout + done.stderr
    assert "exit function ran" in done.stdout
    assert "interpreter teardown ran" not in done.stdout


def test_the_probe_sees_a_teardown_without_the_conftest(tmp_path):
    """The check above can fail: without hetlab's conftest the same run does tear down."""
    done = run_probe(tmp_path, True, with_conftest=False)
    assert done.returncode == 0 and "interpreter teardown ran" in done.stdout, done.stdout + done.stderr
