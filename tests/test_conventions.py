"""A house rule of the tests, read from their source (issue 38): tests wait for events, not clocks
(a test that asserts on the wall clock or sleeps to wait fails on a loaded machine)."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CLOCKS = {"time", "monotonic", "perf_counter", "process_time", "time_ns", "monotonic_ns", "perf_counter_ns"}
MARKER = "# clock-ok:"       # on the line, with the reason: a justified exception


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


def test_no_test_asserts_on_the_clock_or_sleeps_to_wait():
    found = [r for p in sorted((ROOT / "tests").glob("*.py"))
             for r in clock_races(p.read_text(encoding="utf-8"), p.name)]
    assert found == [], "wait for the event itself (or say why with '# clock-ok: …'):\n" + "\n".join(found)


def test_the_checks_find_what_they_look_for():
    """The check above, on code that breaks the rule and code that keeps it."""
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
