"""The exercises ``hetlab.course.grading`` grades (notebooks 02–09), one table: each one's signature,
hetlab's answer, its random inputs, how two answers compare and its commonest mistakes with a hint each.
A piece of the mechanism (``run_on``, ``sync_step``, ``everyone``, ``resume_state``, ``trial``) is
graded by running it for real instead.
"""
from __future__ import annotations

import functools
import math
import random
import statistics
from dataclasses import dataclass
from typing import Any, Callable

import torch

from hetlab.arithmetic import balance, planner, steady, steptime
from hetlab.arithmetic.steptime import StepTime
from hetlab.errors import HetlabError
from hetlab.ps.server import combine_coefficients


@dataclass(frozen=True)
class Exercise:
    """A function to write: its signature, hetlab's answer, random inputs, and typical mistakes."""

    name: str
    signature: str
    notebook: str
    reference: Callable | None = None   # hetlab's own (None: a piece graded by ``run`` alone)
    cases: Callable[[random.Random], tuple] | None = None  # one random argument tuple
    same: Callable[[Any, Any], bool] | None = None         # the learner's answer against the reference's
    mistakes: tuple[tuple[Callable, str], ...] = ()  # (a typical wrong function, what to fix)
    # run(fn, *parts) → (None when right, else "what happened — what to fix"; where it ran, or None
    # when nothing could run live)
    run: Callable[..., tuple[str | None, str | None]] | None = None


# --- comparing answers ---------------------------------------------------------------------------

def _close_tensor(answer, expected) -> bool:
    try:
        answer = torch.as_tensor(answer, dtype=expected.dtype)
    except (TypeError, ValueError, RuntimeError):
        return False
    return answer.shape == expected.shape and torch.allclose(answer, expected, rtol=1e-5, atol=1e-9)


def _close_number(answer, expected) -> bool:
    try:
        return math.isclose(float(answer), float(expected), rel_tol=1e-6, abs_tol=1e-12)
    except (TypeError, ValueError):
        return False


def _same_list(answer, expected) -> bool:
    """Whole numbers, equal to ``expected`` one by one (``[43.0, 21]`` is ``[43, 21]``)."""
    try:
        return [float(v) for v in answer] == [float(e) for e in expected]
    except (TypeError, ValueError):
        return False


def show(value) -> str:
    if isinstance(value, torch.Tensor):
        values = [round(v, 4) for v in value.flatten().tolist()]
        return "tensor(" + str(values[:4])[:-1] + (", …]" if len(values) > 4 else "]") + ")"
    if isinstance(value, StepTime):
        return value.formula
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (list, tuple)):
        inner = ", ".join(show(v) for v in value)
        return f"[{inner}]" if isinstance(value, list) else f"({inner})"
    return repr(value)


def said(e: BaseException) -> str:
    """An exception the learner's code raised, in one line."""
    return f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"


# --- random inputs -------------------------------------------------------------------------------

def _gradients_case(rng: random.Random) -> tuple:
    """2 or 3 gradients of 3 values, and distinct sizes: a plain mean then differs from the weighted one."""
    n = rng.choice((2, 2, 3))
    grads = [torch.tensor([round(rng.uniform(-2, 2), 3) for _ in range(3)], dtype=torch.float64) for _ in range(n)]
    return grads, rng.sample(range(1, 97), n)


def _timing_case(rng: random.Random) -> tuple:
    """The warm-up's steps (slow, the first slowest), then 3 windows of 2 to 4 steps each."""
    warmup = [round(rng.uniform(0.5, 2.0), 3)] + [round(rng.uniform(0.06, 0.2), 4)
                                                   for _ in range(steady.WARMUP_STEPS - 1)]
    steps = [round(rng.uniform(0.01, 0.05), 4) for _ in range(steady.WINDOWS * rng.randint(2, 4))]
    return rng.choice((8, 64, 128, 256)), warmup + steps


def _tasks_case(rng: random.Random) -> tuple:
    slots = rng.randint(2, 8)
    return rng.randint(slots + 1, 5 * slots), slots, rng.choice((0.5, 1.0, 2.0))


def _transfer_case(rng: random.Random) -> tuple:
    return rng.randint(10**5, 10**9), rng.choice((50.0, 200.0, 940.0, 2350.0))


def _split_case(rng: random.Random) -> tuple:
    while True:
        n = rng.choice((2, 2, 3))
        speeds = [round(rng.uniform(300, 6000)) for _ in range(n)]
        fixed = [round(rng.uniform(0.0, 0.04), 4) for _ in range(n)]
        batch = rng.choice((64, 128, 256, 512, 1024))
        if all(b >= 2 for b in steptime.finish_together(batch, _lines(speeds, fixed))[1]):  # every exact share ≥ 2
            return batch, speeds, fixed


def _local_steps_case(rng: random.Random) -> tuple:
    n = rng.choice((2, 2, 3))
    fastest = rng.uniform(1000, 8000)
    speeds = [round(fastest)] + [round(fastest * rng.uniform(0.02, 0.9)) for _ in range(n - 1)]
    rng.shuffle(speeds)   # the fastest anywhere: an answer that takes speeds[0] as the fastest fails
    return rng.randint(2, 16), speeds


def _exchange_case(rng: random.Random) -> tuple:
    return rng.randint(1_000, 2_000_000), rng.choice((2, 2, 4))   # fp16/bf16 or fp32 values up


def _gain_case(rng: random.Random) -> tuple:
    desktop = StepTime(round(rng.uniform(1e-3, 5e-3), 5), round(rng.uniform(0.3e-6, 3e-6), 9), "desktop")
    mac = StepTime(round(desktop.fixed_s * rng.uniform(1.2, 3), 5),
                   round(desktop.per_sample_s * rng.uniform(2, 20), 9), "mac")
    return desktop, mac, rng.choice((32, 64, 128, 256))


# --- the pieces of the answers and of the typical mistakes -----------------------------------------

def _windows(b, s, warmup=steady.WARMUP_STEPS):
    """Each window's samples/s after ``warmup`` steps: the pieces of the mistakes below."""
    cuts = steady.window_cuts(len(s) - warmup, steady.WINDOWS, start=warmup)
    return [b * (j - i) / sum(s[i:j]) for i, j in zip(cuts, cuts[1:])]


def _lines(speeds, fixed) -> list[StepTime]:
    """The learner's (speeds, fixed) lists as the library's step lines."""
    return [StepTime(c, 1 / t) for t, c in zip(speeds, fixed)]


def _still_the_skeleton(call) -> None:
    """NotImplementedError when the learner's piece, called on nothing, raises it or returns None/``...``."""
    try:
        probe = call()
    except NotImplementedError:
        raise
    except Exception:  # noqa: BLE001 - a real piece cannot work on nothing: grade it for real
        return
    if probe is None or probe is Ellipsis:
        raise NotImplementedError


def _where(specs) -> str:
    """Where each worker of ``specs`` runs, as its machine says: role and the device it resolves there."""
    import ray

    from hetlab.core.devices import resolve
    from hetlab.ps.specs import actor_options

    def device(name):
        return str(resolve(name))

    found = ray.get([ray.remote(num_cpus=0)(device).options(**actor_options(s)).remote(s.device) for s in specs])
    return "on " + " and ".join(f"{s.role or s.name} · {d}" for s, d in zip(specs, found))


# --- 07's everyone: the exchange's collective, run on three ranks with a real store ---------------

EVERYONE_SET = "put this rank's piece in the store under f'{key}/{rank}' before you read the others'"
EVERYONE_OWN = "the list needs this rank's own piece too, in its place"
EVERYONE_KEY = "name each piece by the collective's key as well as its rank: f'{key}/{rank}'"


def run_everyone(fn, world: int = 3, timeout_s: float = 2.0):
    """``fn`` on ``world`` ranks at once (threads), each with a client of one real TCPStore on 127.0.0.1,
    for two collectives (every rank but 0 late to the second, as a slower machine is). Right when every
    rank got every piece of each, in rank order."""
    import threading
    import time
    from datetime import timedelta

    import torch.distributed as dist

    where = f"on {world} ranks, threads of this kernel"
    server = dist.TCPStore("127.0.0.1", 0, world, True, timedelta(seconds=timeout_s), wait_for_workers=False)
    pieces = {key: [f"collective {key}, rank {r}".encode() for r in range(world)] for key in ("1", "2")}
    got = [None] * world

    def rank(r):
        client = dist.TCPStore("127.0.0.1", server.port, world, False, timedelta(seconds=timeout_s))
        try:
            got[r] = [fn(client, "1", r, world, pieces["1"][r])]
            time.sleep(0.3 if r else 0)
            got[r].append(fn(client, "2", r, world, pieces["2"][r]))
        except BaseException as e:  # noqa: BLE001 - the learner's error, said in one line below
            got[r] = e

    threads = [threading.Thread(target=rank, args=(r,), daemon=True) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(4 * timeout_s)
    for r, answer in enumerate(got):
        if isinstance(answer, NotImplementedError) or answer is None or (
                isinstance(answer, list) and any(a is None or a is Ellipsis for a in answer)):
            raise NotImplementedError   # the skeleton, still empty
        if isinstance(answer, BaseException):
            if "timeout" in str(answer).lower() or "timed out" in str(answer).lower():
                return f"rank {r} waited {timeout_s:.0f} s for the others' pieces — {EVERYONE_SET}", where
            return f"everyone raised {said(answer)}", where
        for key, back in zip(("1", "2"), answer):
            want = pieces[key]
            if list(back) == want:
                continue
            got_line = f"rank {r} of {world} got {len(back)} pieces of collective {key}"
            if len(back) == world - 1:
                return f"{got_line}, not {world} — {EVERYONE_OWN}", where
            if key == "2" and any(p in pieces["1"] for p in back):
                return f"{got_line}, some of collective 1's — {EVERYONE_KEY}", where
            return f"{got_line}: {list(back)!r}, expected {want!r}", where
    return None, where


# --- 06's follow_split: the rule that follows the machines, on random lines, then driving a live run --

FOLLOW_BY_STEP = ("split by step time: a worker whose step is longer got more samples; give each the size "
                  "with which all finish together (balance.equal_finish_split)")
FOLLOW_NOISE = ("moved for a step less than 5 % faster: keep batch_sizes unless the new split's step_time is more "
                "than balance.FOLLOW_GAIN faster (noise must not move the split)")
FOLLOW_MISTAKES = (
    (lambda b, l: balance.split_batch(sum(b), [line(x) for line, x in zip(l, b)]), FOLLOW_BY_STEP),
    (lambda b, l: balance.equal_finish_split(sum(b), l), FOLLOW_NOISE))


def _follow_case(rng: random.Random) -> tuple:
    """A split and each worker's step line: half a sample or two from where all finish together (the
    rule keeps it), half far from it (it moves); none on the 5 % edge."""
    while True:
        n = rng.choice((2, 2, 3))
        lines = [StepTime(round(rng.uniform(0.0, 0.03), 4), 1 / rng.uniform(300, 6000)) for _ in range(n)]
        batch = rng.choice((64, 128, 256, 512))
        target = balance.equal_finish_split(batch, lines)
        if rng.random() < 0.5:
            sizes, move = list(target), rng.choice((1, 2))
            i, j = rng.sample(range(n), 2)
            sizes[i], sizes[j] = sizes[i] - move, sizes[j] + move
        else:
            sizes = balance.split_batch(batch, [rng.uniform(1, 4) for _ in range(n)])
        gain = steptime.step_time(lines, sizes) / steptime.step_time(lines, target)
        if min(target) >= 4 and min(sizes) >= 1 and abs(gain - (1 + balance.FOLLOW_GAIN)) > 0.01:
            return sizes, lines


def run_follow_split(fn, steps: int = 6, every: int = 2):
    """``fn`` drives the split of a short live run on the connected cluster (a desktop worker and a
    mac worker simulated 3× slower, both on CPU): right when each look's answer is hetlab's own for
    the lines measured then. No Ray connected: nothing runs live."""
    import ray

    if not ray.is_initialized():
        return None, None
    from hetlab.core.data import load_mnist
    from hetlab.ps import FollowSplit, ParameterServerTraining, WorkerSpec

    looks = []   # (split, lines, the learner's answer, hetlab's)

    def rule(batch_sizes, lines):
        answer = fn(list(batch_sizes), list(lines))
        looks.append((list(batch_sizes), list(lines), answer, balance.follow_split(batch_sizes, lines)))
        return answer

    workers = [WorkerSpec("desktop", role="desktop", device="cpu"),
               WorkerSpec("mac", role="mac", device="cpu", slowdown=3.0)]
    where = "on desktop · cpu and mac · cpu, simulated 3× slower"
    training = ParameterServerTraining(workers, load_mnist("train").subset(2_000, seed=0), seed=0,
                                       progress=False, batch_sizes=[32, 32])
    try:
        training.run(steps, hooks=[FollowSplit(every, rule=rule)])
    except HetlabError as e:
        return f"the live run stopped at step {training.step}: {str(e).splitlines()[0]}", where
    finally:
        training.shutdown()
    for at, (sizes, lines, answer, hetlabs) in enumerate(looks, 1):
        if not _same_list(answer, hetlabs):
            hint = next((h for mistake, h in FOLLOW_MISTAKES if _same_list(answer, mistake(sizes, lines))), None)
            return (f"live, look {at}: at {show(sizes)} your rule gave {show(answer)}, hetlab's "
                    f"{show(hetlabs)} for the same measured lines" + (f" — {hint}" if hint else "")), where
    return (None if looks else f"the live run took no look in {steps} steps: run it again"), where


# --- 03's run_on: a task and an actor pinned to a machine ------------------------------------------

PIN_HOW = "pin it with .options(scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False))"
PIN_GET = "ray.get what they report: .remote() returns a ref (or an actor's handle) before the work has run"


def run_pinned(fn):
    """``fn`` asked for each live node: right when the task and the actor each report the node asked
    for. Work not pinned reports this notebook's node (Ray looks for room where the driver is)."""
    import ray

    from hetlab.cluster.roles import live_nodes, node_name

    if not ray.is_initialized():
        if fn("0" * 56) in (None, Ellipsis):   # the skeleton raises NotImplementedError here
            raise NotImplementedError
        return "Ray is not connected here — run the cells above that connect, then this one", ""
    here = ray.get_runtime_context().get_node_id()
    names = {n["NodeID"]: node_name(n.get("Labels", {}), f"node {n['NodeID'][:8]}") for n in live_nodes()}
    where = "on " + " and ".join(names.values())
    if len(names) < 2:
        return "this cluster has one node, so nothing shows where work runs — run the cell above that starts two", where
    reported = {}
    for asked in names:
        got = fn(asked)   # a learner's error: grading says it in one line
        if got is None or got is Ellipsis:
            raise NotImplementedError
        parts = list(got) if isinstance(got, (list, tuple)) else [got]
        if any(isinstance(p, (ray.ObjectRef, ray.actor.ActorHandle)) for p in parts):
            return f"run_on returned {type(parts[0]).__name__}s, not node ids — {PIN_GET}", where
        if len(parts) != 2 or not all(isinstance(p, str) for p in parts):
            return f"run_on returned {show(got)[:80]}, not (the task's node id, the actor's node id)", where
        reported[asked] = dict(zip(("the task", "the actor"), parts))
    for what in ("the task", "the actor"):
        wrong = {asked: got[what] for asked, got in reported.items() if got[what] != asked}
        if not wrong:
            continue
        asked, node = next(iter(wrong.items()))
        line = f"{what} asked for {names[asked]} reported {names.get(node, repr(node[:12]))}"
        if all(got[what] == here for got in reported.values()):
            return f"{line}, this notebook's machine, whichever was asked: it is not pinned — {PIN_HOW}", where
        return f"{line}: pinned to the wrong machine — pin it to the node_id it is given", where
    return None, where


# --- 05's sync_step: the learner's loop, Worker and Server, against hetlab's engine ----------------

SYNC_STEPS, SYNC_SIZES, SYNC_LR, SYNC_SAMPLES = 3, (48, 16), 0.1, 1_000   # the run both loops take
SYNC_TOLERANCE = 1e-5   # the largest weight the two runs may differ by: float rounding, not a step
SYNC_GET = "ray.get the workers' answers: .remote() returns a ref at once, before the work has run"
SYNC_WEIGHTED = "a plain mean of the gradients: weight each by b_i / B, with your weighted_average"
SYNC_STALE = "every gradient was taken at the first weights: return the weights server.step gives back"
SYNC_PARTS = "hand over your classes too: grading.check(\"sync_step\", sync_step, Worker, Server)"


@functools.cache
def _engines(workers: tuple, nodes: tuple) -> torch.Tensor:
    """hetlab's engine's weights after ``SYNC_STEPS`` steps of plain SGD with ``workers`` ((name, role)
    each) on the cluster of ``nodes``: run once per kernel, not once per check."""
    from hetlab.core.data import load_mnist
    from hetlab.ps import ParameterServerTraining, WorkerSpec

    with ParameterServerTraining([WorkerSpec(name, role=role) for name, role in workers],
                                 load_mnist("train").subset(SYNC_SAMPLES, seed=0), batch_sizes=list(SYNC_SIZES),
                                 optimizer="sgd", lr=SYNC_LR, seed=0, progress=False) as engine:
        engine.run(SYNC_STEPS)
        return engine.server.weights()


def run_sync_step(fn, worker_class=None, server_class=None):
    """``SYNC_STEPS`` steps of the learner's ``fn`` with one actor of their ``worker_class`` per machine and
    their ``server_class``, then as many of hetlab's engine on the same samples: right when both end at
    the same weights, to float rounding; else the mistake shows in what the server was given."""
    import ray

    _still_the_skeleton(lambda: fn([], None, None, torch.zeros(0, dtype=torch.long), []))
    if worker_class is None or server_class is None:
        return SYNC_PARTS, ""
    if not ray.is_initialized():
        return "Ray is not connected here — run the cell with the_pair() first, then this one", ""
    from hetlab.cluster.roles import live_nodes
    from hetlab.core.data import load_mnist
    from hetlab.core.models import _send_by_value
    from hetlab.core.stream import stream_indices
    from hetlab.ps import WorkerSpec
    from hetlab.ps.specs import actor_options

    roles = [role for role in ("desktop", "mac") if live_nodes(role)]
    specs = [WorkerSpec(r, role=r) for r in roles] if len(roles) == 2 else [WorkerSpec("a"), WorkerSpec("b")]
    where = _where(specs)
    data = load_mnist("train").subset(SYNC_SAMPLES, seed=0)
    plan = [stream_indices(len(data), 0, [(t * sum(SYNC_SIZES), sum(SYNC_SIZES))]) for t in range(SYNC_STEPS)]
    _send_by_value(worker_class)                         # a class in the learner's own module reaches the workers
    actors = [ray.remote(worker_class).options(num_cpus=0, **actor_options(s)).remote(data, s.device) for s in specs]
    server, given = server_class(SYNC_LR), []            # given: every gradient handed to server.step
    server_step = server.step

    def recorded_step(gradient):
        given.append(gradient.detach().clone())
        return server_step(gradient)

    server.step = recorded_step
    first = weights = server.w.detach().clone()
    try:
        for positions in plan:
            weights = fn(actors, server, weights, positions, list(SYNC_SIZES))
    except NotImplementedError:
        raise
    except Exception as e:  # noqa: BLE001 - the learner's error, said in one line
        return f"sync_step raised {said(e)}" + (f" — {SYNC_GET}" if "ObjectRef" in str(e) else ""), where
    finally:
        for a in actors:
            ray.kill(a)                                  # the machines (a GPU) go free for the engine
    if isinstance(weights, ray.ObjectRef) or (isinstance(weights, (list, tuple))
                                              and any(isinstance(w, ray.ObjectRef) for w in weights)):
        return f"sync_step returned a ref — {SYNC_GET}", where
    if not isinstance(weights, torch.Tensor) or weights.shape != first.shape:
        return f"sync_step returned {show(weights)[:80]}, not the new weights (one flat tensor, as server.step returns)", where
    hetlabs = _engines(tuple((s.name, s.role) for s in specs), tuple(n["NodeID"] for n in live_nodes()))
    gap = (weights - hetlabs).abs().max().item()
    if gap < SYNC_TOLERANCE:
        return None, where
    line = f"after {SYNC_STEPS} steps your weights differ from hetlab's engine by up to {gap:.1e}"
    if torch.equal(weights, first) or not given:
        return f"{line}, they never moved — {SYNC_STALE}", where
    here = worker_class(data, "cpu")                     # the learner's worker again, on this CPU
    grads = [here.gradient(first, p)[0] for p in plan[0].split(list(SYNC_SIZES))]
    if torch.allclose(given[0], sum(grads) / len(grads), atol=SYNC_TOLERANCE):
        return f"{line} — {SYNC_WEIGHTED}", where
    return line, where


# --- 08's resume_state: a resume that continues bitwise ------------------------------------------

RESUME_STEP = "return checkpoint['step'] as the step: the run goes on from there, not from 0"
RESUME_OPTIMIZER = ("lost the optimizer state: Adam's moments and step count start again, so the next updates differ; "
                    "load checkpoint['server'] whole (server.load_state), not only its weights")
RESUME_DATA = ("lost the data position: the resumed run trains samples the first one already trained; rebuild "
               "the stream from checkpoint['stream'] (Stream.from_state)")


def run_resume_state(fn, k: int = 3, m: int = 3, batch: int = 32):
    """k + m steps straight with hetlab's server and stream on this CPU, against k steps, a checkpoint
    through ``torch.save``/``torch.load``, ``fn``'s resume of a new server and m more: right when bitwise equal."""
    import io

    _still_the_skeleton(lambda: fn({}, None))   # says so at once, before any training
    from torch import nn

    from hetlab.core.data import load_mnist
    from hetlab.core.models import make_model
    from hetlab.core.stream import Stream, stream_indices
    from hetlab.ps.server import Server

    where = "on this kernel's CPU"
    data, model = load_mnist("train").subset(1_000, seed=0), make_model("small", seed=0)
    x, y = data.normalized(), data.labels

    def train(server, stream, steps):
        for _ in range(steps):
            idx = stream_indices(len(data), 0, stream.take(batch))
            nn.utils.vector_to_parameters(server.weights(), model.parameters())
            model.zero_grad()
            nn.functional.cross_entropy(model(x[idx]), y[idx]).backward()
            server.step(torch.cat([p.grad.flatten() for p in model.parameters()]))

    straight = Server("small", 0, 1e-3, "sync")
    train(straight, Stream(), k + m)
    first, stream = Server("small", 0, 1e-3, "sync"), Stream()
    train(first, stream, k)
    file = io.BytesIO()
    torch.save({"server": first.state(), "stream": stream.state(), "step": k}, file)
    file.seek(0)
    resumed = Server("small", 1, 1e-3, "sync")
    answer = fn(torch.load(file, weights_only=True), resumed)
    if not isinstance(answer, tuple) or len(answer) != 2:
        return f"resume_state returned {show(answer)} — return two things: the stream and the step", where
    resumed_stream, step = answer
    if not isinstance(step, int) or step != k:
        return f"resumed at step {show(step)}, the checkpoint was taken at step {k} — {RESUME_STEP}", where
    if not resumed.opt.state_dict()["state"]:
        return f"after resume_state the optimizer has no state ({k} steps were taken) — {RESUME_OPTIMIZER}", where
    if not isinstance(resumed_stream, Stream) or resumed_stream.state() != stream.state():
        cursor = getattr(resumed_stream, "cursor", None)
        return f"the stream resumed at sample {show(cursor)}, the checkpoint's at {stream.cursor} — {RESUME_DATA}", where
    train(resumed, resumed_stream, m)
    if not torch.equal(resumed.weights(), straight.weights()):
        return (f"{k} steps, resumed, {m} more are not bitwise the {k + m} steps straight — put back everything "
                f"the checkpoint holds: server.load_state(checkpoint['server']), the stream, the step"), where
    return None, where


# --- 09's trial: the trial function that reports to Tune ------------------------------------------

TRIAL_NEVER = "call tune.report({'epoch': …, 'accuracy': …}) after every epoch: Tune learns a trial's results only so"
TRIAL_ONCE = "report after every epoch, not once at the end: ASHA stops a trial by the reports it got so far"
TRIAL_METRIC = "name the held-out accuracy 'accuracy': the search ranks and stops trials by that metric"
TRIAL_CONFIG = {"lr": 1e-3, "batch_size": 64, "width": 8, "optimizer": "adam", "seed": 0, "epochs": 2,
                "train_samples": 512, "val_samples": 256}   # one tiny configuration: two epochs on this CPU


def hetlabs_accuracies(config) -> list[float]:
    """The held-out accuracy after each epoch of hetlab's trial (``hetlab.search.trial``) on this CPU."""
    from hetlab.core.models import small_cnn
    from hetlab.core.simulate import SlowDevice
    from hetlab.core.train import evaluate
    from hetlab.search.trial import build, epochs_of, split_data

    dev = torch.device("cpu")
    (x, y), val = split_data(config["train_samples"], config["val_samples"])
    net, opt = build(config, small_cnn, dev)
    return [evaluate(net, val, dev) for _ in epochs_of(net, opt, x, y, config, dev, 0, config["epochs"], SlowDevice(1))]


def run_trial_fn(fn, config: dict = TRIAL_CONFIG):
    """``fn`` as the trial of a real Ray Tune search of ``TRIAL_CONFIG`` on one CPU: right when Tune got
    a report after every epoch whose 'accuracy' is hetlab's trial's on the same configuration."""
    import tempfile

    _still_the_skeleton(lambda: fn({}))         # says so at once, before Tune starts
    import ray
    from ray import tune
    from ray.tune.logger import JsonLoggerCallback

    from hetlab.cluster.roles import live_nodes, node_name
    from hetlab.search.driver import _quiet_tune   # the search's own quiet Tune

    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR")
    with tempfile.TemporaryDirectory(prefix="hetlab-trial-") as storage, _quiet_tune(1):
        tuner = tune.Tuner(tune.with_resources(fn, {"cpu": 1}), param_space=dict(config),
                           tune_config=tune.TuneConfig(num_samples=1),
                           run_config=tune.RunConfig(storage_path=storage, verbose=0,
                                                     callbacks=[JsonLoggerCallback()]))
        (result,) = tuner.fit()
        reports = [] if result.metrics_dataframe is None else result.metrics_dataframe.to_dict("records")
    ips = {n["NodeManagerAddress"]: node_name(n.get("Labels", {}), n["NodeManagerAddress"]) for n in live_nodes()}
    where = f"on {ips.get(reports[-1].get('node_ip'), 'this machine')}, one CPU" if reports else ""
    if result.error is not None:
        return f"your trial raised {said(getattr(result.error, 'cause', None) or result.error)}", where
    epochs = config["epochs"]
    if not reports:
        return f"Tune got no report from your trial in {epochs} epochs — {TRIAL_NEVER}", where
    if not all("accuracy" in r for r in reports):
        return f"Tune got no 'accuracy' in its reports — {TRIAL_METRIC}", where
    if len(reports) == 1 and epochs > 1:
        return f"Tune got one report in {epochs} epochs — {TRIAL_ONCE}", where
    got, want = [r["accuracy"] for r in reports], hetlabs_accuracies(config)
    if len(got) != len(want) or any(abs(g - w) > 2 / config["val_samples"] for g, w in zip(got, want)):
        return (f"Tune got accuracies {show(got)}, hetlab's trial gives {show(want)} on the same configuration — "
                f"train with build and epochs_of, score with evaluate on the held-out part, once per epoch"), where
    return None, where


EXERCISES = {e.name: e for e in [
    Exercise("weighted_average", "weighted_average(grads, sizes)", "05",
             lambda grads, sizes: sum(c * g for c, g in zip(combine_coefficients(sizes), grads)),   # the server's
             _gradients_case, _close_tensor, (
                 (lambda grads, sizes: sum(grads) / len(grads),
                  "a plain mean: weight each g_i by b_i / B, so a worker with more samples counts more"),
                 (lambda grads, sizes: sum(g * b for g, b in zip(grads, sizes)),
                  "the 1/B is missing: Σ b_i·g_i is B times too big; divide by B = Σ b_i"),
                 (lambda grads, sizes: sum(g * b for g, b in zip(grads, sizes)) / len(grads),
                  "÷ n, the number of workers: divide Σ b_i·g_i by B = Σ b_i, the number of samples"))),
    Exercise("samples_per_s", "samples_per_s(batch_size, step_seconds)", "02",
             lambda batch_size, step_seconds: steady.steady(step_seconds, batch_size).samples_per_s,
             _timing_case, _close_number, (
                 (lambda b, s: b * len(s) / sum(s), "every step in one sum: leave out the five warm-up "
                                                    "steps, then take the median of three windows"),
                 (lambda b, s: b * (len(s) - 5) / sum(s[5:]), "one window: cut the timed steps into three "
                                                              "equal windows and take the median of their speeds"),
                 (lambda b, s: statistics.mean(_windows(b, s)), "the mean of the windows: take their median "
                                                                "(one slow window must not move it)"))),
    Exercise("tasks_wall_time", "tasks_wall_time(n_tasks, slots, seconds)", "03",
             lambda n, k, s: math.ceil(n / k) * s, _tasks_case, _close_number, (
                 (lambda n, k, s: n * s, "one after another: `slots` tasks run at once"),
                 (lambda n, k, s: n / k * s, "a last, partly filled wave still takes a whole task's time: round up"),
                 (lambda n, k, s: (n // k + 1) * s, "one wave too many when the tasks fill the slots exactly: "
                                                    "round n_tasks / slots up, don't add 1"))),
    Exercise("transfer_seconds", "transfer_seconds(n_bytes, mbit_per_s)", "04",
             lambda n, m: n * 8 / (m * 1e6), _transfer_case, _close_number, (
                 (lambda n, m: n / (m * 1e6), "bytes read as bits: a byte is 8 bits, multiply by 8"),
                 (lambda n, m: n * 8 / (m * 2**20), "a megabit on the link is 10^6 bits, not 2^20"),
                 (lambda n, m: n * 8 / (m * 1e6) * 1e3, "1000 times too big: return seconds, not "
                                                        "milliseconds (a megabit is 10^6 bits)"))),
    Exercise("equal_finish_split", "equal_finish_split(global_batch, speeds, fixed)", "06",
             lambda B, t, c: balance.equal_finish_split(B, _lines(t, c)), _split_case, _same_list, (
                 (lambda B, t, c: balance.split_batch(B, t), "∝ speed alone: each worker's fixed c_i comes first, "
                                                             "b_i = t_i·(T − c_i)"),
                 (lambda B, t, c: balance.split_batch(B, [1 / x for x in t]), "∝ 1 / speed: the faster worker "
                                                                              "must get more samples, not fewer"),
                 (lambda B, t, c: balance.split_batch(B, [1] * len(t)), "an equal split: give each ∝ its speed, "
                                                                        "less its fixed time"))),
    Exercise("follow_split", "follow_split(batch_sizes, lines)", "06", balance.follow_split,
             _follow_case, _same_list, FOLLOW_MISTAKES, run=run_follow_split),
    Exercise("scale_local_steps", "scale_local_steps(local_steps, speeds)", "08", balance.scale_local_steps,
             _local_steps_case, _same_list, (
                 (lambda H, t: [max(1, round(H * min(t) / x)) for x in t], "∝ 1 / speed: the faster "
                  "worker takes more steps, the slower fewer"),
                 (lambda H, t: [H] * len(t), "H for everyone: scale each worker's steps by its speed"),
                 (lambda H, t: [max(1, round(H * x / t[0])) for x in t], "scaled from speeds[0]: the fastest "
                  "is max(speeds), which need not come first"))),
    Exercise("exchange_bytes", "exchange_bytes(params, bytes_per_value)", "08", planner.exchange_bytes,
             _exchange_case, _close_number, (
                 (lambda p, v: 2 * p * v, "the weights come down as fp32 (4 bytes a value), whatever goes up"),
                 (lambda p, v: p * v, "one way only: the delta goes up, then the weights come down"),
                 (lambda p, v: 8 * p, "fp32 both ways: the delta goes up at `bytes_per_value` bytes a value"))),
    Exercise("everyone", "everyone(store, key, rank, world, piece)", "07", run=run_everyone),
    Exercise("run_on", "run_on(node_id)", "03", run=run_pinned),
    Exercise("sync_step", "sync_step(workers, server, weights, positions, sizes)", "05", run=run_sync_step),
    Exercise("resume_state", "resume_state(checkpoint, server)", "08", run=run_resume_state),
    Exercise("trial", "trial(config)", "09", run=run_trial_fn),
    Exercise("pair_gain", "pair_gain(desktop, mac, batch_size)", "09", steptime.independent_gain,
             _gain_case, _close_number, (
                 (lambda d, m, b: d(b) / m(b), "the Mac ÷ the desktop: the pair is the desktop plus the Mac, add 1"),
                 (lambda d, m, b: 1 + m(b) / d(b), "upside down: add the Mac's samples/s ÷ the desktop's (or the "
                  "desktop's step time ÷ the Mac's), not the Mac's step ÷ the desktop's"),
                 (lambda d, m, b: 1 + d.per_sample_s / m.per_sample_s, "the fixed cost is left out: a step takes "
                  "fixed_s + b × per_sample_s, so compare b ÷ t(b)"))),
]}
