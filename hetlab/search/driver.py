"""A hyperparameter search across the pair with Ray Tune: independent trials, each on one
machine's own device, no exchange per step (notebook 09, ``hetlab search``). Where each trial
runs and how many share a device: ``hetlab.search.slots``; storage: ``hetlab.search.storage``; ASHA stops poor
trials early, asynchronously; Tune's own printing is kept quiet.
"""
from __future__ import annotations

import contextlib
import logging
import math
import random
import time

import ray

from hetlab import environment
from hetlab.search import slots
from hetlab.cluster.roles import placement
from hetlab.errors import HetlabError
from hetlab.cluster.raylog import quiet_stopped_processes
from hetlab.core.models import as_factory
from hetlab.search.results import SearchResult, Watcher
from hetlab.search.storage import Storage, check_storage, open_storage
from hetlab.search.trial import DEFAULT_MODEL, OPTIMIZERS, run_trial, split_data, start_keeper

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


def placement_plan(roles, packing, slowdowns) -> dict:
    """Per role: how many trials at once (``packing``: role → k, else ``slots.trials_at_once``),
    what each asks Ray for and how many fit."""
    plan = {}
    for role in roles:
        node = slots.node_of(role)
        k = (packing or {}).get(role) or slots.trials_at_once(node, float((slowdowns or {}).get(role, 1)))
        plan[role] = {"k": k, "device": "GPU" if node["Resources"].get("GPU", 0) >= 1 else "CPU",
                      "shape": slots.slot_shape(node, role, k), "slots": slots.slots_of(node, k)}
    return plan


def plan_line(plan: dict) -> str:
    """One line: each machine's trials at once, on which device."""
    return "trials at once: " + ", ".join(f"{role} {p['k']} per {p['device']}" for role, p in plan.items())


def search(space: dict | None = None, trials: int = 8, *, roles=("desktop", "mac"), epochs: int = 3,
           grace: int = 1, train_samples: int = 4000, val_samples: int = 1000, seed: int = 0,
           model=DEFAULT_MODEL, slowdowns: dict | None = None, storage_path: str | None = None,
           checkpoints: bool = True, time_budget_s: float | None = None, max_failures: int = 1,
           packing: dict | None = None, early_stopping: bool = True, progress: bool = True) -> SearchResult:
    """Run ``trials`` sampled configurations of ``space`` on the machines with ``roles``; returns a
    ``SearchResult`` (table, best, samples/s, timeline). ``slowdowns``: role → simulated slowdown;
    ``packing``: role → trials at once (default ``slots.trials_at_once``); ``early_stopping=False``: every trial
    runs all its epochs. ``storage_path``: where results go (``hetlab.search.storage``; default a
    folder here); each trial's last checkpoint is kept beside the driver (``trial.start_keeper``;
    ``checkpoints=False``: none, as ``benchmarks/pair_search.py`` runs it), so a failed trial is
    retried ``max_failures`` times from its last one, on the other machine if its own was lost.
    ``model``: the course's CNN; tests give one that fails in a trial, or has dropout (a resume
    must restore its generator).
    """
    space = check_space(SPACE if space is None else space)
    roles = check_numbers(trials, epochs, grace, time_budget_s, max_failures, roles, train_samples=train_samples,
                          val_samples=val_samples, batch_size=max(space["batch_size"]), packing=packing,
                          slowdowns=slowdowns)
    configs = sample(space, trials, seed)
    as_factory(model)  # a name or function Ray can send (a module of your own goes by value)
    storage = open_storage(storage_path)
    if not ray.is_initialized():
        raise HetlabError("not connected to Ray: call hetlab.pair.the_pair() (or cluster.connect()) first.")
    for role in roles:
        placement(role)  # one line if no live node has this role
    quiet_stopped_processes()
    plan = placement_plan(roles, packing, slowdowns)
    print(plan_line(plan))
    _usable_everywhere(storage, roles, storage_path is not None, checkpoints)
    split_data(train_samples, val_samples)  # missing or damaged MNIST: one line, here
    name = f"search-{'-'.join(roles)}-{time.strftime('%H%M%S')}"
    from ray import tune
    keeper = start_keeper() if checkpoints else None
    fn = tune.with_parameters(run_trial, model=model, train_samples=train_samples, val_samples=val_samples,
                              epochs=epochs, slowdowns=dict(slowdowns or {}), keeper=keeper)
    storage.fs.create_dir(f"{storage.folder}/{name}", recursive=True)
    cost = slots.width_cost if time_budget_s is None else None  # with a budget: the sampled order
    searcher = slots.SlotSearcher(configs, {r: p["slots"] for r, p in plan.items()}, {}, epochs * train_samples, cost)
    shapes = {r: p["shape"] for r, p in plan.items()}
    watcher = Watcher(configs, (storage.fs, f"{storage.folder}/{name}/hetlab-trials.json"), progress, epochs,
                      searcher, shapes)
    tuner = _tuner(tune.with_resources(fn, _Shapes(shapes)), searcher, epochs, grace, time_budget_s,
                   max_failures, storage, name, watcher, early_stopping)
    try:
        with _quiet_tune(sum(p["slots"] + 1 for p in plan.values())):
            tuner.fit()
    finally:
        watcher.close()
        if keeper is not None:
            ray.kill(keeper)
    result = SearchResult(watcher.records, time.time() - watcher.t0, list(roles), shapes, storage.shown(name),
                          {r: p["k"] for r, p in plan.items()})
    if not any(t.epochs > 0 for t in result.trials):
        failed = [t for t in result.trials if t.error]
        if failed:
            raise HetlabError(f"every trial failed; the first: {failed[0].error} (results: {result.folder}).")
        raise HetlabError(f"time_budget_s={time_budget_s} ended the search before any trial finished one "
                          f"epoch: give more seconds or fewer train_samples (results: {result.folder}).")
    for line in result.problems():
        print(line)
    return result


class _Shapes:
    """Tune's resource request of a trial: its machine's slot shape (``config["role"]``)."""

    def __init__(self, shapes: dict):
        self.shapes = shapes

    def __call__(self, config: dict):
        from ray.tune import PlacementGroupFactory
        return PlacementGroupFactory([self.shapes[config["role"]]])


def check_numbers(trials, epochs, grace, time_budget_s, max_failures, roles, *, train_samples=None,
                  val_samples=None, batch_size=None, packing=None, slowdowns=None) -> tuple:
    """The search's own numbers and roles, each checked in one line before Ray (``hetlab search``
    too): ``train_samples`` at least the largest ``batch_size``, ``packing`` (role → trials at
    once) ≥ 1, ``slowdowns`` (role → X× slower) ≥ 1."""
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


def _usable_everywhere(storage: Storage, roles, given: bool, checkpoints: bool) -> None:
    """Every node is asked to use ``storage`` (it warms them too): storage the learner ``given``
    that a machine cannot use is one line; without it, a note says where results go."""
    blind = check_storage(storage, roles)
    if given and blind is not None:
        raise HetlabError(f"storage {storage.path} is not usable from the {blind[0]} machine ({blind[1]}): "
                          f"give a folder every machine sees at the same path, a URI (e.g. s3://bucket/runs), "
                          f"or none (results on this machine).")
    if not given:
        print(f"note: results in {storage.folder} on this machine" + (
            "; each trial's last checkpoint is kept here too, through Ray, so a trial whose machine is lost "
            "resumes on the other" if checkpoints else "; checkpoints off: a lost trial restarts from epoch 0"))


def _tuner(trainable, searcher, epochs, grace, time_budget_s, max_failures, storage: Storage, name,
           watcher, early_stopping):
    from ray import tune
    from ray.tune.logger import JsonLoggerCallback
    from ray.tune.schedulers import ASHAScheduler, FIFOScheduler
    if early_stopping:
        scheduler = _HandsBack.onto(ASHAScheduler)(time_attr="epoch", max_t=epochs,
                                                   grace_period=grace, reduction_factor=2)
    else:
        scheduler = _HandsBack.onto(FIFOScheduler)()
    scheduler.searcher = searcher
    run_config = tune.RunConfig(
        name=name, storage_path=storage.path, verbose=0,
        callbacks=[watcher, JsonLoggerCallback()], log_to_file=True, progress_reporter=_Silent(),
        failure_config=tune.FailureConfig(max_failures=max_failures))
    tune_config = tune.TuneConfig(metric="accuracy", mode="max", scheduler=scheduler, search_alg=searcher,
                                  num_samples=-1, time_budget_s=time_budget_s, reuse_actors=True)
    return tune.Tuner(trainable, tune_config=tune_config, run_config=run_config)


class _HandsBack:
    """Mixed into Tune's scheduler: before it picks a trial to run, a trial waiting for a slot
    of a machine that is gone, and never run, goes back to the searcher and is stopped (Tune
    staged it there, where it would wait for ever). It looks at Ray's nodes once a second.
    The searcher ends the search (``num_samples=-1``: as many trials as it hands out)."""

    searcher: slots.SlotSearcher
    looked = 0.0

    @classmethod
    def onto(cls, scheduler: type) -> type:
        return type(f"HandsBack{scheduler.__name__}", (cls, scheduler), {})

    def choose_trial_to_run(self, tune_controller):
        if time.monotonic() - self.looked > 1:
            self.looked = time.monotonic()
            lost = set(self.searcher.slots) - slots.alive_roles(self.searcher.slots)
            for trial in tune_controller.get_trials() if 0 < len(lost) < len(self.searcher.slots) else ():
                if (trial.status == "PENDING" and self.searcher.role_of.get(trial.trial_id) in lost
                        and trial.trial_id not in self.searcher.last):
                    self.searcher.hand_back(trial.trial_id)
                    tune_controller.stop_trial(trial)
        return super().choose_trial_to_run(tune_controller)


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
    """Tune's printing off for one fit: the old reporter path (``RAY_AIR_NEW_OUTPUT=0``, which
    prints no "Configuration for experiment" box) with a silent reporter, and Tune's loggers
    at CRITICAL (hetlab reports every failed trial in one line itself). Of Tune's result files
    only ``result.json`` per trial is written (no CSV, no TensorBoard: less work per epoch).
    Tune may hold as many trials waiting to start as the searcher hands out (its default with a
    searcher is one: packed trials would start one after another)."""
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
