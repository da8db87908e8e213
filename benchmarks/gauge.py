"""The ledger's gauge of this machine's speed right now (docs/contributing.md, "A ledger of test time"):
the small CNN's steady samples/s at batch 128 on the CPU (``hetlab.core.speed.course_speed``), beside the
load average. A test run's cost in gauge-seconds is its pytest seconds × gauge ÷ 10,000, so runs on a
quiet and a busy box compare. ``python benchmarks/gauge.py [PYTEST_SECONDS]``; the last line is JSON."""
import json
import os
import sys

from hetlab.core.speed import course_speed


def main() -> None:
    load = os.getloadavg()
    speed = course_speed("cpu")
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else None
    print(f"the small CNN at 128 on the CPU: {speed.samples_per_s:,.0f} samples/s (load average {load[0]:.2f})")
    out = {"gauge_samples_per_s": round(speed.samples_per_s), "loadavg_1min": round(load[0], 2)}
    if seconds is not None:
        out["pytest_s"] = seconds
        out["gauge_seconds"] = round(seconds * speed.samples_per_s / 10_000)
        print(f"{seconds:.0f} pytest seconds = {out['gauge_seconds']} gauge-seconds")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
