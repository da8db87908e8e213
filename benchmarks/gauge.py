"""The ledger's gauge of this machine's speed right now (docs/contributing.md, "A ledger of test time"):
the small CNN's samples/s at batch 128 on the CPU (``hetlab.core.train.measure_speed``, notebook 02's sweep
point: the median of 3 runs of 30 steps after its warm-up), beside the
load average. A test run's cost in gauge-seconds is its pytest seconds × gauge ÷ 10,000, so runs on a
quiet and a busy box compare. ``python benchmarks/gauge.py [PYTEST_SECONDS]``; the last line is JSON.
``pytest --gauge`` (conftest.py; `.ci/run` passes it) reads it before and after the run itself."""
import json
import os
import statistics
import sys


def read(threads: int | None = None) -> dict:
    """One reading: ``{"gauge_samples_per_s": …, "loadavg_1min": …, "torch_threads": …}``, the load read
    before the steps. ``threads``: torch's threads for it (a reading after a test run gives the count of the
    reading before it, whatever a test left set); None: this process's current count."""
    import torch

    from hetlab.core.train import measure_speed
    from hetlab.core.models import make_model

    load = os.getloadavg()[0]
    left = torch.get_num_threads()
    used = threads or left
    torch.set_num_threads(used)
    try:
        model = make_model("small", seed=0)
        speed = statistics.median(measure_speed(model, "cpu", 128, steps=30).samples_per_s for _ in range(3))
    finally:
        torch.set_num_threads(left)
    return {"gauge_samples_per_s": round(speed), "loadavg_1min": round(load, 2), "torch_threads": used}


def gauge_seconds(pytest_s: float, samples_per_s: float) -> int:
    return round(pytest_s * samples_per_s / 10_000)


def main() -> None:
    out = read()
    print(f"the small CNN at 128 on the CPU: {out['gauge_samples_per_s']:,} samples/s "
          f"(load average {out['loadavg_1min']:.2f})")
    if len(sys.argv) > 1:
        seconds = float(sys.argv[1])
        out["pytest_s"] = seconds
        out["gauge_seconds"] = gauge_seconds(seconds, out["gauge_samples_per_s"])
        print(f"{seconds:.0f} pytest seconds = {out['gauge_seconds']} gauge-seconds")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
