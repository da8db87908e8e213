"""Why `make test`'s lanes set OMP_WAIT_POLICY=PASSIVE (conftest.py): the small CNN's samples/s at batch 128
(the ledger's gauge, torch's threads at the number of cores) in one process alone, then in two processes at
once as two lanes run them, with torch's default wait policy (its threads spin on a core while they wait)
and with PASSIVE (they yield it). Rounds alternate; every round is printed with the medians.
``python benchmarks/lanes.py [--rounds 3]``; the last line is JSON, each speed ÷ one process alone."""
import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WAYS = {"one process alone": (1, None), "two at once, default": (2, None), "two at once, PASSIVE": (2, "PASSIVE")}


def at_once(processes: int, policy: str | None) -> list[float]:
    """Each process's samples/s, ``processes`` of them started together."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if policy:
        env["OMP_WAIT_POLICY"] = policy
    running = [subprocess.Popen([sys.executable, os.path.join("benchmarks", "gauge.py")], cwd=ROOT, env=env,
                                stdout=subprocess.PIPE, text=True) for _ in range(processes)]   # its last line: JSON
    return [json.loads(p.communicate()[0].strip().splitlines()[-1])["gauge_samples_per_s"] for p in running]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    rounds = parser.parse_args().rounds
    print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}; samples/s of each process")
    seen = {way: [] for way in WAYS}
    for r in range(rounds):
        for way, (n, policy) in WAYS.items():
            speeds = at_once(n, policy)
            seen[way].append(statistics.mean(speeds))
            print(f"round {r + 1}  {way:22s} {', '.join(f'{s:,.0f}' for s in speeds)}")
    alone = statistics.median(seen["one process alone"])
    print(f"{'':9s}{'way':22s} {'median':>8s} {'÷ alone':>8s}   rounds")
    out = {"rounds": rounds, "alone_samples_per_s": round(alone)}
    for way, runs in seen.items():
        median = statistics.median(runs)
        print(f"{'':9s}{way:22s} {median:8,.0f} {median / alone:8.2f}   {', '.join(f'{x:,.0f}' for x in runs)}")
        out[way] = round(median / alone, 3)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
