"""hetlab.search.driver (notebook 09): real Ray Tune trials on real MNIST, on the practice cluster (two real
Ray nodes here, the "mac" a simulated 4× slower machine); bad input in one line; a lost machine
and a resumed trial; the table, labels and where each trial ran.

The practice "desktop" is started with ``accounted_gpus={"desktop": 1}``: Ray COUNTS one GPU
there although this box has none (the one fake here: a node with a GPU beside one without).
Ray's accounting is real (a trial there gets a share of that GPU from Ray); torch still trains
on the CPU inside, since it finds no CUDA."""
import json
import os
import threading
import time

import pytest
import ray
import torch

from hetlab.cluster import raylog
from hetlab import search
from hetlab.search import slots, trial
from hetlab.errors import HetlabError
from hetlab.core.machine import kernel_id
from hetlab.core.models import small_cnn
from hetlab.core.simulate import SlowDevice
from hetlab.core.train import evaluate
from hetlab.cluster.practice import PracticeCluster

SMALL = dict(trials=4, epochs=2, train_samples=600, val_samples=200, progress=False, packing={"desktop": 1})
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
    (dict(trials=0), "trials=0"), (dict(epochs=2, grace=3), "grace=3 is more than epochs=2"),
    (dict(time_budget_s=0), "time_budget_s=0"), (dict(max_failures=-1), "max_failures=-1"),
    (dict(roles=()), "roles=()"), (dict(train_samples=50), "train_samples=50: give at least the largest batch_size, 128"),
    (dict(packing={"desktop": 0}), "packing={'desktop': 0}"), (dict(slowdowns={"mac": 0}), "slowdowns={'mac': 0}"),
    (dict(slowdowns={"mac": -3}), "each ≥ 1 (1 = real speed)"),
    (dict(storage_path=""), "storage_path='': give a folder or a URI"),
    (dict(storage_path="/no/such/folder"), "storage /no/such/folder: no such folder here"),
    (dict(trials=73), "trials=73 is more than the 72 distinct configurations"),
    (dict(storage_path="nosuchscheme://x/y"), "storage_path nosuchscheme://x/y: pyarrow cannot open it"),
])
def test_bad_numbers_are_one_line(kwargs, says):
    with pytest.raises(HetlabError) as e:
        search.search(None, **kwargs)
    assert says in str(e.value) and "\n" not in str(e.value)
    assert not ray.is_initialized()


def read_only_folder(tmp_path) -> str:
    folder = tmp_path / "read-only"
    folder.mkdir(parents=True)
    folder.chmod(0o555)
    return str(folder) if not os.access(folder, os.W_OK) else "/sys"   # root writes anywhere but /sys


def test_storage_this_machine_cannot_write_is_one_line_before_ray(tmp_path):
    for where in (read_only_folder(tmp_path), f"file://{read_only_folder(tmp_path / 'u')}"):
        with pytest.raises(HetlabError) as e:
            search.search(None, storage_path=where, trials=2)
        assert "this machine cannot write, read back and delete a file there" in str(e.value), where
        assert "\n" not in str(e.value) and not ray.is_initialized()
    assert search.storage.open_storage(str(tmp_path)).folder == str(tmp_path)   # a usable folder: taken
    assert os.listdir(tmp_path) == ["read-only", "u"]                           # its test file deleted


def test_sampling_is_reproducible_and_without_replacement():
    space = search.check_space(SPACE)
    assert search.sample(space, 6, seed=3) == search.sample(space, 6, seed=3)
    assert search.sample(space, 6, seed=3) != search.sample(space, 6, seed=4)
    assert {c["seed"] for c in search.sample(space, 6, seed=3)} == {3000 + i for i in range(6)}
    every = search.sample(space, 16, seed=3)            # all 2 × 2 × 2 × 2 configurations, each once
    assert len({tuple(c[n] for n in SPACE) for c in every}) == 16


def test_the_slow_machine_takes_no_last_trial_the_fast_one_would_finish_sooner():
    configs = search.sample(search.check_space(SPACE), 6, seed=0)
    searcher = slots.SlotSearcher(configs, {"desktop": 2, "mac": 1}, {"desktop": 1.0, "mac": 0.5}, 1000)
    given = [searcher.suggest(f"t{i}") for i in range(5)]
    assert [g["role"] for g in given[:3]] == ["desktop"] * 3            # 2 slots + 1 waiting, fastest first
    assert given[3]["role"] == "mac" and given[4] is None               # then the mac; then all are busy
    searcher.on_trial_complete("t0")
    assert searcher.suggest("t5")["role"] == "desktop"                  # 2 left: the desktop's
    searcher.on_trial_complete("t3")                                    # the mac is free, 1 left:
    assert searcher.suggest("t6") is None                               # the desktop would finish it sooner
    searcher.on_trial_complete("t1")
    assert searcher.suggest("t7")["role"] == "desktop" and searcher.suggest("t8") is None  # all given out;
    #                                                   finished once every trial has run (see the next test)


def test_the_slow_machine_counts_the_fast_ones_running_trials_done():
    # a running trial may be a moment from its end; a late trial on the mac delays the whole search
    configs = search.sample(search.check_space(SPACE), 3, seed=0)
    searcher = slots.SlotSearcher(configs, {"desktop": 1, "mac": 1}, {"desktop": 1.0, "mac": 0.4}, 1000)
    assert [searcher.suggest(t)["role"] for t in "ab"] == ["desktop", "desktop"]   # running + waiting
    assert searcher.suggest("c") is None     # the desktop: 2 s at least, 3 s at most; the mac: 2.5 s
    searcher.on_trial_complete("a")
    assert searcher.suggest("c")["role"] == "desktop"


def test_a_trial_waiting_for_a_lost_machine_goes_back_and_runs_on_the_other():
    configs = search.sample(search.check_space(SPACE), 4, seed=0)
    searcher = slots.SlotSearcher(configs, {"desktop": 1, "mac": 1}, {"desktop": 1.0, "mac": 1.0}, 1000)
    given = {t: searcher.suggest(t) for t in "abcd"}            # each machine: 1 slot + 1 waiting
    assert [g["role"] for g in given.values()] == ["desktop", "desktop", "mac", "mac"]
    for t in "ac":
        searcher.on_trial_result(t, {"role": given[t]["role"], "samples": 100, "time_this_iter_s": 1.0})
    searcher.moved("c", "mac", "desktop")                      # the mac is lost: its running trial moves,
    searcher.hand_back("d")                                    # its waiting one goes back
    assert searcher.suggest("e") is None                       # the desktop is full (a, b, c)
    searcher.on_trial_complete("a")
    searcher.on_trial_complete("b")
    assert searcher.suggest("e") == {**given["d"], "role": "desktop"} and searcher.suggest("f") is None
    searcher.on_trial_result("e", {"role": "desktop", "samples": 100, "time_this_iter_s": 1.0})
    assert searcher.suggest("f") == "FINISHED" and searcher.handed_back == {"d"}


def test_by_cost_the_fast_machine_takes_the_costliest_the_slow_one_the_cheapest():
    configs = [{"width": w, "trial": i} for i, w in enumerate([16, 32, 8, 16])]
    searcher = slots.SlotSearcher(configs, {"desktop": 1, "mac": 1}, {"desktop": 0.0, "mac": 0.0}, 1000,
                                  slots.width_cost)
    assert searcher.suggest("a") == {"config": configs[1], "role": "desktop"}   # speeds unknown: in turn
    assert searcher.suggest("b") == {"config": configs[2], "role": "mac"}
    assert searcher.suggest("c") is None                     # no waiting trial while a machine's speed is unknown
    searcher.on_trial_result("b", {"role": "mac", "samples": 100, "time_this_iter_s": 1.0})
    assert searcher.suggest("c") is None                     # the mac's speed alone: it does not rank it first
    searcher.on_trial_result("a", {"role": "desktop", "samples": 100, "time_this_iter_s": 0.1})
    assert searcher.suggest("c") == {"config": configs[3], "role": "desktop"}   # both known: its waiting trial


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
    for t in pair_run.trials:
        assert t.node_id == practice.node_id(t.role), t                   # ran where its label says
        assert t.device == "cpu" and t.epochs >= 1 and 0.05 < t.accuracy <= 1
        assert t.ray_gpu == (t.role == "desktop") and t.resumed_from == 0  # the GPU only where there is one
    # The desktop's GPU is only counted here: its trials held a share and trained on the CPU, and say so.
    unused = [str(t.trial) for t in pair_run.trials if t.role == "desktop"]
    assert pair_run.problems() == [f"trials {', '.join(unused)} held a share of desktop's GPU but trained on its "
                                   f"CPU: torch there sees no GPU (run `hetlab doctor` on it)"]
    per = pair_run.per_machine()
    assert per["desktop"]["device_samples_per_s"] > per[MAC]["device_samples_per_s"]   # 4× slower, simulated
    assert {t.computer for t in pair_run.trials} == {kernel_id()} and pair_run.one_computer  # shared cores
    table = str(pair_run)
    assert MAC in table and "trials/hour" in table and table.count("\n") == 2 + 4
    assert table.count("cpu (GPU held, unused)") == len(unused)
    saved = json.load(open(os.path.join(pair_run.folder, "hetlab-trials.json")))
    assert [r["trial"] for r in saved] == [0, 1, 2, 3] and all(r["status"] for r in saved)


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
    alone = search.search(SPACE, roles=("desktop",), checkpoints=False, **SMALL)
    assert {t.node_id for t in alone.trials} == {practice.node_id("desktop")}
    assert set(alone.resources) == {"desktop"} and alone.resources["desktop"]["GPU"] == 1
    for a, b in zip(alone.trials, pair_run.trials):       # same configs, seeds, data: same accuracy
        assert a.config == b.config
        if a.epochs == b.epochs:
            assert a.accuracy == pytest.approx(b.accuracy, abs=1e-6)


def fails_in_a_trial(width=16):
    if ray.get_runtime_context().get_actor_id() is not None:   # inside a trial, not on the driver
        raise RuntimeError(f"out of memory at width {width} (made up)")
    return small_cnn(width)


def test_the_drivers_printer_drops_a_stopped_trial_process_traceback(practice, capsys):
    from ray._private.ray_logging import global_worker_stdstream_dispatcher as dispatcher
    from test_raylog import STOPPED
    raylog.quiet_stopped_processes()
    raylog.quiet_stopped_processes()                                      # wrapped once, however often called
    assert [n for n, h in dispatcher.handlers if getattr(h, "hetlab_quiet", False)] == ["ray_print_logs"]
    dispatcher.emit({"lines": STOPPED + ["epoch 1 done"], "pid": 4242, "ip": "127.0.0.1", "is_err": True,
                     "task_name": "run_trial", "actor_name": "", "localhost": "127.0.0.1", "job": ""})
    err = capsys.readouterr().err
    assert "epoch 1 done" in err and "SystemExit" not in err and "Traceback" not in err


def test_trials_that_raise_are_one_line_each(practice, capsys):
    with pytest.raises(HetlabError) as e:
        search.search(SPACE, model=fails_in_a_trial, max_failures=0, checkpoints=False, **{**SMALL, "trials": 2})
    assert "every trial failed; the first: RuntimeError: out of memory at width" in str(e.value)
    out = capsys.readouterr()
    assert "Traceback" not in out.out + out.err


def test_a_budget_too_small_for_one_epoch_is_one_line_and_keeps_the_records(practice):
    with pytest.raises(HetlabError) as e:
        search.search(SPACE, time_budget_s=0.5, checkpoints=False, **SMALL)
    assert "ended the search before any trial finished one epoch" in str(e.value)
    folder = str(e.value).split("(results: ")[1].rstrip(").")
    assert len(json.load(open(os.path.join(folder, "hetlab-trials.json")))) == 4


def test_storage_a_machine_cannot_see_is_one_line_without_it_a_note(practice, monkeypatch, capsys, tmp_path):
    # A folder one machine cannot see cannot exist on one machine: check_storage is told so (fake).
    monkeypatch.setattr(search.driver, "check_storage", lambda storage, roles: ("mac", "cannot read the test file"))
    storage = search.storage.open_storage(str(tmp_path))
    with pytest.raises(HetlabError) as e:
        search.driver._usable_everywhere(storage, ("desktop", "mac"), given=True, checkpoints=True)
    assert "not usable from the mac machine (cannot read the test file)" in str(e.value)
    assert "\n" not in str(e.value)
    search.driver._usable_everywhere(storage, ("desktop", "mac"), given=False, checkpoints=True)
    out = capsys.readouterr().out
    assert out.startswith("note: results in") and "resumes on the other" in out and out.count("\n") == 1


def test_every_node_writes_reads_and_deletes_in_a_folder_or_a_uri(practice, tmp_path):
    for sub in "ab":
        (tmp_path / sub).mkdir()
    for storage in (search.storage.open_storage(str(tmp_path / "a")), search.storage.open_storage(f"file://{tmp_path}/b")):
        assert search.storage.check_storage(storage, ("desktop", "mac")) is None
        assert os.listdir(storage.folder) == []                            # every test file deleted
    said = search.storage.probe_storage(str(tmp_path / "a"), "no-such-marker")
    assert said.startswith("cannot read the test file the driver wrote")


def test_a_machine_that_does_not_answer_the_storage_probe_in_time_is_named(practice, tmp_path, monkeypatch):
    # A window too short for any node to answer (real probes, real Ray): the first role is named,
    # in one line, and the driver's test file is still deleted. (A late probe may still be writing
    # its own ".hetlab-node-…" file for a few ms: it runs on after the window, as on a busy pair.)
    monkeypatch.setattr(search.storage, "patience", lambda seconds: 0.001)
    storage = search.storage.open_storage(str(tmp_path))
    role, why = search.storage.check_storage(storage, ("desktop", "mac"))
    assert role == "desktop" and why.startswith("did not answer within 0 s") and "\n" not in why
    assert [f for f in os.listdir(storage.folder) if f.startswith(".hetlab-reach-")] == []


def test_a_machine_takes_k_trials_per_gpu_and_one_per_cpu_or_simulated_device():
    gpu, cpu = {"Resources": {"GPU": 1, "CPU": 8}}, {"Resources": {"CPU": 8}}
    assert slots.trials_at_once(gpu, 1.0) == slots.GPU_TRIALS > 1
    assert slots.trials_at_once(cpu, 1.0) == slots.trials_at_once(gpu, 4.0) == 1   # shared cores; overlapping sleeps


def dropout_cnn(width=16):
    """The course's CNN with dropout: its training draws random numbers, so a resume must restore them."""
    return torch.nn.Sequential(small_cnn(width), torch.nn.Dropout(0.3))


def test_a_machine_lost_mid_search_its_trial_moves_to_the_other(practice, tmp_path):
    lost = threading.Event()

    def lose_mac_after_its_first_epoch():      # the search's records on disk, read as they grow
        deadline = time.time() + 120
        while time.time() < deadline and not lost.is_set():
            time.sleep(0.2)
            try:
                records = json.loads(next(tmp_path.glob("search-*/hetlab-trials.json")).read_text())
            except (OSError, ValueError, StopIteration):       # not written yet, or being written
                continue
            if any(r["role"] == "mac" and r["epochs"] >= 1 for r in records):
                practice.remove_node("mac")
                lost.set()

    remover = threading.Thread(target=lose_mac_after_its_first_epoch, daemon=True)
    remover.start()
    try:
        result = search.search(SPACE, slowdowns={"mac": 8}, storage_path=str(tmp_path),
                               model=dropout_cnn, **{**SMALL, "epochs": 3, "grace": 3})
    finally:
        lost.set()
        remover.join()
        if "mac" not in practice._nodes:
            practice.add_node("mac")
    assert len(result.finished) == 4                                   # the search finished
    assert {t.machine for t in result.trials} == {"desktop"}          # the mac's waiting trial went back too
    moved = [t for t in result.trials if t.retries]
    assert len(moved) == 1 and moved[0].machine == "desktop"          # retried on the desktop
    assert [s[0] for s in moved[0].spans] == ["mac (simulated 8× slower)", "desktop"]  # mac → desktop
    assert moved[0].epochs == 3 and moved[0].samples == 3 * 600
    assert moved[0].resumed_from >= 1                                 # resumed from its checkpoint, not restarted
    assert result.problems()[0] == (f"trial {moved[0].trial} was retried 1× and finished on desktop, "
                                    f"resumed from epoch {moved[0].resumed_from}")
    # A resume, not a restart with the epoch's number: the same configuration trained here without
    # a break ends with the same training loss and accuracy (weights, optimizer, epoch, dropout's RNG).
    loss, accuracy = trained_here(moved[0], 3, dropout_cnn)
    assert moved[0].loss == pytest.approx(loss, rel=1e-5)
    assert moved[0].accuracy == accuracy


def trained_here(record, epochs: int, model=small_cnn) -> tuple[float, float]:
    """A trial's configuration trained here on the CPU with the trial's own data, step and seed, without
    a break: its last epoch's training loss and its held-out accuracy."""
    (x, y), val = trial.split_data(600, 200)
    cfg, cpu = {**record.config, "seed": record.seed}, torch.device("cpu")
    net, opt = trial.build(cfg, model, cpu)
    *_, (_, _, _, loss) = trial.epochs_of(net, opt, x, y, cfg, cpu, 0, epochs, SlowDevice(1))
    return loss, evaluate(net, val, cpu)


def test_a_trial_trained_here_repeats_its_result_exactly(pair_run):
    best = pair_run.best
    assert trained_here(best, best.epochs)[1] == best.accuracy   # same config, seed, step: same result


@pytest.mark.parametrize("args, says", [
    (["--trials", "0"], "trials=0: give a whole number ≥ 1."),
    (["--slowdown", "0"], "--slowdown 0: give X ≥ 1"), (["--slowdown", "-3"], "--slowdown -3: give X ≥ 1"),
    (["--at-once", "0"], "--at-once 0: give trials at once per device, at least 1."),
    (["--train-samples", "0"], "--train-samples 0: give at least 128, the largest batch tried."),
    (["--storage", ""], "storage_path='': give a folder or a URI"),
    (["--storage", "nosuchscheme://x/y"], "pyarrow cannot open it"),
    (["--storage", "/no/such/folder"], "no such folder here"),
])
def test_cli_bad_input_is_one_line_before_ray(args, says, capsys, monkeypatch):
    from hetlab.tools import cli

    def no_cluster(*args, **kwargs):
        raise AssertionError("a cluster was started for a bad value")
    monkeypatch.setattr("hetlab.pair.the_pair", no_cluster)
    assert cli.main(["search", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("HetlabError: ") and says in err and err.count("\n") == 1


def test_cli_searches_the_cluster_at_an_address_into_a_uri(practice, capsys, tmp_path):
    from hetlab.tools import cli
    assert cli.main(["search", "--address", practice.address, "--trials", "2", "--epochs", "1",
                     "--train-samples", "600", "--quiet", "--at-once", "1", "--storage", f"file://{tmp_path}",
                     "--max-failures", "0"]) == 0
    out = capsys.readouterr().out
    assert "2 of 2 configurations finished on desktop + mac" in out and "best: {'lr'" in out
    assert "mac (simulated)" in out or "desktop" in out.split("best:")[1]
    assert f"results: file://{tmp_path}/search-desktop-mac-" in out
    assert len(list(tmp_path.glob("search-desktop-mac-*/hetlab-trials.json"))) == 1


def test_cli_mac_only():
    from hetlab.tools import cli
    args = cli.build_parser().parse_args(["search", "--mac-only", "--max-failures", "3", "--storage", "s3://b/runs"])
    assert (args.roles, args.max_failures, args.storage) == (("mac",), 3, "s3://b/runs")
