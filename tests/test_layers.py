"""The library's layers: a module imports only from its own layer or a lower one, and no
module imports itself back through others (README, "Layout").

    basics     one device, one process: data, models, training step, devices, arithmetic; no Ray
    cluster    Ray and the machines: connecting, roles, commands, Ray's logs, practice cluster
    engines    training across machines: the parameter server (hetlab.ps), Ray Train, the pair, the course's graders
    front ends what a learner drives or looks at: CLI, widgets, plots, diagrams, the GPU check

Read from the source (every ``import``, also those inside functions). A module's layer is its
folder's, so a new module in a folder needs nothing here; a new folder, or a module directly in
hetlab/, is given a layer in ``LAYERS``: the test names any module without one. The basic layer imports no Ray,
but for one function: ``models`` checks with Ray's own cloudpickle that Ray can send your model.
The tooling that runs and checks the course (CLI, doctor, GPU check) lives in
``hetlab/tools/``, and no lesson module depends on it; no module of ``hetlab`` imports the
maintainers' ``harness/`` (the rehearsal, the GPU machine's call), which the wheel leaves out.
"""
import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "hetlab"
# Each folder is one layer (its modules with it); the modules directly in hetlab/ are named.
LAYERS = {
    "basics": ["hetlab", "errors", "vocab", "core", "arithmetic", "store"],
    "cluster": ["cluster", "windows", "tools.doctor"],
    "engines": ["ps", "raytrain", "search", "pair", "course"],   # course: its graders run the engines
    "front ends": ["__main__", "tools", "tools.cli", "tools.gpucheck", "views"],
}
FOLDER_LEVEL = {where: n for n, places in enumerate(LAYERS.values()) for where in places}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts) or "hetlab"


def hetlab_imports(path: Path) -> set[str]:
    """The hetlab modules ``path`` imports (``from hetlab import x`` counts x if it is a module)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "hetlab":
            base = node.module.removeprefix("hetlab").lstrip(".") or "hetlab"
            subs = [f"{base}.{a.name}" if base != "hetlab" else a.name for a in node.names]
            found |= {s for s in subs if s in LEVEL} or {base}
        elif isinstance(node, ast.Import):
            found |= {a.name.removeprefix("hetlab.") for a in node.names if a.name.startswith("hetlab.")}
    return found - {module_name(path)}


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def layer_of(name: str) -> int | None:
    """The layer of module ``name``: its own entry, else its innermost folder's (None: no layer)."""
    parts = name.split(".")
    for n in range(len(parts), 0, -1):
        if ".".join(parts[:n]) in FOLDER_LEVEL:
            return FOLDER_LEVEL[".".join(parts[:n])]
    return None


LEVEL = {name: layer_of(name) for name in MODULES if layer_of(name) is not None}
TOOLING = {"cli", "doctor", "gpucheck"}
# Ray in the basic layer: only here, only inside the function, only Ray's cloudpickle (what Ray
# sends a learner's model and loss with, so the check is the one that matters).
RAY_IN_BASICS = {("core.models", "_send_by_value"), ("core.models", "_check_picklable")}


def ray_imports(path: Path) -> set[tuple[str, str]]:
    """(module, function) of every ``import ray...`` in ``path``; function "" for the top level."""
    found = set()

    def visit(node, function):
        for child in ast.iter_child_nodes(node):
            name = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else function
            if isinstance(child, ast.Import) and any(a.name.split(".")[0] == "ray" for a in child.names) \
                    or isinstance(child, ast.ImportFrom) and (child.module or "").split(".")[0] == "ray":
                found.add((module_name(path), function))
            visit(child, name)

    visit(ast.parse(path.read_text(encoding="utf-8")), "")
    return found


def test_every_module_has_a_layer():
    assert sorted(set(MODULES) - set(LEVEL)) == []


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_module_imports_from_a_higher_layer(name):
    higher = {m for m in hetlab_imports(MODULES[name]) if LEVEL[m] > LEVEL[name]}
    assert not higher, f"{name} ({list(LAYERS)[LEVEL[name]]}) imports {sorted(higher)} from a higher layer"


def test_no_import_cycle():
    """Every import counts, also one inside a function: a circle broken by a late import is still a circle."""
    graph = {name: hetlab_imports(path) - {"hetlab"} for name, path in MODULES.items()}
    done, on_path = set(), []

    def visit(name):
        if name in on_path:
            raise AssertionError("import cycle: " + " → ".join(on_path[on_path.index(name):] + [name]))
        if name in done:
            return
        on_path.append(name)
        for dep in sorted(graph.get(name, ())):
            visit(dep)
        on_path.pop()
        done.add(name)

    for name in sorted(graph):
        visit(name)


def test_the_arithmetic_imports_no_store():
    """Issue 58: the learner's files live in ``hetlab.store``; the arithmetic takes step lines and
    the engine's cost from its callers, so no arithmetic module imports the store."""
    arithmetic = [name for name in MODULES if name.startswith("arithmetic")]
    stored = {name for name in arithmetic if any(m.startswith("store") for m in hetlab_imports(MODULES[name]))}
    assert stored == set()
    assert any(m.startswith("store") for m in hetlab_imports(MODULES["views.report"]))   # the check sees an import


def test_the_basic_layer_imports_no_ray():
    basics = [name for name in MODULES if LEVEL[name] == 0]
    found = set().union(*(ray_imports(MODULES[name]) for name in basics))
    assert found == RAY_IN_BASICS, f"Ray imported in the basic layer: {sorted(found - RAY_IN_BASICS)}"


def test_the_check_finds_ray_where_it_is_imported():
    cluster = ray_imports(MODULES["cluster.connecting"])
    assert ("cluster.connecting", "") in cluster and ray_imports(MODULES["errors"]) == set()


def test_tooling_lives_in_hetlab_tools():
    assert {f"tools.{name}" for name in TOOLING} <= set(MODULES)
    flat = {name.rsplit(".", 1)[-1] for name in MODULES if not name.startswith("tools")}
    assert not flat & TOOLING, f"tooling outside hetlab/tools/: {sorted(flat & TOOLING)}"
    users = {name for name in MODULES if not name.startswith("tools")
             and any(m == "tools" or m.startswith("tools.") for m in hetlab_imports(MODULES[name]))}
    assert users == {"__main__"}, f"lesson modules that import tooling: {sorted(users - {'__main__'})}"


def harness_imports(path: Path) -> bool:
    """Whether ``path`` imports the maintainers' ``harness`` anywhere (also inside a function)."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
        if any(n.split(".")[0] == "harness" for n in names):
            return True
    return False


def test_no_module_of_the_package_imports_the_harness(tmp_path):
    """``harness/`` is not in the wheel: a module of ``hetlab`` importing it breaks a learner's install."""
    assert [name for name, path in MODULES.items() if harness_imports(path)] == []
    (tmp_path / "late.py").write_text("def f():\n    from harness.rehearsal import hosts\n")
    assert harness_imports(tmp_path / "late.py")          # the check sees an import inside a function


def test_vocab_is_the_one_home_of_env_names_and_default_ports():
    """No module but ``vocab`` writes a ``HETLAB_…`` variable's name, one of Ray's that hetlab sets
    or checks, or a default port as a literal."""
    from hetlab import vocab

    ports = {vocab.Ports.gcs, vocab.Ports.train_rendezvous, vocab.Ports.dashboard, vocab.Ports.client_server}
    ray_names = {vocab.RAY_ADDRESS_ENV, vocab.RAY_AUTH_ENV, vocab.RAY_MAC_CLUSTER_ENV, vocab.RAY_PYTHON_MATCH_ENV}
    found = set()
    for name, path in MODULES.items():
        if name == "vocab":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and (
                    isinstance(node.value, str) and (re.fullmatch(r"HETLAB_[A-Z_]+", node.value)
                                                     or node.value in ray_names)
                    or type(node.value) is int and node.value in ports):
                found.add((name, node.value))
    assert found == set(), f"define these in hetlab/vocab.py: {sorted(found)}"


# A folder's docstring may leave out a module only here, with why.
UNLISTED: dict = {}   # a folder → modules its docstring may leave out (none)


def unlisted_modules(folder: Path) -> set[str]:
    """The modules and sub-folders of ``folder`` its ``__init__`` docstring does not name as ````name````."""
    doc = ast.get_docstring(ast.parse((folder / "__init__.py").read_text(encoding="utf-8"))) or ""
    names = {p.stem for p in folder.glob("*.py") if p.stem != "__init__"} \
        | {p.name for p in folder.iterdir() if (p / "__init__.py").exists()}
    return {name for name in names if f"``{name}``" not in doc}


def test_each_folders_docstring_lists_its_modules(tmp_path):
    folders = {".".join(init.parent.relative_to(PACKAGE).parts): init.parent
               for init in PACKAGE.rglob("__init__.py") if init.parent != PACKAGE}
    found = {name: unlisted_modules(folder) for name, folder in folders.items()}
    assert {name: m for name, m in found.items() if m and m != UNLISTED.get(name)} == {}
    (tmp_path / "__init__.py").write_text('"""Two modules: ``one``."""\n')
    (tmp_path / "one.py").write_text("")
    (tmp_path / "two.py").write_text("")
    assert unlisted_modules(tmp_path) == {"two"}      # the check sees a module left out
