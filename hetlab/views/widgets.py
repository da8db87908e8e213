"""An interactive batch-split tuner for a parameter-server run (notebook 06).

``SplitTuner`` is a thin view: the arithmetic lives in ``hetlab.arithmetic.balance``, the
training in ``hetlab.ps``, the pictures in ``hetlab.views.plots``. Move the slider, press
"Run", and see each worker's compute / simulated / communication / waiting time and
the cluster's samples per second; press "Auto" to let ``auto_tune`` pick the split. After two
runs at different splits it fits each worker's step (fixed + b / speed, ``steptime.fit_rounds``)
and predicts the samples/s of any split the slider shows, and recommends where both finish together.
"""
from __future__ import annotations

import io

import ipywidgets as w
import ray

from hetlab.arithmetic import balance, steptime
from hetlab.views import plots
from hetlab.errors import HetlabError
from hetlab.ps.records import per_worker_samples_per_s


def figure_png(fig) -> bytes:
    """A matplotlib Figure as PNG bytes (what an ``ipywidgets.Image`` shows)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80)
    return buf.getvalue()


class SplitTuner:
    """Sliders for the batch split, a "Run N steps" button, an "Auto" button, a live plot.

    ``training`` is a ``ParameterServerTraining``; ``global_batch`` samples per step are
    split over its workers. Two workers get one slider (the first worker's share);
    more get one weight slider each. Display it by leaving it as a cell's last value.
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
        if n == 2:
            share = current[0] / global_batch
            self.sliders = [w.FloatSlider(value=round(share, 2), min=0.01, max=0.99, step=0.01,
                                          description=f"share on {self.labels[self.names[0]]}",
                                          readout_format=".0%", continuous_update=False,
                                          style={"description_width": "initial"},
                                          layout=w.Layout(width="500px"))]
        else:
            self.sliders = [w.FloatSlider(value=float(b), min=1.0, max=float(global_batch), step=1.0,
                                          description=self.labels[name], continuous_update=False,
                                          style={"description_width": "initial"})
                            for name, b in zip(self.names, current)]
        self.run_button = w.Button(description=f"Run {steps} steps", button_style="primary")
        self.auto_button = w.Button(description="Auto", tooltip="measure, re-split, repeat (auto_tune)")
        self.split_label = w.HTML()
        self.result_label = w.HTML("Press <b>Run</b> to measure this split.")
        self.recommended_label = w.HTML()
        self.plot = w.Image(format="png", layout=w.Layout(max_width="900px"))
        self.runs: list[dict] = []          # one per Run: sizes, records, samples/s, efficiency
        self.tune_result: balance.TuneResult | None = None
        self.error: str | None = None
        # (slider value, sizes): the exact split behind the slider's value, until it moves
        self._exact = (self.sliders[0].value, current) if n == 2 else None
        for slider in self.sliders:
            slider.observe(self._slider_moved, names="value")
        self.run_button.on_click(lambda _: self._guarded(self.run))
        self.auto_button.on_click(lambda _: self._guarded(self.auto))
        self._show_split()
        self.widget = w.VBox([
            w.HBox([*self.sliders]), self.split_label,
            w.HBox([self.run_button, self.auto_button]),
            self.result_label, self.recommended_label, self.plot,
        ])

    # --- the state the sliders describe ---------------------------------------------------
    def batch_sizes(self) -> list[int]:
        """The integer split that the sliders describe now (after ``set_batch_sizes``, exactly
        those sizes until the slider moves: its 1 % steps cannot show every split)."""
        if len(self.sliders) == 1:
            share = self.sliders[0].value
            if self._exact is not None and self._exact[0] == share:
                return list(self._exact[1])
            return balance.split_batch(self.global_batch, [share, 1 - share])
        return balance.split_batch(self.global_batch, [s.value for s in self.sliders])

    def set_batch_sizes(self, sizes: list[int]) -> None:
        """Move the sliders to ``sizes``."""
        if len(self.sliders) == 1:
            slider = self.sliders[0]
            share = min(max(round(sizes[0] / sum(sizes), 2), slider.min), slider.max)
            self._exact = (share, list(sizes))
            slider.value = share
        else:
            for slider, b in zip(self.sliders, sizes):
                slider.value = float(b)

    def _slider_moved(self, change) -> None:
        if self._exact is not None and change["new"] != self._exact[0]:
            self._exact = None  # the learner moved it: the slider's own split from now on
        self._show_split()

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
        rates = per_worker_samples_per_s(records, self.names)
        cluster = self.training.samples_per_s(records)
        run = {"batch_sizes": sizes, "records": records, "samples_per_s": cluster,
               "worker_samples_per_s": rates, "efficiency": balance.efficiency(cluster, rates)}
        self.runs.append(run)
        self.result_label.value = (
            f"split {balance.format_ratio(sizes)}: cluster <b>{cluster:,.0f} samples/s</b>, "
            f"efficiency ≈ <b>{run['efficiency']:.0%}</b> of the workers' own speeds "
            f"({', '.join(f'{self.labels[n]} {r:,.0f}/s' for n, r in zip(self.names, rates))})")
        fits = self.fitted()
        recommended = (balance.split_batch(self.global_batch, rates) if fits is None
                       else balance.equal_finish_split(self.global_batch, fits))
        basis = "∝ this run's speeds" if fits is None else "both finish together, from your runs' fitted steps"
        self.recommended_label.value = (f"recommended ({basis}): <b>{balance.format_ratio(recommended)}</b>")
        self._show_split()
        self.figure = plots.time_split(records, self.labels,
                                       samples_per_s=[r["samples_per_s"] for r in self.runs],
                                       run_labels=[":".join(map(str, r["batch_sizes"])) for r in self.runs])
        self.plot.value = figure_png(self.figure)
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

