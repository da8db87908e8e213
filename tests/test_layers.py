"""The library's layers: a module imports only from its own layer or a lower one, and no
module imports itself back through others (README, "Layout").

    basics     one device, one process: data, models, training step, devices, arithmetic
    cluster    Ray and the machines: connecting, roles, commands, practice cluster, rehearsal
    engines    training across machines: the parameter server (hetlab.ps), Ray Train, the pair
    front ends what a learner drives or looks at: CLI, widgets, plots, diagrams, the GPU check

Read from the source (every ``import``, also those inside functions), so a new module must be
given a layer here: the test names any module it does not know.
"""
import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "hetlab"
LAYERS = {
    "basics": ["hetlab", "errors", "vocab", "flat", "simulate", "raylog", "machine", "authtoken",
               "step", "data", "models", "devices", "measured", "checkpoint", "balance", "planner",
               "textbook", "train"],
    "cluster": ["reach", "cluster", "commands", "gpus", "practice", "tools.rehearsal",
                "tools.preflight"],
    "engines": ["ps", "ps.specs", "ps.worker", "ps.server", "ps.engine", "ps.training", "raytrain",
                "pair", "trial", "results", "search"],
    "front ends": ["tools", "tools.cli", "__main__", "widgets", "plots", "diagrams", "tools.gpucheck",
                   "searchplot", "tools.searchcli"],
}
LEVEL = {module: n for n, modules in enumerate(LAYERS.values()) for module in modules}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts) or "hetlab"


def hetlab_imports(path: Path, top_level_only: bool = False) -> set[str]:
    """The hetlab modules ``path`` imports (``from hetlab import x`` counts x if it is a module)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = tree.body if top_level_only else ast.walk(tree)
    found = set()
    for node in nodes:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "hetlab":
            base = node.module.removeprefix("hetlab").lstrip(".") or "hetlab"
            subs = [f"{base}.{a.name}" if base != "hetlab" else a.name for a in node.names]
            found |= {s for s in subs if s in LEVEL} or {base}
        elif isinstance(node, ast.Import):
            found |= {a.name.removeprefix("hetlab.") for a in node.names if a.name.startswith("hetlab.")}
    return found - {module_name(path)}


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def test_every_module_has_a_layer():
    assert sorted(set(MODULES) - set(LEVEL)) == []


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_module_imports_from_a_higher_layer(name):
    higher = {m for m in hetlab_imports(MODULES[name]) if LEVEL[m] > LEVEL[name]}
    assert not higher, f"{name} ({list(LAYERS)[LEVEL[name]]}) imports {sorted(higher)} from a higher layer"


def test_no_import_cycle():
    graph = {name: hetlab_imports(path, top_level_only=True) - {"hetlab"} for name, path in MODULES.items()}
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
