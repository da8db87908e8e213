"""`make check`'s guard in every Python subprocess a test starts (conftest.py puts this folder first on
PYTHONPATH in the fast tier only): when Ray's ``services`` module is imported, starting a Ray process
exits at once with a line naming the mark the test needs. Not a test module: pytest does not collect it."""
import importlib.abc
import importlib.util
import sys

WATCHED = "ray._private.services"


def _refuse(*args, **kwargs):
    sys.stderr.write("make check: this test starts Ray in a subprocess, so make check must leave it out: "
                     "mark it @pytest.mark.ray\n")
    raise SystemExit(97)


class _Guard(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != WATCHED:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            module.start_ray_process = _refuse
        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _Guard())
