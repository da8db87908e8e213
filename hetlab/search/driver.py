"""A hyperparameter search across the pair with Ray Tune (notebook 09, ``hetlab search``):
independent trials, each on one machine's own device; ASHA stops poor trials early. ``plan`` gives
each machine k trials at once, and ``SlotSearcher`` hands each configuration to a machine with a free slot.
"""
from __future__ import annotations

import contextlib
import logging
import math
import random
import tempfile
import time

import ray
from ray.tune.search import Searcher

from hetlab import environment
from hetlab.cluster.roles import ROLE_SLIVER, joined, role_resource
from hetlab.errors import HetlabError
from hetlab.search.results import SearchResult, Watcher
from hetlab.search.trial import OPTIMIZERS, run_trial, split_data, start_keeper

SPACE = {"lr": [3e-4, 1e-3, 3e-3, 1e-2], "batch_size": [32, 64, 128], "width": [8, 16, 32],
         "optimizer": ["adam", "sgd"]}


def check_space(space) -> dict:
    """``space`` (name → list of choices) checked in one line each, before Ray; names left out keep
    ``SPACE``'s first choice."""
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
    """``trials`` distinct configurations drawn from ``space`` with ``seed``, each with its own
    training seed: a search you can repeat."""
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
           train_samples: int = 4000, val_samples: int = 1000, seed: int = 0,
           slowdowns: dict | None = None, time_budget_s: float | None = None,
           max_failures: int = 1, packing: dict | None = None, early_stopping: bool = True) -> SearchResult:
    """Run ``trials`` sampled configurations of ``space`` on the machines with ``roles``: a ``SearchResult``.
    ``slowdowns``: role → simulated slowdown; ``packing``: role → trials at once (default ``plan``'s);
    ``early_stopping=False``: no ASHA. A failed trial is retried ``max_failures`` times from its last epoch.
    """
    space = check_space(SPACE if space is None else space)
    roles = check_numbers(trials, epochs, time_budget_s, max_failures, roles, train_samples=train_samples,
                          val_samples=val_samples, batch_size=max(space["batch_size"]), packing=packing,
                          slowdowns=slowdowns)
    configs = sample(space, trials, seed)
    plans = {role: plan(role, float((slowdowns or {}).get(role, 1)), (packing or {}).get(role)) for role in roles}
    print("trials at once: " + ", ".join(f"{role} {p['k']} per {p['device']}" for role, p in plans.items()))
    split_data(train_samples, val_samples)  # missing or damaged MNIST: one line, here
    folder, name = tempfile.mkdtemp(prefix="hetlab-search-"), f"search-{'-'.join(roles)}-{time.strftime('%H%M%S')}"
    from ray import tune
    from ray.tune.logger import JsonLoggerCallback
    from ray.tune.schedulers import ASHAScheduler, FIFOScheduler
    keeper = start_keeper()
    fn = tune.with_parameters(run_trial, train_samples=train_samples, val_samples=val_samples,
                              epochs=epochs, slowdowns=dict(slowdowns or {}), keeper=keeper)
    shapes = {r: p["shape"] for r, p in plans.items()}

    def shape_of(config):  # what a trial asks Ray for: a slot of the machine the searcher gave it
        return tune.PlacementGroupFactory([shapes[config["role"]]])
    searcher = SlotSearcher(configs, {r: p["slots"] for r, p in plans.items()}, epochs * train_samples)
    watcher = Watcher(configs, epochs)
    scheduler = (ASHAScheduler(time_attr="epoch", max_t=epochs, grace_period=1, reduction_factor=2)
                 if early_stopping else FIFOScheduler())
    tuner = tune.Tuner(tune.with_resources(fn, shape_of), tune_config=tune.TuneConfig(
        metric="accuracy", mode="max", scheduler=scheduler, search_alg=searcher, num_samples=-1,
        time_budget_s=time_budget_s, reuse_actors=True), run_config=tune.RunConfig(
        name=name, storage_path=folder, verbose=0, callbacks=[watcher, JsonLoggerCallback()], log_to_file=True,
        failure_config=tune.FailureConfig(max_failures=max_failures)))
    try:
        with _quiet_tune(sum(p["slots"] + 1 for p in plans.values())):
            tuner.fit()
    finally:
        watcher.close()
        ray.kill(keeper)
    result = SearchResult(watcher.records, time.time() - watcher.t0, list(roles), shapes, f"{folder}/{name}",
                          {r: p["k"] for r, p in plans.items()})
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


def check_numbers(trials, epochs, time_budget_s, max_failures, roles, *, train_samples=None,
                  val_samples=None, batch_size=None, packing=None, slowdowns=None) -> tuple:
    """The search's own numbers and roles, each checked in one line before Ray (``hetlab search`` too)."""
    for label, value, least in (("trials", trials, 1), ("epochs", epochs, 1), ("max_failures", max_failures, 0)):
        if not _whole(value, least):
            raise HetlabError(f"{label}={value!r}: give a whole number ≥ {least}.")
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


@contextlib.contextmanager
def _quiet_tune(slot_count: int):
    """Tune's printing off for one fit (the old reporter path, which ``verbose=0`` silences, and its
    loggers at CRITICAL: hetlab reports failed trials itself), only ``result.json`` written per trial, and as
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


# --- where each trial runs: k trials at once per device, the faster machine first ------------------

GPU_TRIALS = 2   # trials at once on a device Ray counts as a GPU: the course's CNN leaves a card mostly idle


def plan(role: str, slowdown: float, k: int | None = None) -> dict:
    """One machine's slots: ``k`` trials at once (default ``GPU_TRIALS`` where Ray counts a GPU, else 1:
    on a CPU they would only share its cores, and a simulated machine's sleeps would overlap), the
    ``shape`` each trial asks Ray for (1/k of the GPU, or of the CPUs, pinned to ``role``), and how
    many ``slots`` fit."""
    nodes, _ = joined(role, "a search")
    cpus, gpus = nodes[0]["Resources"].get("CPU", 1), int(nodes[0]["Resources"].get("GPU", 0))
    k = k or (GPU_TRIALS if gpus >= 1 and slowdown <= 1 else 1)
    shape = {"GPU": 1 / k, "CPU": min(1.0, cpus / (k * gpus))} if gpus >= 1 else {"CPU": cpus / k}
    return {"k": k, "device": "GPU" if gpus >= 1 else "CPU", "shape": {**shape, role_resource(role): ROLE_SLIVER},
            "slots": k * gpus if gpus >= 1 else k}


class SlotSearcher(Searcher):
    """Ray Tune searcher: the next configuration goes to a machine with a free slot, fastest first; a
    slower machine takes one only if it surely finishes it before the faster ones would finish the rest
    (a late trial there delays the whole search). Each machine holds one trial beyond its slots, waiting,
    so Tune hands it the process of the trial that ends there."""

    def __init__(self, configs: list[dict], slots: dict, work: float):
        super().__init__(metric="accuracy", mode="max")
        self.left, self.slots, self.work = list(configs), dict(slots), work   # work: samples of one whole trial
        self.seen = {r: [0.0, 0.0] for r in slots}    # role → [trials' worth of samples, seconds] measured
        self.role_of: dict = {}                       # trial → role, while it runs or waits
        self.last: dict = {}                          # trial → samples at its last result

    def suggest(self, trial_id: str):
        if not self.left:
            return Searcher.FINISHED
        role = self._pick()
        if role is None:
            return None
        self.role_of[trial_id] = role
        return {"config": self.left.pop(0), "role": role}

    def _speed(self, role: str) -> float:
        trials, seconds = self.seen[role]
        return trials / seconds if seconds > 0 else 0.0   # trials per second per slot, once measured

    def _pick(self):
        known = all(self._speed(r) > 0 for r in self.slots)   # until then: in the roles' order
        by_speed = sorted(self.slots, key=lambda r: -self._speed(r)) if known else list(self.slots)
        held = {r: sum(1 for t in self.role_of.values() if t == r) for r in by_speed}  # running or waiting
        for n, role in enumerate(by_speed):
            if held[role] > self.slots[role] or (held[role] == self.slots[role] and not known):
                continue   # a waiting trial only once the speeds are known
            faster = sum(self.slots[r] * self._speed(r) for r in by_speed[:n])  # trials per second
            if n == 0 or faster <= 0 or self._speed(role) <= 0:
                return role
            mine_s = (held[role] / self.slots[role] + 1) / self._speed(role)
            theirs_s = (len(self.left) + sum(max(0, held[r] - self.slots[r]) for r in by_speed[:n])) / faster
            if mine_s <= theirs_s:
                return role
        return None

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        role = result.get("role")
        if role in self.seen and result.get("time_this_iter_s"):
            self.seen[role][0] += max(0, result["samples"] - self.last.get(trial_id, 0)) / self.work
            self.seen[role][1] += result["time_this_iter_s"]
            self.last[trial_id] = result["samples"]

    def on_trial_complete(self, trial_id: str, result=None, error: bool = False) -> None:
        self.role_of.pop(trial_id, None)
