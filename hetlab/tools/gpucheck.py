"""``hetlab gpu-check``: what notebooks 01 and 02 claim about CUDA, run on the learner's own NVIDIA
card (README "Check a real NVIDIA GPU"), each check with a goal, printed as rows and then one JSON
line; without CUDA, one line. ``CHECKS``: the card and why every timer waits for it (``describe``),
notebook 01's full run (``notebook01``), notebook 02's speed against batch size (``sweep``); the
maintainers' harness (``python -m harness.gpucheck``) runs them beside its own.
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field, replace

import torch

from hetlab.errors import HetlabError
from hetlab.store.measured import QUICK_SWEEP_BATCHES, SWEEP_BATCHES

UNITS = {"ratio": "{:,.2f}×", "fraction": "{:.2%}", "samples/s": "{:,.0f}/s", "relative": "{:.1e}"}


@dataclass(frozen=True)
class Goal:
    """What a figure must be: ``op`` (">=", ">", "<=") ``value``; ``text`` says it for people."""

    op: str
    value: float
    text: str = ""

    def met(self, figure: float | None) -> bool:
        if figure is None or not math.isfinite(figure):
            return False
        return {">=": figure >= self.value, ">": figure > self.value, "<=": figure <= self.value}[self.op]

    def __str__(self) -> str:
        return self.text or f"{self.op} {self.value:g}"


@dataclass
class Row:
    """One line of the result: a figure, its goal, its status and a note on what was measured. The
    status is "pass" or "FAIL" against the goal, "info" with none, "error" when the check broke."""

    name: str
    figure: float | None
    unit: str = "ratio"
    goal: Goal | None = None
    note: str = ""
    status: str = ""
    details: dict = field(default_factory=dict)

    def __post_init__(self):
        if not self.status:
            self.status = "info" if self.goal is None else "pass" if self.goal.met(self.figure) else "FAIL"

    @property
    def figure_text(self) -> str:
        return "-" if self.figure is None else UNITS.get(self.unit, "{:g}").format(self.figure)

    def as_json(self) -> dict:
        goal = self.goal and {"op": self.goal.op, "value": self.goal.value, "text": str(self.goal)}
        return {"name": self.name, "figure": self.figure, "unit": self.unit, "goal": goal,
                "status": self.status, "note": self.note, "details": self.details}


@dataclass(frozen=True)
class Sizes:
    """How much each check runs: notebook 01's full recipe in both modes; ``QUICK`` trims the sweep."""

    nb01_train: int = 60000          # notebook 01: all of MNIST, 6 epochs, batch 64, cosine, ≥ 99 %
    nb01_test: int = 10000
    nb01_epochs: int = 6
    nb01_batch: int = 64
    nb01_target: float = 0.99
    sweep_batches: tuple = SWEEP_BATCHES
    sweep_steps: int = 10


FULL = Sizes()
QUICK = replace(FULL, sweep_batches=QUICK_SWEEP_BATCHES, sweep_steps=3)


@dataclass
class Context:
    """What every check reads: the device it runs on and how much it runs."""

    device: str
    sizes: Sizes


def check_describe(ctx) -> list[Row]:
    from hetlab.core.devices import describe, synchronize
    info = describe(ctx.device)
    dev = torch.device(info["device"])
    a = torch.randn(2048, 2048, device=dev)
    for _ in range(3):
        a @ a  # warm-up: cuBLAS initialises on its first product
    synchronize(dev)
    t0 = time.perf_counter()
    for _ in range(20):
        a @ a
    launched = time.perf_counter() - t0   # the host queued the work …
    synchronize(dev)
    done = time.perf_counter() - t0       # … and the device finished it
    memory = f"{info['memory_gb']} GiB, " if info["memory_gb"] else ""
    note = (f"{info['name']}, {memory}capability {info['capability']}; 20 matmuls: {launched * 1e3:.2f} ms to launch, "
            f"{done * 1e3:.2f} ms to finish (synchronize)")
    row = Row("describe", done / max(launched, 1e-9), "ratio",
              Goal(">=", 2.0, "≥ 2× (timer without synchronize sees only the launch)"), note, details=info)
    if info["kind"] != "cuda":
        row.status, row.note = "FAIL", f"not a CUDA device: {note}"
    return [row]


def check_notebook01(ctx) -> list[Row]:
    from hetlab.core.data import load_mnist
    from hetlab.core.models import make_model
    from hetlab.core.train import train
    s = ctx.sizes
    train_set, test_set = load_mnist("train"), load_mnist("test")
    if s.nb01_train < len(train_set):
        train_set, test_set = train_set.subset(s.nb01_train), test_set.subset(s.nb01_test)
    t0 = time.perf_counter()
    hist = train(make_model("small", seed=0), train_set, test_set, epochs=s.nb01_epochs,
                 batch_size=s.nb01_batch, device=ctx.device, schedule="cosine", progress=False)
    seconds, warm = time.perf_counter() - t0, hist.steady
    note = (f"{len(train_set):,} images × {s.nb01_epochs} epochs, batch {s.nb01_batch}, cosine: "
            f"{seconds:.1f} s with evaluation; {warm.samples_per_s:,.0f} samples/s warm on {hist.device}")
    return [Row("notebook01", hist.final_accuracy, "fraction", Goal(">=", s.nb01_target, f"≥ {s.nb01_target:.1%}"),
                note, details={"seconds": seconds, "test_accuracy": hist.test_accuracy, "steady": warm.as_dict()})]


def check_sweep(ctx) -> list[Row]:
    """Notebook 02's sweep. On a CPU or a Mac the classic CNN is slower per sample (more arithmetic);
    on a card at large batches both are bound by each step's launches, so the second row has no goal:
    it says which one was faster on this card."""
    from hetlab.core.models import make_model
    from hetlab.core.train import measure_speed
    s = ctx.sizes
    speeds = {name: [measure_speed(make_model(name), ctx.device, b, steps=s.sweep_steps) for b in s.sweep_batches]
              for name in ("small", "classic")}
    rates = {name: [x.samples_per_s for x in r] for name, r in speeds.items()}
    gain, best = {n: max(r) / r[0] for n, r in rates.items()}, {n: max(r) for n, r in rates.items()}
    details = {"batch_sizes": list(s.sweep_batches), "samples_per_s": rates,
               "warmup_s": {name: [x.warmup_s for x in r] for name, r in speeds.items()}}
    return [Row("sweep_batching_gain", gain["small"], "ratio", Goal(">", 3.0, "> 3× (small, best vs batch 1)"),
                f"classic gains {gain['classic']:.1f}× (warm: each batch size's first step apart)", details=details),
            Row("sweep_small_vs_classic", best["small"] / best["classic"], "ratio", None,
                f"best small {best['small']:,.0f}, classic {best['classic']:,.0f} samples/s: on a card at large "
                f"batches both are overhead-bound, so the classic CNN need not be slower here", details=details)]


CHECKS = {"describe": check_describe, "notebook01": check_notebook01, "sweep": check_sweep}


def select(only: str | list[str] | None, checks: dict = CHECKS) -> list[str]:
    """``--only NAME[,NAME]`` → the check names in run order; an unknown name is one line."""
    if not only:
        return list(checks)
    wanted = [n.strip() for n in (only.split(",") if isinstance(only, str) else only) if n.strip()]
    unknown = [n for n in wanted if n not in checks]
    if unknown or not wanted:
        raise HetlabError(f"--only {','.join(unknown) or repr(only)}: no such check; "
                          f"choose from {', '.join(checks)}.")
    return [n for n in checks if n in wanted]


def require_cuda() -> str:
    """``"cuda"``, or a HetlabError saying why this machine cannot run the check."""
    if torch.cuda.is_available():
        return "cuda"
    build = f"torch {torch.__version__}" + ("" if torch.version.cuda else ", a build without CUDA")
    raise HetlabError(f"gpu-check needs an NVIDIA GPU with CUDA, and torch sees none here ({build}): "
                      f"run it on the CUDA desktop, or see docs/gpu-machine.md for a leased GPU machine.")


def run_checks(ctx, names: list[str], checks: dict, out=print) -> list[Row]:
    """The named checks in order, each row printed as it comes; a check that breaks is one error row
    (its one-line reason), and the others still run."""
    rows = []
    for name in names:
        out(f"[gpu-check] {name} …")
        t0 = time.perf_counter()
        try:
            new = checks[name](ctx)
        except Exception as exc:  # noqa: BLE001 - one broken check must not hide the others
            text = " ".join(str(exc).split()) or type(exc).__name__
            new = [Row(name, None, status="error", note=f"{type(exc).__name__}: {text}"[:300])]
        for row in new:
            row.details.setdefault("check_seconds", round(time.perf_counter() - t0, 1))
            out(f"[gpu-check]   {row.name}: {row.figure_text} {row.status}  (goal {row.goal or '-'}) {row.note}")
        rows += new
    return rows


def summary(rows: list[Row], versions: dict, quick: bool, seconds: float, names: list[str]) -> dict:
    """The JSON object printed last (and saved as the harness's record)."""
    return {"check": "gpu_check", "passed": all(r.status in ("pass", "info") for r in rows),
            "quick": quick, "only": names, "seconds": round(seconds, 1), "versions": versions,
            "rows": [r.as_json() for r in rows]}


def run(only: str | list[str] | None = None, quick: bool = False, out=print) -> dict:
    """Run the chosen checks on this machine's card: each row as it comes, then the JSON object (last line)."""
    names, device = select(only), require_cuda()
    started = time.perf_counter()
    rows = run_checks(Context(device, QUICK if quick else FULL), names, CHECKS, out)
    versions = {"gpu": torch.cuda.get_device_name(0), "cuda": torch.version.cuda, "torch": torch.__version__}
    result = summary(rows, versions, quick, time.perf_counter() - started, names)
    out(json.dumps(result, default=str))
    return result
