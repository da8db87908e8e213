"""Notebook 06's batch-split tuner: one slider per worker but the last, each that worker's batch
size (the last takes the rest of the global batch), and a "Run" button.

Each press trains ``steps`` steps at the sliders' split (``training.resplit``, the split's one
writer), then shows where each worker's steps went (``plots.timeline``), the cluster's samples/s of
every run so far, and the split ∝ the speeds the run just measured. The arithmetic lives in ``hetlab.arithmetic.balance``.
"""
from __future__ import annotations

import io

import ipywidgets as w
import ray

from hetlab.arithmetic import balance
from hetlab.errors import HetlabError
from hetlab.ps.records import cluster_samples_per_s, per_worker_samples_per_s
from hetlab.views import plots

SHUT_DOWN = ("the training behind this tuner is shut down (training.shutdown(), the practice cluster's shutdown, "
             "or a restarted kernel): re-run the notebook's set-up cell, then the tuner's cell, and press Run again.")


class SplitTuner:
    """The sliders, the button and the plot over ``training`` (a ``ParameterServerTraining``),
    ``global_batch`` samples a step. Display it by leaving it as a cell's last value."""

    def __init__(self, training, global_batch: int, steps: int = 5):
        self.training, self.global_batch, self.steps = training, global_batch, steps
        self.names = [spec.name for spec in training.workers]
        self.labels = dict(zip(self.names, training.labels))  # "mac · cpu (simulated 4× slower)"
        current = balance.split_batch(global_batch, training.batch_sizes)
        self.sliders = [w.IntSlider(value=b, min=1, max=global_batch - 1, description=f"batch on {self.labels[name]}",
                                    continuous_update=False, style={"description_width": "initial"},
                                    layout=w.Layout(width="500px"))
                        for name, b in zip(self.names[:-1], current)]
        self.run_button = w.Button(description=f"Run {steps} steps", button_style="primary")
        self.result_label = w.HTML("Press <b>Run</b> to measure this split.")
        self.recommended_label = w.HTML()
        self.plot = w.Image(format="png", layout=w.Layout(max_width="900px"))
        self.runs: list[dict] = []          # one per Run: batch sizes, records, samples/s, efficiency
        self.error: str | None = None
        self.run_button.on_click(lambda _: self._pressed())
        self.widget = w.VBox([w.VBox(self.sliders), self.run_button, self.result_label, self.recommended_label,
                              self.plot])

    def batch_sizes(self) -> list[int]:
        """The split the sliders show: each slider's batch size, the last worker the rest."""
        sizes = [s.value for s in self.sliders]
        rest = self.global_batch - sum(sizes)
        if rest < 1:
            raise HetlabError(f"the sliders give {sum(sizes)} of the global batch of {self.global_batch}: "
                              f"leave the last worker at least 1 sample.")
        return sizes + [rest]

    def run(self) -> dict:
        """Train ``steps`` measured steps at the sliders' split; show what they measured."""
        if self.training.is_shut_down or not ray.is_initialized():
            raise HetlabError(SHUT_DOWN)
        sizes = self.batch_sizes()
        self.training.resplit(sizes, "widget")
        records = self.training.run(self.steps)
        speeds, cluster = per_worker_samples_per_s(records, self.names), cluster_samples_per_s(records)
        run = {"batch_sizes": sizes, "records": records, "samples_per_s": cluster,
               "efficiency": balance.efficiency(cluster, speeds)}
        self.runs.append(run)
        self.result_label.value = (
            f"split {balance.format_split(sizes)}: cluster <b>{cluster:,.0f} samples/s</b>, "
            f"efficiency ≈ <b>{run['efficiency']:.0%}</b> of the workers' own speeds "
            f"({', '.join(f'{self.labels[n]} {s:,.0f}/s' for n, s in zip(self.names, speeds))})<br>runs so far: "
            + ", ".join(f"{balance.format_split(r['batch_sizes'])} {r['samples_per_s']:,.0f}/s" for r in self.runs))
        self.recommended_label.value = ("recommended (∝ this run's speeds): "
                                        f"<b>{balance.format_split(balance.split_batch(self.global_batch, speeds))}</b>")
        self.figure = plots.timeline(records, self.labels, title=f"split {balance.format_split(sizes)}: each step's time")
        png = io.BytesIO()
        self.figure.savefig(png, format="png", dpi=80)
        self.plot.value = png.getvalue()
        return run

    def _pressed(self) -> None:
        """Run, showing a HetlabError in the widget as one line instead of losing it in a callback."""
        self.error = None
        try:
            self.run()
        except HetlabError as e:
            self.error = str(e)
            self.result_label.value = f"<span style='color:red'>HetlabError: {e}</span>"

    def _repr_mimebundle_(self, **kwargs):
        return self.widget._repr_mimebundle_(**kwargs)
