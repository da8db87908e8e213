"""What a search did, trial by trial, as the driver saw it (notebook 09): ``Watcher``, a Ray Tune
callback, keeps one ``TrialRecord`` per configuration, timed by the driver's clock (two machines'
clocks never disagree); ``SearchResult`` holds them with the search's wall time.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from ray.tune import Callback

from hetlab.arithmetic.steady import samples_per_s

COLUMNS = ("trial", "lr", "batch_size", "width", "optimizer", "machine", "device", "epochs",
           "accuracy", "samples", "status")


@dataclass
class TrialRecord:
    """One configuration of the search, as it ended."""

    trial: int
    config: dict                      # lr, batch_size, width, optimizer
    seed: int
    status: str = "not started"       # running, done, stopped early (ASHA), failed, not started
    epochs: int = 0
    accuracy: float = float("nan")    # on the held-out part of the training set, last epoch
    samples: int = 0                  # trained, over all its epochs (and machines)
    busy_s: float = 0.0               # its device's seconds training (a simulated sleep included)
    machine: str = ""                 # where it ran last, as labelled ("mac (simulated 4× slower)")
    device: str = ""                  # cuda, mps or cpu
    role: str = ""                    # the hetlab role of that machine's node
    computer: str = ""                # and the computer (``hetlab.core.machine.kernel_id``): nodes may share one
    spans: list = field(default_factory=list)  # [machine, start_s, end_s] since the search began
    retries: int = 0
    error: str = ""                   # one line, if it failed

    def row(self) -> list[str]:
        """Its cells in ``COLUMNS``' order, as the table shows them."""
        cells = {"trial": self.trial, **self.config, "machine": self.machine,
                 "device": self.device,
                 "epochs": self.epochs, "accuracy": round(self.accuracy, 4), "samples": self.samples,
                 "status": self.status + (f" (retried ×{self.retries})" if self.retries else "")}
        return [str(cells.get(c, "")) for c in COLUMNS]


@dataclass
class SearchResult:
    """The trials of one search, its wall time and where it ran."""

    trials: list[TrialRecord]
    wall_s: float
    roles: list[str]
    resources: dict           # role → what each trial there asked Ray for
    folder: str               # Tune's results
    packing: dict = field(default_factory=dict)  # role → trials at once on its device
    samples_per_s: float = field(init=False)  # samples trained by all trials ÷ ``running_s``

    def __post_init__(self):
        self.samples_per_s = samples_per_s(self.samples, self.running_s)

    @property
    def finished(self) -> list[TrialRecord]:
        return [t for t in self.trials if t.status in ("done", "stopped early")]

    @property
    def samples(self) -> int:
        return sum(t.samples for t in self.trials)

    @property
    def running_s(self) -> float:
        """Seconds from the first trial's start to the search's end (Ray Tune's own set-up left out)."""
        starts = [span[1] for t in self.trials for span in t.spans]
        return self.wall_s - min(starts) if starts else self.wall_s

    @property
    def trials_per_hour(self) -> float:
        """Trials finished (all epochs, or stopped early by ASHA) per hour while the search ran trials."""
        return len(self.finished) * 3600 / self.running_s if self.running_s > 0 else 0.0

    @property
    def one_computer(self) -> bool:
        """Its machines were one computer (the practice cluster, or two nodes on one box): they shared its cores."""
        return len({t.role for t in self.trials if t.role}) > 1 and len({t.computer for t in self.trials if t.role}) == 1

    @property
    def best(self) -> TrialRecord | None:
        """The highest accuracy among the trials that ran every epoch (else among all finished)."""
        full = [t for t in self.finished if t.epochs == max(t.epochs for t in self.finished)]
        return max(full, key=lambda t: t.accuracy) if full else None

    def best_line(self) -> str:
        """The best configuration in one line, or why there is none."""
        best = self.best
        if best is None:
            return ("best: none — no trial finished (every epoch, or stopped early by ASHA) before the "
                    "search ended: give it more seconds (time_budget_s, --budget) or fewer train_samples.")
        return (f"best: {best.config} held-out accuracy {best.accuracy:.4f} after {best.epochs} epochs "
                f"({best.machine}, {best.device})")

    def __str__(self) -> str:
        """The summary, then the table: best first, the configurations never started left out."""
        ran = sorted((t for t in self.trials if t.status != "not started"), key=lambda t: -t.accuracy if t.epochs else 1)
        cells = [t.row() for t in ran]
        widths = [max(len(x) for x in col) for col in zip(COLUMNS, *cells)]
        lines = ["  ".join(x.ljust(w) for x, w in zip(line, widths)) for line in [list(COLUMNS)] + cells]
        return "\n".join([self.summary(), *lines[:1], "  ".join("-" * w for w in widths), *lines[1:]])

    def summary(self) -> str:
        return (f"{len(self.finished)} of {len(self.trials)} configurations finished on {' + '.join(self.roles)} "
                f"in {self.wall_s:.1f} s: {self.trials_per_hour:,.0f} trials/hour, "
                f"{self.samples_per_s:,.0f} samples/s")


class Watcher(Callback):
    """Ray Tune callback in the driver: a record per configuration."""

    def __init__(self, configs: list[dict], epochs: int):
        self.records = [TrialRecord(c["trial"], {k: v for k, v in c.items() if k not in ("seed", "trial")},
                                    c["seed"]) for c in configs]
        self.epochs = epochs
        self.t0 = time.time()

    def _record(self, trial) -> TrialRecord:
        return self.records[trial.config["config"]["trial"]]

    def _now(self) -> float:
        return round(time.time() - self.t0, 3)

    def on_trial_start(self, iteration, trials, trial, **info):
        record = self._record(trial)
        record.status = "running"
        record.spans.append(["", self._now(), self._now()])

    def on_trial_result(self, iteration, trials, trial, result, **info):
        record = self._record(trial)
        record.epochs = int(result["epoch"])  # not Tune's count of reports: a retried trial goes on from its epoch
        record.accuracy = float(result["accuracy"])
        for key in ("samples", "busy_s", "machine", "device", "role", "computer"):
            setattr(record, key, result[key])
        if not record.spans:
            record.spans.append(["", self._now(), self._now()])
        record.spans[-1][0], record.spans[-1][2] = record.machine, self._now()

    def on_trial_recover(self, iteration, trials, trial, **info):
        record = self._record(trial)
        record.retries += 1
        record.error = _error_line(trial)

    def on_trial_complete(self, iteration, trials, trial, **info):
        record = self._record(trial)
        record.status = "done" if record.epochs >= self.epochs else "stopped early"

    def on_trial_error(self, iteration, trials, trial, **info):
        record = self._record(trial)
        record.status, record.error = "failed", _error_line(trial)

    def close(self) -> None:
        for record in self.records:
            if record.status == "running":
                record.status = "cut by the time budget" if record.epochs else "not started"


def _error_line(trial) -> str:
    """The trial's error as one line, from the local files Tune writes before it calls back."""
    from ray import cloudpickle
    from ray.exceptions import RayActorError
    try:
        with open(trial.pickled_error_file, "rb") as f:
            error = cloudpickle.load(f)
    except Exception:  # noqa: BLE001 - no pickled error: the text Tune wrote, last line
        try:
            with open(trial.error_file) as f:
                return " ".join(f.read().strip().splitlines()[-1:])[:200] or "no error recorded"
        except Exception:  # noqa: BLE001
            return "no error recorded"
    if isinstance(error, RayActorError):
        return "its machine or its trial process went away (RayActorError)"
    cause = getattr(error, "cause", None) or error
    return f"{type(cause).__name__}: {' '.join(str(cause).split())}"[:200]
