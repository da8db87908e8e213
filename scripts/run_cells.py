"""Run notebooks' code cells in order, as one script each, where Jupyter is not installed (the
leased GPU machine: docs/gpu-machine.md). Each notebook runs in a fresh namespace, plots go to
matplotlib's Agg backend, IPython magics (`%matplotlib inline`) are left out; a failing cell is
printed with its index and that notebook stops there (exit status 1). Jupyter's own run
(``make test``, nbval) stays the test: this only takes the notebooks' code to a CUDA card.

    HETLAB_QUICK=0 python3 scripts/run_cells.py notebooks/01_single_device_mnist.ipynb \
        notebooks/02_measure_your_devices.ipynb
"""
import json
import sys
import time
import traceback

import matplotlib

matplotlib.use("Agg")
failed = 0
for path in sys.argv[1:]:
    cells = [c for c in json.load(open(path))["cells"] if c["cell_type"] == "code"]
    ns, t0 = {"__name__": "__main__"}, time.perf_counter()
    print(f"=== {path}: {len(cells)} code cells", flush=True)
    for i, c in enumerate(cells):
        src, t = "".join(c["source"]), time.perf_counter()
        src = "\n".join(line for line in src.splitlines() if not line.lstrip().startswith(("%", "!")))  # IPython magics
        try:
            exec(compile(src, f"{path}#cell{i}", "exec"), ns)
        except Exception:
            print(f"!!! {path} cell {i} FAILED:\n{src[:600]}\n---", flush=True)
            traceback.print_exc(limit=4)
            failed += 1
            break
        print(f"--- cell {i} ok ({time.perf_counter() - t:.1f} s)", flush=True)
    else:
        print(f"=== {path}: all cells ran ({time.perf_counter() - t0:.0f} s)", flush=True)
sys.exit(1 if failed else 0)
