"""hetlab.search (notebook 09): real Ray Tune trials on real MNIST, on the practice cluster (two real
Ray nodes here, the "mac" a simulated 4× slower machine), one trial per node at a time; bad input
in one line; a lost machine; the table, labels and where each trial ran."""
import json
import os
import threading
import time

import pytest
import ray

from hetlab import search
from hetlab.errors import HetlabError
from hetlab.models import small_cnn
from hetlab.practice import PracticeCluster

SMALL = dict(trials=4, epochs=2, train_samples=600, val_samples=200, progress=False)
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
    (dict(roles=()), "roles=()"), (dict(train_samples=50), "batch_size 128 is larger than train_samples=50"),
])
def test_bad_numbers_are_one_line(kwargs, says):
    with pytest.raises(HetlabError) as e:
        search.search(None, **kwargs)
    assert says in str(e.value)


def raises_at_width_4(width=16):
    if width == 4:
        raise ValueError("width 4 is not supported by this network")
    return small_cnn(width)


def test_a_model_that_raises_fails_before_any_trial():
    with pytest.raises(HetlabError) as e:
        search.search(SPACE, model=raises_at_width_4, trials=2)
    assert "(width=4) failed before the search: ValueError: width 4 is not supported" in str(e.value)
    assert not ray.is_initialized()


def test_sampling_is_reproducible():
    space = search.check_space(SPACE)
    assert search.sample(space, 6, seed=3) == search.sample(space, 6, seed=3)
    assert search.sample(space, 6, seed=3) != search.sample(space, 6, seed=4)
    assert {c["seed"] for c in search.sample(space, 6, seed=3)} == {3000 + i for i in range(6)}


@pytest.fixture(scope="module")
def practice():
    with PracticeCluster(("desktop", "mac")) as pc:
        yield pc


@pytest.fixture(scope="module")
def pair_run(practice):
    return search.search(SPACE, slowdowns={"mac": 4}, **SMALL)


def test_trials_run_on_both_machines_each_labelled_where_it_ran(practice, pair_run):
    assert len(pair_run.finished) == 4 and pair_run.samples > 0
    assert {t.machine for t in pair_run.trials} == {"desktop", MAC}      # both machines took trials
    for t in pair_run.trials:
        assert t.node_id == practice.node_id(t.role), t                   # ran where its label says
        assert t.device == "cpu" and t.epochs >= 1 and 0 <= t.accuracy <= 1
    assert pair_run.resources == {"CPU": 1.0}                            # one whole practice node each
    per = pair_run.per_machine()
    assert per["desktop"]["device_samples_per_s"] > per[MAC]["device_samples_per_s"]   # 4× slower, simulated
    table = str(pair_run)
    assert MAC in table and "trials/hour" in table and table.count("\n") == 2 + 4
    saved = json.load(open(os.path.join(pair_run.folder, "hetlab-trials.json")))
    assert [r["trial"] for r in saved] == [0, 1, 2, 3] and all(r["status"] for r in saved)


def test_desktop_only_is_pinned_and_repeats_the_pair_runs_results(practice, pair_run):
    alone = search.search(SPACE, roles=("desktop",), checkpoints=False, **SMALL)
    assert {t.node_id for t in alone.trials} == {practice.node_id("desktop")}
    assert alone.resources["hetlab-role:desktop"] > 0
    for a, b in zip(alone.trials, pair_run.trials):       # same configs, seeds, data: same accuracy
        assert a.config == b.config
        if a.epochs == b.epochs:
            assert a.accuracy == pytest.approx(b.accuracy, abs=1e-6)


def fails_in_a_trial(width=16):
    if ray.get_runtime_context().get_actor_id() is not None:   # inside a trial, not on the driver
        raise RuntimeError(f"out of memory at width {width} (made up)")
    return small_cnn(width)


def test_trials_that_raise_are_one_line_each(practice, capsys):
    with pytest.raises(HetlabError) as e:
        search.search(SPACE, model=fails_in_a_trial, max_failures=0, checkpoints=False, **SMALL)
    assert "every trial failed; the first: RuntimeError: out of memory at width" in str(e.value)
    out = capsys.readouterr()
    assert "Traceback" not in out.out + out.err


def test_a_budget_too_small_for_one_epoch_is_one_line_and_keeps_the_records(practice):
    with pytest.raises(HetlabError) as e:
        search.search(SPACE, time_budget_s=0.5, checkpoints=False, **SMALL)
    assert "ended the search before any trial finished one epoch" in str(e.value)
    folder = str(e.value).split("(results: ")[1].rstrip(").")
    assert len(json.load(open(os.path.join(folder, "hetlab-trials.json")))) == 4


def test_checkpoints_where_the_mac_cannot_see_them(practice, monkeypatch, capsys, tmp_path):
    # A folder one machine cannot see cannot exist on one machine: check_storage is told so (fake).
    monkeypatch.setattr(search, "check_storage", lambda path, roles: "mac")
    with pytest.raises(HetlabError) as e:
        search._checkpoints(True, str(tmp_path), ("desktop", "mac"))
    assert "not visible from the mac machine" in str(e.value) and "checkpoints=False" in str(e.value)
    assert search._checkpoints("auto", str(tmp_path), ("desktop", "mac")) is False
    assert "note: checkpoints off" in capsys.readouterr().out


def test_every_node_sees_a_local_folder_here(practice, tmp_path):
    assert search.check_storage(str(tmp_path), ("desktop", "mac")) is None


def test_a_machine_lost_mid_search_its_trial_moves_to_the_other(practice, tmp_path):
    lost = threading.Event()

    def lose_mac_after_its_first_epoch():      # Tune's result.json of each trial, read as it grows
        deadline = time.time() + 120
        while time.time() < deadline and not lost.is_set():
            time.sleep(0.2)
            if any('"role": "mac"' in p.read_text() for p in tmp_path.glob("lost/*/result.json")):
                practice.remove_node("mac")
                lost.set()

    remover = threading.Thread(target=lose_mac_after_its_first_epoch, daemon=True)
    remover.start()
    try:
        result = search.search(SPACE, slowdowns={"mac": 8}, storage_path=str(tmp_path), name="lost",
                               **{**SMALL, "epochs": 3, "grace": 3})
    finally:
        lost.set()
        remover.join()
        if "mac" not in practice._nodes:
            practice.add_node("mac")
    assert len(result.finished) == 4                                   # the search finished
    moved = [t for t in result.trials if t.retries]
    assert len(moved) == 1 and moved[0].machine == "desktop"          # retried on the desktop
    assert [s[0] for s in moved[0].spans] == ["mac (simulated 8× slower)", "desktop"]  # mac → desktop
    assert moved[0].epochs == 3 and moved[0].samples == 3 * 600       # resumed from its checkpoint
    assert result.problems() == [f"trial {moved[0].trial} was retried 1× and finished on desktop"]


def test_train_best_here_repeats_its_trial_exactly(pair_run):
    from hetlab.trial import split_data
    best = pair_run.best
    train, val = split_data(600, 200)                      # the trial's own data
    out = search.train_best(best, best.epochs, train, val, device="cpu")
    assert out["device"] == "cpu" and out["samples_per_s"] > 0
    assert out["accuracy"] == best.accuracy               # same config, seed, step: same result


def test_cli_bad_input_is_one_line_before_ray(capsys):
    from hetlab.tools import cli
    assert cli.main(["search", "--trials", "0"]) == 2
    err = capsys.readouterr().err
    assert err == "HetlabError: trials=0: give a whole number ≥ 1.\n"


def test_cli_searches_the_cluster_at_an_address(practice, capsys):
    from hetlab.tools import cli
    assert cli.main(["search", "--address", practice.address, "--trials", "2", "--epochs", "1",
                     "--train-samples", "600", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "2 of 2 configurations finished on desktop + mac" in out and "best: {'lr'" in out
    assert "mac (simulated)" in out or "desktop" in out.split("best:")[1]
