"""What happens around a run's steps, as objects passed to ``run`` (notebooks 05, 06, 08).

The loops in ``hetlab.ps.loop`` only train; a ``Hook`` watches and acts between steps, as fast.ai's
miniai callbacks do, and gets the ``ParameterServerTraining`` itself: ``Progress`` (a progress bar),
``FollowSplit`` (re-split the global batch when the machines' speeds change, notebook 06) and
``AutoCheckpoint`` (notebook 08). ``ParameterServerTraining(progress=..., checkpoint_dir=...,
checkpoint_every=...)`` and ``run(retune_every=N)`` build them; ``run(steps, hooks=[...])`` takes any.
"""
from __future__ import annotations

from pathlib import Path

from hetlab import progress_bar
from hetlab.arithmetic.balance import follow_split
from hetlab.arithmetic.steptime import fit_rounds
from hetlab.core.checkpoint import CHECKPOINT_GLOB, checkpoint_path
from hetlab.errors import HetlabError
from hetlab.ps.specs import check_count
from hetlab.ps.records import worker_steps

KEEP_CHECKPOINTS = 3  # automatic checkpoints kept in their folder (the newest ones)


class Hook:
    """Override what you need; each method gets the training. After a step, a hook whose
    ``wants_rest`` is true gets ``at_rest`` once nothing is in flight (async waits for it)."""

    def before_run(self, run, steps: int) -> None:
        """Before the first step of ``run``; a hook that cannot work in this run raises here."""

    def after_step(self, run) -> None:
        """After every step (async: every update)."""

    def wants_rest(self, run) -> bool:
        return False

    def at_rest(self, run) -> None:
        """Nothing is in flight: the server's state and the data cursor tell the same story."""

    def after_run(self, run) -> None:
        """After the last step, or when the run stopped with an error."""


def after_step(run, hooks: list, resting: list) -> list:
    """Every hook's ``after_step``; returns ``resting`` and the hooks that now want the run at rest."""
    for hook in hooks:
        hook.after_step(run)
    return resting + [h for h in hooks if h not in resting and h.wants_rest(run)]


def rest(run, hooks: list) -> None:
    """``at_rest`` of each of ``hooks``: nothing is in flight now."""
    for hook in hooks:
        hook.at_rest(run)


class Progress(Hook):
    """A progress bar over the run's steps, with the last loss (async: and its staleness)."""

    def __init__(self):
        self.bar = None

    def before_run(self, run, steps):
        self.bar = progress_bar(steps, f"{run.mode}, {len(run.members)} workers")

    def after_step(self, run):
        last = run.records[-1]
        self.bar.update(1)
        if run.mode == "async":
            self.bar.set_postfix(loss=f"{last.loss:.3f}", staleness=last.staleness, refresh=False)
        else:
            self.bar.set_postfix(loss=f"{last.loss:.3f}", refresh=False)

    def after_run(self, run):
        if self.bar is not None:
            self.bar.close()
            self.bar = None


class AutoCheckpoint(Hook):
    """Every ``every`` steps, a checkpoint in ``folder`` (``step-NNNNNN.pt``), keeping the newest
    ``keep``. Taken at rest: async sends no new message until those in flight are applied, so a
    checkpoint's server state and data cursor describe the same updates (notebook 08)."""

    def __init__(self, folder, every: int, keep: int = KEEP_CHECKPOINTS):
        self.folder, self.every, self.keep = Path(folder), check_count("checkpoint_every", every, 1), keep

    def wants_rest(self, run):
        return run.step % self.every == 0

    def at_rest(self, run):
        run.save_checkpoint(checkpoint_path(self.folder, run.step))
        for old in sorted(self.folder.glob(CHECKPOINT_GLOB))[:-self.keep]:
            old.unlink(missing_ok=True)


class FollowSplit(Hook):
    """Every ``every`` steps, re-split the global batch for the speeds measured in those steps
    when that gains more than 5 % of predicted efficiency (``balance.follow_split``; notebook 06).

    A worker's step takes about fixed + batch / speed s on its device, plus its messages. Its last
    two looks at sizes at least 10 % apart give both terms (``steptime.fit_rounds``); else fixed = 0.
    Ignoring the fixed part would move the split further at every look. A hook keeps its looks.
    ``rule(batch_sizes, lines)`` gives the next split (notebook 06's grader passes the learner's own).
    """

    def __init__(self, every: int, rule=follow_split):
        self.every, self.steps, self.window = check_count("retune_every", every, 1), 0, 0
        self.rule = rule
        self.looks: dict = {}   # worker → (its slowdown, batch per step, busy s per step) at its last look

    def before_run(self, run, steps):
        if run.mode == "async":
            raise HetlabError("retune_every is for mode 'sync' or 'local_sgd': in async mode nobody "
                              "waits for a straggler, so there is no split to follow.")
        self.steps, self.window = 0, len(run.records)

    def after_step(self, run):
        self.steps += 1
        if self.steps % self.every == 0:
            self.follow(run, run.records[self.window:])
            self.window = len(run.records)

    def follow(self, run, records) -> None:
        """Re-split for the speeds in ``records`` if that gains enough (a "resplit" ``Event`` says so). A
        look from before the worker's simulated slowdown changed is out of date: dropped."""
        lines = []
        for name, slowdown in ((s.name, s.slowdown) for s in run.workers):
            seen = worker_steps(r for r in records if r.worker == name)
            if seen.device_samples_per_s <= 0:
                return  # a worker has no record here (one was just lost): look again next time
            look, last = (seen.batch, seen.batch / seen.device_samples_per_s), self.looks.get(name)
            points = [last[1:], look] if last and last[0] == slowdown else [look]
            line = fit_rounds(*zip(*points))
            self.looks[name] = (slowdown, *look)
            lines.append(line.plus(seen.comm_s, f"{name}, its messages included"))
        if run.resplit(self.rule(run.batch_sizes, lines), "follow", lines=tuple(lines)) is not None:
            run.warm_up()   # a timed step follows: MPS compiles per shape
