"""Where the trials of a search run: each machine's own device, k trials at once (notebook 09).
A small model leaves a card mostly idle, so several trials share it: ``trials_at_once`` picks k,
``slot_shape`` asks Ray for ``{"GPU": 1/k}`` (or a share of the CPUs), and ``SlotSearcher`` hands
each configuration to a machine with a free slot, fastest first.
"""
from __future__ import annotations

from ray.tune.search import Searcher

from hetlab.cluster.roles import ROLE_SLIVER, has_role, live_nodes, role_resource
from hetlab.errors import HetlabError

GPU_TRIALS = 2   # trials at once on a device Ray counts as a GPU: the course's CNN leaves a card mostly idle


def node_of(role: str) -> dict:
    """The live Ray node of ``role``, or a one-line error."""
    nodes = live_nodes(role)
    if not nodes:
        raise HetlabError(f"no live machine has the role {role!r}: join it (hetlab join) or leave it out of roles.")
    return nodes[0]


def alive_roles(roles) -> set:
    """Those of ``roles`` that a live Ray node has now (one look at Ray's nodes for all of them)."""
    nodes = live_nodes()
    return {r for r in roles if any(has_role(n, r) for n in nodes)}


def trials_at_once(node: dict, slowdown: float) -> int:
    """k for a machine: ``GPU_TRIALS`` where Ray counts a GPU; one on a CPU (k trials would only
    share its cores) and on a simulated slower machine (its sleeps would overlap and overstate
    what packing gives; a real slower device is busy while it computes)."""
    return GPU_TRIALS if node["Resources"].get("GPU", 0) >= 1 and slowdown <= 1 else 1


def slot_shape(node: dict, role: str, k: int) -> dict:
    """What one of ``k`` trials on ``node`` asks Ray for: 1/k of its GPU (and a CPU, or its
    share of the CPUs), else 1/k of its CPUs; always pinned to ``role``."""
    cpus, gpus = node["Resources"].get("CPU", 1), node["Resources"].get("GPU", 0)
    if gpus >= 1:
        shape = {"GPU": 1 / k, "CPU": min(1.0, cpus / (k * int(gpus)))}
    else:
        shape = {"CPU": cpus / k}
    return {**shape, role_resource(role): ROLE_SLIVER}


def slots_of(node: dict, k: int) -> int:
    """How many trials ``slot_shape(node, role, k)`` fits on ``node`` at once."""
    gpus = node["Resources"].get("GPU", 0)
    return k * int(gpus) if gpus >= 1 else k


def width_cost(config: dict) -> float:
    """A configuration's relative cost per sample: the CNN's width (the course's CNN trains
    about in proportion to it; the batch size matters much less)."""
    return float(config.get("width", 1))


class SlotSearcher(Searcher):
    """Ray Tune searcher: the next configuration goes to a machine with a free slot, fastest first;
    a slower machine takes one only if it surely finishes it before the faster would finish the rest:
    the faster machines' running trials counted done, its own whole (a late trial on the slow machine
    delays the whole search; one it declines costs only its idle end). With ``cost``, the fastest
    takes the costliest left (longest first).
    Each machine gets one trial beyond its slots, waiting, so Tune hands it the process of the trial
    that ends there (a new process costs seconds); a lost machine's waiting trial is handed back."""

    def __init__(self, configs: list[dict], slots: dict, units_per_s: dict, work: float, cost=None):
        super().__init__(metric="accuracy", mode="max")
        self.left, self.slots, self.work, self.cost = list(configs), dict(slots), work, cost
        self.units_per_s = {r: float(v) for r, v in units_per_s.items()}   # role → cost units per second per slot
        self.seen = {r: [0.0, 0.0] for r in slots}                  # role → [cost units, seconds] measured
        self.role_of: dict = {}                                     # trial → role, while it runs or waits
        self.config_of: dict = {}
        self.last: dict = {}                                        # trial → samples at its last result
        self.handed_back: set = set()                               # trials whose lost machine never ran them

    def _cost(self, config: dict) -> float:
        return float(self.cost(config)) if self.cost else 1.0

    def suggest(self, trial_id: str):
        if not self.left:  # finished once no trial can still be handed back
            return Searcher.FINISHED if all(t in self.last for t in self.role_of) else None
        picked = self._pick()
        if picked is None:
            return None
        role, config = picked
        self.left.remove(config)
        self.role_of[trial_id], self.config_of[trial_id] = role, config
        return {"config": config, "role": role}

    def _units_per_s(self, role: str) -> float:
        units, seconds = self.seen[role]
        return units / seconds if seconds > 0 and units > 0 else self.units_per_s.get(role, 0.0)

    def _pick(self):
        known = all(self._units_per_s(r) > 0 for r in self.slots if self.slots[r])  # until then: in the roles' order
        by_speed = sorted(self.slots, key=lambda r: -self._units_per_s(r)) if known else list(self.slots)
        ordered = sorted(self.left, key=self._cost) if self.cost else self.left
        held = {r: self._costs(r) for r in by_speed}   # each machine's trials, running or waiting
        for n, role in enumerate(by_speed):
            mine = self._units_per_s(role)
            if self.slots[role] == 0 or len(held[role]) > self.slots[role] or (
                    len(held[role]) == self.slots[role] and not known):  # waiting trials: once speeds are known
                continue
            config = ordered[-1] if n == 0 and self.cost else ordered[0]
            faster = sum(self.slots[r] * self._units_per_s(r) for r in by_speed[:n])  # cost units/s
            if n == 0 or faster <= 0 or mine <= 0:
                return role, config
            mine_s = (sum(held[role]) / self.slots[role] + self._cost(config)) / mine
            theirs_s = (sum(map(self._cost, self.left)) + sum(sum(held[r][self.slots[r]:])
                                                               for r in by_speed[:n])) / faster
            if mine_s <= theirs_s:
                return role, config
        return None

    def _costs(self, role: str) -> list:
        """The costs of ``role``'s trials, running or waiting, costliest first (so the running)."""
        return sorted((self._cost(self.config_of[t]) for t, r in self.role_of.items() if r == role), reverse=True)

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        role = result.get("role")
        if role in self.seen and result.get("time_this_iter_s") and trial_id in self.config_of:
            new = max(0, result["samples"] - self.last.get(trial_id, 0))
            self.seen[role][0] += new * self._cost(self.config_of[trial_id]) / self.work
            self.seen[role][1] += result["time_this_iter_s"]
            self.last[trial_id] = result["samples"]

    def on_trial_complete(self, trial_id: str, result=None, error: bool = False) -> None:
        self.role_of.pop(trial_id, None)

    def hand_back(self, trial_id: str) -> None:
        """A trial that waited for a slot of a machine now lost, and never ran: its configuration
        goes back to the list (Tune then stops that trial), and the machine takes no new trial."""
        self.slots[self.role_of.pop(trial_id)] = 0
        self.left.insert(0, self.config_of[trial_id])
        self.handed_back.add(trial_id)

    def moved(self, trial_id: str, lost: str, to: str) -> None:
        """A trial whose machine was lost runs on ``to`` now; ``lost`` takes no new trial."""
        self.slots[lost] = 0
        if self.role_of.get(trial_id) == lost:
            self.role_of[trial_id] = to
