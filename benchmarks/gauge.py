"""The ledger's gauge of this machine's speed right now (docs/contributing.md, "A ledger of test time"):
the small CNN's samples/s at batch 128 on the CPU (``hetlab.core.devices.throughput``, notebook 02's sweep
point: the median of 3 runs of 30 steps after its warm-up), beside the
load average. A test run's cost in gauge-seconds is its pytest seconds × gauge ÷ 10,000, so runs on a
quiet and a busy box compare. ``python benchmarks/gauge.py [PYTEST_SECONDS]``; the last line is JSON."""
import json
import os
import statistics
import sys

from hetlab.core.devices import throughput
from hetlab.core.models import make_model


def main() -> None:
    load = os.getloadavg()
    model = make_model("small", seed=0)
    speed = statistics.median(throughput(model, "cpu", 128, steps=30) for _ in range(3))
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else None
    print(f"the small CNN at 128 on the CPU: {speed:,.0f} samples/s (load average {load[0]:.2f})")
    out = {"gauge_samples_per_s": round(speed), "loadavg_1min": round(load[0], 2)}
    if seconds is not None:
        out["pytest_s"] = seconds
        out["gauge_seconds"] = round(seconds * speed / 10_000)
        print(f"{seconds:.0f} pytest seconds = {out['gauge_seconds']} gauge-seconds")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
