"""Shared test settings: quick mode for notebooks (nbval kernels inherit this
environment), and Ray quiet and offline."""
import os

os.environ.setdefault("HETLAB_QUICK", "1")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_DEDUP_LOGS", "0")

# Notebook 04 run through the two-host rehearsal (tests/test_rehearsal.py) does everything its
# practice-only run does, plus the real-pair cells: where the rehearsal runs, it runs there only.
COVERED_BY_REHEARSAL = ("04_build_your_cluster.ipynb",)


def pytest_collection_modifyitems(config, items):
    if os.environ.get("HETLAB_REHEARSAL"):  # we are the rehearsal's own run
        return
    from hetlab import rehearsal
    if rehearsal.missing() is not None:
        return
    covered = [item for item in items if item.path.name in COVERED_BY_REHEARSAL]
    if covered:
        config.hook.pytest_deselected(items=covered)
        items[:] = [item for item in items if item not in covered]
