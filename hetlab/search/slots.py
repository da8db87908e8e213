"""Where the trials of a search run (notebook 09): ``plan`` gives each machine k trials at once on its
own device, and ``SlotSearcher`` hands each configuration to a machine with a free slot, fastest first.
"""
from __future__ import annotations

from ray.tune.search import Searcher

from hetlab.cluster.roles import ROLE_SLIVER, joined, role_resource

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
    """Ray Tune searcher: the next configuration goes to a machine with a free slot, fastest first;
    a slower machine takes one only if it surely finishes it before the faster would finish the rest:
    the faster machines' running trials counted done, its own whole (a late trial on the slow machine
    delays the whole search; one it declines costs only its idle end).
    Each machine gets one trial beyond its slots, waiting, so Tune hands it the process of the trial
    that ends there (a new process costs seconds)."""

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
