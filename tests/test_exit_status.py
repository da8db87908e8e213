"""How the test process ends (conftest.py's ``pytest_unconfigure``): with pytest's own exit status,
after the exit functions, without the interpreter's teardown (which once crashed a green run with
exit 139), and only in the process the command line started: a program calling ``pytest.main()``
goes on. Each case runs pytest in a subprocess on a one-file probe in ``tmp_path``, with the
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
'''
BODIES = {0: "def test_probe():\n    assert True\n",           # passed
          1: "def test_probe():\n    assert False\n",          # a test failed
          2: "raise ImportError('a broken module')\n",         # interrupted: a collection error
          5: ""}                                               # no tests collected
IN_PROCESS = ("import sys, pytest\n"
              "status = pytest.main(sys.argv[1:])\n"
              "print('the caller goes on with', int(status), flush=True)\n")


def run_probe(tmp_path: Path, status: int, with_conftest: bool = True,
              in_process: bool = False) -> subprocess.CompletedProcess:
    test = tmp_path / "test_probe.py"
    test.write_text(PROBE + BODIES[status])
    plugin = ["-p", "conftest"] if with_conftest else []
    start = ["-c", IN_PROCESS] if in_process else ["-m", "pytest"]
    return subprocess.run([sys.executable, *start, "-q", "-p", "no:cacheprovider", *plugin, str(test)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("status", sorted(BODIES))
def test_the_run_ends_with_pytests_status_after_the_exit_functions_and_no_teardown(tmp_path, status):
    done = run_probe(tmp_path, status)
    assert done.returncode == status, done.stdout + done.stderr
    assert "exit function ran" in done.stdout
    assert "interpreter teardown ran" not in done.stdout


def test_the_probe_sees_a_teardown_without_the_conftest(tmp_path):
    """The check above can fail: without hetlab's conftest the same run does tear down."""
    done = run_probe(tmp_path, 0, with_conftest=False)
    assert done.returncode == 0 and "interpreter teardown ran" in done.stdout, done.stdout + done.stderr


def test_a_program_calling_pytest_main_gets_the_status_and_goes_on(tmp_path):
    """The hook ends only the process the command line started: under ``pytest.main()`` the
    caller gets the status back (1 here), carries on and ends its own way, teardown included."""
    done = run_probe(tmp_path, 1, in_process=True)
    assert "the caller goes on with 1" in done.stdout, done.stdout + done.stderr
    assert done.returncode == 0 and "interpreter teardown ran" in done.stdout
