"""House rules a reader relies on, read from the source (issue 38): short docstrings in hetlab/,
and tests that wait for events, not clocks."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_DOC_LINES = 8            # "about 5": what, why, which notebook; the rest goes onto the fields
CLOCKS = {"time", "monotonic", "perf_counter", "process_time", "time_ns", "monotonic_ns", "perf_counter_ns"}
MARKER = "# clock-ok:"       # on the line, with the reason: a justified exception
WAIVED: set[str] = set()     # "path what": a docstring allowed to be long, with the reason beside it


def long_docstrings(source: str, name: str = "<module>") -> list[str]:
    """``name:line what (n lines)`` for every docstring in ``source`` over ``MAX_DOC_LINES`` lines."""
    tree = ast.parse(source)
    found = []
    for node in [tree, *ast.walk(tree)]:
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=True)
            if doc and (n := len(doc.splitlines())) > MAX_DOC_LINES:
                found.append(f"{name}:{getattr(node, 'lineno', 1)} "
                             f"{getattr(node, 'name', 'module')} ({n} lines)")
    return sorted(set(found))


def _is_clock(node) -> bool:
    """``time.monotonic()``, ``perf_counter()`` and the like: a reading of the wall clock."""
    if not isinstance(node, ast.Call):
        return False
    f = node.func
    return (isinstance(f, ast.Attribute) and f.attr in CLOCKS and isinstance(f.value, ast.Name)
            and f.value.id == "time") or (isinstance(f, ast.Name) and f.id in CLOCKS - {"time"})


def _is_sleep(node) -> bool:
    f = node.func if isinstance(node, ast.Call) else None
    return isinstance(f, ast.Attribute) and f.attr == "sleep" or isinstance(f, ast.Name) and f.id == "sleep"


def clock_races(source: str, name: str = "<test>") -> list[str]:
    """Where ``source`` asserts on the wall clock, or sleeps instead of waiting for an event.

    Allowed: both inside a ``while`` loop (a poll of the event, with a deadline), and a line that
    says why with ``# clock-ok: …``. A value computed from a clock reading counts as one.
    """
    lines = source.splitlines()
    found = []

    def visit(node, in_poll: bool, clocked: set):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(child, False, set())
                continue
            if isinstance(child, ast.Assign) and _reads_clock(child.value, clocked):
                clocked |= {t.id for t in child.targets if isinstance(t, ast.Name)}
            line = lines[child.lineno - 1] if hasattr(child, "lineno") else ""
            if MARKER not in line and not in_poll:
                if isinstance(child, ast.Assert) and _reads_clock(child.test, clocked):
                    found.append(f"{name}:{child.lineno} asserts on the wall clock: {line.strip()}")
                elif isinstance(child, ast.Expr) and (
                        _is_sleep(child.value) or isinstance(child.value, ast.Await) and _is_sleep(child.value.value)):
                    found.append(f"{name}:{child.lineno} sleeps instead of waiting for an event: {line.strip()}")
            visit(child, in_poll or isinstance(child, ast.While), clocked)

    visit(ast.parse(source), False, set())
    return found


def _reads_clock(node, clocked: set) -> bool:
    return any(_is_clock(n) or isinstance(n, ast.Name) and n.id in clocked for n in ast.walk(node))


def test_no_docstring_in_hetlab_is_over_8_lines():
    found = [d for p in sorted((ROOT / "hetlab").rglob("*.py"))
             for d in long_docstrings(p.read_text(encoding="utf-8"), str(p.relative_to(ROOT)))]
    waived = {d for d in found if "{} {}".format(d.split(":")[0], d.split()[1]) in WAIVED}
    assert len(waived) == len(WAIVED), f"short now: remove from WAIVED what is not in {sorted(waived)}"
    found = sorted(set(found) - waived)
    assert found == [], "shorten these docstrings (what, why, which notebook):\n" + "\n".join(found)


def test_no_test_asserts_on_the_clock_or_sleeps_to_wait():
    found = [r for p in sorted((ROOT / "tests").glob("*.py"))
             for r in clock_races(p.read_text(encoding="utf-8"), p.name)]
    assert found == [], "wait for the event itself (or say why with '# clock-ok: …'):\n" + "\n".join(found)


def test_the_checks_find_what_they_look_for():
    """The two checks above, on code that breaks the rules and code that keeps them."""
    def doc(n):
        return 'class C:\n    """' + "\n".join(["line"] * n) + '"""\n'

    assert long_docstrings(doc(9)) == ["<module>:1 C (9 lines)"] and long_docstrings(doc(8)) == []
    bad = (
        "import time\n"
        "def test_cap():\n"
        "    started = time.monotonic()\n"
        "    took = time.monotonic() - started\n"
        "    assert took < 15\n"
        "def test_sleep():\n"
        "    time.sleep(3)\n"
        "async def test_async_sleep():\n"
        "    await asyncio.sleep(0.2)\n"
    )
    assert [r.split(" ", 1)[0] for r in clock_races(bad)] == ["<test>:5", "<test>:7", "<test>:9"]
    good = (
        "import time\n"
        "def test_poll():\n"
        "    deadline = time.monotonic() + 30\n"
        "    while not done():\n"
        "        assert time.monotonic() < deadline\n"
        "        time.sleep(0.1)\n"
        "def test_slow_device():\n"
        "    time.sleep(0.01)  # clock-ok: the simulated slowdown itself\n"
    )
    assert clock_races(good) == []


# --- one home per idea (issue 46) ----------------------------------------------------------------
# The formulas' homes are checked by behaviour in test_one_home.py (issue 51): their call sites give
# the same answer on random lines. Here: every class that logs a run is one of these.
RUN_LOGS = {  # the classes that log a run, each with why it is not one of the others
    "core/train.py History": "one device's epochs in one process (notebook 01): loss, accuracy, samples/s",
    "ps/messages.py RunLog": "per step, each worker's share and where its time went, and the run's events",
    "raytrain/loop.py RankLog": "inside one Ray Train rank: its own timings, sent back in its report",
}


def formula_copies(pattern: str, sources: dict) -> list[str]:
    """``path:line`` of every match of ``pattern`` in ``sources`` ({path: text})."""
    import re
    return [f"{path}:{text[:m.start()].count(chr(10)) + 1}" for path, text in sources.items()
            for m in re.finditer(pattern, text)]


def run_log_classes(sources: dict) -> set[str]:
    """``path Name`` of every class named like a run's log (``…Log``, ``…History``)."""
    return {f"{path} {node.name}" for path, text in sources.items() for node in ast.walk(ast.parse(text))
            if isinstance(node, ast.ClassDef) and node.name.endswith(("Log", "History"))}


def _sources(*folders) -> dict:
    return {str(p.relative_to(ROOT / folders[0] if len(folders) == 1 else ROOT)): p.read_text(encoding="utf-8")
            for folder in folders for p in sorted((ROOT / folder).rglob("*.py"))}


def test_one_run_log_per_idea():
    assert run_log_classes(_sources("hetlab")) == set(RUN_LOGS)
    assert run_log_classes({"x.py": "class TrialLog:\n    pass\n"}) == {"x.py TrialLog"}


SWEEP_SIZES = r"\(1, 4, 16, 64, 256, 1024\)|\(1, 8, 64, 256\)"


def test_notebook_02s_sweep_sizes_are_written_once():
    """Notebook 02's sweep sizes (full and quick) live in ``store.measured`` only: the Mac's
    sweep from afar, the report and the GPU check read them there, so a change reaches all four."""
    assert [c.split(":")[0] for c in formula_copies(SWEEP_SIZES, _sources("hetlab"))] == \
        ["store/measured.py", "store/measured.py"]
    assert formula_copies(SWEEP_SIZES, {"x.py": "sweep_batches: tuple = (1, 8, 64, 256)\n"}) == ["x.py:1"]
