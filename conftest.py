"""Shared test settings: quick mode for notebooks (nbval kernels inherit this
environment), Ray quiet and offline, how long nbval waits for a cell's output, and
which notebooks run only through the two-host rehearsal, `make test`'s two lanes (``-n 2``), the fast tier
of `make check` (``--fast-tier``),
a stack of every thread on a crash, the ledger's gauge read before and after a run (``--gauge``), and
``folder``: a figures folder of a test's own with no address asked for."""
import faulthandler
import functools
import os
import sys
import tempfile
import time

import pytest

from hetlab.vocab import ADDRESS_ENV, MEASURED_ENV, RAY_ADDRESS_ENV

os.environ.setdefault("HETLAB_QUICK", "1")
# Notebook 02 saves its figures where hetlab.store.measured.folder() says. A test session gives them a
# folder of its own, so a test never replaces the figures a learner measured in the checkout's
# measured/ (the notebook itself has no test branch: it just saves to measured.folder()). Each of
# `make test`'s two lanes (below) has its own: one lane's figures never meet the other's.
if not os.environ.get(MEASURED_ENV) or os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ[MEASURED_ENV] = tempfile.mkdtemp(prefix="hetlab-measured-")
if os.environ.get("PYTEST_XDIST_WORKER"):
    # In a lane, torch's threads (and those of every process the lane starts) yield a core they wait for
    # instead of spinning on it: two processes of 2 spinning threads on 2 cores each ran at a fifth of
    # their speed alone, and at two thirds with this (benchmarks/lanes.py). Set before torch loads.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_DEDUP_LOGS", "0")

# nbval 0.11 waits a fixed 5 s (IPyNbCell.output_timeout, no option of its own) for each of a
# cell's output messages after the cell has finished; on a 2-core box busy with Ray's processes
# they can arrive later, and the cell fails with "Timeout of 5 seconds exceeded waiting for
# output" although it ran fine. The cell's own run time stays bounded by --nbval-cell-timeout.
OUTPUT_TIMEOUT_S = 60

# Where the two-host rehearsal runs (tests/test_rehearsal.py: root, ip, tc, nft), these notebooks
# run there only, to keep `make test` short: their practice-cluster branch is a few set-up lines
# whose library calls the unit tests run on a practice cluster (04: the rehearsal run does all its
# practice cells too; 03: a local Ray, tests/test_cluster.py; 07: the same train_mixed on a practice
# cluster, tests/test_raytrain.py; 08: losing and re-adding the simulated mac, tests/test_practice.py
# and tests/test_faults.py). Notebooks 05 and 06 run in both: their practice run is the one where
# the two machines are clearly unlike (the rehearsal's hosts share one CPU).
COVERED_BY_REHEARSAL = ("03_ray_fundamentals.ipynb", "04_build_your_cluster.ipynb",
                        "07_ray_train_mixed_devices.ipynb", "08_the_real_world.ipynb")


# `make test` runs two lanes at once (pytest-xdist, -n 2): a third of a serial run the CPUs sit idle
# while tests wait on Ray's new processes, a simulated device's sleep, a capped link or a timeout.
# The second lane is the rehearsal's file and three files of practice-cluster tests, about half of
# the suite; the first lane is the rest, the notebooks in their order. Each lane runs its files in the
# usual order, and without -n there are no lanes. The timing-sensitive tests hold with a busy loop
# per core (the ledger), more than the other lane takes from them.
SECOND_LANE = ("tests/test_rehearsal.py", "tests/test_search.py", "tests/test_raytrain.py", "tests/test_practice.py")


@pytest.hookimpl(optionalhook=True)      # pytest-xdist's hook (the test extras install it)
def pytest_xdist_make_scheduler(config, log):
    """With -n: every test of a lane goes to one worker, in the collection's order. The fast tier has
    no file of the second lane: there -n hands out single tests (xdist's own ``load``)."""
    if config.getoption("--fast-tier"):
        return None
    from xdist.scheduler import LoadScopeScheduling

    class Lanes(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return "second" if nodeid.split("::")[0] in SECOND_LANE else "first"
    return Lanes(config, log)


# The fast tier (`make check`, issue 58): every test that needs no Ray, no notebook and no rehearsal.
# A test is left out when it is marked ``ray`` (by its module's ``pytestmark`` or on itself), or ``slow``
# (a training or a wait of tens of seconds that needs none of them, to keep the tier near a minute), or when
# it uses, directly or through another fixture, one of these fixtures, each of which starts Ray in its
# test module (a local Ray, a practice cluster, the rehearsal's pair). A test of the fast tier that
# starts Ray anyway fails at once, naming the mark it needs (``_no_ray_here``).
RAY_FIXTURES = frozenset({"local_ray", "practice", "cluster", "pair"})


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """A figures folder of the test's own and no address asked for: no saved pair, no variable set."""
    monkeypatch.setenv(MEASURED_ENV, str(tmp_path))
    for name in (ADDRESS_ENV, RAY_ADDRESS_ENV):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def pytest_addoption(parser):
    parser.getgroup("nbval").addoption(
        "--nbval-output-timeout", type=float, default=OUTPUT_TIMEOUT_S,
        help=f"seconds nbval waits for each output message of a finished cell "
             f"(nbval's fixed value: 5; hetlab default: {OUTPUT_TIMEOUT_S})")
    parser.addoption("--fast-tier", action="store_true",
                     help="make check: only the tests that need no Ray, no notebook and no rehearsal; "
                          "a test that starts Ray fails")
    parser.addoption("--gauge", action="store_true",
                     help="read the ledger's gauge (benchmarks/gauge.py) before and after the run and print "
                          "the run's gauge-seconds (docs/contributing.md); .ci/run passes it")


def pytest_configure(config):
    config.addinivalue_line("markers", "ray: starts Ray, a notebook or the rehearsal (make test only, "
                                       "not make check)")
    config.addinivalue_line("markers", "slow: trains or waits for tens of seconds (make test only, not make check)")
    if config.getoption("--fast-tier"):
        _no_ray_here()


def pytest_collection_modifyitems(config, items):
    seconds = config.getoption("--nbval-output-timeout")
    for item in items:
        if type(item).__name__ == "IPyNbCell" and hasattr(item, "output_timeout"):  # nbval's cell item
            item.output_timeout = seconds
    if config.getoption("--fast-tier"):
        _fast_tier(config, items)
    else:
        _leave_to_the_rehearsal(config, items)


def needs_ray(item) -> bool:
    """Whether ``item`` runs a notebook, is marked ``ray`` or ``slow``, or uses a fixture of ``RAY_FIXTURES``."""
    return (type(item).__name__ == "IPyNbCell" or item.get_closest_marker("ray") is not None
            or item.get_closest_marker("slow") is not None
            or bool(RAY_FIXTURES & set(getattr(item, "fixturenames", ()))))


def _fast_tier(config, items):
    slow = [item for item in items if needs_ray(item)]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if not needs_ray(item)]


def _no_ray_here():
    """In the fast tier, for the whole session: starting or joining a Ray in this process fails the
    test (or the fixture) that does it, naming the fix."""
    import ray
    import ray._private.services as services

    def refuse(*args, **kwargs):
        pytest.fail("this test starts Ray, so make check must leave it out: mark it @pytest.mark.ray "
                    "(or give it a fixture of conftest.RAY_FIXTURES)", pytrace=False)
    ray.init = refuse
    services.start_ray_process = refuse
    # and in every Python subprocess a test starts (`hetlab train`, a benchmark): tests/fast_tier/sitecustomize.py
    guard = os.path.join(os.path.dirname(__file__), "tests", "fast_tier")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (guard, os.environ.get("PYTHONPATH")) if p)


def _leave_to_the_rehearsal(config, items):
    if os.environ.get("HETLAB_ORIGIN") or os.environ.get("HETLAB_QUICK") == "0":
        return  # the rehearsal's own run, or full mode (make test-full runs every notebook)
    from harness import rehearsal
    if rehearsal.missing() is not None:
        return
    covered = [item for item in items if item.path.name in COVERED_BY_REHEARSAL]
    if covered:
        config.hook.pytest_deselected(items=covered)
        items[:] = [item for item in items if item not in covered]


GAUGE = pytest.StashKey[dict]()      # --gauge: the first reading and the run's clock


def _seconds_per_file(terminalreporter) -> dict[str, float]:
    """Each test file's (or notebook's) seconds, summed over its items' set-up, call and tear-down."""
    seconds: dict[str, float] = {}
    for reports in terminalreporter.stats.values():
        for report in reports:
            where = str(getattr(report, "nodeid", "")).split("::")[0]
            if where and hasattr(report, "duration"):
                seconds[where] = seconds.get(where, 0.0) + report.duration
    return seconds


@functools.cache
def _gauge():
    """benchmarks/gauge.py, a script rather than a package: loaded by its path, once."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "hetlab_gauge", os.path.join(os.path.dirname(__file__), "benchmarks", "gauge.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def pytest_sessionstart(session):
    """With ``--gauge``: the gauge's first reading, then the clock of the run it brackets."""
    if session.config.getoption("--gauge") and not hasattr(session.config, "workerinput"):   # not in a lane
        session.config.stash[GAUGE] = {"before": _gauge().read(), "t0": time.monotonic()}


def _print_gauge(terminalreporter, config):
    """Seconds per test file (the ledger's per-file table), then the run's seconds (the readings' own left
    out) and its gauge-seconds at each reading and their mean.
    The gauge read right after a run moved 2,100–3,500 between runs on one box, so both ends are read."""
    run = config.stash[GAUGE]
    seconds = time.monotonic() - run["t0"]
    gauge = _gauge()
    after = gauge.read(threads=run["before"]["torch_threads"])
    speeds = [run["before"]["gauge_samples_per_s"], after["gauge_samples_per_s"]]
    mean = sum(speeds) / 2
    files = _seconds_per_file(terminalreporter)
    terminalreporter.write_sep("-", "seconds per file, the slowest 25 (set-up, call and tear-down)")
    for where, s in sorted(files.items(), key=lambda kv: -kv[1])[:25]:
        terminalreporter.write_line(f"{s:8.1f}  {where}")
    terminalreporter.write_sep("-", "the ledger's gauge (docs/contributing.md)")
    terminalreporter.write_line(
        f"before: {speeds[0]:,} samples/s (load {run['before']['loadavg_1min']:.2f}); after: {speeds[1]:,} "
        f"(load {after['loadavg_1min']:.2f}); the run: {seconds:.1f} s = {gauge.gauge_seconds(seconds, mean)} "
        f"gauge-seconds at their mean ({gauge.gauge_seconds(seconds, speeds[0])} before, "
        f"{gauge.gauge_seconds(seconds, speeds[1])} after)")


def pytest_terminal_summary(terminalreporter, config):
    """After a run with notebooks: minutes per notebook (the README's table takes full mode's from
    ``make test-full``), summed over its cells' set-up, run and tear-down; with ``--gauge``, the gauge."""
    seconds = {where: s for where, s in _seconds_per_file(terminalreporter).items() if where.endswith(".ipynb")}
    if seconds:
        mode = "quick" if os.environ.get("HETLAB_QUICK") != "0" else "full"
        terminalreporter.write_sep("-", f"minutes per notebook ({mode} mode)")
        for where, s in sorted(seconds.items()):
            terminalreporter.write_line(f"{where:<50s} {s / 60:5.1f}")
    if GAUGE in config.stash:
        _print_gauge(terminalreporter, config)


# Every thread's stack on a crash, to stderr, the interpreter's teardown included: a run that once
# ended "886 passed" then "Segmentation fault" (exit 139) would say where. The test process ends
# pytest's own way, with its own status: no early exit hides a crash (issue 51; the fresh-clone runs
# without one: docs/measured/2026-11-28-exit.md).
faulthandler.enable(file=sys.__stderr__, all_threads=True)
