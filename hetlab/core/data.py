"""MNIST as tensors, read straight from the IDX files shipped in ``data/`` (notebook 01), your own
data in the same two tensors, and hetlab's one shuffle (``epoch_order``). Batches are slices of one
tensor; ``textbook_loader``, the per-sample way most tutorials use, stays for 01's race.
"""
from __future__ import annotations

import gzip
import hashlib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Iterator

import numpy as np
import torch

from hetlab.errors import HetlabError

MEAN, STD = 0.1307, 0.3081  # of the 60,000 training images, pixels scaled to [0, 1]

FILES = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
}
# sha256 of each file's decompressed contents: gzip bytes differ between mirrors, contents do not.
SHA256 = {
    "train-images-idx3-ubyte.gz": "ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db",
    "train-labels-idx1-ubyte.gz": "65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5",
    "t10k-images-idx3-ubyte.gz": "0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7",
    "t10k-labels-idx1-ubyte.gz": "ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2",
}
ROOT = Path(__file__).resolve().parents[2] / "data"   # where the repository ships the files


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
    """Yield (x, y) mini-batches for one epoch in ``epoch_order``; the last batch may be short. The
    epoch is gathered once, then every batch is a zero-copy slice."""
    if batch_size < 1:
        raise HetlabError(f"batch size must be at least 1, got {batch_size}.")
    if shuffle:
        order = epoch_order(len(y), seed, epoch).to(x.device)
        x, y = x[order], y[order]
    for i in range(0, len(y), batch_size):
        yield x[i : i + batch_size], y[i : i + batch_size]


def _is_pair(data) -> bool:
    return isinstance(data, (tuple, list)) and len(data) == 2 and not isinstance(data, torch.utils.data.Dataset)


def as_tensors(data) -> tuple[torch.Tensor, torch.Tensor]:
    """A hetlab ``Dataset``, a tuple ``(x, y)`` of tensors or arrays, or a map-style
    ``torch.utils.data.Dataset`` of ``(input, label)`` → float32 inputs and int64 labels on the CPU."""
    if isinstance(data, Dataset):
        return data.normalized(), data.labels
    try:
        if _is_pair(data):
            x, y = torch.as_tensor(data[0]), torch.as_tensor(data[1])
        elif isinstance(data, torch.utils.data.Dataset) and hasattr(data, "__len__"):
            x, y = torch.utils.data.default_collate([data[i] for i in range(len(data))])
        else:
            raise HetlabError(f"data must be a hetlab Dataset, a tuple (x, y) of tensors, or a map-style "
                              f"torch.utils.data.Dataset, got {type(data).__name__}.")
    except (TypeError, ValueError, RuntimeError, IndexError) as e:
        raise HetlabError(f"data do not make inputs and labels ({type(e).__name__}: {' '.join(str(e).split())[:120]}): "
                          f"give (x, y) tensors, or a dataset whose items are (input of one shape, label).") from None
    if x.ndim < 1 or y.ndim != 1 or len(x) != len(y) or len(y) == 0:
        raise HetlabError(f"data must be inputs x (N×…) and labels y (N), got x {list(x.shape)} and y "
                          f"{list(y.shape)}.")
    if y.is_floating_point() or y.is_complex():
        raise HetlabError(f"labels must be whole numbers (class indices), got {y.dtype}.")
    # on the CPU: the other machine cannot load CUDA (or MPS) storage from Ray's object store
    return x.detach().cpu().float().contiguous(), y.detach().cpu().long().contiguous()


def n_samples(data) -> int:
    """How many samples ``data`` holds (any form ``as_tensors`` takes), without converting it."""
    return len(data[1]) if _is_pair(data) else len(data)


@lru_cache(maxsize=4)
def epoch_order(n: int, seed: int, epoch: int) -> torch.Tensor:
    """The shuffled order of ``n`` samples in epoch ``epoch``, a pure function of its arguments: hetlab's
    one shuffle. Cached; callers only slice it."""
    return torch.randperm(n, generator=torch.Generator().manual_seed(seed * 1_000_003 + epoch))


def _contents(path: Path) -> bytes | None:
    """The decompressed bytes of one gzipped file, None when it is missing or not gzip."""
    try:
        with gzip.open(path, "rb") as f:
            return f.read()
    except (OSError, EOFError):
        return None


@lru_cache(maxsize=4)
def _load(split: str, root: str) -> Dataset:
    arrays = []
    for name in FILES[split]:
        path = Path(root) / name
        raw = _contents(path)
        if raw is None or hashlib.sha256(raw).hexdigest() != SHA256[name]:
            problem = "is missing" if not path.exists() else "is not the real MNIST (unreadable or corrupted)"
            raise HetlabError(f"MNIST file {path} {problem}: restore it with `git checkout -- data/`.")
        ndim = raw[3]   # IDX: two zero bytes, the type (uint8), the number of dimensions, then each
        dims = [int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)]
        arrays.append(np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims))
    images, labels = arrays
    return Dataset(torch.from_numpy(images.copy()), torch.from_numpy(labels.astype(np.int64)))


def load_mnist(split: str = "train") -> Dataset:
    """The 60,000 ``"train"`` or 10,000 ``"test"`` MNIST samples as tensors, each file checked."""
    if split not in FILES:
        raise HetlabError(f"unknown MNIST split {split!r}: use 'train' or 'test'.")
    return _load(split, str(ROOT))


def checksums() -> dict[str, str | None]:
    """sha256 of each MNIST file's decompressed contents (None: missing or unreadable): what
    ``hetlab doctor`` compares between the machines."""
    found = {name: _contents(ROOT / name) for name in SHA256}
    return {name: None if raw is None else hashlib.sha256(raw).hexdigest() for name, raw in found.items()}


def checksum_status(found: dict[str, str | None]) -> str:
    """One word or phrase for ``checksums()``: ``"verified"`` when every file is the real MNIST."""
    missing = [n for n, h in found.items() if h is None]
    wrong = [n for n, h in found.items() if h is not None and h != SHA256.get(n)]
    parts = ([f"missing {', '.join(missing)}"] if missing else []) + ([f"corrupted {', '.join(wrong)}"] if wrong else [])
    return "; ".join(parts) or "verified"


class PerSampleMNIST(torch.utils.data.Dataset):
    """MNIST served one sample at a time through PIL, as torchvision's MNIST with ``ToTensor()`` and
    ``Normalize()`` does: the textbook pipeline notebook 01 races."""

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
