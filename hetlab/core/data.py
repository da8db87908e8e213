"""MNIST as tensors, read straight from the IDX files shipped in ``data/`` (notebook 01), and
hetlab's one shuffle (``epoch_order``). No PIL images, no DataLoader: the set is decoded once into
a tensor and batches are slices of it (``textbook_loader``, the per-sample way, stays for 01's race). How workers with unequal batches share one shuffled stream
is ``hetlab.core.stream`` (notebook 05).
"""
from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import tempfile
import urllib.request
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np
import torch

from hetlab.errors import HetlabError
from hetlab.vocab import DATA_ENV

MEAN, STD = 0.1307, 0.3081  # of the 60,000 training images, pixels scaled to [0, 1]

FILES = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
}
# sha256 of each file's *decompressed* contents (the original IDX bytes): a copy from any mirror is
# accepted (gzip bytes differ between mirrors, contents do not).
SHA256 = {
    "train-images-idx3-ubyte.gz": "ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db",
    "train-labels-idx1-ubyte.gz": "65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5",
    "t10k-images-idx3-ubyte.gz": "0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7",
    "t10k-labels-idx1-ubyte.gz": "ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2",
}
MIRRORS = (
    "https://ossci-datasets.s3.amazonaws.com/mnist/",
    "https://storage.googleapis.com/cvdf-datasets/mnist/",
)


def default_root() -> Path:
    """``$HETLAB_DATA``, else the repo's ``data/`` folder, else ``~/.cache/hetlab/mnist``."""
    if os.environ.get(DATA_ENV):
        return Path(os.environ[DATA_ENV])
    repo_data = Path(__file__).resolve().parents[2] / "data"
    if repo_data.is_dir():
        return repo_data
    return Path.home() / ".cache" / "hetlab" / "mnist"


@dataclass(frozen=True)
class Dataset:
    """MNIST images (uint8, N×28×28) and labels (int64, N), on the CPU."""

    images: torch.Tensor
    labels: torch.Tensor

    def __len__(self) -> int:
        return len(self.labels)

    def normalized(self) -> torch.Tensor:
        """Float32 N×1×28×28, scaled to [0, 1] then standardised with MEAN and STD."""
        x = self.images.float()  # one new buffer, then in place: the same values, no temporaries
        return x.div_(255.0).sub_(MEAN).div_(STD).unsqueeze(1)

    def subset(self, n: int, seed: int = 0) -> "Dataset":
        """A deterministic random subset of ``n`` samples (the same for the same seed)."""
        if not 0 < n <= len(self):
            raise HetlabError(f"subset size {n} is out of range: choose 1..{len(self)}.")
        idx = epoch_order(len(self), seed, 0)[:n]
        return Dataset(self.images[idx], self.labels[idx])


def batches(
    x: torch.Tensor, y: torch.Tensor, batch_size: int, shuffle: bool = True, seed: int = 0, epoch: int = 0
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Yield (x, y) mini-batches for one epoch; the last batch may be short.

    The order is ``epoch_order(len(y), seed, epoch)``, the one shuffle every engine uses.
    Shuffling gathers the whole epoch once (one large copy, fast on any device), then
    every batch is a zero-copy slice: far cheaper than a gather per batch.
    """
    if batch_size < 1:
        raise HetlabError(f"batch size must be at least 1, got {batch_size}.")
    if shuffle:
        order = epoch_order(len(y), seed, epoch).to(x.device)
        x, y = x[order], y[order]
    for i in range(0, len(y), batch_size):
        yield x[i : i + batch_size], y[i : i + batch_size]


def as_tensors(data) -> tuple[torch.Tensor, torch.Tensor]:
    """Training data in any of three forms → ``(x, y)``: float32 inputs, int64 labels, on the CPU.

    * a hetlab ``Dataset`` (MNIST): its normalised images and labels;
    * a tuple ``(x, y)`` of tensors or arrays with the same first dimension;
    * any map-style ``torch.utils.data.Dataset`` whose items are ``(input, label)``:
      every item is read once and stacked (fine for data that fits in memory).
    """
    if isinstance(data, Dataset):
        return data.normalized(), data.labels
    if isinstance(data, (tuple, list)) and len(data) == 2 and not isinstance(data, torch.utils.data.Dataset):
        try:
            x, y = torch.as_tensor(data[0]), torch.as_tensor(data[1])
        except (TypeError, ValueError, RuntimeError) as e:
            raise HetlabError(f"data=(x, y) must be two tensors or arrays ({type(e).__name__}: "
                              f"{str(e).splitlines()[0][:100]}).") from None
        return _checked(x, y)
    if isinstance(data, torch.utils.data.Dataset) and hasattr(data, "__len__") and hasattr(data, "__getitem__"):
        if len(data) == 0:
            raise HetlabError("the dataset is empty: it needs at least one (input, label) item.")
        xs, ys = [], []
        for i in range(len(data)):
            item = data[i]
            if not (isinstance(item, (tuple, list)) and len(item) == 2):
                raise HetlabError(f"dataset item {i} is a {type(item).__name__}, not (input, label): "
                                  f"make __getitem__ return (tensor, int label).")
            xs.append(torch.as_tensor(item[0]))
            ys.append(torch.as_tensor(item[1]))
        try:
            x, y = torch.stack(xs), torch.stack(ys)
        except RuntimeError as e:
            raise HetlabError(f"dataset items do not stack into one tensor ({' '.join(str(e).split())[:120]}): "
                              f"every input must have the same shape.") from None
        return _checked(x, y)
    raise HetlabError(f"data must be a hetlab Dataset, a tuple (x, y) of tensors, or a map-style "
                      f"torch.utils.data.Dataset, got {type(data).__name__}.")


def _checked(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    if x.ndim < 1 or y.ndim != 1 or len(x) != len(y) or len(y) == 0:
        raise HetlabError(f"data must be inputs x (N×…) and labels y (N), got x {list(x.shape)} and y "
                          f"{list(y.shape)}.")
    if y.is_floating_point() or y.is_complex():
        raise HetlabError(f"labels must be whole numbers (class indices), got {y.dtype}.")
    # on the CPU: data on a GPU would travel through Ray's object store as CUDA (or MPS) storage,
    # which the other machine cannot load
    return x.detach().cpu().float().contiguous(), y.detach().cpu().long().contiguous()


def n_samples(data) -> int:
    """How many samples ``data`` holds (any form ``as_tensors`` takes), without converting it."""
    if isinstance(data, (tuple, list)) and len(data) == 2 and not isinstance(data, torch.utils.data.Dataset):
        return len(data[1])
    return len(data)


def compact(data):
    """What the parameter server puts in Ray's object store: a hetlab Dataset as it is (uint8
    images, a quarter of the normalised bytes; each worker normalises), anything else as ``(x, y)``."""
    return data if isinstance(data, Dataset) else as_tensors(data)


@lru_cache(maxsize=4)
def epoch_order(n: int, seed: int, epoch: int) -> torch.Tensor:
    """The shuffled order of ``n`` samples in epoch ``epoch``: a pure function of its arguments,
    and hetlab's one shuffle (``batches``, ``Dataset.subset``, the parameter server's stream,
    Ray Train's ranks; notebooks 01 and 05). Cached, since every batch of an epoch reads it;
    callers only slice it."""
    return torch.randperm(n, generator=torch.Generator().manual_seed(seed * 1_000_003 + epoch))


def _read_idx(path: Path) -> np.ndarray:
    """Decode one gzipped IDX file after checking its contents' sha256."""
    name = path.name
    if not path.exists():
        raise HetlabError(
            f"MNIST file {path} is missing: restore it with `git checkout -- data/` "
            f"or call hetlab.core.data.download_mnist()."
        )
    try:
        with gzip.open(path, "rb") as f:
            raw = f.read()
    except (OSError, EOFError) as e:
        raise HetlabError(
            f"MNIST file {path} is not a readable gzip file ({e}): delete it and run "
            f"`git checkout -- data/` or hetlab.core.data.download_mnist()."
        ) from None
    if hashlib.sha256(raw).hexdigest() != SHA256[name]:
        raise HetlabError(
            f"MNIST file {path} is corrupted (sha256 mismatch): delete it and run "
            f"`git checkout -- data/` or hetlab.core.data.download_mnist()."
        )
    magic = int.from_bytes(raw[:4], "big")
    ndim = magic & 0xFF
    dims = [int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


@lru_cache(maxsize=4)
def _load(split: str, root: str) -> Dataset:
    img_name, lbl_name = FILES[split]
    images = _read_idx(Path(root) / img_name)
    labels = _read_idx(Path(root) / lbl_name)
    return Dataset(torch.from_numpy(images.copy()), torch.from_numpy(labels.astype(np.int64)))


def load_mnist(split: str = "train", root: str | os.PathLike | None = None) -> Dataset:
    """Load the 60,000 ``"train"`` or 10,000 ``"test"`` MNIST samples as tensors, from the files the
    repository ships (``download_mnist`` restores missing ones from the usual mirrors)."""
    if split not in FILES:
        raise HetlabError(f"unknown MNIST split {split!r}: use 'train' or 'test'.")
    root = Path(root) if root is not None else default_root()
    return _load(split, str(root))


def checksums(root: str | os.PathLike | None = None) -> dict[str, str | None]:
    """sha256 of each MNIST file's decompressed contents in ``root`` (None: missing or unreadable).

    What ``hetlab doctor`` compares between the machines (``preflight.local_report``):
    contents, not gzip bytes, so copies from different mirrors agree. Computed once per
    process and folder, and again only when a file's size or modification time changes.
    """
    root = Path(root) if root is not None else default_root()
    stats = []
    for name in SHA256:
        try:
            st = (root / name).stat()
            stats.append((st.st_size, st.st_mtime_ns))
        except OSError:
            stats.append(None)
    return dict(_checksums(str(root), tuple(stats)))


@lru_cache(maxsize=4)
def _checksums(root: str, stats: tuple) -> dict[str, str | None]:
    """``checksums`` of ``root`` whose files had these ``stats``: a changed file is a new key, read again."""
    found = {}
    for name in SHA256:
        try:
            with gzip.open(Path(root) / name, "rb") as f:
                found[name] = hashlib.sha256(f.read()).hexdigest()
        except (OSError, EOFError):
            found[name] = None
    return found


def checksum_status(found: dict[str, str | None]) -> str:
    """One word or phrase for ``checksums()``: ``"verified"`` when every file is the real MNIST."""
    missing = [n for n, h in found.items() if h is None]
    wrong = [n for n, h in found.items() if h is not None and h != SHA256.get(n)]
    if not missing and not wrong:
        return "verified"
    return "; ".join(part for part in (f"missing {', '.join(missing)}" if missing else "",
                                       f"corrupted {', '.join(wrong)}" if wrong else "") if part)


def download_mnist(root: str | os.PathLike | None = None, mirrors: Sequence[str] = MIRRORS,
                   timeout: float = 30.0) -> Path:
    """Fetch any missing MNIST file into ``root``, verify its sha256, write it atomically."""
    root = Path(root) if root is not None else default_root()
    root.mkdir(parents=True, exist_ok=True)
    for name in SHA256:
        target = root / name
        if target.exists():
            continue
        errors = []
        for mirror in mirrors:
            try:
                with urllib.request.urlopen(mirror + name, timeout=timeout) as resp:
                    blob = resp.read()
                if hashlib.sha256(gzip.decompress(blob)).hexdigest() != SHA256[name]:
                    errors.append(f"{mirror}: checksum mismatch")
                    continue
            except Exception as e:  # any network or gzip failure: try the next mirror
                errors.append(f"{mirror}: {type(e).__name__}")
                continue
            with tempfile.NamedTemporaryFile(dir=root, delete=False) as tmp:
                tmp.write(blob)
            shutil.move(tmp.name, target)
            break
        else:
            raise HetlabError(
                f"could not download {name} ({'; '.join(errors)}): check your network, "
                f"or copy the MNIST files into {root}."
            )
    return root


# --- the textbook pipeline, kept for comparison (notebook 01, benchmarks/single_device.py) ------
# What ``torchvision.datasets.MNIST(transform=Compose([ToTensor(), Normalize(...)]))`` plus a
# ``DataLoader`` does, written out without torchvision (whose CPU build crashes on import here): for
# every sample a uint8 array becomes a PIL image, then a float tensor in [0, 1], then a normalised
# one; the DataLoader collates samples into batches one by one. ``Dataset`` does the same arithmetic
# once for the whole set and slices batches from one tensor.

class PerSampleMNIST(torch.utils.data.Dataset):
    """MNIST served one sample at a time through PIL, as torchvision's MNIST does."""

    def __init__(self, data: Dataset):
        self.images = data.images.numpy()
        self.labels = data.labels.tolist()

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int):
        from PIL import Image
        img = Image.fromarray(self.images[i], mode="L")                 # uint8 array -> PIL
        x = torch.from_numpy(np.array(img, dtype=np.uint8)).float().div_(255)  # ToTensor
        x = ((x - MEAN) / STD).unsqueeze(0)                            # Normalize, 1×28×28
        return x, self.labels[i]


def textbook_loader(data: Dataset, batch_size: int = 64, shuffle: bool = True, seed: int = 0):
    """A ``DataLoader`` over ``PerSampleMNIST``: the per-sample pipeline most tutorials use."""
    return torch.utils.data.DataLoader(PerSampleMNIST(data), batch_size=batch_size, shuffle=shuffle,
                                       generator=torch.Generator().manual_seed(seed))
