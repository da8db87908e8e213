"""hetlab.data on the real MNIST files shipped in data/ (no network but 127.0.0.1)."""
import functools
import gzip
import http.server
import shutil
import threading
from pathlib import Path

import pytest
import torch

from hetlab import HetlabError
from hetlab.data import FILES, SHA256, batches, default_root, download_mnist, load_mnist


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


def test_subset_is_deterministic_and_shards_are_disjoint(train):
    a, b, c = train.subset(500, seed=1), train.subset(500, seed=1), train.subset(500, seed=2)
    assert torch.equal(a.labels, b.labels) and not torch.equal(a.images, c.images)
    small = train.subset(1000, seed=0)
    shards = small.shard([300, 700])
    assert [len(s) for s in shards] == [300, 700]
    flat = torch.cat([s.images.reshape(len(s), -1) for s in shards])
    assert torch.unique(flat, dim=0).shape[0] == torch.unique(small.images.reshape(1000, -1), dim=0).shape[0]
    with pytest.raises(HetlabError, match="shard sizes"):
        small.shard([600, 600])
    with pytest.raises(HetlabError, match="subset size"):
        small.subset(0)


def test_batches_cover_an_epoch_once():
    x, y = torch.arange(10).float(), torch.arange(10)
    seen = torch.cat([yb for _, yb in batches(x, y, 3, shuffle=True, seed=0)])
    assert sorted(seen.tolist()) == list(range(10))
    with pytest.raises(HetlabError, match="batch size"):
        next(batches(x, y, 0))


def test_missing_file_says_what_to_do(tmp_path):
    with pytest.raises(HetlabError, match="missing.*git checkout -- data/"):
        load_mnist("test", root=tmp_path)


def test_corrupted_files_say_what_to_do(tmp_path):
    src = default_root()
    for name in FILES["test"]:
        shutil.copy(src / name, tmp_path / name)
    lbl = tmp_path / FILES["test"][1]
    raw = bytearray(gzip.decompress(lbl.read_bytes()))
    raw[100] ^= 1  # flip one label bit: valid gzip, wrong contents
    lbl.write_bytes(gzip.compress(bytes(raw)))
    with pytest.raises(HetlabError, match="corrupted"):
        load_mnist("test", root=tmp_path)
    lbl.write_bytes(b"not gzip at all")
    with pytest.raises(HetlabError, match="not a readable gzip"):
        load_mnist("test", root=tmp_path)
    with pytest.raises(HetlabError, match="unknown MNIST split"):
        load_mnist("validation")


@pytest.fixture
def mirror(tmp_path):
    """A real HTTP server on 127.0.0.1 serving the repo's MNIST files as a mirror would."""
    served = tmp_path / "mirror"
    served.mkdir()
    for name in SHA256:
        shutil.copy(default_root() / name, served / name)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(served))
    handler.log_message = lambda *a: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield served, f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


def test_download_fetches_and_verifies(mirror, tmp_path):
    served, url = mirror
    root = tmp_path / "fresh"
    download_mnist(root, mirrors=[url])
    assert sorted(p.name for p in root.iterdir()) == sorted(SHA256)
    assert load_mnist("test", root=root).labels[:3].tolist() == [7, 2, 1]


def test_download_rejects_a_bad_mirror_and_tries_the_next(mirror, tmp_path):
    served, url = mirror
    good = tmp_path / "good"
    good.mkdir()
    for name in SHA256:
        shutil.copy(served / name, good / name)
        (served / name).write_bytes(gzip.compress(b"tampered"))
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(good))
    handler.log_message = lambda *a: None
    second = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=second.serve_forever, daemon=True).start()
    try:
        root = tmp_path / "fresh"
        with pytest.raises(HetlabError, match="checksum mismatch"):
            download_mnist(root, mirrors=[url])
        assert not any(root.iterdir()), "a rejected download must leave nothing behind"
        download_mnist(root, mirrors=[url, f"http://127.0.0.1:{second.server_address[1]}/"])
        assert len(load_mnist("train", root=root)) == 60000
    finally:
        second.shutdown()
        second.server_close()


def test_download_from_a_closed_port_fails_fast(tmp_path):
    with pytest.raises(HetlabError, match="could not download"):
        download_mnist(tmp_path, mirrors=["http://127.0.0.1:1/"], timeout=2)
