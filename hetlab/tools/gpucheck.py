"""Check a real NVIDIA GPU: the course's CUDA claims in one command (README "Check a real NVIDIA
GPU"; ``hetlab gpu-check``, ``make gpu-check``; docs/gpu-machine.md for a leased GPU machine).

Every notebook runs on a CPU, and CI has no GPU. This check runs, on a machine with CUDA, what
the course says about one, each time with a goal:

* ``describe``: ``devices.describe`` on the card, and why every timing here waits for it
  (``devices.synchronize``): a timer that does not wait measures only the kernel launches.
* ``single_device``: ``benchmarks/single_device.py`` on CUDA (tensor pipeline vs DataLoader).
* ``notebook01``: notebook 01's full run (``hetlab.train.train``, its recipe) to ≥ 99 %.
* ``pair_ps``: a real unlike pair in one box, nothing simulated: a "desktop" worker on the
  CUDA card (it asks Ray for the GPU) and a "mac" worker on this machine's CPU, on two
  practice nodes, through the parameter server in sync mode with an auto-tuned split.
  Efficiency = together ÷ the sum of the two standalone speeds (each at its share), measured in
  the same run, at a global batch sized so that the card's step is about 100 ms
  (``pair_batch_for``), and as an info row at 16,384; each row says where the step's time went.
  Accuracy against a single-device run on the same samples (same batch, same epochs).
* ``pair_raytrain``: the same pair through Ray Train (gloo on CPU copies, ``hetlab.raytrain``).
* ``autocast``: fp16 and bf16 autocast on the CUDA worker through the parameter server, the
  fp16 overflow fallback provoked on purpose, and fp16 gradients on the wire.
* ``sweep``: notebook 02's throughput-vs-batch sweep (``devices.throughput``) on CUDA.

Each check returns rows (name, figure, goal, pass/fail, note); ``run`` prints a table and,
as its last line, one JSON object, and with ``record=DIR`` writes the dated record
(``DATE-GPU.json`` + ``.md``, for docs/measured/). Without CUDA it refuses in one line before
anything starts. Ray is imported only by the checks that use it.
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import importlib.util
import io
import json
import math
import os
import platform
import re
import subprocess
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable

import torch

from hetlab.errors import HetlabError

ACCURACY_TOLERANCE = 0.005  # a pair's accuracy may trail the single-device run's by 0.5 points


# --- rows and goals (pure) -------------------------------------------------------------------

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


UNITS = {  # how a figure is written in the table
    "ratio": lambda x: f"{x:,.2f}×",
    "fraction": lambda x: f"{x:.2%}",
    "samples/s": lambda x: f"{x:,.0f}/s",
    "relative": lambda x: f"{x:.1e}",
}


@dataclass
class Row:
    """One line of the table: a figure, its goal, pass/fail, and a note on what was measured."""

    name: str
    figure: float | None
    unit: str = "ratio"
    goal: Goal | None = None
    note: str = ""
    status: str = ""           # "pass", "FAIL", "info" (no goal) or "error" (the check broke)
    details: dict = field(default_factory=dict)

    def __post_init__(self):
        if not self.status:
            self.status = evaluate(self.figure, self.goal)

    @property
    def figure_text(self) -> str:
        if self.figure is None:
            return "-"
        return UNITS.get(self.unit, lambda x: f"{x:g}")(self.figure)

    def as_json(self) -> dict:
        goal = None if self.goal is None else {"op": self.goal.op, "value": self.goal.value,
                                               "text": str(self.goal)}
        return {"name": self.name, "figure": self.figure, "unit": self.unit, "goal": goal,
                "status": self.status, "note": self.note, "details": self.details}


def evaluate(figure: float | None, goal: Goal | None) -> str:
    """``"pass"``/``"FAIL"`` against ``goal``; ``"info"`` when there is none."""
    if goal is None:
        return "info"
    return "pass" if goal.met(figure) else "FAIL"


def error_row(name: str, exc: BaseException) -> Row:
    """The row of a check that broke: its one-line reason, so the other checks still run."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return Row(name, None, status="error", note=f"{type(exc).__name__}: {text}"[:300])


def accuracy_goal(reference: float, tolerance: float = ACCURACY_TOLERANCE) -> Goal:
    return Goal(">=", reference - tolerance,
                f"≥ single-device {reference:.2%} − {tolerance * 100:g} pt")


def render_table(rows: list[Row]) -> str:
    """The readable table: check, figure, goal, result, note."""
    head = ("check", "figure", "goal", "result", "note")
    cells = [head] + [(r.name, r.figure_text, str(r.goal or ""), r.status, r.note) for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(4)]
    lines = []
    for i, c in enumerate(cells):
        lines.append("  ".join(c[j].ljust(widths[j]) for j in range(4)) + "  " + c[4])
        if i == 0:
            lines.append("  ".join("-" * w for w in widths) + "  " + "-" * 4)
    return "\n".join(lines)


def summary(rows: list[Row], versions: dict, quick: bool, seconds: float, names: list[str]) -> dict:
    """The JSON object printed last (and saved as the record)."""
    return {"check": "gpu_check", "passed": all(r.status in ("pass", "info") for r in rows),
            "quick": quick, "only": names, "seconds": round(seconds, 1), "versions": versions,
            "rows": [r.as_json() for r in rows]}


# --- the pair's arithmetic and plan (pure) -----------------------------------------------------

def pair_efficiency(together: float, alone_before: list[float], alone_after: list[float]) -> float:
    """Together ÷ Σ standalone, each standalone the mean of before and after (drift hits both)."""
    from hetlab.balance import efficiency
    alone = [(a + b) / 2 for a, b in zip(alone_before, alone_after, strict=True)]
    return efficiency(together, alone)


def pair_batch_for(speed: float, step_s: float, floor: int, bytes_per_sample: float | None = None,
                   memory: float | None = None) -> int:
    """The efficiency run's global batch: the card's ideal step about ``step_s`` long at its
    ``speed`` (samples/s alone), at least ``floor``, within a quarter of ``memory`` (bytes) at
    ``bytes_per_sample`` (a training step's peak); a multiple of 1024.

    Why sized to the card: a synchronous step pays a few ms of Ray messages and the update
    whatever its size, so on a card that trains ~800,000 samples/s (an H100, this small model)
    a 16,384 batch is a 20 ms step and loses a fifth of it; the same batch is a far longer step
    on a slower card."""
    batch = max(floor, speed * step_s)
    if bytes_per_sample and memory:
        batch = min(batch, memory / 4 / bytes_per_sample)
    return max(1024, int(batch) // 1024 * 1024)


def pair_workers(device: str = "cuda", precision: str = "fp32") -> list:
    """The unlike pair in one box: "desktop" on ``device`` (the card), "mac" on the CPU."""
    from hetlab.ps.specs import WorkerSpec
    return [WorkerSpec("desktop", role="desktop", device=device, precision=precision),
            WorkerSpec("mac", role="mac", device="cpu")]


def pair_placements(workers: list) -> dict[str, dict]:
    """Per worker, the Ray actor options the parameter server gives it (``ps.training.actor_options``):
    the worker on the card asks for ``num_gpus=1``, the CPU worker asks for none."""
    from hetlab.ps.training import actor_options
    return {w.name: actor_options(w) for w in workers}


# --- sizes ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Sizes:
    """How much each check runs. Notebook 01's recipe is the notebook's full one in both modes
    (seconds on a GPU); ``QUICK`` trims repeats, measured steps, epochs and the sweep."""

    bench_samples: int = 12000       # benchmarks/single_device.py --samples
    bench_repeats: int = 3
    nb01_train: int = 60000          # notebook 01: all of MNIST, 6 epochs, batch 64, cosine, ≥ 99 %
    nb01_test: int = 10000
    nb01_epochs: int = 6
    nb01_batch: int = 64
    nb01_target: float = 0.99
    pair_batch: int | None = None    # global batch of the efficiency run; None: sized to the card (pair_batch_for)
    pair_step_s: float = 0.1         # ... so that its ideal step is about this long
    pair_short_batch: int = 16384    # and an info row at this batch: a short step on a fast card
    pair_steps: int = 6              # measured steps per standalone / tuning round
    pair_rounds: int = 6             # auto-tune rounds at most
    pair_repeats: int = 8            # the tuned split runs pair_repeats × pair_steps steps (a GPU step is ms)
    train_samples: int = 60000       # the pair's accuracy runs and their single-device reference
    test_samples: int = 10000
    acc_batch: int = 128             # global batch of the accuracy runs
    acc_epochs: int = 2
    sweep_batches: tuple = (1, 4, 16, 64, 256, 1024)   # notebook 02, full mode
    sweep_steps: int = 10


FULL = Sizes()
QUICK = replace(FULL, bench_repeats=2, pair_steps=4, pair_rounds=5, pair_repeats=6, acc_epochs=1,
                sweep_batches=(1, 8, 64, 256), sweep_steps=3)


# --- what the checks share ----------------------------------------------------------------------

class Context:
    """Shared, made on first use: data, the practice cluster of the pair, the single-device
    reference, the accuracy runs' tuned split and their results (so ``--only`` works alone)."""

    def __init__(self, device: str, sizes: Sizes):
        self.device, self.sizes = device, sizes
        self._cluster = None
        self._cache: dict = {}

    def cached(self, key, make: Callable):
        if key not in self._cache:
            self._cache[key] = make()
        return self._cache[key]

    def train_data(self):
        from hetlab.data import load_mnist
        n = self.sizes.train_samples
        return self.cached("train", lambda: load_mnist("train") if n >= 60000
                           else load_mnist("train").subset(n, seed=0))

    def test_data(self):
        from hetlab.data import load_mnist
        n = self.sizes.test_samples
        return self.cached("test", lambda: load_mnist("test") if n >= 10000
                           else load_mnist("test").subset(n, seed=0))

    @property
    def acc_steps(self) -> int:
        return self.sizes.acc_epochs * (len(self.train_data()) // self.sizes.acc_batch)

    def cluster(self):
        """Two practice nodes here, "desktop" and "mac"; the desktop's Ray counts the real card."""
        if self._cluster is None:
            from hetlab.practice import PracticeCluster
            gpus = {"desktop": 1} if torch.device(self.device).type == "cuda" else None
            self._cluster = PracticeCluster(("desktop", "mac"), accounted_gpus=gpus)
        return self._cluster

    def reference(self) -> float:
        """Single-device accuracy on the pair's samples: same data, global batch, epochs, Adam."""
        def make():
            from hetlab.models import make_model
            from hetlab.train import train
            hist = train(make_model("small", seed=0), self.train_data(), self.test_data(),
                         epochs=self.sizes.acc_epochs, batch_size=self.sizes.acc_batch,
                         device=self.device, seed=0, progress=False)
            return hist.final_accuracy
        return self.cached("reference", make)

    def accuracy_split(self, training=None) -> list[int]:
        """Batch sizes of the accuracy runs: auto-tuned at their global batch (fp32), on the
        running pair ``training`` if given (its weights move on: not an accuracy run), else on
        a pair started for it."""
        from hetlab.balance import auto_tune, split_batch
        from hetlab.ps import ParameterServerTraining
        b, s = self.sizes.acc_batch, self.sizes

        def tune(run):
            return auto_tune(lambda sizes: run.measure(sizes, steps=s.pair_steps), b, 2,
                             rounds=s.pair_rounds).batch_sizes

        def make():
            if training is not None:
                return tune(training)
            self.cluster()
            with ParameterServerTraining(pair_workers(self.device), self.train_data(), seed=0,
                                         progress=False, batch_sizes=split_batch(b, [1, 1])) as run:
                return tune(run)
        return self.cached("split", make)

    def ps_run(self, precision: str = "fp32", transfer: str = "fp32") -> dict:
        """One accuracy run of the pair through the parameter server (sync, tuned split)."""
        def make():
            from hetlab.ps import ParameterServerTraining
            sizes = self.accuracy_split()
            self.cluster()
            with ParameterServerTraining(pair_workers(self.device, precision), self.train_data(),
                                         seed=0, progress=False, transfer=transfer,
                                         batch_sizes=sizes) as run:
                records = run.run(self.acc_steps)
                losses = [r.loss for r in records]
                return {"accuracy": run.evaluate(self.test_data()), "labels": run.labels,
                        "batch_sizes": sizes, "samples": run.samples_seen,
                        "samples_per_s": run.samples_per_s(records),
                        "bytes_to_server_per_sample": run.bytes_to_server / run.samples_seen,
                        "losses_finite": all(math.isfinite(x) for x in losses)}
        return self.cached(("ps", precision, transfer), make)

    def close(self) -> None:
        if self._cluster is not None:
            self._cluster.shutdown()
            self._cluster = None


def _require(condition: bool, message: str) -> None:
    """A check's precondition (the worker really on the card, …): if false, the row is an error."""
    if not condition:
        raise HetlabError(message)


# --- the checks -------------------------------------------------------------------------------

def check_describe(ctx: Context) -> list[Row]:
    from hetlab.devices import describe, synchronize
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
    note = (f"{info['name']}, {memory}capability {info['capability']}, bf16 "
            f"{'yes' if info['bf16'] else 'no'}; 20 matmuls: {launched * 1e3:.2f} ms to launch, "
            f"{done * 1e3:.2f} ms to finish (synchronize)")
    row = Row("describe", done / max(launched, 1e-9), "ratio",
              Goal(">=", 2.0, "≥ 2× (timer without synchronize sees only the launch)"), note,
              details=info)
    if info["kind"] != "cuda":
        row.status, row.note = "FAIL", f"not a CUDA device: {note}"
    return [row]


def _load_benchmark(name: str):
    path = Path(__file__).resolve().parents[2] / "benchmarks" / f"{name}.py"
    if not path.is_file():
        raise HetlabError(f"{path} not found: run gpu-check from a hetlab checkout.")
    spec = importlib.util.spec_from_file_location(f"hetlab_benchmark_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def check_single_device(ctx: Context) -> list[Row]:
    bench = _load_benchmark("single_device")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):  # its table goes into the record's details
        r = bench.main(["--device", ctx.device, "--samples", str(ctx.sizes.bench_samples),
                        "--repeats", str(ctx.sizes.bench_repeats)])
    note = (f"training {r['samples_per_s_hetlab']:,} vs {r['samples_per_s_dataloader']:,} samples/s "
            f"(tensor batches vs DataLoader), {ctx.sizes.bench_samples} samples, best of "
            f"{ctx.sizes.bench_repeats}")
    details = {**r, "output": out.getvalue()}
    return [Row("train_speedup", r["train_speedup"], "ratio", Goal(">=", 3.0, "≥ 3×"), note, details=details),
            Row("pipeline_speedup", r["pipeline_speedup"], "ratio", Goal(">=", 10.0, "≥ 10×"),
                "input pipeline alone: batches ready on the device", details=details)]


def check_notebook01(ctx: Context) -> list[Row]:
    from hetlab.data import load_mnist
    from hetlab.models import make_model
    from hetlab.train import train
    s = ctx.sizes
    train_set, test_set = load_mnist("train"), load_mnist("test")
    if s.nb01_train < len(train_set):
        train_set, test_set = train_set.subset(s.nb01_train), test_set.subset(s.nb01_test)
    t0 = time.perf_counter()
    hist = train(make_model("small", seed=0), train_set, test_set, epochs=s.nb01_epochs,
                 batch_size=s.nb01_batch, device=ctx.device, schedule="cosine", progress=False)
    seconds = time.perf_counter() - t0
    note = (f"{len(train_set):,} images × {s.nb01_epochs} epochs, batch {s.nb01_batch}, cosine: "
            f"{seconds:.1f} s, {hist.samples_per_s:,.0f} samples/s on {hist.device}")
    return [Row("notebook01", hist.final_accuracy, "fraction",
                Goal(">=", s.nb01_target, f"≥ {s.nb01_target:.1%}"), note,
                details={"seconds": seconds, "test_accuracy": hist.test_accuracy,
                         "samples_per_s": hist.samples_per_s})]


def _device_of(label: str) -> str:
    """``"desktop · cuda:0 fp16"`` → ``"cuda"``."""
    return label.split(" · ", 1)[1].split()[0].split(":")[0]


def check_pair_ps(ctx: Context) -> list[Row]:
    from hetlab.balance import format_ratio, split_batch
    from hetlab.ps import ParameterServerTraining
    s = ctx.sizes
    workers = pair_workers(ctx.device)
    ctx.cluster()
    asks = {name: bool(opts.get("num_gpus")) for name, opts in pair_placements(workers).items()}
    gpu_note = ", ".join(f"{n} {'asks Ray for the GPU' if a else 'asks for no GPU'}" for n, a in asks.items())
    with ParameterServerTraining(workers, ctx.train_data(), seed=0, progress=False,
                                 batch_sizes=split_batch(s.pair_short_batch, [1, 1])) as training:
        labels = training.labels
        _require([_device_of(x) for x in labels] == [torch.device(ctx.device).type, "cpu"],
                 f"workers ran as {labels}, not the card + the CPU")
        training.run(2)  # warm-up
        g, why = s.pair_batch, "given"
        if g is None:
            speed = training.standalone_throughput([s.pair_short_batch, 64], steps=s.pair_steps)[0]
            g = pair_batch_for(speed, s.pair_step_s, s.pair_short_batch, *_card_memory(ctx.device))
            why = (f"sized to the card: {speed:,.0f} samples/s alone, a step of about "
                   f"{1e3 * s.pair_step_s:.0f} ms, within a quarter of its memory")
        rows = [_pair_efficiency(training, g, s, Goal(">=", 0.90, "≥ 90% of Σ alone"),
                                 "pair_ps_efficiency", f"global batch {g:,} ({why}); {gpu_note}")]
        if g != s.pair_short_batch:
            rows.append(_pair_efficiency(training, s.pair_short_batch, s, None, "pair_ps_efficiency_short",
                                         f"global batch {s.pair_short_batch:,}: a shorter step, the same "
                                         f"fixed cost of the parameter server"))
        ctx.accuracy_split(training)  # the accuracy runs' split, tuned on this running pair
    ref, run = ctx.reference(), ctx.ps_run()
    _require(run["losses_finite"], "a non-finite loss in the fp32 run")
    rows.append(Row("pair_ps_accuracy", run["accuracy"], "fraction", accuracy_goal(ref),
                    f"{run['samples']:,} samples (batch {ctx.sizes.acc_batch} = "
                    f"{format_ratio(run['batch_sizes'])}, {ctx.sizes.acc_epochs} epochs); "
                    f"{'; '.join(run['labels'])}", details={**run, "reference": ref}))
    return rows


def _pair_efficiency(training, g: int, s: Sizes, goal: Goal | None, name: str, what: str) -> Row:
    """Auto-tune the split of ``g``, then train at it, each worker timed alone at its share just
    before and after: efficiency = together ÷ Σ alone; and why the step is longer than its ideal."""
    from hetlab.balance import auto_tune, format_ratio
    from hetlab.ps.specs import step_budget
    tuned = auto_tune(lambda sizes: training.measure(sizes, steps=s.pair_steps), g, 2, rounds=s.pair_rounds)
    before = training.standalone_throughput(tuned.batch_sizes, steps=s.pair_steps)
    records = training.run(s.pair_steps * s.pair_repeats, batch_sizes=tuned.batch_sizes)
    after = training.standalone_throughput(tuned.batch_sizes, steps=s.pair_steps)
    together, budget = training.samples_per_s(records), step_budget(records)
    labels = training.labels
    alone = " + ".join(f"{_device_of(lab)} {(a + b) / 2:,.0f}" for lab, a, b in zip(labels, before, after))
    return Row(name, pair_efficiency(together, before, after), "fraction", goal,
               f"sync, {what}; tuned {format_ratio(tuned.batch_sizes)}: {together:,.0f} samples/s together, "
               f"alone {alone} (each at its share); kept {budget.ideal / budget.step:.0%} of the devices' "
               f"speeds in the steps: {budget}",
               details={"global_batch": g, "labels": labels, "standalone_before": before,
                        "standalone_after": after, "together": together,
                        "tuned_batch_sizes": tuned.batch_sizes, "tune_converged": tuned.converged,
                        "steps": len({r.step for r in records}), "kept": budget.ideal / budget.step,
                        "step_budget_ms": budget.ms(), "speeds_in_steps": budget.speeds,
                        "comm_ms": {w: round(1e3 * c, 2) for w, c in budget.comm.items()},
                        "compute_ms": _mean_ms(records, "compute_s"), "update_ms": _mean_ms(records, "update_s")})


def _card_memory(device: str) -> tuple[float | None, float | None]:
    """(peak bytes per sample of a training step of the small model, the card's memory), measured
    here in the driver (the card is in this machine); (None, None) off CUDA."""
    if torch.device(device).type != "cuda":
        return None, None
    from hetlab.models import make_model
    model, batch = make_model("small").to(device), 1024
    x = torch.randn(batch, 1, 28, 28, device=device)
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    model(x).sum().backward()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    del model, x
    torch.cuda.empty_cache()
    return peak / batch, torch.cuda.get_device_properties(torch.device(device)).total_memory


def _mean_ms(records, field_name: str) -> dict:
    """Per worker, the mean of a StepRecord field in ms."""
    out: dict = {}
    for r in records:
        out.setdefault(r.worker, []).append(getattr(r, field_name))
    return {w: round(1e3 * sum(v) / len(v), 2) for w, v in out.items()}


def check_pair_raytrain(ctx: Context) -> list[Row]:
    from hetlab.raytrain import train_mixed
    ctx.cluster()
    n = len(ctx.train_data())
    result = train_mixed(steps=ctx.acc_steps, global_batch=ctx.sizes.acc_batch, ratio="auto",
                         devices=[ctx.device, "cpu"], train_samples=n if n < 60000 else None,
                         test_samples=ctx.sizes.test_samples if ctx.sizes.test_samples < 10000 else None,
                         seed=0, progress=False)
    kinds = [r.device.split(":")[0] for r in result.ranks]
    _require(kinds == [torch.device(ctx.device).type, "cpu"], f"ranks ran on {kinds}, not the card + the CPU")
    ranks = "; ".join(f"{r.role} {r.device} b={r.batch_size}" for r in result.ranks)
    note = (f"{result.steps} steps of batch {ctx.sizes.acc_batch} ({ranks}); gloo on CPU copies, "
            f"no GPU asked; fit {result.fit_s:.0f} s, loop {result.train_s:.0f} s; weights "
            f"{'identical' if result.weights_identical else 'differ in rounding'} on the two ranks")
    return [Row("pair_raytrain_accuracy", result.accuracy, "fraction", accuracy_goal(ctx.reference()),
                note, details={"ranks": [asdict(r) for r in result.ranks], "fit_s": result.fit_s,
                               "train_s": result.train_s, "reference": ctx.reference()})]


FIRST_BATCH = [(0, 256)]  # positions 0-255 of the shuffled stream: the first batch


def _worker_gradient(ctx: Context, precision: str, scale: float):
    """The gradient a parameter-server Worker (in this process, no Ray) sends for its first
    batch at the initial weights × ``scale``; same batch for every call."""
    from hetlab.models import make_model
    from hetlab.flat import flat_weights
    from hetlab.ps.specs import WorkerSpec
    from hetlab.ps.worker import Worker
    w = Worker(WorkerSpec("desktop", device=ctx.device, precision=precision),
               ctx.train_data().subset(1024, seed=1), "small")
    grad, _ = w.gradient(FIRST_BATCH, flat_weights(make_model("small", seed=0)) * scale)
    return grad, w


def _fp16_overflows(worker, scale: float) -> bool:
    """Would this batch's fp16 gradient, loss-scaled as the worker does, overflow?"""
    from hetlab.models import make_model
    from hetlab.flat import flat_weights, load_flat
    from hetlab.ps.worker import LOSS_SCALE
    model = make_model("small", seed=None).to(worker.device)
    load_flat(list(model.parameters()), (flat_weights(make_model("small", seed=0)) * scale).to(worker.device))
    idx = worker._indices(FIRST_BATCH)  # the batch _worker_gradient used
    xb, yb = worker.x[idx], worker.y[idx]
    with torch.autocast(worker.device.type, dtype=torch.float16):
        loss = torch.nn.functional.cross_entropy(model(xb), yb)
    (loss * LOSS_SCALE).backward()
    return not all(bool(torch.isfinite(p.grad).all()) for p in model.parameters())


def _relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-30))


def check_autocast(ctx: Context) -> list[Row]:
    from hetlab.balance import format_ratio
    ref = ctx.ps_run()["accuracy"]  # the fp32 pair, same samples and split
    goal = Goal(">=", ref - ACCURACY_TOLERANCE, f"≥ fp32 pair {ref:.2%} − {ACCURACY_TOLERANCE * 100:g} pt")
    rows = []
    for precision in ("fp16", "bf16"):
        run = ctx.ps_run(precision=precision)
        desktop = run["labels"][0]
        _require(f" {precision}" in desktop and "off on" not in desktop,
                 f"autocast {precision} is not on for the card's worker: {desktop}")
        _require(run["losses_finite"], f"a non-finite loss in the {precision} run")
        rows.append(Row(f"autocast_{precision}", run["accuracy"], "fraction", goal,
                        f"{desktop} + mac cpu fp32, split {format_ratio(run['batch_sizes'])}: "
                        f"{run['samples_per_s']:,.0f} samples/s", details=run))
    g32, _ = _worker_gradient(ctx, "fp32", 1.0)
    g16, worker = _worker_gradient(ctx, "fp16", 1.0)
    _require(worker.amp_dtype == torch.float16, f"fp16 autocast is off on {worker.device}")
    autocast_diff = _relative(g16, g32)
    scale = next((x for x in (4.0, 16.0, 64.0, 256.0) if _fp16_overflows(worker, x)), None)
    _require(scale is not None, "could not make an fp16 gradient overflow (weights × 256)")
    big32, _ = _worker_gradient(ctx, "fp32", scale)
    big16, _ = _worker_gradient(ctx, "fp16", scale)
    _require(bool(torch.isfinite(big32).all()), f"the fp32 gradient at weights × {scale:g} is not finite")
    _require(bool(torch.isfinite(big16).all()), "the fp16 worker sent a non-finite gradient")
    rows.append(Row("fp16_overflow_fallback", _relative(big16, big32), "relative",
                    Goal("<=", 1e-4, "≤ 1e-4 from fp32 (batch redone in fp32)"),
                    f"weights × {scale:g}: fp16 × loss scale overflows, the worker redid the batch in "
                    f"fp32; without overflow fp16 differs from fp32 by {autocast_diff:.1e} (autocast on)",
                    details={"scale": scale, "autocast_relative_difference": autocast_diff}))
    wire, fp32 = ctx.ps_run(transfer="fp16"), ctx.ps_run()
    ratio = wire["bytes_to_server_per_sample"] / fp32["bytes_to_server_per_sample"]
    rows.append(Row("wire_fp16", wire["accuracy"], "fraction", goal,
                    f"gradients sent as fp16: {ratio:.2f}× the fp32 run's bytes to the server",
                    details={**wire, "bytes_ratio": ratio}))
    return rows


def check_sweep(ctx: Context) -> list[Row]:
    from hetlab.devices import throughput
    from hetlab.models import make_model
    s = ctx.sizes
    rates = {name: [throughput(make_model(name), ctx.device, b, steps=s.sweep_steps) for b in s.sweep_batches]
             for name in ("small", "classic")}
    gain = {name: max(r) / r[0] for name, r in rates.items()}
    table = "; ".join(f"{name} " + " ".join(f"b{b}:{x:,.0f}" for b, x in zip(s.sweep_batches, r))
                      for name, r in rates.items())
    details = {"batch_sizes": list(s.sweep_batches), "samples_per_s": rates}
    best = {name: max(r) for name, r in rates.items()}
    return [Row("sweep_batching_gain", gain["small"], "ratio", Goal(">", 3.0, "> 3× (small, best vs batch 1)"),
                f"classic gains {gain['classic']:.1f}×; {table}", details=details),
            Row("sweep_small_vs_classic", best["small"] / best["classic"], "ratio",
                Goal(">", 1.0, "> 1× (bigger model slower)"),
                f"best small {best['small']:,.0f}, classic {best['classic']:,.0f} samples/s", details=details)]


CHECKS: dict[str, Callable[[Context], list[Row]]] = {
    "describe": check_describe,
    "single_device": check_single_device,
    "notebook01": check_notebook01,
    "pair_ps": check_pair_ps,
    "pair_raytrain": check_pair_raytrain,
    "autocast": check_autocast,
    "sweep": check_sweep,
}


def select(only: str | list[str] | None) -> list[str]:
    """``--only NAME[,NAME]`` → the check names in run order; an unknown name is one line."""
    if not only:
        return list(CHECKS)
    wanted = [n.strip() for n in (only.split(",") if isinstance(only, str) else only) if n.strip()]
    unknown = [n for n in wanted if n not in CHECKS]
    if unknown or not wanted:
        raise HetlabError(f"--only {','.join(unknown) or repr(only)}: no such check; "
                          f"choose from {', '.join(CHECKS)}.")
    return [n for n in CHECKS if n in wanted]


def require_cuda() -> str:
    """``"cuda"``, or a HetlabError saying why this machine cannot run the check (before Ray)."""
    if torch.cuda.is_available():
        return "cuda"
    build = f"torch {torch.__version__}" + ("" if torch.version.cuda else ", a build without CUDA")
    raise HetlabError(f"gpu-check needs an NVIDIA GPU with CUDA, and torch sees none here ({build}): "
                      f"run it on the CUDA desktop, or see docs/gpu-machine.md for a leased GPU machine.")


# --- versions and the record -------------------------------------------------------------------

def _nvidia_driver() -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None


def _dist_version(name: str) -> str | None:
    from importlib import metadata
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def versions(device: str) -> dict:
    """What this check ran on: GPU, driver, CUDA, torch, Ray, Python, hetlab and its commit.

    ``HETLAB_COMMIT`` names the commit where the checkout has no .git (a copy sent to a GPU
    machine; scripts/gpu_carry.py writes it); ``HETLAB_RAY_WHEEL`` says how Ray got there."""
    import hetlab
    from hetlab.machine import hetlab_commit
    cuda = torch.device(device).type == "cuda"
    return {"gpu": torch.cuda.get_device_name(0) if cuda else None,
            "driver": _nvidia_driver() if cuda else None,
            "cuda": torch.version.cuda, "torch": torch.__version__, "ray": _dist_version("ray"),
            "python": platform.python_version(), "hetlab": hetlab.__version__,
            "hetlab_commit": os.environ.get("HETLAB_COMMIT") or hetlab_commit(),
            "ray_wheel": os.environ.get("HETLAB_RAY_WHEEL"), "device": device,
            "cpus": os.cpu_count(), "host": platform.node(),
            "date": _dt.date.today().isoformat()}


def gpu_slug(name: str | None) -> str:
    """A file-name part for a GPU: "NVIDIA H100 80GB HBM3" → "h100", "NVIDIA GeForce RTX 4070 Ti"
    → "rtx-4070-ti"; no GPU → "cpu"."""
    if not name:
        return "cpu"
    drop = {"nvidia", "geforce", "tesla", "pcie", "sxm", "nvl", "hbm", "hbm2", "hbm2e", "hbm3", "hbm3e"}
    parts = [t for t in re.split(r"[\s_\-]+", name.lower())
             if t and t not in drop and not re.fullmatch(r"\d+gb|sxm\d*|hbm\d*e?", t)]
    slug = re.sub(r"[^a-z0-9-]", "", "-".join(parts)).strip("-")
    return slug or "gpu"


def render_markdown(result: dict) -> str:
    """The record for people: what ran, on what, and the table."""
    v = result["versions"]
    lines = [f"# GPU check {v['date']}: {v['gpu'] or v['device']}", "",
             f"`hetlab gpu-check{' --quick' if result['quick'] else ''}` "
             f"({', '.join(result['only'])}): {result['seconds']:.0f} s, "
             f"{'all goals met' if result['passed'] else 'NOT all goals met'}.", "",
             "| version | |", "|---|---|"]
    lines += [f"| {k} | {v[k]} |" for k in ("gpu", "driver", "cuda", "torch", "ray", "ray_wheel", "python",
                                           "hetlab", "hetlab_commit", "cpus", "host") if v.get(k) is not None]
    lines += ["", "| check | figure | goal | result | note |", "|---|---|---|---|---|"]
    for r in result["rows"]:
        row = Row(r["name"], r["figure"], r["unit"], None, r["note"], r["status"])
        goal = (r["goal"] or {}).get("text", "")
        lines.append(f"| {r['name']} | {row.figure_text} | {goal} | {r['status']} | "
                     f"{r['note'].replace('|', '/')} |")
    return "\n".join(lines) + "\n"


def write_record(result: dict, directory: str | os.PathLike) -> tuple[Path, Path]:
    """``DIR/DATE-GPU.json`` (the JSON last line's object) and ``.md``; a second run that day gets
    ``-2``, ``-3``, … rather than overwriting the first."""
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    stem = f"{result['versions']['date']}-{gpu_slug(result['versions']['gpu'])}"
    n = 1
    while (folder / f"{stem}.json").exists() or (folder / f"{stem}.md").exists():
        n += 1
        stem = f"{result['versions']['date']}-{gpu_slug(result['versions']['gpu'])}-{n}"
    paths = folder / f"{stem}.json", folder / f"{stem}.md"
    paths[0].write_text(json.dumps(result, indent=1, default=str) + "\n")
    paths[1].write_text(render_markdown(result))
    return paths


# --- the runner ---------------------------------------------------------------------------------

def run(only: str | list[str] | None = None, quick: bool = False, record: str | None = None,
        sizes: Sizes | None = None, device_override: str | None = None, out=print) -> dict:
    """Run the chosen checks, print progress, the table and the JSON object (last line).

    ``sizes``: how much each check runs (default ``QUICK`` or ``FULL``). ``device_override`` is
    for tests on a CPU box only (tests/test_gpucheck.py): it runs the checks' code on another
    device. The CLI never sets it: without CUDA, ``hetlab gpu-check`` refuses.
    """
    names = select(only)
    device = device_override or require_cuda()
    sizes = sizes or (QUICK if quick else FULL)
    ctx, rows, started = Context(device, sizes), [], time.perf_counter()
    try:
        for name in names:
            out(f"[gpu-check] {name} …")
            t0 = time.perf_counter()
            try:
                new = CHECKS[name](ctx)
            except Exception as exc:  # noqa: BLE001 - one broken check must not hide the others
                new = [error_row(name, exc)]
            for row in new:
                row.details.setdefault("check_seconds", round(time.perf_counter() - t0, 1))
                out(f"[gpu-check]   {row.name}: {row.figure_text} {row.status}")
            rows += new
    finally:
        ctx.close()
    result = summary(rows, versions(device), quick, time.perf_counter() - started, names)
    out(render_table(rows))
    if record:
        json_path, md_path = write_record(result, record)
        out(f"record: {json_path} and {md_path}")
    out(json.dumps(result, default=str))
    return result
