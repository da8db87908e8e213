"""A real local Ray for test modules that need one but no practice cluster (tests/test_ps.py,
tests/test_gpucheck.py). Not a test module: pytest does not collect it."""
import ray

from hetlab.cluster.connecting import start_with_retry


def start(**resources) -> None:
    """``ray.init`` a quiet 2-CPU local Ray with these custom resources, once more if a loaded
    box missed Ray's fixed node start-up window."""
    start_with_retry(lambda: ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="ERROR",
                                      resources=resources or None),
                     lambda started: ray.shutdown(), lambda exc, timed_out: None)
