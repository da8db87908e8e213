"""hetlab.cluster.raylog: Ray 2.60's "Token authentication is enabled" warning becomes one hetlab line,
and nothing else is hidden. Each case starts a REAL local Ray in a fresh Python with
RAY_AUTH_MODE unset (Ray warns only then, once per process)."""
import logging
import os
import subprocess
import sys

import pytest

from hetlab.cluster import raylog

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

pytestmark = pytest.mark.ray   # its scripts start a practice cluster or a local Ray in a subprocess

STARTS = {
    "connect": "from hetlab.cluster.connecting import connect; connect(num_cpus=1); ray.shutdown()",
    "practice": "from hetlab.cluster.practice import PracticeCluster; PracticeCluster(('desktop',)).shutdown()",
}


def run_without_token_mode(script: str) -> subprocess.CompletedProcess:
    """Run ``script`` in a fresh Python without ``RAY_AUTH_MODE`` (a learner's first kernel)."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_AUTH_MODE"}
    env["PYTHONPATH"] = ROOT
    out = subprocess.run([sys.executable, "-c", script], env=env, cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return out


@pytest.mark.parametrize("how", sorted(STARTS))
def test_token_warning_is_one_hetlab_line_and_other_warnings_pass(how):
    script = "\n".join([
        "import ray",
        STARTS[how],
        "from ray._private.authentication import authentication_token_setup as setup",
        "setup._warn_token_auth_disabled()  # Ray's other token warning must still show",
        "setup.logger.warning('another warning on the same logger')",
        "setup._warn_token_auth_enabled()  # a second time in this process: no second notice",
    ])
    out = run_without_token_mode(script)
    assert out.stdout.count(raylog.NOTICE) == 1
    assert raylog.TOKEN_ENABLED not in out.stderr
    assert "Token authentication is disabled for this Ray cluster" in out.stderr
    assert "another warning on the same logger" in out.stderr


def test_filter_drops_only_that_message():
    def record(msg):
        return logging.LogRecord(raylog.TOKEN_LOGGER, logging.WARNING, __file__, 1, msg, None, None)
    assert raylog.drop(record("Token authentication is disabled for this Ray cluster. Anyone ..."))
    assert raylog.drop(record("something else"))
    assert not raylog.drop(record(raylog.TOKEN_ENABLED + " Set RAY_AUTH_MODE=disabled to opt out."))
    raylog.explain_token_auth()
    raylog.explain_token_auth()
    assert logging.getLogger(raylog.TOKEN_LOGGER).filters.count(raylog.drop) == 1
    assert raylog.drop not in logging.getLogger("ray").filters
