"""A real local Ray for test modules that need one but no practice cluster (tests/test_ps.py,
tests/test_gpucheck.py). Not a test module: pytest does not collect it."""
import ray


def start(**resources) -> None:
    """``ray.init`` a quiet 2-CPU local Ray with these custom resources, once more if a loaded
    box missed Ray's fixed node start-up window."""
    for attempt in (1, 2):
        try:
            ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="ERROR",
                     resources=resources or None)
            return
        except Exception as e:  # noqa: BLE001 - Ray raises a bare Exception here
            ray.shutdown()
            if attempt == 2 or "timed out during startup" not in str(e):
                raise
