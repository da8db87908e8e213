"""Will adding the Mac speed training up? A back-of-the-envelope planner (notebooks 02 and 08).

Pure arithmetic, no Ray and no torch. The model of one synchronous step, with the
parameter server on the desktop (hetlab's layout; the desktop's own exchange is in
memory and costs nothing):

* the desktop computes ``b_d`` samples in ``b_d / T_d`` seconds,
* the Mac computes ``b_m`` samples in ``b_m / T_m`` seconds, then *exchanges* with the
  server: its gradient goes up and the new weights come down. One exchange costs
  ``e = rtt + P · (w_up + 4) · 8 / bandwidth`` (P parameters; the gradient or delta goes
  up with ``w_up`` bytes per value — 4 in fp32, 2 in fp16/bf16 — and the weights always
  come down in fp32, 4 bytes; the two transfers happen one after the other),
* the step ends when the slower of the two is done: ``max(b_d/T_d, b_m/T_m + e)``.

The best split gives the Mac ``b_m = T_m (B − T_d e) / (T_d + T_m)`` samples of the
global batch B, and the step then takes ``(B + T_m e) / (T_d + T_m)``. Adding the Mac
helps exactly when ``e < B / T_d``: **one exchange over the link must take less time
than the desktop needs for the whole batch on its own.** Local SGD with H local steps
exchanges once per H steps, which replaces B by H·B in every formula above.
Communication does not overlap compute here (a simple PS); throughputs go in —
``speeds()`` reads the ones notebook 02 measured and saved on each machine (``hetlab.measured``),
else the assumed figures, each labelled — and predictions come out — the accuracy cost of local SGD is not
modelled, it is measured (benchmarks/local_sgd.py).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from hetlab import measured
from hetlab.errors import HetlabError
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


def speeds(model: str = "small", batch_size: int = 128, where=None) -> tuple[measured.Speed, measured.Speed]:
    """(desktop, mac) samples/s for ``model`` at ``batch_size``: notebook 02's saved figures
    where they exist, else the assumed ones; each is a number whose ``.source`` says which."""
    return (measured.speed("desktop", model, batch_size, where), measured.speed("mac", model, batch_size, where))


def assumed_speeds(model: str = "small") -> tuple[measured.Speed, measured.Speed]:
    """(desktop, mac) assumed samples/s (an RTX 4070 Ti, an M2 GPU; batch 128), labelled "assumed"."""
    return (measured.assumed("desktop", model), measured.assumed("mac", model))


def ceiling(throughputs: Sequence[float]) -> float:
    """The most the pair can gain over the desktop alone (notebook 02): ``1 + T_m / T_d``.

    Perfect scaling: both machines busy all the time, nothing lost to the network or to waiting.
    No plan below beats it, whatever the link.
    """
    t_d, t_m = _check(throughputs, 1, 1)
    return 1 + t_m / t_d


@dataclass(frozen=True)
class Plan:
    """One way to train: batch per device, local steps, and the predicted speed."""

    name: str
    batch_sizes: tuple[int, int]   # (desktop, mac) samples per local step
    local_steps: int               # H: local steps between exchanges (1 = per-step sync)
    round_s: float                 # seconds for H global steps (one exchange)
    comm_s: float                  # seconds of that round spent exchanging
    bytes_per_sample: float        # bytes over the link per trained sample

    @property
    def samples_per_s(self) -> float:
        return self.local_steps * sum(self.batch_sizes) / self.round_s

    @property
    def step_s(self) -> float:
        """Seconds per global step (one global batch)."""
        return self.round_s / self.local_steps


def _check(throughputs: Sequence[float], params: int, global_batch: int) -> tuple[float, float]:
    if len(throughputs) != 2:
        raise HetlabError(f"give two throughputs (desktop, mac), got {len(throughputs)}.")
    t_d, t_m = (float(t) for t in throughputs)
    if not all(math.isfinite(t) and t > 0 for t in (t_d, t_m)):
        raise HetlabError(f"throughputs must be positive samples/s, got {list(throughputs)}.")
    if params < 1 or global_batch < 1:
        raise HetlabError(f"params and global batch must be ≥ 1 (got {params}, {global_batch}).")
    return t_d, t_m


WEIGHTS_DOWN_BYTES = BYTES_PER_VALUE[WEIGHTS_DOWN]  # the server always sends fp32 weights (hetlab.ps)


def exchange_bytes(params: int, bytes_per_value: int = 4) -> int:
    """Bytes of one exchange: the gradient/delta up (``bytes_per_value`` each), fp32 weights down."""
    return params * (bytes_per_value + WEIGHTS_DOWN_BYTES)


def exchange_seconds(params: int, link: Link, bytes_per_value: int = 4) -> float:
    """One exchange: a round trip plus the gradient up and the fp32 weights down at the link's rate."""
    if link.bandwidth_mbit_s <= 0 or link.rtt_ms < 0:
        raise HetlabError(f"link needs bandwidth > 0 and rtt ≥ 0, got {link}.")
    return link.rtt_ms / 1e3 + exchange_bytes(params, bytes_per_value) * 8 / (link.bandwidth_mbit_s * 1e6)


def round_seconds(throughputs: Sequence[float], batch_sizes: Sequence[int], params: int, link: Link,
                  local_steps: int = 1, bytes_per_value: int = 4, server_s: float = 0.0,
                  overhead_s: float = 0.0) -> float:
    """Seconds for H global steps at this split: ``max(H·b_d/T_d, H·b_m/T_m + e) + server_s + overhead_s``.

    ``server_s`` is the server's own update per exchange (combine + optimizer step), which
    starts only when the last gradient is in; ``overhead_s`` is the engine's fixed cost per
    exchange whatever the batch (sending the message, (de)serialising, loading the weights:
    Ray's round trip). Both are paid once per round, so local SGD divides them by H; both 0
    unless measured (``StepRecord.server_s``; ``benchmarks/rehearsal_link.py`` measures the overhead).
    """
    t_d, t_m = _check(throughputs, params, sum(batch_sizes))
    if server_s < 0 or overhead_s < 0:
        raise HetlabError(f"server_s and overhead_s are seconds ≥ 0, got {server_s} and {overhead_s}.")
    b_d, b_m = batch_sizes
    if b_m == 0:
        return local_steps * b_d / t_d + server_s
    return max(local_steps * b_d / t_d,
               local_steps * b_m / t_m + exchange_seconds(params, link, bytes_per_value)) + server_s + overhead_s


def desktop_alone(throughputs: Sequence[float], global_batch: int) -> Plan:
    """The baseline: the desktop trains every sample, nothing crosses the network."""
    t_d, _ = _check(throughputs, 1, global_batch)
    return Plan("desktop alone", (global_batch, 0), 1, global_batch / t_d, 0.0, 0.0)


def with_mac(throughputs: Sequence[float], params: int, link: Link, global_batch: int,
             local_steps: int = 1, bytes_per_value: int = 4) -> Plan:
    """Desktop + Mac with the best integer split; ``local_steps`` > 1 is local SGD.

    If the best whole-sample split gives the Mac nothing, or is no faster than the
    desktop alone, the plan says so (Mac batch 0, the desktop's own time).
    """
    t_d, t_m = _check(throughputs, params, global_batch)
    if local_steps < 1:
        raise HetlabError(f"local steps H must be ≥ 1, got {local_steps}.")
    h = local_steps
    e = exchange_seconds(params, link, bytes_per_value)
    ideal_mac = t_m * (h * global_batch - t_d * e) / (h * (t_d + t_m))
    b_m = min(global_batch - 1, max(0, round(ideal_mac)))
    name = "sync per step" if h == 1 else f"local SGD H={h}"
    b_d = global_batch - b_m
    round_s = round_seconds(throughputs, (b_d, b_m), params, link, h, bytes_per_value)
    if b_m == 0 or round_s >= h * global_batch / t_d:  # (rounding to whole samples can tip it)
        alone = desktop_alone(throughputs, global_batch)
        return Plan(f"{name} (Mac left out)", alone.batch_sizes, h, h * alone.round_s, 0.0, 0.0)
    return Plan(name, (b_d, b_m), h, round_s, e, exchange_bytes(params, bytes_per_value) / (h * global_batch))


def break_even_local_steps(throughputs: Sequence[float], params: int, link: Link,
                           global_batch: int, bytes_per_value: int = 4) -> int:
    """Smallest H for which one exchange costs less than the desktop's H steps (e < H·B/T_d)."""
    t_d, _ = _check(throughputs, params, global_batch)
    return math.floor(t_d * exchange_seconds(params, link, bytes_per_value) / global_batch) + 1


@dataclass(frozen=True)
class Advice:
    """The planner's answer: the plans it compared and the one it recommends."""

    plans: list[Plan]
    best: Plan
    speedup: float          # best plan's samples/s over the desktop alone
    verdict: str


def advise(throughputs: Sequence[float], params: int, link: Link, global_batch: int,
           local_steps: Sequence[int] = (4, 8, 16, 32, 64), min_gain: float = 1.05) -> Advice:
    """Compare desktop alone, per-step sync (fp32) and local SGD (16-bit) for each H.

    Recommends the Mac only if it gains at least ``min_gain`` (5 % by default: smaller
    gains vanish in noise and local SGD's extra staleness); among local-SGD plans within
    2 % of the fastest, the smallest H (closest to plain SGD) wins.
    """
    alone = desktop_alone(throughputs, global_batch)
    sync = with_mac(throughputs, params, link, global_batch, 1, BYTES_PER_VALUE["fp32"])
    local = [with_mac(throughputs, params, link, global_batch, h, BYTES_PER_VALUE["fp16"])
             for h in local_steps]
    plans = [alone, sync, *local]
    fastest = max(p.samples_per_s for p in plans)
    candidates = [p for p in plans[1:] if p.batch_sizes[1] > 0
                  and p.samples_per_s >= 0.98 * fastest
                  and p.samples_per_s >= min_gain * alone.samples_per_s]
    if not candidates:
        e = exchange_seconds(params, link, BYTES_PER_VALUE["fp32"])
        verdict = (f"use the desktop alone: one fp32 exchange on {link.name} takes "
                   f"{e * 1e3:.1f} ms vs {alone.step_s * 1e3:.1f} ms for a whole batch of "
                   f"{global_batch} on the desktop; no plan gains {min_gain - 1:.0%}.")
        return Advice(plans, alone, 1.0, verdict)
    best = min(candidates, key=lambda p: p.local_steps)
    speedup = best.samples_per_s / alone.samples_per_s
    verdict = (f"add the Mac with {best.name}, batch {best.batch_sizes[0]}:{best.batch_sizes[1]} "
               f"(desktop:mac): {speedup:.2f}× the desktop alone on {link.name}.")
    return Advice(plans, best, speedup, verdict)


def table(plans: Sequence[Plan]) -> list[dict]:
    """Rows for printing or a DataFrame: one per plan, times in ms."""
    return [{"plan": p.name, "batch desktop:mac": f"{p.batch_sizes[0]}:{p.batch_sizes[1]}",
             "step ms": round(p.step_s * 1e3, 2), "comm ms/step": round(p.comm_s / p.local_steps * 1e3, 2),
             "samples/s": round(p.samples_per_s), "bytes/sample": round(p.bytes_per_sample, 1)}
            for p in plans]
