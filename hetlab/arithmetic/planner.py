"""Will adding the Mac speed training up? A planner from each machine's step line (notebooks 02, 08).

A round of H local steps takes ``max(H·t_d(b_d), H·t_m(b_m) + e) + engine`` (``at_split``), the
desktop alone ``t_d(B)`` a step; ``benchmarks/pair_vs_alone.py`` checks it against measured runs.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

from hetlab.arithmetic import estimates, steady, steptime
from hetlab.errors import HetlabError
from hetlab.arithmetic.steptime import StepTime
from hetlab.vocab import BYTES_PER_VALUE, WEIGHTS_DOWN


@dataclass(frozen=True)
class Link:
    """A network link between the two machines: bandwidth in Mbit/s, round trip in ms."""

    bandwidth_mbit_s: float
    rtt_ms: float
    name: str = "link"


# Assumed figures (not measured here): a good 802.11ac/ax home Wi-Fi link and wired
# gigabit Ethernet. Replace them with your own `iperf3` / `ping` numbers.
WIFI = Link(300.0, 5.0, "Wi-Fi (assumed ~300 Mbit/s, ~5 ms)")
GIGABIT = Link(1000.0, 0.5, "gigabit Ethernet (assumed ~1000 Mbit/s, ~0.5 ms)")
SAME_MACHINE = Link(1e9, 0.0, "the same machine (no link)")


def assumed_devices(model: str = "small") -> tuple[StepTime, StepTime]:
    """(desktop, mac) estimated step times: an RTX 4070 Ti and an M2 GPU, labelled as estimates."""
    return (estimates.labelled("desktop", model), estimates.labelled("mac", model))


# How far the model's predictions fell from measured runs, at most (docs/measured/): a smaller
# predicted gain than this could be the model's error, so a verdict for the Mac needs more.
MODEL_ERROR = 0.15
MIN_GAIN = 1 + MODEL_ERROR


def _check(params: int, global_batch: int, local_steps: int = 1) -> None:
    if params < 1 or global_batch < 1:
        raise HetlabError(f"params and global batch must be ≥ 1 (got {params}, {global_batch}).")
    if isinstance(local_steps, bool) or not isinstance(local_steps, int) or local_steps < 1:
        raise HetlabError(f"local steps H must be a whole number ≥ 1, got {local_steps!r}.")


@dataclass(frozen=True)
class Plan:
    """One way to train: batch per device, local steps, and the predicted speed."""

    name: str
    batch_sizes: tuple[int, int]   # (desktop, mac) samples per local step
    local_steps: int               # H: local steps between exchanges (1 = per-step sync)
    round_s: float                 # seconds for H global steps (one exchange)
    comm_s: float                  # seconds of that round spent exchanging: the link + the engine
    bytes_per_sample: float        # bytes over the link per trained sample
    samples_per_s: float = field(init=False)   # H global batches ÷ round_s

    def __post_init__(self):
        object.__setattr__(self, "samples_per_s", steady.samples_per_s(self.local_steps * sum(self.batch_sizes),
                                                                        self.round_s))

    @property
    def step_s(self) -> float:
        """Seconds per global step (one global batch)."""
        return self.round_s / self.local_steps

    @property
    def uses_mac(self) -> bool:
        return self.batch_sizes[1] > 0


def exchange_bytes(params: int, bytes_per_value: int = 4) -> int:
    """Bytes of one exchange: the gradient/delta up (``bytes_per_value`` each), fp32 weights down."""
    return params * (bytes_per_value + BYTES_PER_VALUE[WEIGHTS_DOWN])   # the server always sends fp32 weights


def exchange_seconds(params: int, link: Link, bytes_per_value: int = 4) -> float:
    """One exchange over the link: a round trip plus the gradient up and the fp32 weights down."""
    if link.bandwidth_mbit_s <= 0 or link.rtt_ms < 0:
        raise HetlabError(f"link needs bandwidth > 0 and rtt ≥ 0, got {link}.")
    return link.rtt_ms / 1e3 + exchange_bytes(params, bytes_per_value) * 8 / (link.bandwidth_mbit_s * 1e6)


def engine_or_default(engine_s) -> float:
    """``engine_s`` checked (notebook 05's ``measured.engine_cost()``), or ``estimates.ENGINE_S`` when None."""
    value = estimates.ENGINE_S if engine_s is None else engine_s
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
        raise HetlabError(f"engine_s must be seconds ≥ 0, got {engine_s!r}.")
    return float(value)


def at_split(pair: Sequence, batch_sizes: Sequence[int], params: int, link: Link, local_steps: int = 1,
             bytes_per_value: int = 4, engine_s: float | None = None) -> Plan:
    """The prediction for a run at this split (desktop, mac): a round of H local steps takes
    ``max(H·t_d(b_d), H·t_m(b_m) + e) + engine``, the server on the desktop and the Mac's exchange e
    over the link. The Mac given 0: the desktop alone, ``H·t_d(B)``."""
    d, m = pair
    b_d, b_m = (int(b) for b in batch_sizes)
    h, engine = local_steps, engine_or_default(engine_s)
    _check(params, b_d + b_m, h)
    if b_m == 0:
        return Plan("desktop alone", (b_d, 0), h, h * d(b_d), 0.0, 0.0)
    e = exchange_seconds(params, link, bytes_per_value)
    name = "sync per step" if h == 1 else f"local SGD H={h}"
    return Plan(name, (b_d, b_m), h, max(h * d(b_d), h * m(b_m) + e) + engine, e + engine,
                exchange_bytes(params, bytes_per_value) / (h * (b_d + b_m)))


def with_mac(pair: Sequence, params: int, link: Link, global_batch: int, local_steps: int = 1,
             bytes_per_value: int = 4, engine_s: float | None = None, keep_mac: bool = False) -> Plan:
    """Desktop + Mac at the whole-sample split with the shortest round; ``local_steps`` > 1 is local SGD.
    No faster than the desktop alone: the Mac is left out, unless ``keep_mac``."""
    d, m = pair
    _check(params, global_batch, local_steps)
    h, engine = local_steps, engine_or_default(engine_s)
    # the Mac's share with which H desktop steps and H Mac steps plus one exchange end together
    x = steptime.finish_together(global_batch, [d, m.plus(exchange_seconds(params, link, bytes_per_value) / h)])[1][1]
    tries = {min(global_batch - 1, max(1, k)) for k in (math.floor(x), math.ceil(x))} if x > 0 else {1}
    plans = {b_m: at_split((d, m), (global_batch - b_m, b_m), params, link, h, bytes_per_value, engine)
             for b_m in sorted(tries)}
    b_m = min(plans, key=lambda k: (round(plans[k].round_s, 12), abs(k - x)))   # a tie: the nearer whole sample
    if plans[b_m].round_s >= h * d(global_batch) and not keep_mac:
        return Plan(f"{plans[b_m].name} (Mac left out)", (global_batch, 0), h, h * d(global_batch), 0.0, 0.0)
    return plans[b_m]


@dataclass(frozen=True)
class Advice:
    """The planner's answer: the plans it compared and the one it recommends."""

    plans: list[Plan]
    best: Plan
    speedup: float          # best plan's samples/s over the desktop alone
    verdict: str


def advise(pair: Sequence, params: int, link: Link, global_batch: int,
           local_steps: Sequence[int] = (4, 8, 16, 32, 64), engine_s: float | None = None,
           alone: StepTime | None = None) -> Advice:
    """Compare the desktop alone, per-step sync (fp32) and local SGD (16-bit) for each H.

    Recommends the Mac only if it gains at least ``MIN_GAIN``; among plans within 2 % of the fastest,
    the smallest H wins. ``alone``: the desktop's plain loop, where it differs from its pair worker.
    """
    d, m = pair
    engine = engine_or_default(engine_s)
    alone = at_split((alone or d, m), (global_batch, 0), params, link)   # the plain loop, nothing exchanged
    sync = with_mac((d, m), params, link, global_batch, 1, BYTES_PER_VALUE["fp32"], engine)
    local = [with_mac((d, m), params, link, global_batch, h, BYTES_PER_VALUE["fp16"], engine)
             for h in local_steps]
    plans = [alone, sync, *local]
    fastest = max(p.samples_per_s for p in plans)
    candidates = [p for p in plans[1:] if p.uses_mac and p.samples_per_s >= 0.98 * fastest
                  and p.samples_per_s >= MIN_GAIN * alone.samples_per_s]
    if candidates:
        best = min(candidates, key=lambda p: p.local_steps)
        speedup = best.samples_per_s / alone.samples_per_s
        verdict = (f"add the Mac with {best.name}, batch {best.batch_sizes[0]}:{best.batch_sizes[1]} "
                   f"(desktop:mac): {speedup:.2f}× the desktop alone on {link.name}.")
        return Advice(plans, best, speedup, verdict)
    top = steptime.ceiling(d, m, global_batch)   # no plan gains: the pair's ceiling against what an exchange costs
    e = exchange_seconds(params, link, BYTES_PER_VALUE["fp32"]) + engine
    return Advice(plans, alone, 1.0, f"use the desktop alone: at batch {global_batch} the pair's ceiling here is "
                  f"{top:.2f}× and one exchange on {link.name} and the engine cost {e * 1e3:.1f} ms a step; no plan "
                  f"gains {MIN_GAIN - 1:.0%}.")
