"""An interactive batch-split tuner for a parameter-server run (notebook 06).

``SplitTuner`` is a thin view: the arithmetic lives in ``hetlab.arithmetic.balance``, the
training in ``hetlab.ps``, the pictures in ``hetlab.views.plots``. Each slider is one worker's
batch size (the last worker takes the rest of the global batch), so the split the sliders show is
the split a run trains with: ``batch_sizes()`` → ``training.resplit`` → each worker's batch.
Press "Run" to see each worker's compute / simulated / communication / waiting time and the
cluster's samples per second; press "Auto" to let ``auto_tune`` pick the split. After two runs at
different splits it fits each worker's step (fixed + b / speed, ``steptime.fit_rounds``), predicts
the samples/s of the split the sliders show, and recommends where both finish together.
"""
from __future__ import annotations

import io

import ipywidgets as w
import ray

from hetlab.arithmetic import balance, steptime
from hetlab.views import plots
from hetlab.errors import HetlabError
from hetlab.ps.records import cluster_samples_per_s, per_worker_samples_per_s


class SplitTuner:
    """Sliders for the batch split, a "Run N steps" button, an "Auto" button, a live plot.

    ``training`` is a ``ParameterServerTraining``; ``global_batch`` samples per step are
    split over its workers: one slider per worker but the last, each its batch size. Display it
    by leaving it as a cell's last value.
    """

    def __init__(self, training, global_batch: int, steps: int = 5, auto_rounds: int = 5,
                 auto_steps: int = 3):
        self.training = training
        self.global_batch = global_batch
        self.steps, self.auto_rounds, self.auto_steps = steps, auto_rounds, auto_steps
        self.names = [spec.name for spec in training.workers]
        self.labels = dict(zip(self.names, training.labels))  # "mac · cpu fp32 (simulated 4× slower)"
        n = len(self.names)
        current = balance.split_batch(global_batch, training.batch_sizes or [1] * n, n=n)
        self.sliders = [w.IntSlider(value=b, min=1, max=global_batch - 1, description=f"batch on {self.labels[name]}",
                                    continuous_update=False, style={"description_width": "initial"},
                                    layout=w.Layout(width="500px"))
                        for name, b in zip(self.names[:-1], current)]
        self.run_button = w.Button(description=f"Run {steps} steps", button_style="primary")
        self.auto_button = w.Button(description="Auto", tooltip="measure, re-split, repeat (auto_tune)")
        self.split_label = w.HTML()
        self.result_label = w.HTML("Press <b>Run</b> to measure this split.")
        self.recommended_label = w.HTML()
        self.plot = w.Image(format="png", layout=w.Layout(max_width="900px"))
        self.runs: list[dict] = []          # one per Run: batch sizes, records, samples/s, efficiency
        self.tune_result: balance.TuneResult | None = None
        self.error: str | None = None
        for slider in self.sliders:
            slider.observe(lambda _: self._show_split(), names="value")
        self.run_button.on_click(lambda _: self._guarded(self.run))
        self.auto_button.on_click(lambda _: self._guarded(self.auto))
        self._show_split()
        self.widget = w.VBox([
            w.VBox(self.sliders), self.split_label,
            w.HBox([self.run_button, self.auto_button]),
            self.result_label, self.recommended_label, self.plot,
        ])

    # --- the split the sliders show -------------------------------------------------------
    def batch_sizes(self) -> list[int]:
        """The split the sliders show: each slider's batch size, the last worker the rest."""
        sizes = [s.value for s in self.sliders]
        rest = self.global_batch - sum(sizes)
        if rest < 1:
            raise HetlabError(f"the sliders give {sum(sizes)} of the global batch of {self.global_batch}: "
                              f"leave the last worker at least 1 sample.")
        return sizes + [rest]

    def set_batch_sizes(self, sizes: list[int]) -> None:
        """Move the sliders to the split ``sizes``."""
        for slider, b in zip(self.sliders, sizes):
            slider.value = int(b)

    def _show_split(self) -> None:
        try:
            sizes = self.batch_sizes()
        except HetlabError as e:
            self.split_label.value = f"<span style='color:red'>{e}</span>"
            return
        parts = ", ".join(f"{self.labels[n]}: <b>{b}</b>" for n, b in zip(self.names, sizes))
        fits = self.fitted()
        guess = "" if fits is None else (
            f"; predicted <b>{steptime.together_samples_per_s(fits, sizes):,.0f} samples/s</b> "
            f"(each worker's step fitted over your runs)")
        self.split_label.value = f"batch sizes per step — {parts}{guess}"

    def fitted(self) -> list[steptime.StepTime] | None:
        """Each worker's step line fitted over the runs so far (fixed + b × per-sample). None until
        the runs give each worker two batch sizes."""
        if len({tuple(r["batch_sizes"]) for r in self.runs}) < 2:
            return None
        return [steptime.fit_rounds([r["batch_sizes"][i] for r in self.runs],
                                    [r["batch_sizes"][i] / r["worker_samples_per_s"][i] for r in self.runs])
                for i in range(len(self.names))]

    # --- the buttons ----------------------------------------------------------------------
    def run(self) -> dict:
        """Run ``steps`` measured steps at the sliders' split; update the plot and labels."""
        sizes = self.batch_sizes()
        self.training.resplit(sizes, "widget")
        records = self.training.run(self.steps, hooks=[])  # a look: no bar, no checkpoint
        speeds = per_worker_samples_per_s(records, self.names)
        cluster = cluster_samples_per_s(records)
        run = {"batch_sizes": sizes, "records": records, "samples_per_s": cluster,
               "worker_samples_per_s": speeds, "efficiency": balance.efficiency(cluster, speeds)}
        self.runs.append(run)
        self.result_label.value = (
            f"split {balance.format_split(sizes)}: cluster <b>{cluster:,.0f} samples/s</b>, "
            f"efficiency ≈ <b>{run['efficiency']:.0%}</b> of the workers' own speeds "
            f"({', '.join(f'{self.labels[n]} {s:,.0f}/s' for n, s in zip(self.names, speeds))})")
        fits = self.fitted()
        recommended = (balance.split_batch(self.global_batch, speeds) if fits is None
                       else balance.equal_finish_split(self.global_batch, fits))
        basis = "∝ this run's speeds" if fits is None else "both finish together, from your runs' fitted steps"
        self.recommended_label.value = f"recommended ({basis}): <b>{balance.format_split(recommended)}</b>"
        self._show_split()
        self.figure = plots.time_split(records, self.labels,
                                       samples_per_s=[r["samples_per_s"] for r in self.runs],
                                       run_labels=[":".join(map(str, r["batch_sizes"])) for r in self.runs])
        png = io.BytesIO()
        self.figure.savefig(png, format="png", dpi=80)
        self.plot.value = png.getvalue()
        return run

    def auto(self) -> balance.TuneResult:
        """Let ``auto_tune`` measure and settle the split, then move the sliders there."""
        result = balance.auto_tune(lambda sizes: self.training.measure(sizes, self.auto_steps),
                                   self.global_batch, len(self.names), rounds=self.auto_rounds)
        self.tune_result = result
        self.set_batch_sizes(result.batch_sizes)
        self.recommended_label.value = f"auto-tuned: <b>{result}</b>"
        return result

    def shut_down_note(self) -> str | None:
        """One line saying the training behind the tuner is gone and what to do; None if it is live."""
        if not getattr(self.training, "is_shut_down", True) and ray.is_initialized():
            return None
        return ("the training behind this tuner is shut down (training.shutdown(), the practice "
                "cluster's shutdown, or a restarted kernel): re-run the notebook's set-up cell, then "
                "the tuner's cell, and press Run again.")

    def _guarded(self, action) -> None:
        """Run a button's action; show a HetlabError in the widget instead of losing it."""
        self.error = None
        for b in (self.run_button, self.auto_button):
            b.disabled = True
        try:
            note = self.shut_down_note()
            if note:  # say so in the tuner, not as a raw error from deep inside a run
                raise HetlabError(note)
            action()
        except HetlabError as e:
            self.error = str(e)
            self.result_label.value = f"<span style='color:red'>HetlabError: {e}</span>"
        finally:
            for b in (self.run_button, self.auto_button):
                b.disabled = False

    def _repr_mimebundle_(self, **kwargs):
        return self.widget._repr_mimebundle_(**kwargs)
