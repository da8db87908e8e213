"""A hyperparameter search across the pair with Ray Tune (notebook 09, ``hetlab search``):
independent trials, each on one machine's own device; ASHA stops poor trials early.
"""
from __future__ import annotations

import contextlib
import logging
import math
import random
import tempfile
import time

import ray

from hetlab import environment
from hetlab.search import slots
from hetlab.errors import HetlabError
from hetlab.cluster.raylog import quiet_stopped_processes
from hetlab.search.results import SearchResult, Watcher
from hetlab.search.trial import OPTIMIZERS, run_trial, split_data, start_keeper

SPACE = {"lr": [3e-4, 1e-3, 3e-3, 1e-2], "batch_size": [32, 64, 128], "width": [8, 16, 32],
         "optimizer": ["adam", "sgd"]}


def check_space(space) -> dict:
    """``space`` (name → list of choices) checked, each value in one line; names left out keep
    the first choice of ``SPACE``'s. An empty or malformed space fails here, before Ray."""
    if not isinstance(space, dict) or not space:
        raise HetlabError(f"the search space is empty or not a dict ({space!r}): give e.g. "
                          f"{{'lr': [1e-3, 3e-3], 'batch_size': [32, 64]}}; names: {', '.join(SPACE)}.")
    unknown = sorted(set(space) - set(SPACE))
    if unknown:
        raise HetlabError(f"unknown name(s) {unknown} in the search space: use {', '.join(SPACE)}.")
    checked = {name: [choices[0]] for name, choices in SPACE.items()}
    for name, choices in space.items():
        if not isinstance(choices, (list, tuple)) or not choices:
            raise HetlabError(f"search space {name!r} must be a non-empty list of choices, got {choices!r}.")
        valid, rule = _RULES[name]
        for value in choices:
            if not valid(value):
                raise HetlabError(f"search space {name!r}: {value!r} is not a valid choice ({rule}).")
        checked[name] = list(choices)
    return checked


def _whole(value, least: int = 1) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


_RULES = {"lr": (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < math.inf,
                 "a number above 0, e.g. 1e-3"),
          "batch_size": (_whole, "a whole number ≥ 1, e.g. 64"), "width": (_whole, "a whole number ≥ 1, e.g. 16"),
          "optimizer": (lambda v: v in OPTIMIZERS, f"one of {sorted(OPTIMIZERS)}")}


def sample(space: dict, trials: int, seed: int = 0) -> list[dict]:
    """``trials`` distinct configurations drawn from ``space`` with ``seed`` (without
    replacement, the same every time), each with its own training seed: a search you can repeat."""
    names = list(space)
    combos = math.prod(len(space[n]) for n in names)
    if trials > combos:
        raise HetlabError(f"trials={trials} is more than the {combos} distinct configurations of this "
                          f"space: give trials ≤ {combos}, or more choices in the space.")
    out = []
    for i, index in enumerate(random.Random(seed).sample(range(combos), trials)):
        config = {}
        for name in names:
            index, pick = divmod(index, len(space[name]))
            config[name] = space[name][pick]
        out.append({**config, "seed": seed * 1000 + i, "trial": i})
    return out


def search(space: dict | None = None, trials: int = 8, *, roles=("desktop", "mac"), epochs: int = 3,
           grace: int = 1, train_samples: int = 4000, val_samples: int = 1000, seed: int = 0,
           slowdowns: dict | None = None, time_budget_s: float | None = None,
           max_failures: int = 1, packing: dict | None = None, early_stopping: bool = True,
           progress: bool = True) -> SearchResult:
    """Run ``trials`` sampled configurations of ``space`` on the machines with ``roles``; returns a
    ``SearchResult`` (table, best, samples/s, timeline). ``slowdowns``: role → simulated slowdown;
    ``packing``: role → trials at once (default ``slots.plan``'s rule); ``early_stopping=False``: every
    trial runs all its epochs. Each trial's last checkpoint is kept beside the driver
    (``trial.start_keeper``), so a failed trial is retried ``max_failures`` times from its last one.
    """
    space = check_space(SPACE if space is None else space)
    roles = check_numbers(trials, epochs, grace, time_budget_s, max_failures, roles, train_samples=train_samples,
                          val_samples=val_samples, batch_size=max(space["batch_size"]), packing=packing,
                          slowdowns=slowdowns)
    configs = sample(space, trials, seed)
    plan = {role: slots.plan(role, float((slowdowns or {}).get(role, 1)), (packing or {}).get(role)) for role in roles}
    print("trials at once: " + ", ".join(f"{role} {p['k']} per {p['device']}" for role, p in plan.items()))
    quiet_stopped_processes()
    split_data(train_samples, val_samples)  # missing or damaged MNIST: one line, here
    folder, name = tempfile.mkdtemp(prefix="hetlab-search-"), f"search-{'-'.join(roles)}-{time.strftime('%H%M%S')}"
    from ray import tune
    from ray.tune.logger import JsonLoggerCallback
    from ray.tune.schedulers import ASHAScheduler, FIFOScheduler
    keeper = start_keeper()
    fn = tune.with_parameters(run_trial, train_samples=train_samples, val_samples=val_samples,
                              epochs=epochs, slowdowns=dict(slowdowns or {}), keeper=keeper)
    shapes = {r: p["shape"] for r, p in plan.items()}

    def shape_of(config):  # what a trial asks Ray for: a slot of the machine the searcher gave it
        return tune.PlacementGroupFactory([shapes[config["role"]]])
    searcher = slots.SlotSearcher(configs, {r: p["slots"] for r, p in plan.items()}, epochs * train_samples)
    watcher = Watcher(configs, progress, epochs)
    scheduler = (ASHAScheduler(time_attr="epoch", max_t=epochs, grace_period=grace, reduction_factor=2)
                 if early_stopping else FIFOScheduler())
    tuner = tune.Tuner(tune.with_resources(fn, shape_of), tune_config=tune.TuneConfig(
        metric="accuracy", mode="max", scheduler=scheduler, search_alg=searcher, num_samples=-1,
        time_budget_s=time_budget_s, reuse_actors=True), run_config=tune.RunConfig(
        name=name, storage_path=folder, verbose=0, callbacks=[watcher, JsonLoggerCallback()], log_to_file=True,
        progress_reporter=_Silent(), failure_config=tune.FailureConfig(max_failures=max_failures)))
    try:
        with _quiet_tune(sum(p["slots"] + 1 for p in plan.values())):
            tuner.fit()
    finally:
        watcher.close()
        ray.kill(keeper)
    result = SearchResult(watcher.records, time.time() - watcher.t0, list(roles), shapes, f"{folder}/{name}",
                          {r: p["k"] for r, p in plan.items()})
    if not any(t.epochs > 0 for t in result.trials):
        failed = [t for t in result.trials if t.error]
        if failed:
            raise HetlabError(f"every trial failed; the first: {failed[0].error} (results: {result.folder}).")
        raise HetlabError(f"time_budget_s={time_budget_s} ended the search before any trial finished one "
                          f"epoch: give more seconds or fewer train_samples (results: {result.folder}).")
    for t in result.trials:
        if t.status == "failed":
            print(f"trial {t.trial} failed after {t.retries} retries: {t.error}")
    return result


def check_numbers(trials, epochs, grace, time_budget_s, max_failures, roles, *, train_samples=None,
                  val_samples=None, batch_size=None, packing=None, slowdowns=None) -> tuple:
    """The search's own numbers and roles, each checked in one line before Ray (``hetlab search`` too)."""
    for label, value, least in (("trials", trials, 1), ("epochs", epochs, 1), ("grace", grace, 1),
                                ("max_failures", max_failures, 0)):
        if not _whole(value, least):
            raise HetlabError(f"{label}={value!r}: give a whole number ≥ {least}.")
    if grace > epochs:
        raise HetlabError(f"grace={grace} is more than epochs={epochs}: ASHA can stop a trial only "
                          f"after `grace` epochs; use grace ≤ epochs.")
    if time_budget_s is not None and not (isinstance(time_budget_s, (int, float)) and 0 < time_budget_s < math.inf):
        raise HetlabError(f"time_budget_s={time_budget_s!r}: give seconds above 0, or None for no limit.")
    roles = (roles,) if isinstance(roles, str) else tuple(roles)
    if not roles or len(set(roles)) != len(roles):
        raise HetlabError(f"roles={roles!r}: give distinct roles, e.g. ('desktop', 'mac') or ('desktop',).")
    if train_samples is not None and batch_size is not None and not (
            isinstance(train_samples, int) and batch_size <= train_samples):
        raise HetlabError(f"train_samples={train_samples!r}: give at least the largest batch_size, {batch_size}.")
    if val_samples is not None and (not _whole(val_samples) or (train_samples or 0) + val_samples > 60000):
        raise HetlabError(f"val_samples={val_samples!r}: give a whole number ≥ 1; train_samples + val_samples "
                          f"must fit in MNIST's 60000 training samples.")
    if packing is not None and (not isinstance(packing, dict) or not all(map(_whole, packing.values()))):
        raise HetlabError(f"packing={packing!r}: give role → trials at once, each ≥ 1, e.g. {{'desktop': 2}}.")
    if slowdowns is not None and (not isinstance(slowdowns, dict) or any(
            isinstance(x, bool) or not isinstance(x, (int, float)) or not 1 <= x < math.inf
            for x in slowdowns.values())):
        raise HetlabError(f"slowdowns={slowdowns!r}: give role → X× slower, each ≥ 1 (1 = real speed), "
                          f"e.g. {{'mac': 4}}.")
    return roles


class _Silent:
    """A Tune progress reporter that reports nothing (hetlab draws its own bar)."""

    def setup(self, *args, **kwargs):
        pass

    def should_report(self, trials, done=False):
        return False

    def report(self, trials, done, *sys_info):
        pass


@contextlib.contextmanager
def _quiet_tune(slot_count: int):
    """Tune's printing off for one fit (the old reporter path, a silent reporter, its loggers at
    CRITICAL: hetlab reports failed trials itself), only ``result.json`` written per trial, and as
    many trials waiting to start as the searcher hands out (Tune's default, one, would start packed
    trials one after another)."""
    loggers = [logging.getLogger(n) for n in ("ray.tune", "ray.train", "ray.air")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL)
    try:
        with environment({"RAY_AIR_NEW_OUTPUT": "0", "TUNE_DISABLE_AUTO_CALLBACK_LOGGERS": "1",
                          "TUNE_MAX_PENDING_TRIALS_PG": str(max(1, slot_count))}):
            yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)
