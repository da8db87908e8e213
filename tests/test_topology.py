"""Notebook 04's picture of the pair (``diagrams.pair_topology``): every port on it is read from
``hetlab.vocab.Ports``, folded as the printed firewall lines fold them, and every arrow points the way
its connection is opened: the Mac opens the join, Ray Train's and SSH; the desktop calls back. No Ray."""
from dataclasses import replace

from matplotlib.text import Annotation

from hetlab.cluster import commands
from hetlab.views import diagrams
from hetlab.vocab import Ports


def texts(fig) -> str:
    return "\n".join(t.get_text() for ax in fig.axes for t in ax.texts) + "\n" + fig._suptitle.get_text()


def arrows(fig) -> list[tuple[tuple, tuple]]:
    """(start, end) of each arrow, in drawing order."""
    return [(a.xyann, a.xy) for ax in fig.axes for a in ax.texts if isinstance(a, Annotation) and a.arrow_patch]


def test_every_port_comes_from_ports_and_the_printed_ranges():
    moved = replace(Ports(), gcs=7379, train_rendezvous=7386, min_worker=11002, max_worker=11063)
    text = texts(diagrams.pair_topology(moved, "192.0.2.10", "192.0.2.20"))
    for port in (":7379", "TCP 7386", "11002–11063", "192.0.2.10", "192.0.2.20", "127.0.0.1:8888", "127.0.0.1:8889"):
        assert port in text, port
    assert ", ".join(commands.firewall_ranges(moved, head=True)) in text
    assert ", ".join(commands.firewall_ranges(moved, head=False)) in text
    assert ":6379" not in text and "6386" not in text          # nothing typed in


def test_each_arrow_points_the_way_its_connection_opens():
    fig = diagrams.pair_topology()
    drawn = arrows(fig)
    assert len(drawn) == 5
    desktop, mac = fig.axes[0].patches[0], fig.axes[0].patches[1]
    mid = (desktop.get_x() + desktop.get_width() + mac.get_x()) / 2

    def from_mac(i):
        (x0, _), (x1, _) = drawn[i]
        return x0 > mid > x1
    assert [from_mac(i) for i in range(5)] == [True, False, True, True, False]   # join, back, Train, SSH, token
    text = texts(fig)
    assert "Ray Train: TCP 6386" in text and "no port of its own" in text and "token" in text
