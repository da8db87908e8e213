"""The GPU checks of the real unlike pair in one box (``python -m harness.gpucheck``): ``pair_ps``, the
card and this CPU through the parameter server (efficiency against the two standalone speeds
measured in the same run, where each step's time went (``step_budget``, also read by
benchmarks/hetero_efficiency.py), accuracy against one device), and
``pair_raytrain``, the same pair through Ray Train and hetlab's exchange (CPU copies through the rendezvous store,
the exchange the learner's Mac and desktop use; the practice "mac" has no Linux gloo). Nothing simulated.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

import torch

from harness.gpucheck.context import (Context, Sizes, accuracy_goal, require, pair_batch_for, pair_efficiency,
                                      pair_placements, pair_workers)
from hetlab.arithmetic.steptime import finish_together, step_time
from hetlab.errors import HetlabError
from hetlab.ps.records import worker_steps
from hetlab.tools.gpucheck import Goal, Row


@dataclass
class StepBudget:
    """Why synchronous steps took longer than ideal, in mean seconds per step (notebook 06).
    ``ideal + split + noise + overhead == step``. ``speeds``: each worker's device, samples/s;
    ``comm``: each worker's messages, mean seconds per step (``worker_steps``)."""

    ideal: float       # the batch ÷ Σ speeds: every device busy all the time, nothing else
    split: float       # the slower worker's mean time above a split balanced for these speeds and messages
    noise: float       # each step's slowest worker above that mean: step by step, whoever is slower sets it
    overhead: float    # the parameter server's own cost: messages (even when balanced), the update, the driver
    step: float
    speeds: dict = field(default_factory=dict)
    comm: dict = field(default_factory=dict)

    def ms(self) -> dict:
        """The parts in ms (two decimals), for a JSON record."""
        return {k: round(1e3 * getattr(self, k), 2) for k in ("ideal", "split", "noise", "overhead", "step")}

    def __str__(self) -> str:
        part = lambda x: f"{1e3 * x:.1f} ms ({x / self.step:.0%})"  # noqa: E731
        return (f"ideal {1e3 * self.ideal:.1f} ms + split off {part(self.split)} + noise {part(self.noise)}"
                f" + the parameter server's own cost {part(self.overhead)} = step {1e3 * self.step:.1f} ms")


def step_budget(records) -> StepBudget:
    """Where the time of these synchronous steps went, beyond the ideal (notebook 06).

    Worker i's device runs at s_i = its samples ÷ its compute + simulated time; its messages
    take c_i per step (comm). The ideal step is B ÷ Σ s_i. Balanced, every worker would take
    T = (B + Σ s_i·c_i) ÷ Σ s_i per step (``steptime.finish_together``): "split" is the
    slower worker's mean time above T, "noise" each step's slowest worker above that mean,
    "overhead" T − ideal (the messages) plus the rest of the step (the update, the driver).
    All four are ≥ 0 and add up to the mean step.
    """
    by_step: dict = {}
    mine: dict = {}   # worker → its records, in the order the workers first appear
    for r in records:
        by_step.setdefault(r.step, []).append(r)
        mine.setdefault(r.worker, []).append(r)
    if not by_step:
        raise HetlabError("step_budget needs the records of at least one step, e.g. training.run(8).")
    n, names = len(by_step), list(mine)
    samples = {w: sum(r.samples for r in rs) for w, rs in mine.items()}
    seen = {w: worker_steps(rs) for w, rs in mine.items()}
    speeds, comm = {w: s.device_samples_per_s for w, s in seen.items()}, {w: s.comm_s for w, s in seen.items()}
    total = sum(speeds.values())
    ideal = sum(samples.values()) / n / total
    lines = [seen[w].line for w in names]
    balanced = finish_together(sum(samples.values()) / n, lines)[0]
    slower = step_time(lines, [samples[w] / n for w in names])
    longest = sum(max(r.device_s + r.comm_s for r in rs) for rs in by_step.values()) / n
    step = sum(rs[0].step_s for rs in by_step.values()) / n
    noise = longest - slower if longest - slower > 1e-9 else 0.0   # ≥ 0 but for float rounding
    return StepBudget(ideal, slower - balanced, noise, balanced - ideal + step - longest, step,
                      speeds, comm)


def _device_of(label: str) -> str:
    """``"desktop · cuda:0"`` → ``"cuda"``."""
    return label.split(" · ", 1)[1].split()[0].split(":")[0]


def check_pair_ps(ctx: Context) -> list[Row]:
    from hetlab.arithmetic.balance import format_split, split_batch
    from hetlab.ps import ParameterServerTraining
    s = ctx.sizes
    workers = pair_workers(ctx.worker_device)
    ctx.cluster()
    asks = {name: bool(opts.get("num_gpus")) for name, opts in pair_placements(workers).items()}
    gpu_note = ", ".join(f"{n} {'asks Ray for the GPU' if a else 'asks for no GPU'}" for n, a in asks.items())
    with ParameterServerTraining(workers, ctx.train_data(), seed=0, progress=False,
                                 batch_sizes=split_batch(s.pair_short_batch, [1, 1])) as training:
        labels = training.labels
        require([_device_of(x) for x in labels] == [torch.device(ctx.device).type, "cpu"],
                 f"workers ran as {labels}, not the card + the CPU")
        training.run(2)  # warm-up
        g, why = s.pair_batch, "given"
        if g is None:
            speed = training.standalone_samples_per_s([s.pair_short_batch, 64], steps=s.pair_steps)[0]
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
    require(run["losses_finite"], "a non-finite loss in the fp32 run")
    rows.append(Row("pair_ps_accuracy", run["accuracy"], "fraction", accuracy_goal(ref),
                    f"{run['samples']:,} samples (batch {ctx.sizes.acc_batch} = "
                    f"{format_split(run['batch_sizes'])}, {ctx.sizes.acc_epochs} epochs); "
                    f"{'; '.join(run['labels'])}", details={**run, "reference": ref}))
    return rows


def _pair_efficiency(training, g: int, s: Sizes, goal: Goal | None, name: str, what: str) -> Row:
    """Auto-tune the split of ``g``, then train at it, each worker timed alone at its share just
    before and after: efficiency = together ÷ Σ alone; and why the step is longer than its ideal."""
    from hetlab.arithmetic.balance import auto_tune, format_split
    from hetlab.ps.records import cluster_samples_per_s
    tuned = auto_tune(lambda sizes: training.measure(sizes, steps=s.pair_steps), g, 2, rounds=s.pair_rounds)
    before = training.standalone_samples_per_s(tuned.batch_sizes, steps=s.pair_steps)
    records = training.run(s.pair_steps * s.pair_repeats, batch_sizes=tuned.batch_sizes)
    after = training.standalone_samples_per_s(tuned.batch_sizes, steps=s.pair_steps)
    together, budget = cluster_samples_per_s(records), step_budget(records)
    labels = training.labels
    alone = " + ".join(f"{_device_of(lab)} {(a + b) / 2:,.0f}" for lab, a, b in zip(labels, before, after))
    return Row(name, pair_efficiency(together, before, after), "fraction", goal,
               f"sync, {what}; tuned {format_split(tuned.batch_sizes)}: {together:,.0f} samples/s together, "
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
    from hetlab.core.models import make_model
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
    from hetlab.raytrain.mixed import train_mixed
    ctx.cluster()
    n = len(ctx.train_data())
    result = train_mixed(steps=ctx.acc_steps, global_batch=ctx.sizes.acc_batch, batch_sizes="auto",
                         devices=[ctx.device, "cpu"], train_samples=n if n < 60000 else None,
                         test_samples=ctx.sizes.test_samples if ctx.sizes.test_samples < 10000 else None,
                         seed=0)   # hetlab's exchange, as across the learner's pair
    kinds = [r.device.split(":")[0] for r in result.ranks]
    require(kinds == [torch.device(ctx.device).type, "cpu"], f"ranks ran on {kinds}, not the card + the CPU")
    ranks = "; ".join(f"{r.role} {r.device} b={r.batch_size}" for r in result.ranks)
    note = (f"{result.steps} steps of batch {ctx.sizes.acc_batch} ({ranks}); hetlab's exchange on CPU copies, "
            f"no GPU asked; fit {result.fit_s:.0f} s, loop {result.train_s:.0f} s; weights "
            f"{'identical' if result.weights_identical else 'differ in rounding'} on the two ranks")
    return [Row("pair_raytrain_accuracy", result.accuracy, "fraction", accuracy_goal(ctx.reference()),
                note, details={"ranks": [asdict(r) for r in result.ranks], "fit_s": result.fit_s,
                               "train_s": result.train_s, "reference": ctx.reference()})]

