"""The graded exercises (issue 37): each grader accepts hetlab's answer and a learner's own correct
one, rejects typical mistakes in one line that names them, and says "your turn" to an unfilled
skeleton. Each notebook's skeleton is committed unfilled, and its check cell follows it and prints "your turn"
(`make test` also runs every notebook that way, through nbval).

The mistakes below are written here, independently of hetlab.course.grading's own list: a grader that
matched only its own list would pass a test built from it."""
import json
import random
from pathlib import Path

import pytest
import torch

from hetlab.arithmetic import balance, steptime
from hetlab.core.stream import Stream
from hetlab.course import grading
from hetlab.errors import HetlabError

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


# A learner's own correct answers, written differently from the references.
def weighted_average(grads, sizes):
    stacked = torch.stack(grads)
    w = torch.tensor(sizes, dtype=stacked.dtype) / sum(sizes)
    return (w[:, None] * stacked).sum(0)


def equal_finish_split(B, speeds, fixed):
    T = (B + sum(c * t for c, t in zip(fixed, speeds))) / sum(speeds)
    return balance.split_batch(B, [t * (T - c) for t, c in zip(speeds, fixed)])


def everyone(store, key, rank, world, piece):
    store.set(f"{key}/{rank}", piece)
    return [piece if r == rank else store.get(f"{key}/{r}") for r in range(world)]


def follow_split(batch_sizes, lines):
    B = sum(batch_sizes)
    T, exact = steptime.finish_together(B, lines)
    sizes = balance.split_batch(B, [max(x, 1e-9) for x in exact])
    faster = max(line(b) for line, b in zip(lines, batch_sizes)) / max(line(b) for line, b in zip(lines, sizes))
    return sizes if faster > 1.05 else batch_sizes


def resume_state(checkpoint, server):
    with torch.no_grad():
        server.w.copy_(checkpoint["server"]["weights"])
    server.opt.load_state_dict(checkpoint["server"]["optimizer"])
    return Stream(**checkpoint["stream"]), checkpoint["step"]


def _weights_only(checkpoint, server):
    with torch.no_grad():
        server.w.copy_(checkpoint["server"]["weights"])
    return Stream.from_state(checkpoint["stream"]), checkpoint["step"]


def trial(config):
    import torch
    from ray import tune

    from hetlab.core.models import small_cnn
    from hetlab.core.simulate import SlowDevice
    from hetlab.core.train import evaluate
    from hetlab.search.trial import build, epochs_of, split_data
    (x, y), val = split_data(config["train_samples"], config["val_samples"])
    net, opt = build(config, small_cnn, torch.device("cpu"))
    epochs = epochs_of(net, opt, x, y, config, torch.device("cpu"), 0, config["epochs"], SlowDevice(1))
    for epoch, *_ in epochs:
        tune.report({"accuracy": evaluate(net, val), "epoch": epoch + 1, "note": "mine"})


def _trial_reporting(report):
    """A trial that trains as hetlab's does and hands each epoch's accuracy to ``report(tune, epoch, accuracy, last)``."""
    def fn(config):
        from ray import tune

        from hetlab.course.exercises import hetlabs_accuracies
        accuracies = hetlabs_accuracies(config)
        for epoch, accuracy in enumerate(accuracies, 1):
            report(tune, epoch, accuracy, epoch == len(accuracies))
    return fn


def scale_local_steps(H, speeds):
    return [max(1, round(H * t / max(speeds))) for t in speeds]


RIGHT = {
    "weighted_average": weighted_average,
    "everyone": everyone,
    "samples_per_s": lambda b, s: sorted(b * len(w) / sum(w) for w in (s[5 + i * (len(s) - 5) // 3:
                                                                      5 + (i + 1) * (len(s) - 5) // 3]
                                                                    for i in range(3)))[1],
    "tasks_wall_time": lambda n, k, s: -(-n // k) * s,
    "transfer_seconds": lambda n, m: n / (m * 125_000),
    "equal_finish_split": equal_finish_split,
    "scale_local_steps": scale_local_steps,
    "follow_split": follow_split,
    "resume_state": resume_state,
    "exchange_bytes": lambda p, v: p * v + p * 4,
    "pair_gain": lambda d, m, b: (d.fixed_s + b * d.per_sample_s + m.fixed_s + b * m.per_sample_s)
                                 / (m.fixed_s + b * m.per_sample_s),
}

# The mistakes each grader names: a learner's wrong function, each with a word the grader's line
# must contain (its hint), and for some a word it must not (a hint that would mislead).
MISTAKES = {
    "weighted_average": [(lambda g, s: torch.stack(g).mean(0), "plain mean"),
                         (lambda g, s: sum(b * x for b, x in zip(s, g)), "1/B"),
                         (lambda g, s: sum(b * x for b, x in zip(s, g)) / len(s), "÷ n")],
    "samples_per_s": [(lambda b, s: b * (len(s) - 5) / sum(s[5:]), "three equal windows"),
                      (lambda b, s: sum(b * len(w) / sum(w) for w in (s[5 + i * (len(s) - 5) // 3:
                                                                        5 + (i + 1) * (len(s) - 5) // 3]
                                                                      for i in range(3))) / 3, "median"),
                      (lambda b, s: b * len(s) / sum(s), "warm-up")],
    "tasks_wall_time": [(lambda n, k, s: n * s, "one after another"), (lambda n, k, s: s * n / k, "round up"),
                        (lambda n, k, s: s * (1 + n // k), "don't add 1")],
    "transfer_seconds": [(lambda n, m: n / m / 1e6, "8 bits"), (lambda n, m: 8 * n / m / 1024**2, "10^6"),
                         (lambda n, m: 1000 * 8 * n / (m * 10**6), "milliseconds", "not 10^3")],
    "equal_finish_split": [(lambda B, t, c: balance.split_batch(B, [1 / x for x in t]), "1 / speed"),
                           (lambda B, t, c: balance.split_batch(B, t), "fixed"),
                           (lambda B, t, c: [B // len(t)] * len(t), "equal")],
    "scale_local_steps": [(lambda H, t: [max(1, round(H * min(t) / x)) for x in t], "1 / speed"),
                          (lambda H, t: [H for _ in t], "H for everyone"),
                          (lambda H, t: [max(1, round(H * x / t[0])) for x in t], "speeds[0]")],   # first ≠ fastest
    # the rule that follows the machines: by step time, not where all finish together; every move
    # taken (noise moves it)
    "follow_split": [(lambda b, l: balance.split_batch(sum(b), [x(n) for x, n in zip(l, b)]), "step time"),
                     (lambda b, l: balance.equal_finish_split(sum(b), l), "5 %")],
    # run for real (k steps, save, resume, m more against k + m straight): only the weights put back
    # (Adam starts again), a fresh stream (the data position lost), resumed at step 0
    "resume_state": [(_weights_only, "optimizer state"),
                     (lambda c, s: (s.load_state(c["server"]), Stream(), c["step"])[1:], "data position"),
                     (lambda c, s: (s.load_state(c["server"]), Stream.from_state(c["stream"]), 0)[1:], "step 0")],
    "exchange_bytes": [(lambda p, v: p * v * 2, "fp32"), (lambda p, v: p * v, "one way")],
    # run for real, three ranks at once: reads before it writes (every rank waits), forgets its own
    # piece, names pieces by rank only (the next collective reads the last one's)
    "everyone": [(lambda s, k, r, w, p: [s.get(f"{k}/{i}") for i in range(w)], "before you read"),
                 (lambda s, k, r, w, p: [s.set(f"{k}/{r}", p)] and [s.get(f"{k}/{i}") for i in range(w) if i != r],
                  "own piece"),
                 (lambda s, k, r, w, p: (s.set(str(r), p), [s.get(str(i)) for i in range(w)])[1], "collective's key")],
    "pair_gain": [(lambda d, m, b: (b / m(b)) / (b / d(b)), "add 1"),
                  (lambda d, m, b: 1 + m(b) / d(b), "upside down"),
                  (lambda d, m, b: 1 + d.per_sample_s / m.per_sample_s, "fixed cost")],
}


# 09's trial, run in a real Tune search (test_09s_trial_…): never reports, reports once at the end,
# names the metric otherwise
TRIAL_MISTAKES = [(_trial_reporting(lambda tune, e, a, last: None), "no report"),
                  (_trial_reporting(lambda tune, e, a, last: last and tune.report({"epoch": e, "accuracy": a})),
                   "one report"),
                  (_trial_reporting(lambda tune, e, a, last: tune.report({"epoch": e, "val_acc": a})), "'accuracy'")]


# Graded by running the learner's pieces on a cluster: their tests (below) start Ray.
ON_RAY = {"run_on", "sync_step", "trial"}   # trial: a real Tune search (test_09s_trial_…)
PURE = sorted(set(grading.EXERCISES) - ON_RAY)


def test_every_exercise_has_a_right_answer_and_two_mistakes_here():
    assert set(RIGHT) == set(MISTAKES) == set(PURE)
    assert all(len(m) >= 2 for m in MISTAKES.values())


@pytest.mark.parametrize("name", PURE)
def test_accepts_the_reference_and_a_learners_own_correct_answer(name):
    for fn in filter(None, (grading.EXERCISES[name].reference, RIGHT[name])):   # everyone's: hetlab's exchange, below
        verdict = grading.grade(name, fn)
        assert verdict.status == grading.RIGHT, verdict.line


@pytest.mark.parametrize("name", PURE)
def test_rejects_typical_mistakes_in_one_line_that_names_them(name):
    for mistake, word, *misleading in MISTAKES[name]:
        verdict = grading.grade(name, mistake)
        assert verdict.status == grading.WRONG, f"{name}: accepted a mistake ({word})"
        assert "\n" not in verdict.line and verdict.line.startswith("not yet:")
        assert word in verdict.line, f"{name}: {verdict.line!r} does not name the mistake ({word})"
        assert not any(w in verdict.line for w in misleading), f"{name}: {verdict.line!r} misleads ({misleading})"


@pytest.mark.parametrize("name", sorted(grading.EXERCISES))
def test_every_hint_of_the_grader_is_reached_by_its_own_mistake(name):
    """No hint is shadowed: a mistake that gives the same answers as an earlier one on every case
    would never be named (an answer in milliseconds was told "a megabit is 10^6 bits, not 10^3")."""
    for mistake, hint in grading.EXERCISES[name].mistakes:
        assert grading.grade(name, mistake).line.endswith(f" — {hint}."), f"{name}: never says {hint!r}"


def test_the_fastest_machine_is_not_always_listed_first():
    """An answer that takes speeds[0] as the fastest is right whenever the fastest comes first."""
    takes_the_first = MISTAKES["scale_local_steps"][2][0]
    assert takes_the_first(8, [351, 6306]) == [8, 144] and balance.scale_local_steps(8, [351, 6306]) == [1, 8]
    rng = random.Random(0)
    cases = [grading.EXERCISES["scale_local_steps"].cases(rng) for _ in range(grading.CASES)]
    assert any(max(speeds) != speeds[0] for _, speeds in cases)
    assert any(max(speeds) == speeds[0] for _, speeds in cases)


@pytest.mark.parametrize("name", sorted(grading.EXERCISES))
def test_an_unfilled_skeleton_is_your_turn_not_a_failure(name, capsys):
    def raises(*args):
        raise NotImplementedError

    for skeleton in (raises, lambda *args: None, lambda *args: ..., None):
        verdict = grading.grade(name, skeleton)
        assert verdict.status == grading.YOUR_TURN
        assert verdict.line.startswith(f"your turn: write {name}(") and "run this again" in verdict.line
    grading.check(name, raises)
    assert capsys.readouterr().out.startswith("your turn:")


def test_the_exchange_the_library_runs_passes_07s_grader():
    """07's everyone is hetlab.raytrain.exchange's own, graded by running it on three ranks."""
    from hetlab.raytrain import exchange
    assert grading.grade("everyone", exchange.everyone).status == grading.RIGHT


def test_06s_rule_drives_a_live_run_and_a_rule_wrong_only_there_is_named(practice):
    """On a cluster, follow_split's grader also lets the rule drive a real run's split: hetlab's own
    passes; a rule right on the random inputs but not on the lines a live run measures (their
    source says the messages are included) is caught there, at its look, in one line."""
    verdict = grading.grade("follow_split", balance.follow_split)
    assert verdict.status == grading.RIGHT and "ran for real" in verdict.line, verdict.line

    def live_only(batch_sizes, lines):
        wrong = "messages" in lines[0].source
        return [sum(batch_sizes) - 1, 1] if wrong else balance.follow_split(batch_sizes, lines)

    verdict = grading.grade("follow_split", live_only)
    assert verdict.status == grading.WRONG and "\n" not in verdict.line, verdict.line
    assert "live, look 1" in verdict.line and "[63, 1]" in verdict.line, verdict.line


def test_09s_trial_runs_in_a_real_tune_search_and_each_mistake_is_named(practice):
    """09's trial is run as the trial of a one-configuration Tune search on the practice cluster:
    a learner's own passes; never reporting, reporting once, another metric's name are named."""
    import sys

    from ray import cloudpickle
    cloudpickle.register_pickle_by_value(sys.modules[__name__])   # as a notebook's functions go: by value
    verdict = grading.grade("trial", trial)
    assert verdict.status == grading.RIGHT and "ran for real on " in verdict.line, verdict.line
    for mistake, word in TRIAL_MISTAKES:
        verdict = grading.grade("trial", mistake)
        assert verdict.status == grading.WRONG and "\n" not in verdict.line and word in verdict.line, verdict.line


def test_a_crash_is_one_line_naming_the_error():
    verdict = grading.grade("weighted_average", lambda g, s: g[5])
    assert verdict.status == grading.WRONG and "IndexError" in verdict.line and "\n" not in verdict.line
    verdict = grading.grade("run_on", lambda node_id: {}[node_id])   # a piece run for real (no Ray here)
    assert verdict.status == grading.WRONG and "run_on raised KeyError" in verdict.line and "\n" not in verdict.line


def test_an_unknown_exercise_is_refused():
    with pytest.raises(HetlabError, match="no exercise"):
        grading.grade("weighted_avg", weighted_average)


def _cells(path):
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def _src(cell):
    return "".join(cell["source"])


@pytest.mark.parametrize("number", [f"{i:02d}" for i in range(2, 10)])
def test_each_notebook_from_02_has_an_unfilled_skeleton_then_its_check(number, capsys):
    path = next(NOTEBOOKS.glob(f"{number}_*.ipynb"))
    cells = _cells(path)
    checks = [i for i, c in enumerate(cells) if c["cell_type"] == "code" and "grading.check(" in _src(c)]
    assert checks, f"{path.name}: no graded exercise"
    for i in checks:
        name = _src(cells[i]).split('grading.check("', 1)[1].split('"', 1)[0]
        skeleton = _src(cells[i - 1])
        assert cells[i - 1]["cell_type"] == "code" and f"def {name}(" in skeleton, \
            f"{path.name}: the skeleton of {name} must be the cell just above its check"
        assert "raise NotImplementedError" in skeleton, f"{path.name}: {name}'s skeleton is committed filled in"
        namespace = {}
        for cell in (skeleton, _src(cells[i])):   # the pair as committed: the skeleton, then its check
            exec(compile(cell, f"{path.name}:{name}", "exec"), namespace)
        assert capsys.readouterr().out == \
            f"your turn: write {grading.EXERCISES[name].signature} above, then run this again.\n"


def test_check_keeps_each_exercises_last_result_for_the_report(tmp_path, monkeypatch, capsys):
    """Issue 59: the hand-in lists every grader's last result, with the notebook and the machine."""
    from hetlab.course import grading
    from hetlab.course.exercises import EXERCISES
    from hetlab.store import measured
    monkeypatch.setenv("HETLAB_MEASURED", str(tmp_path))
    grading.check("samples_per_s", lambda batch_size, step_seconds: step_seconds / batch_size)
    (kept,) = measured.load_graded().values()
    assert kept["status"] == grading.WRONG and kept["notebook"] == "02" and kept["line"] in capsys.readouterr().out
    grading.check("samples_per_s", EXERCISES["samples_per_s"].reference)
    (kept,) = measured.load_graded().values()
    assert kept["status"] == grading.RIGHT and kept["role"] in ("desktop", "mac") and kept["exercise"] == "samples_per_s"


# --- the pieces run for real on a practice cluster: 03's pinned task and actor, 05's workers and loop ----

@pytest.fixture(scope="module")
def practice():
    from hetlab.cluster.practice import PracticeCluster
    with PracticeCluster(roles=("desktop", "mac")) as pc:
        yield pc


def my_run_on(node_id):
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    there = NodeAffinitySchedulingStrategy(node_id, soft=False)
    task = ray.remote(lambda: ray.get_runtime_context().get_node_id()).options(num_cpus=0, scheduling_strategy=there)

    class Here:
        def node(self):
            return ray.get_runtime_context().get_node_id()
    actor = ray.remote(Here).options(num_cpus=0, scheduling_strategy=there).remote()
    return ray.get(task.remote()), ray.get(actor.node.remote())


def unpinned_run_on(node_id):
    import ray
    task = ray.remote(lambda: ray.get_runtime_context().get_node_id()).options(num_cpus=0)

    class Here:
        def node(self):
            return ray.get_runtime_context().get_node_id()
    return ray.get(task.remote()), ray.get(ray.remote(Here).options(num_cpus=0).remote().node.remote())


def other_run_on(node_id):
    import ray
    other = next(n["NodeID"] for n in ray.nodes() if n["Alive"] and n["NodeID"] != node_id)
    return my_run_on(other)


def refs_run_on(node_id):
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    there = NodeAffinitySchedulingStrategy(node_id, soft=False)
    task = ray.remote(lambda: ray.get_runtime_context().get_node_id()).options(num_cpus=0, scheduling_strategy=there)
    return task.remote(), task.remote()


def drivers_run_on(node_id):
    import ray
    ray.get(ray.remote(lambda: None).options(num_cpus=0).remote())
    here = ray.get_runtime_context().get_node_id()   # read in the notebook, not in the task
    return here, here


@pytest.mark.parametrize("fn, word", [(unpinned_run_on, "not pinned"), (other_run_on, "wrong machine"),
                                      (refs_run_on, "ray.get"), (drivers_run_on, "not pinned")])
def test_03s_run_on_names_each_typical_mistake(practice, fn, word):
    verdict = grading.grade("run_on", fn)
    assert verdict.status == grading.WRONG and "\n" not in verdict.line and word in verdict.line, verdict.line


def test_03s_run_on_accepts_a_learners_own_pins_and_says_where_they_ran(practice):
    verdict = grading.grade("run_on", my_run_on)
    assert verdict.status == grading.RIGHT and "desktop" in verdict.line and "mac" in verdict.line, verdict.line


class MyWorker:
    """A learner's own worker, written differently from hetlab's (autograd.grad, no .grad fields)."""

    def __init__(self, data, device):
        from hetlab.core.models import make_model
        self.model = make_model("small", seed=0)
        self.x, self.y = data.normalized(), data.labels

    def gradient(self, weights, positions):
        torch.nn.utils.vector_to_parameters(weights, self.model.parameters())
        loss = torch.nn.functional.cross_entropy(self.model(self.x[positions]), self.y[positions])
        grads = torch.autograd.grad(loss, list(self.model.parameters()))
        return torch.cat([g.reshape(-1) for g in grads]), len(positions)


class MyServer:
    """The notebook's server: the weights and plain SGD, here in the driver's process."""

    def __init__(self, lr):
        from hetlab.core.flat import flat_weights
        from hetlab.core.models import make_model
        self.w = torch.nn.Parameter(flat_weights(make_model("small", seed=0)))
        self.opt = torch.optim.SGD([self.w], lr=lr)

    def step(self, gradient):
        self.w.grad = gradient
        self.opt.step()
        return self.w.detach().clone()


def my_step(workers, server, weights, positions, sizes):
    import ray
    parts = torch.split(positions, sizes)
    answers = [ray.get(w.gradient.remote(weights, p)) for w, p in zip(workers, parts)]
    total = sum(b for _, b in answers)
    return server.step(sum(g * (b / total) for g, b in answers))


def plain_mean_step(workers, server, weights, positions, sizes):
    import ray
    answers = ray.get([w.gradient.remote(weights, p) for w, p in zip(workers, torch.split(positions, sizes))])
    return server.step(torch.stack([g for g, _ in answers]).mean(0))


def stale_step(workers, server, weights, positions, sizes):
    my_step(workers, server, weights, positions, sizes)
    return weights                           # the weights it was given, not the new ones


def no_get_step(workers, server, weights, positions, sizes):
    refs = [w.gradient.remote(weights, p) for w, p in zip(workers, torch.split(positions, sizes))]
    return server.step(sum(refs))


@pytest.mark.parametrize("step, worker, word", [
    (plain_mean_step, MyWorker, "b_i / B"), (stale_step, MyWorker, "first weights"), (no_get_step, MyWorker, "ray.get")])
def test_05s_sync_step_names_each_typical_mistake_of_a_run(practice, step, worker, word):
    verdict = grading.grade("sync_step", step, worker, MyServer)
    assert verdict.status == grading.WRONG and "\n" not in verdict.line and word in verdict.line, verdict.line


def test_05s_sync_step_accepts_a_learners_own_loop_run_for_real_and_says_where(practice):
    verdict = grading.grade("sync_step", my_step, MyWorker, MyServer)
    assert verdict.status == grading.RIGHT and "on desktop · cpu and mac · cpu" in verdict.line, verdict.line
