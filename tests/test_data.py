"""hetlab.core.data on the real MNIST files shipped in data/."""
import gzip
import random
import shutil

import pytest
import torch

from hetlab import HetlabError
from hetlab.arithmetic.balance import split_batch
from hetlab.core import data
from hetlab.core.data import FILES, batches, load_mnist
from hetlab.core.stream import Stream, split_spans, stream_indices


@pytest.fixture(scope="module")
def train():
    return load_mnist("train")


def test_it_is_the_real_mnist(train):
    test = load_mnist("test")
    assert (len(train), len(test)) == (60000, 10000)
    assert train.images.dtype == torch.uint8 and train.images.shape[1:] == (28, 28)
    pixels = train.images.double() / 255
    assert round(pixels.mean().item(), 4) == 0.1307
    assert round(pixels.std().item(), 4) == 0.3081
    assert torch.bincount(train.labels)[:3].tolist() == [5923, 6742, 5958]
    assert train.labels[:10].tolist() == [5, 0, 4, 1, 9, 2, 1, 3, 1, 4]
    assert test.labels[:10].tolist() == [7, 2, 1, 0, 4, 1, 4, 9, 5, 9]


def test_normalized_is_standardised(train):
    x = train.normalized()
    assert x.shape == (60000, 1, 28, 28) and x.dtype == torch.float32
    assert abs(x.mean().item()) < 1e-3 and abs(x.std().item() - 1) < 1e-3


def test_subset_is_deterministic(train):
    a, b, c = train.subset(500, seed=1), train.subset(500, seed=1), train.subset(500, seed=2)
    assert torch.equal(a.labels, b.labels) and not torch.equal(a.images, c.images)
    with pytest.raises(HetlabError, match="subset size"):
        a.subset(0)


# --- sampling: one cursor into one shuffled stream, whatever the split (notebook 05) ------

def _used(stream):
    """Positions handed out and not given back."""
    return stream.cursor - sum(n for _, n in stream.pending)


def test_stream_hands_out_positions_once_and_takes_back_the_unused():
    s = Stream()
    assert s.take(5) == [(0, 5)] and s.take(3) == [(5, 3)]
    s.give_back([(0, 5)])                                   # a lost worker's batch
    assert s.take(7) == [(0, 5), (8, 2)] and _used(s) == 10   # handed out again first
    s.give_back([(3, 2), (8, 2)])
    assert s.pending == [(3, 2), (8, 2)] and _used(s) == 6
    assert Stream.from_state(s.state()) == s                 # what a checkpoint keeps
    assert split_spans([(0, 5), (8, 2)], [4, 3]) == [[(0, 4)], [(4, 1), (8, 2)]]
    order0, order1 = stream_indices(10, 3, [(0, 10)]), stream_indices(10, 3, [(10, 10)])
    assert sorted(order0.tolist()) == list(range(10)) and not torch.equal(order0, order1)
    assert stream_indices(10, 3, [(8, 4)]).tolist() == order0[8:].tolist() + order1[:2].tolist()


def _first_epoch_uses(n, spans):
    """How often each of the n samples is trained by the positions [0, n) among ``spans``."""
    mine = [p for start, size in spans for p in range(start, start + size) if p < n]
    assert len(mine) == len(set(mine)) == n                  # every position once, none twice
    return torch.bincount(stream_indices(n, 7, [(p, 1) for p in mine]), minlength=n)


@pytest.mark.parametrize("sizes", [[1, 7, 56], [421, 91]])
def test_sync_steps_use_every_sample_once_per_epoch(sizes):
    """Each step is the next Σb positions, worker i its consecutive b_i: one uniform big batch."""
    n, stream, applied = 3000, Stream(), []
    while _used(stream) < n:
        shares = split_spans(stream.take(sum(sizes)), sizes)
        flat = [p for share in shares for start, size in share for p in range(start, start + size)]
        assert [sum(k for _, k in share) for share in shares] == sizes
        assert flat == list(range(flat[0], flat[0] + sum(sizes)))   # consecutive, in worker order
        applied += [span for share in shares for span in share]
    assert _first_epoch_uses(n, applied).tolist() == [1] * n
    # equal shards would have trained worker i's n/len(sizes) samples at b_i per step:
    # after an epoch's steps the biggest batch's shard is seen max(b)/min(b) times as often
    shard_rate = [b / (n / len(sizes)) for b in sizes]
    assert max(shard_rate) / min(shard_rate) == max(sizes) / min(sizes) > 4


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_lost_workers_samples_stay_in_training(mode):
    """Unequal batches, async arrivals in random order, and the second worker lost after 5
    updates with its batch in flight: over the first epoch every sample is trained exactly once."""
    n, sizes, rng = 6000, [421, 91], random.Random(0)
    stream, applied, in_flight, updates = Stream(), [], {}, 0
    while _used(stream) < n or in_flight:
        if mode == "sync":
            shares = split_spans(stream.take(sum(sizes)), sizes)
            if updates == 5:                                     # the Mac's gradient never comes
                stream.give_back(shares[1])
                shares, sizes = shares[:1], split_batch(sum(sizes), [1])
            applied += [span for share in shares for span in share]
        else:
            for w in range(len(sizes)):                          # idle workers take their next b_i
                if w not in in_flight and _used(stream) < n:
                    in_flight[w] = stream.take(sizes[w])
            w = rng.choice(sorted(in_flight))                    # whichever arrives first
            spans = in_flight.pop(w)
            if updates == 5 and len(sizes) == 2:                 # the Mac is lost with a batch in flight
                stream.give_back(spans if w == 1 else in_flight.pop(1))
                if w == 0:
                    applied += spans
                sizes = split_batch(sum(sizes), [1])
            else:
                applied += spans
        updates += 1
    assert stream.pending == [] and len(sizes) == 1
    assert _first_epoch_uses(n, applied).tolist() == [1] * n


def test_batches_cover_an_epoch_once():
    x, y = torch.arange(10).float(), torch.arange(10)
    seen = torch.cat([yb for _, yb in batches(x, y, 3, shuffle=True, seed=0)])
    assert sorted(seen.tolist()) == list(range(10))
    with pytest.raises(HetlabError, match="batch size"):
        next(batches(x, y, 0))


def test_missing_file_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setattr(data, "ROOT", tmp_path)
    with pytest.raises(HetlabError, match="missing.*git checkout -- data/"):
        load_mnist("test")


def test_corrupted_files_say_what_to_do(tmp_path, monkeypatch):
    for name in FILES["test"]:
        shutil.copy(data.ROOT / name, tmp_path / name)
    monkeypatch.setattr(data, "ROOT", tmp_path)
    lbl = tmp_path / FILES["test"][1]
    raw = bytearray(gzip.decompress(lbl.read_bytes()))
    raw[100] ^= 1  # flip one label bit: valid gzip, wrong contents
    lbl.write_bytes(gzip.compress(bytes(raw)))
    with pytest.raises(HetlabError, match="not the real MNIST.*git checkout -- data/"):
        load_mnist("test")
    lbl.write_bytes(b"not gzip at all")
    with pytest.raises(HetlabError, match="not the real MNIST"):
        load_mnist("test")
    with pytest.raises(HetlabError, match="unknown MNIST split"):
        load_mnist("validation")
