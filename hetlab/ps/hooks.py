"""Callbacks between a run's steps: plain callables, ``callback(run)``, that ``run(steps, hooks=[...])``
calls after every step. ``FollowSplit`` re-splits the global batch when the machines' speeds change
(notebook 06: ``run(steps, hooks=[FollowSplit(N)])``).
"""
from __future__ import annotations

from hetlab.arithmetic.balance import follow_split
from hetlab.arithmetic.steptime import fit_rounds
from hetlab.ps.records import worker_steps
from hetlab.ps.specs import check_count


class FollowSplit:
    """Every ``every`` steps, re-split the global batch for the speeds of those steps when that gains
    more than 5 % (``balance.follow_split``; notebook 06). A worker's last two looks give its step's
    fixed and per-sample parts (``steptime.fit_rounds``). ``rule(batch_sizes, lines)`` gives the split."""

    def __init__(self, every: int, rule=follow_split):
        self.every, self.rule = check_count("FollowSplit's every", every, 1), rule
        self.looks: dict = {}   # worker → (its slowdown, batch per step, busy s per step) at its last look

    def __call__(self, run) -> None:
        if (run.step - run.first_step) % self.every == 0:
            self.follow(run, [r for r in run.records if r.step > run.step - self.every])

    def follow(self, run, records) -> None:
        """Re-split for the speeds in ``records`` if that gains enough; a look from before the worker's
        simulated slowdown changed is dropped."""
        lines = []
        for spec in run.workers:
            seen = worker_steps(r for r in records if r.worker == spec.name)
            if seen.device_samples_per_s <= 0:
                return  # a worker has no record here (one was just lost): look again next time
            look, last = (seen.batch, seen.batch / seen.device_samples_per_s), self.looks.get(spec.name)
            points = [last[1:], look] if last and last[0] == spec.slowdown else [look]
            line = fit_rounds(*zip(*points))
            self.looks[spec.name] = (spec.slowdown, *look)
            lines.append(line.plus(seen.comm_s, f"{spec.name}, its messages included"))
        if run.resplit(self.rule(run.batch_sizes, lines), "follow", lines=tuple(lines)) is not None:
            run.warm_up()   # a timed step follows: MPS compiles per shape
