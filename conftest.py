"""Shared test settings: quick mode for notebooks (nbval kernels inherit this
environment), and Ray quiet and offline."""
import os

os.environ.setdefault("HETLAB_QUICK", "1")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_DEDUP_LOGS", "0")
