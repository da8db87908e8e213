"""hetlab.raylog: Ray 2.60's "Token authentication is enabled" warning becomes one hetlab line,
and nothing else is hidden. Each case starts a REAL local Ray in a fresh Python with
RAY_AUTH_MODE unset (Ray warns only then, once per process)."""
import logging
import os
import subprocess
import sys

import pytest

from hetlab import raylog

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

STARTS = {
    "connect": "from hetlab.cluster import connect; connect(num_cpus=1); ray.shutdown()",
    "practice": "from hetlab.practice import PracticeCluster; PracticeCluster(('desktop',)).shutdown()",
}


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
    env = {k: v for k, v in os.environ.items() if k != "RAY_AUTH_MODE"}
    env["PYTHONPATH"] = ROOT
    out = subprocess.run([sys.executable, "-c", script], env=env, cwd=ROOT, capture_output=True,
                         text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.count(raylog.NOTICE) == 1
    assert raylog.TOKEN_ENABLED not in out.stderr
    assert "Token authentication is disabled for this Ray cluster" in out.stderr
    assert "another warning on the same logger" in out.stderr


def test_filter_drops_only_that_message():
    def record(msg):
        return logging.LogRecord(raylog.TOKEN_LOGGER, logging.WARNING, __file__, 1, msg, None, None)
    f = raylog.TokenNotice()
    assert f.filter(record("Token authentication is disabled for this Ray cluster. Anyone ..."))
    assert f.filter(record("something else"))
    assert not f.filter(record(raylog.TOKEN_ENABLED + " Set RAY_AUTH_MODE=disabled to opt out."))
    raylog.explain_token_auth()
    raylog.explain_token_auth()
    assert sum(isinstance(x, raylog.TokenNotice) for x in logging.getLogger(raylog.TOKEN_LOGGER).filters) == 1
    assert not any(isinstance(x, raylog.TokenNotice) for x in logging.getLogger("ray").filters)


def test_a_practice_cluster_replacing_an_earlier_ray_says_nothing_of_it():
    """A local Ray, then a practice cluster: Ray would log "Overwriting previous Ray address …"
    (its address file names the first Ray). The practice cluster drops exactly that line; another
    INFO line on the same logger still shows."""
    script = "\n".join([
        "import logging, ray",
        "from hetlab.cluster import connect; connect(num_cpus=1); ray.shutdown()",
        "logging.getLogger('ray').setLevel(logging.INFO)  # as in a kernel whose earlier Ray ran in another",
        "from hetlab.practice import PracticeCluster; PracticeCluster(('desktop',)).shutdown()",
        "from ray._private import utils",
        "utils.logger.setLevel(logging.INFO); utils.logger.info('another line on the same logger')",
    ])
    env = {k: v for k, v in os.environ.items() if k != "RAY_AUTH_MODE"}
    env["PYTHONPATH"] = ROOT
    out = subprocess.run([sys.executable, "-c", script], env=env, cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert raylog.REPLACED not in out.stderr
    assert "another line on the same logger" in out.stderr


def test_the_replaced_address_filter_drops_only_that_line():
    drop = raylog.ReplacedAddress()
    record = lambda msg: logging.LogRecord(raylog.ADDRESS_LOGGER, logging.INFO, __file__, 1, msg, None, None)
    assert not drop.filter(record("Overwriting previous Ray address (10.0.0.1:6379). Running ray.init() ..."))
    assert drop.filter(record("Connecting to existing Ray cluster at address: 10.0.0.1:6379"))
