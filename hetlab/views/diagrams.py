"""Diagrams of the ideas, drawn from the numbers they are about (notebooks 04, 05, 08).

``hetlab.views.plots`` draws what was *measured* (step records, speeds); this module draws what
is *explained*: the pair's processes, ports and connections (``pair_topology``), who sends what to
whom in a parameter-server step, and the bandwidth arithmetic of ``hetlab.arithmetic.planner``.
Every byte count and
every time on a diagram is computed from its arguments (the model's parameter count, the
devices' speeds, the link), never typed in, and the planner's own functions do the arithmetic.
Like ``hetlab.views.plots``, each function returns a matplotlib ``Figure`` built without pyplot.
"""
from __future__ import annotations

from typing import Sequence

from matplotlib.figure import Figure
from matplotlib.patches import FancyBboxPatch

from hetlab.arithmetic import planner
from hetlab.store import measured
from hetlab.views import plots
from hetlab.errors import HetlabError

plots._show_figures_in_notebooks()  # a returned Figure shows as a picture in Jupyter

FP32 = planner.BYTES_PER_VALUE["fp32"]


def _nbytes(n: float) -> str:
    """``116,264 B (116.3 kB)``: the exact count a test can find, and a readable one."""
    return f"{round(n):,} B ({n / 1e3:,.1f} kB)"


def _box(ax, x, y, w, h, text, colour, fontsize=9):
    """A rounded box centred on (x, y) with centred text."""
    ax.add_patch(FancyBboxPatch((x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0.02,rounding_size=0.15",
                                facecolor=colour, edgecolor="black", linewidth=1))
    ax.text(x, y, text, ha="center", va="center", fontsize=fontsize)


def _arrow(ax, start, end, colour="black", rad=0.0):
    ax.annotate("", xy=end, xytext=start,
                arrowprops=dict(arrowstyle="-|>", color=colour, linewidth=1.6, mutation_scale=14,
                                shrinkA=0, shrinkB=0, connectionstyle=f"arc3,rad={rad}"))


def _canvas(ax, width, height):
    ax.set_xlim(0, width)
    ax.set_ylim(0, height)
    ax.axis("off")


def ps_round_trip(batch_sizes: Sequence[int] = (48, 16), params: int | None = None) -> Figure:
    """One synchronous parameter-server step of the pair, numbered 1–4 (notebook 05, section 3).

    1 the server's weights go down to every worker; 2 each worker sends back the mean gradient
    of its own b_i samples; 3 the server combines Σ (b_i/B)·g_i; 4 one optimizer step (Adam)
    gives the weights of the next round. With ``params`` each arrow says how many bytes it
    carries (fp32, as hetlab sends them by default).
    """
    sizes, names = [int(b) for b in batch_sizes], ("desktop", "mac")
    if len(sizes) != 2 or min(sizes) < 1:
        raise HetlabError(f"give two batch sizes ≥ 1, the desktop's and the mac's, got {list(batch_sizes)}.")
    total = sum(sizes)
    fig = Figure(figsize=(10, 6), layout="constrained")
    ax = fig.add_subplot()
    width, height = 12.0, 7.4
    _canvas(ax, width, height)
    terms = " + ".join(f"({b}/{total})·g_{n}" for b, n in zip(sizes, names))
    _box(ax, width / 2, 6.2, 8.4, 1.8,
         "parameter server (in the driver's process: your notebook)\nholds the weights w and Adam's state\n"
         f"3 · combine: g = Σ (b_i/B)·g_i = {terms}\n"
         "4 · optimizer step: w ← Adam(w, g), the next round's weights",
         "#dbe9f6", fontsize=10)
    for x, b, name in zip((2.6, width - 2.6), sizes, names):
        _box(ax, x, 1.6, 3.6, 1.5, f"{name} worker (its own device)\nforward + backward\non its b_{name} = {b} "
             f"samples → g_{name},\ntheir mean gradient", "#fde9d3", fontsize=10)
        side = -1 if x <= width / 2 else 1          # weights on the outer side, gradient on the inner
        down_x, up_x = x + side * 0.5, x - side * 0.5
        _arrow(ax, (down_x, 5.25), (down_x, 2.4), "tab:blue")
        _arrow(ax, (up_x, 2.4), (up_x, 5.25), "tab:orange")
        ax.text(down_x + side * 0.15, 3.85, "1 · weights w ↓", ha="left" if side > 0 else "right", va="center",
                fontsize=10, color="tab:blue")
        ax.text(up_x - side * 0.15, 3.85, f"2 · gradient g_{name} ↑\n(b_{name} = {b} samples)",
                ha="right" if side > 0 else "left", va="center", fontsize=10, color="tab:orange")
    carried = (f"Each arrow carries P = {params:,} values × 4 B (fp32) = {_nbytes(params * FP32)} per step. "
               if params else "")
    ax.text(width / 2, 0.05, f"B = Σ b_i = {total}. {carried}\nSynchronous: step 3 waits for every gradient, so "
            "the slowest worker sets the pace; then the round starts again at 1.", ha="center", va="bottom",
            fontsize=9.5)
    fig.suptitle("The parameter server's round trip: one synchronous step", fontsize=12)
    return fig


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.2f} ms"


def bandwidth_arithmetic(params: int, links: Sequence[planner.Link] = (planner.WIFI, planner.GIGABIT),
                         pair: Sequence | None = None, global_batch: int = 128, local_steps: int = 8) -> Figure:
    """Compute against exchange, per step, in milliseconds (notebook 08, section 5).

    Bars: each machine's step at the whole global batch (``pair``: (desktop, mac) step times,
    default ``planner.assumed_devices()``), the engine's own cost per exchange, then,
    for each link, one exchange (per-step sync, fp32 up) and local SGD's exchange (fp16 up)
    per step (every H steps: e/H). The dashed line is the desktop's whole step. Beside each
    exchange bar, ``planner.with_mac``'s verdict for that plan. The engine's cost is your pair's
    own when notebook 05 saved it (``measured.engine_cost``), labelled with where it came from.
    """
    links = list(links)
    if not links:
        raise HetlabError("give at least one link, e.g. planner.WIFI.")
    d, m = planner.assumed_devices() if pair is None else pair
    engine_s = measured.engine_cost()   # read once: the figure and its source
    engine, engine_from = planner.engine_or_default(engine_s), engine_s.source
    alone = planner.at_split((d, m), (global_batch, 0), params, links[0])   # nothing exchanged
    h = int(local_steps)
    b = global_batch
    bytes_per_value, local_bytes_per_value = FP32, planner.BYTES_PER_VALUE["fp16"]
    rows = [(f"desktop's step at the batch of {b}\n({d.source})", d(b), "tab:blue", None, ""),
            (f"mac's step at the batch of {b}\n({m.source})", m(b), "lightsteelblue", None, ""),
            (f"the engine's own cost per exchange\n({engine_from})",
             engine, "tab:gray", None, "")]
    for link in links:
        e = planner.exchange_seconds(params, link, bytes_per_value)
        e_local = planner.exchange_seconds(params, link, local_bytes_per_value)
        for name, seconds, value_bytes, hatch, steps in (
                ("per-step sync: one exchange per step", e, bytes_per_value, None, 1),
                (f"local SGD H={h}: one exchange / {h} steps", e_local / h, local_bytes_per_value, "///", h)):
            plan = planner.with_mac((d, m), params, link, b, steps, value_bytes, engine)
            verdict = ("the Mac is left out" if not plan.uses_mac else
                       f"{plan.samples_per_s / alone.samples_per_s:.2f}× the desktop alone "
                       f"(batch {plan.batch_sizes[0]}:{plan.batch_sizes[1]})")
            sent = planner.exchange_bytes(params, value_bytes)
            rows.append((f"{link.name}\n{name}\n({sent:,} B: {value_bytes * 8}-bit up, fp32 down)",
                         seconds, "tab:orange", hatch, verdict))
    fig = Figure(figsize=(11, 1.6 + 0.8 * len(rows)), layout="constrained")
    ax = fig.add_subplot()
    ys = list(range(len(rows)))
    longest = max(r[1] for r in rows)
    for y, (label, seconds, colour, hatch, verdict) in zip(ys, rows):
        ax.barh(y, seconds * 1e3, height=0.6, color=colour, hatch=hatch,
                edgecolor="white" if hatch is None else "saddlebrown", linewidth=0.5)
        note = _ms(seconds) + (f"  → {verdict}" if verdict else "")
        ax.text(seconds * 1e3 + longest * 1e3 * 0.01, y, note, va="center", fontsize=8.5)
    ax.axvline(alone.step_s * 1e3, color="black", linestyle="--", linewidth=1)
    ax.text(alone.step_s * 1e3, -0.75, f"  t_d(B) = {_ms(alone.step_s)}: the desktop's whole step.\n"
            "  A share given to the Mac saves part of it; an exchange costs the bars below.", fontsize=8, va="bottom")
    ax.set_yticks(ys, [r[0] for r in rows], fontsize=8.5)
    ax.set_ylim(len(rows) - 0.5, -1.3)
    ax.set_xlim(0, longest * 1e3 * 1.55)
    ax.set_xlabel("milliseconds per global step")
    fig.suptitle(f"Compute against exchange: P = {params:,} parameters, global batch {global_batch} "
                 f"(hetlab.arithmetic.planner)", fontsize=12)
    return fig


def pair_topology(ports=None, desktop_ip: str = "DESKTOP_IP", mac_ip: str = "MAC_IP") -> Figure:
    """The pair notebook 04 builds (section 3): each machine's processes with their ports, which way each
    connection goes, and the token's path. Every port is read from ``ports`` (``hetlab.vocab.Ports``) and
    folded as the printed firewall lines fold them (``cluster.commands``): nothing is typed in here.

    The Mac joins: it connects to the head's GCS; Ray's raylets, object managers and workers then call
    each other both ways. Ray Train's rank on the Mac connects out to the rendezvous store on the
    desktop, which carries the ranks' exchange too. The token goes once from the desktop to the Mac over
    SSH; every Ray connection then presents it. The torch store is not Ray's: the token does not cover it.
    """
    from hetlab.cluster import commands
    from hetlab.vocab import LAB_PORT, LAB_TUNNEL_PORT, TOKEN_PATH

    ports = ports if ports is not None else commands.Ports()
    head_in = commands.firewall_ranges(ports, head=True)      # what the desktop admits from the Mac
    mac_in = commands.firewall_ranges(ports, head=False)      # what the Mac accepts from the desktop
    train_in = commands.train_ranges(ports, "desktop")        # Ray Train's, on the desktop only
    node_ports = f"{ports.node_manager}–{ports.metrics_export}"
    workers = f"{ports.min_worker}–{ports.max_worker}"
    fig = Figure(figsize=(12, 7.2), layout="constrained")
    ax = fig.add_subplot()
    width, height = 14.0, 8.4
    _canvas(ax, width, height)
    _box(ax, 2.45, 4.35, 4.7, 6.6,
         f"desktop · the head · {desktop_ip}\n\n"
         f"GCS (the cluster's directory)  :{ports.gcs}\n"
         f"Ray Client  :{ports.client_server}\n"
         f"raylet, object manager, agents  :{node_ports}\n"
         f"workers (the desktop's actors)  :{workers}\n"
         f"dashboard :{ports.dashboard}, metrics :{ports.autoscaler_metrics}–{ports.dashboard_metrics}\n"
         f"    on 127.0.0.1 only\n\n"
         f"JupyterLab + your notebook (the driver,\n    the parameter server)  127.0.0.1:{LAB_PORT}\n"
         f"Ray Train rank 0 + its rendezvous store  :{ports.train_rendezvous}\n\n"
         f"token  {TOKEN_PATH}  (mode 600)",
         "#dbe9f6", fontsize=9)
    _box(ax, 11.55, 4.35, 4.7, 6.6,
         f"Mac · joins · {mac_ip}\n\n"
         f"raylet, object manager, agents  :{node_ports}\n"
         f"workers (the Mac's actors)  :{workers}\n\n"
         f"Ray Train rank 1: no port of its own,\n    it connects out\n\n"
         f"its own JupyterLab  127.0.0.1:{LAB_PORT}\n"
         f"the desktop's lab, tunnelled  127.0.0.1:{LAB_TUNNEL_PORT}\n\n"
         f"token  {TOKEN_PATH}  (mode 600),\n    fetched from the desktop over SSH",
         "#fde9d3", fontsize=9)
    left, right = 4.95, 9.05
    rows = [  # (y, from the Mac?, colour, label)
        (6.9, True, "tab:blue", f"join: TCP {', '.join(head_in)}\n(the GCS first, then the raylet, "
                                f"objects, workers)"),
        (5.5, False, "tab:blue", f"back: TCP {', '.join(mac_in)}\n(the desktop's raylet and workers call the Mac's)"),
        (4.1, True, "tab:green", f"Ray Train: TCP {', '.join(train_in)}\n(the rendezvous store, and the ranks' "
                                 "exchange)"),
        (2.7, True, "tab:purple", f"SSH: TCP 22 (the token, once; the lab\ntunnel {LAB_TUNNEL_PORT} → {LAB_PORT}; "
                                  "clone and update)"),
    ]
    for y, from_mac, colour, label in rows:
        start, end = ((right, y), (left, y)) if from_mac else ((left, y), (right, y))
        _arrow(ax, start, end, colour)
        ax.text(width / 2, y + 0.12, label, ha="center", va="bottom", fontsize=8.5, color=colour)
    _arrow(ax, (left, 1.7), (right, 1.7), "tab:red", rad=0.0)
    ax.text(width / 2, 1.82, "the token's path: desktop → Mac, once, inside\nthe SSH connection the Mac opened", ha="center", va="bottom",
            fontsize=8.5, color="tab:red")
    ax.text(width / 2, 0.15, "Each arrow but the red one points the way its connection is opened. The firewall admits each port from "
            "the other machine's address only (SSH aside).\nEvery Ray connection, both ways, presents the token "
            "(RAY_AUTH_MODE=token); the torch store on the desktop is not Ray's, and the token does not cover it.", ha="center", va="bottom", fontsize=8.5)
    fig.suptitle("Your pair: processes, ports, which way each connection goes, and the token's path", fontsize=12)
    return fig
