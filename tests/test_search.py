"""hetlab.search.driver (notebook 09): real Ray Tune trials on real MNIST, on the practice cluster (two real
Ray nodes here, the "mac" a simulated 4× slower machine); bad input in one line; the table,
labels and where each trial ran.

The practice "desktop" is started with ``accounted_gpus={"desktop": 1}``: Ray COUNTS one GPU
there although this box has none (the one fake here: a node with a GPU beside one without).
Ray's accounting is real (a trial there gets a share of that GPU from Ray); torch still trains
on the CPU inside, since it finds no CUDA."""
import os

import pytest
import ray
import torch

from hetlab import search
from hetlab.search import driver, trial
from hetlab.errors import HetlabError
from hetlab.core.machine import kernel_id
from hetlab.core.models import small_cnn
from hetlab.core.simulate import SlowDevice
from hetlab.core.train import evaluate
from hetlab.cluster.practice import PracticeCluster

SMALL = dict(trials=4, epochs=2, train_samples=600, val_samples=200, packing={"desktop": 1})
SPACE = {"lr": [1e-3, 3e-3], "batch_size": [32, 64], "width": [4, 8], "optimizer": ["adam", "sgd"]}
MAC = "mac (simulated 4× slower)"


@pytest.mark.parametrize("space, says", [
    ({}, "the search space is empty"),
    ([1e-3], "the search space is empty or not a dict"),
    ({"lr": []}, "'lr' must be a non-empty list"),
    ({"lr": 1e-3}, "'lr' must be a non-empty list"),
    ({"lr": [-1e-3]}, "'lr': -0.001 is not a valid choice"),
    ({"batch_size": [32.5]}, "'batch_size': 32.5 is not a valid choice"),
    ({"optimizer": ["rmsprop"]}, "'optimizer': 'rmsprop' is not a valid choice"),
    ({"depth": [3]}, "unknown name(s) ['depth']"),
])
def test_a_bad_space_is_one_line_before_ray(space, says):
    with pytest.raises(HetlabError, match=None) as e:
        search.search(space, trials=2)
    assert says in str(e.value) and "\n" not in str(e.value)
    assert not ray.is_initialized()


@pytest.mark.parametrize("kwargs, says", [
    (dict(trials=0), "trials=0"),
    (dict(time_budget_s=0), "time_budget_s=0"), (dict(max_failures=-1), "max_failures=-1"),
    (dict(roles=()), "roles=()"), (dict(train_samples=50), "train_samples=50: give at least the largest batch_size, 128"),
    (dict(packing={"desktop": 0}), "packing={'desktop': 0}"), (dict(slowdowns={"mac": 0}), "slowdowns={'mac': 0}"),
    (dict(slowdowns={"mac": -3}), "each ≥ 1 (1 = real speed)"),
    (dict(trials=73), "trials=73 is more than the 72 distinct configurations"),
])
def test_bad_numbers_are_one_line(kwargs, says):
    with pytest.raises(HetlabError) as e:
        search.search(None, **kwargs)
    assert says in str(e.value) and "\n" not in str(e.value)
    assert not ray.is_initialized()


def test_sampling_is_reproducible_and_without_replacement():
    space = search.check_space(SPACE)
    assert search.sample(space, 6, seed=3) == search.sample(space, 6, seed=3)
    assert search.sample(space, 6, seed=3) != search.sample(space, 6, seed=4)
    assert {c["seed"] for c in search.sample(space, 6, seed=3)} == {3000 + i for i in range(6)}
    every = search.sample(space, 16, seed=3)            # all 2 × 2 × 2 × 2 configurations, each once
    assert len({tuple(c[n] for n in SPACE) for c in every}) == 16


def measured(searcher, trial_id, role, seconds):
    """A first epoch of one whole trial's work (1000 samples) reported from ``role`` in ``seconds``."""
    searcher.on_trial_result(trial_id, {"role": role, "samples": 1000, "time_this_iter_s": seconds})


def test_the_slow_machine_takes_no_last_trial_the_fast_one_would_finish_sooner():
    configs = search.sample(search.check_space(SPACE), 8, seed=0)
    searcher = driver.SlotSearcher(configs, {"desktop": 2, "mac": 1}, 1000)
    given = [searcher.suggest(f"t{i}") for i in range(4)]
    assert [g and g["role"] for g in given] == ["desktop", "desktop", "mac", None]  # speeds unknown: no waiting
    measured(searcher, "t0", "desktop", 1.0)
    measured(searcher, "t2", "mac", 2.0)                                 # the mac 2× slower
    searcher.on_trial_complete("t0")
    searcher.on_trial_complete("t2")
    assert [searcher.suggest(t)["role"] for t in ("t3", "t4")] == ["desktop"] * 2   # 2 slots + 1 waiting
    assert searcher.suggest("t5")["role"] == "mac" and searcher.suggest("t6") is None  # then all are busy
    searcher.on_trial_complete("t1")
    assert searcher.suggest("t6")["role"] == "desktop"                  # 2 left: the desktop's
    searcher.on_trial_complete("t5")                                    # the mac is free, 1 left:
    assert searcher.suggest("t7") is None                               # the desktop would finish it sooner
    searcher.on_trial_complete("t3")
    assert searcher.suggest("t7")["role"] == "desktop" and searcher.suggest("t8") == "FINISHED"


def test_the_slow_machine_counts_the_fast_ones_running_trials_done():
    # a running trial may be a moment from its end; a late trial on the mac delays the whole search
    configs = search.sample(search.check_space(SPACE), 4, seed=0)
    searcher = driver.SlotSearcher(configs, {"desktop": 1, "mac": 1}, 1000)
    assert [searcher.suggest(t)["role"] for t in "ab"] == ["desktop", "mac"]
    measured(searcher, "a", "desktop", 1.0)
    measured(searcher, "b", "mac", 2.5)
    searcher.on_trial_complete("b")
    assert searcher.suggest("c")["role"] == "desktop"    # running + waiting
    assert searcher.suggest("d") is None     # the desktop: 2 s at least, 3 s at most; the mac: 2.5 s
    searcher.on_trial_complete("a")
    assert searcher.suggest("d")["role"] == "desktop"


@pytest.fixture(scope="module")
def practice():
    with PracticeCluster(("desktop", "mac"), accounted_gpus={"desktop": 1}) as pc:
        yield pc


@pytest.fixture(scope="module")
def pair_run(practice):
    return search.search(SPACE, slowdowns={"mac": 4}, **{**SMALL, "packing": {"desktop": 2}})


def test_trials_run_on_both_machines_each_labelled_where_it_ran(practice, pair_run):
    assert len(pair_run.finished) == 4 and pair_run.samples > 0
    assert {t.machine for t in pair_run.trials} == {"desktop", MAC}      # both machines took trials
    for t in pair_run.trials:   # the role each trial read from its node's labels
        assert t.device == "cpu" and t.epochs >= 1 and 0.05 < t.accuracy <= 1 and t.status != "failed"
    busy = {m: sum(t.busy_s for t in pair_run.trials if t.machine == m) for m in ("desktop", MAC)}
    per = {m: sum(t.samples for t in pair_run.trials if t.machine == m) for m in ("desktop", MAC)}
    assert per["desktop"] / busy["desktop"] > per[MAC] / busy[MAC]                # 4× slower, simulated
    assert sum(per.values()) == pair_run.samples
    assert {t.computer for t in pair_run.trials} == {kernel_id()} and pair_run.one_computer  # shared cores
    table = str(pair_run)
    assert MAC in table and "trials/hour" in table and table.count("\n") == 2 + 4


def test_a_gpu_on_one_machine_only_takes_that_machines_trials_k_at_once(pair_run):
    # The desktop counts a GPU and the mac none: the desktop's trials ask for half the GPU each
    # (packing 2), the mac's for its CPU, whatever the other machine has.
    assert pair_run.resources == {"desktop": {"GPU": 0.5, "CPU": 0.5, "hetlab-role:desktop": 0.001},
                                  "mac": {"CPU": 1.0, "hetlab-role:mac": 0.001}}
    assert pair_run.packing == {"desktop": 2, "mac": 1}
    desktop = [span for t in pair_run.trials for span in t.spans if t.role == "desktop"]
    at_once = max(sum(s[1] <= start < s[2] for s in desktop) for _, start, _ in desktop)
    assert at_once == 2                                                   # two trials shared its GPU


def test_desktop_only_is_pinned_and_repeats_the_pair_runs_results(practice, pair_run):
    alone = search.search(SPACE, roles=("desktop",), **SMALL)
    assert {t.role for t in alone.trials} == {"desktop"}
    assert set(alone.resources) == {"desktop"} and alone.resources["desktop"]["GPU"] == 1
    for a, b in zip(alone.trials, pair_run.trials):       # same configs, seeds, data: same accuracy
        assert a.config == b.config
        if a.epochs == b.epochs:
            assert a.accuracy == pytest.approx(b.accuracy, abs=1e-6)




def test_a_budget_too_small_for_one_epoch_is_one_line_and_names_the_results(practice):
    with pytest.raises(HetlabError) as e:
        search.search(SPACE, time_budget_s=0.5, **SMALL)
    assert "ended the search before any trial finished one epoch" in str(e.value)
    folder = str(e.value).split("(results: ")[1].rstrip(").")
    assert os.path.isdir(folder) and "\n" not in str(e.value)


def test_a_machine_takes_k_trials_per_gpu_and_one_per_cpu_or_simulated_device(practice):
    assert driver.plan("desktop", 1.0)["k"] == driver.GPU_TRIALS > 1                  # Ray counts its GPU
    assert driver.plan("mac", 1.0)["k"] == driver.plan("desktop", 4.0)["k"] == 1       # shared cores; overlapping sleeps
    assert driver.plan("desktop", 1.0, 3) == {"k": 3, "device": "GPU", "slots": 3,
                                              "shape": {"GPU": 1 / 3, "CPU": 1 / 3, "hetlab-role:desktop": 0.001}}


def test_a_trial_trained_here_repeats_its_result_exactly(pair_run):
    best = pair_run.best          # its configuration trained here with the trial's own data, step and seed
    (x, y), val = trial.split_data(600, 200)
    cfg, cpu = {**best.config, "seed": best.seed}, torch.device("cpu")
    net, opt = trial.build(cfg, small_cnn, cpu)
    for _ in trial.epochs_of(net, opt, x, y, cfg, cpu, 0, best.epochs, SlowDevice(1)):
        pass
    assert evaluate(net, val, cpu) == best.accuracy   # same config, seed, step: same result


@pytest.mark.parametrize("args, says", [
    (["--trials", "0"], "trials=0: give a whole number ≥ 1."),
    (["--slowdown", "0"], "--slowdown 0: give X ≥ 1"), (["--slowdown", "-3"], "--slowdown -3: give X ≥ 1"),
    (["--at-once", "0"], "--at-once 0: give trials at once per device, at least 1."),
    (["--train-samples", "0"], "--train-samples 0: give at least 128, the largest batch tried."),
])
def test_cli_bad_input_is_one_line_before_ray(args, says, capsys, monkeypatch):
    from hetlab.tools import cli

    def no_cluster(*args, **kwargs):
        raise AssertionError("a cluster was started for a bad value")
    monkeypatch.setattr("hetlab.pair.the_pair", no_cluster)
    assert cli.main(["search", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("HetlabError: ") and says in err and err.count("\n") == 1


def test_cli_searches_the_cluster_at_an_address(practice, capsys):
    from hetlab.tools import cli
    assert cli.main(["search", "--address", practice.address, "--trials", "2", "--epochs", "1",
                     "--train-samples", "600", "--at-once", "1", "--max-failures", "0"]) == 0
    out = capsys.readouterr().out
    assert "2 of 2 configurations finished on desktop + mac" in out and "best: {'lr'" in out
    assert "mac (simulated)" in out or "desktop" in out.split("best:")[1]
    folder = out.split("results: ")[1].strip()
    assert "/search-desktop-mac-" in folder and os.path.isdir(folder)


def test_cli_mac_only():
    from hetlab.tools import cli
    args = cli.build_parser().parse_args(["search", "--mac-only", "--max-failures", "3"])
    assert (args.roles, args.max_failures) == (("mac",), 3)


def test_a_retried_trial_resumes_where_it_stopped():
    """What Tune's retry runs after a lost trial: the state saved after epoch 1, loaded into a fresh
    network and optimizer, trains epoch 2 to the same weights as a trial that never stopped (Adam's
    moments, the epoch's shuffle and the counters all carried over)."""
    (x, y), _ = trial.split_data(600, 200)
    cfg, cpu, slow = {"lr": 3e-3, "batch_size": 64, "width": 4, "optimizer": "adam", "seed": 1}, torch.device("cpu"), SlowDevice(1)
    whole, whole_opt = trial.build(cfg, small_cnn, cpu)
    list(trial.epochs_of(whole, whole_opt, x, y, cfg, cpu, 0, 2, slow))
    first, first_opt = trial.build(cfg, small_cnn, cpu)
    [(_, n, busy_s, _)] = trial.epochs_of(first, first_opt, x, y, cfg, cpu, 0, 1, slow)
    again, again_opt = trial.build(cfg, small_cnn, cpu)       # the retry starts from the seed's weights
    start, samples, busy = trial.resume(trial.save(first, first_opt, 1, n, busy_s), again, again_opt, cpu)
    assert (start, samples, busy) == (1, n, busy_s)
    assert not torch.equal(again[0].weight, whole[0].weight)   # one epoch short so far
    list(trial.epochs_of(again, again_opt, x, y, cfg, cpu, start, 2, slow))
    for a, b in zip(again.parameters(), whole.parameters()):
        assert torch.equal(a, b)
