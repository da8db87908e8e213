"""One JSON line of every figure the course claims for a card, from a GPU call's step logs
(scripts/gpu_run.sh: $OUT/STEP.log, each ending with its JSON line, and $OUT/status.txt).

    python3 scripts/gpu_figures.py /tmp/hetlab-gpu-check
"""
import json
import sys
from pathlib import Path


def last_json(path: Path):
    """The last line of ``path`` that is a JSON object, or None."""
    for line in reversed(path.read_text(errors="replace").splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                continue
    return None


def figures(out: Path) -> dict:
    status = dict(line.split() for line in (out / "status.txt").read_text().splitlines() if line.strip())
    found = {name: last_json(out / f"{name}.log") for name in status if (out / f"{name}.log").is_file()}
    result = {"gpu_call": "figures", "steps": {k: int(v) for k, v in status.items()},
              "stand_in": bool((found.get("gpu_check") or {}).get("stand_in")), "figures": {}}
    check = found.get("gpu_check") or {}
    for row in check.get("rows", []):
        result["figures"][row["name"]] = row["figure"]
    for name, bench in found.items():
        if not bench or bench.get("bench") != "pair_vs_alone":
            continue
        b = bench["global_batch"]
        result["figures"][f"pair_{b}_measured_over_predicted"] = bench["measured_over_predicted"]
        result["figures"][f"pair_{b}_pick_borne_out"] = bench["pick_borne_out"]
        result["figures"][f"pair_{b}_desktop_alone_samples_per_s"] = bench["plans"]["desktop alone"]["median"]
    loop = found.get("local_loop")
    if loop:
        result["figures"]["local_loop_end_to_end_over_train"] = loop["end_to_end_over_train_median_of_pairs"]
    result["missing"] = sorted(name for name, bench in found.items() if bench is None and name != "notebooks")
    return result


if __name__ == "__main__":
    summary = figures(Path(sys.argv[1]))
    print(json.dumps(summary))
    sys.exit(1 if summary["missing"] else 0)
