"""What happens around a run's steps, as objects passed to ``run`` (notebooks 05, 06, 08).

The loops in ``hetlab.ps.loop`` only train; a ``Hook`` watches and acts between steps, as
fast.ai's miniai callbacks do: ``Progress`` (a progress bar), ``FollowSpeeds`` (re-split the
global batch when the machines' speeds change, notebook 06) and ``AutoCheckpoint`` (notebook
08). ``ParameterServerTraining(progress=..., checkpoint_dir=..., checkpoint_every=...)`` and
``run(retune_every=N)`` are shorthands that build them; ``run(steps, hooks=[...])`` takes any.
"""
from __future__ import annotations

from pathlib import Path

from hetlab import progress_bar
from hetlab.balance import fit_step_time, follow_split
from hetlab.checkpoint import CHECKPOINT_GLOB, checkpoint_path
from hetlab.errors import HetlabError
from hetlab.ps.options import check_count

KEEP_CHECKPOINTS = 3  # automatic checkpoints kept in their folder (the newest ones)


class Hook:
    """Override what you need; each method gets the training. After a step, a hook whose
    ``wants_rest`` is true gets ``at_rest`` once nothing is in flight (async waits for it)."""

    def before_run(self, training, steps: int) -> None:
        """Before the first step of ``run``; a hook that cannot work in this run raises here."""

    def after_step(self, training) -> None:
        """After every step (async: every update)."""

    def wants_rest(self, training) -> bool:
        return False

    def at_rest(self, training) -> None:
        """Nothing is in flight: the server's state and the data cursor tell the same story."""

    def after_run(self, training) -> None:
        """After the last step, or when the run stopped with an error."""


class Hooks:
    """One run's hooks, in order, bound to its training: what the loops call."""

    def __init__(self, hooks, training):
        self.hooks, self.training, self.waiting = list(hooks), training, []

    def before_run(self, steps: int) -> None:
        for hook in self.hooks:
            hook.before_run(self.training, steps)

    def after_step(self) -> None:
        for hook in self.hooks:
            hook.after_step(self.training)
        self.waiting += [h for h in self.hooks if h not in self.waiting and h.wants_rest(self.training)]

    def at_rest(self) -> None:
        waiting, self.waiting = self.waiting, []
        for hook in waiting:
            hook.at_rest(self.training)

    def after_run(self) -> None:
        for hook in self.hooks:
            hook.after_run(self.training)


class Progress(Hook):
    """A progress bar over the run's steps, with the last loss (async: and its staleness)."""

    def __init__(self):
        self.bar = None

    def before_run(self, training, steps):
        self.bar = progress_bar(steps, f"{training.mode}, {len(training.workers)} workers")

    def after_step(self, training):
        last = training.records[-1]
        self.bar.update(1)
        if training.mode == "async":
            self.bar.set_postfix(loss=f"{last.loss:.3f}", staleness=last.staleness, refresh=False)
        else:
            self.bar.set_postfix(loss=f"{last.loss:.3f}", refresh=False)

    def after_run(self, training):
        if self.bar is not None:
            self.bar.close()
            self.bar = None


class AutoCheckpoint(Hook):
    """Every ``every`` steps, a checkpoint in ``folder`` (``step-NNNNNN.pt``), keeping the newest
    ``keep``. Taken at rest: async sends no new message until those in flight are applied, so a
    checkpoint's server state and data cursor describe the same updates (notebook 08)."""

    def __init__(self, folder, every: int, keep: int = KEEP_CHECKPOINTS):
        self.folder, self.every, self.keep = Path(folder), check_count("checkpoint_every", every, 1), keep

    def wants_rest(self, training):
        return training.step % self.every == 0

    def at_rest(self, training):
        training.save_checkpoint(checkpoint_path(self.folder, training.step))
        for old in sorted(self.folder.glob(CHECKPOINT_GLOB))[:-self.keep]:
            old.unlink(missing_ok=True)


class FollowSpeeds(Hook):
    """Every ``every`` steps, re-split the global batch for the speeds measured in those steps
    when that gains more than 5 % of predicted efficiency (``balance.follow_split``; notebook 06).

    Each worker's step takes about fixed + batch / speed seconds on its device (compute +
    simulated), plus its communication. The last two looks at different sizes give both terms
    (``balance.fit_step_time``: a line through two points); with one size only, fixed = 0. The
    fixed part matters: a smaller share does not shrink a step's fixed cost, and ignoring it
    would move the split further at every look.
    """

    def __init__(self, every: int):
        self.every, self.steps, self.window = check_count("retune_every", every, 1), 0, 0

    def before_run(self, training, steps):
        if training.mode == "async":
            raise HetlabError("retune_every is for mode 'sync' or 'local_sgd': in async mode nobody "
                              "waits for a straggler, so there is no split to follow.")
        self.steps, self.window = 0, len(training.records)

    def after_step(self, training):
        self.steps += 1
        if self.steps % self.every == 0:
            self.follow(training, training.records[self.window:])
            self.window = len(training.records)

    @staticmethod
    def follow(training, records) -> None:
        """Re-split for the speeds in ``records`` if that gains enough; an event says so."""
        speeds, overheads = [], []
        for m in training.pool.members:
            mine = [r for r in records if r.worker == m.spec.name]
            if not mine:
                return  # a worker has no record here (one was just lost): look again next time
            n = sum(r.batch_size for r in mine) / len(mine)  # per step (local SGD: per inner step)
            busy = sum((r.compute_s + r.simulated_s) * r.batch_size / r.samples for r in mine) / len(mine)
            looks = [m.look, (n, busy)] if m.look else [(n, busy)]
            speed, fixed = fit_step_time(*zip(*looks), min_spread=0.0)
            m.look = (n, busy)
            speeds.append(speed)
            overheads.append(fixed + sum(r.comm_s for r in mine) / len(mine))
        sizes = follow_split(training.batch_sizes, speeds, overheads)
        if sizes != training.batch_sizes:
            training.events.append({"event": "split_retuned", "step": training.step, "from": list(training.batch_sizes),
                                    "to": sizes, "samples_per_s": speeds, "fixed_s": overheads})
            training.batch_sizes = sizes
            training.pool.warm_up()  # the new sizes' first step is not timed (MPS compiles per shape)
