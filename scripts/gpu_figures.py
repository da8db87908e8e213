"""One JSON line of every figure the course claims for a card, from a GPU call's step logs
(scripts/gpu_run.sh: $OUT/STEP.log, each ending with its JSON line; $OUT/plan.txt, the steps planned;
$OUT/started.txt, those begun; $OUT/status.txt, those ended with their exit status, or "not-run").
Exit status 1 when a step gave no figures: it failed, was cut at its budget, or never ran.

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


CUT = (124, 137)   # timeout's exit status at a step's budget, and after its kill


def _lines(path: Path) -> list[list[str]]:
    return [line.split() for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


def figures(out: Path) -> dict:
    """The figures, and every step's fate: ``steps`` (exit status of each step that ended), ``cut`` (stopped
    at its budget, or started and never ended: the lease ran out), ``not_run`` (planned in plan.txt but never
    started) and ``missing`` (every step that gave no figures: cut, not run, failed without its JSON)."""
    planned = [p[0] for p in _lines(out / "plan.txt")]
    started = [p[0] for p in _lines(out / "started.txt")]
    ended = {p[0]: p[1] for p in _lines(out / "status.txt")}
    steps = {k: int(v) for k, v in ended.items() if v.lstrip("-").isdigit()}
    cut = [n for n in dict.fromkeys(started + list(steps)) if steps.get(n) in CUT or (n in started and n not in ended)]
    not_run = [n for n in dict.fromkeys(planned + list(ended)) if n not in started and n not in steps]
    found = {name: last_json(out / f"{name}.log") for name in dict.fromkeys(started + list(steps))
             if (out / f"{name}.log").is_file()}
    result = {"gpu_call": "figures", "steps": steps, "cut": cut, "not_run": not_run,
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
        for what, ratio in (bench.get("desktop_alone") or {}).get("over_line", {}).items():
            result["figures"][f"pair_{b}_desktop_alone_{what}_over_line"] = ratio
    loop = found.get("local_loop")
    if loop:
        result["figures"]["local_loop_end_to_end_over_train"] = loop["end_to_end_over_train_median_of_pairs"]
    silent = [name for name, bench in found.items() if bench is None and name != "notebooks"]
    failed_notebooks = "notebooks" in steps and steps["notebooks"] != 0
    result["missing"] = sorted(set(silent + cut + not_run + (["notebooks"] if failed_notebooks else [])))
    return result


if __name__ == "__main__":
    summary = figures(Path(sys.argv[1]))
    print(json.dumps(summary))
    sys.exit(1 if summary["missing"] else 0)
