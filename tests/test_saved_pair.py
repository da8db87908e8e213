"""The pair notebook 04 saves (hetlab.store.saved_pair): where it lives, who reads it, and that a
variable still wins. Tests point HETLAB_MEASURED at a folder of their own (conftest.py), so a
learner's saved pair is never read here."""
import pytest

from hetlab.store import saved_pair
from hetlab.cluster.connecting import requested_address
from hetlab.errors import HetlabError
from hetlab.pair import PRACTICE_LINE, which_cluster


def test_no_pair_saved_is_the_practice_cluster(folder):
    assert saved_pair.load() is None and requested_address().address is None
    assert which_cluster() == PRACTICE_LINE


def test_a_saved_pair_is_what_connect_and_the_notebooks_use(folder, monkeypatch):
    path = saved_pair.save("192.168.1.10", "192.168.1.20")
    assert path == folder / "pair.json" and saved_pair.load().address == "192.168.1.10:6379"
    assert requested_address() == requested_address(None)
    assert (requested_address().address, requested_address().source) == ("192.168.1.10:6379", "saved pair")
    assert which_cluster() == "your pair: desktop (192.168.1.10) + mac (192.168.1.20)"
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.9:6379")             # a variable wins, and says so
    assert which_cluster() == "your pair: the head at 10.0.0.9:6379 (from RAY_ADDRESS)"
    assert requested_address("10.0.0.8:6379").source == "given" and requested_address().pair.mac_ip == "192.168.1.20"
    monkeypatch.setenv("HETLAB_ADDRESS", "local")                   # before RAY_ADDRESS
    assert requested_address().address == "local" and which_cluster() == PRACTICE_LINE


def test_a_damaged_file_or_a_bad_address_is_one_line(folder):
    (folder / "pair.json").write_text("{not json")
    with pytest.raises(HetlabError, match="delete it and run notebook 04 again"):
        saved_pair.load()
    with pytest.raises(HetlabError, match="nothing saved"):
        saved_pair.save("my-desktop.local", "192.168.1.20")


def test_head_and_join_read_the_saved_pair_and_name_the_flag_without_one(folder, capsys):
    from hetlab.tools import cli
    assert cli.main(["head"]) == 2 and "--ip" in capsys.readouterr().err
    saved_pair.save("192.168.1.10", "192.168.1.20")
    assert cli.main(["head"]) == 0
    head = capsys.readouterr().out
    assert "--node-ip-address=192.168.1.10" in head and "from 192.168.1.20 to any port 6379:6385" in head
    assert cli.main(["join", "--head-user", "ana"]) == 0
    join = capsys.readouterr().out
    assert "ssh ana@192.168.1.10" in join and "--node-ip-address=192.168.1.20" in join


def test_every_way_in_connects_to_the_one_address_worked_out(folder, monkeypatch):
    """Issue 58: the address is worked out once (hetlab.cluster.connecting): with a pair saved and
    RAY_ADDRESS naming a closed port here, ``connect()`` and ``the_pair()`` both go to that port (and
    fail there in one line, before Ray starts), never to the saved pair's head or a local Ray."""
    from hetlab import cluster
    from hetlab.pair import the_pair
    saved_pair.save("192.168.1.10", "192.168.1.20")
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")
    for way_in in (lambda: cluster.connect(timeout=5), lambda: the_pair()):
        with pytest.raises(HetlabError, match="cannot reach the Ray head at 127.0.0.1:1"):
            way_in()
