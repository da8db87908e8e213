"""The textbook MNIST input pipeline, kept for comparison (notebook 01, benchmarks/single_device.py).

This is what ``torchvision.datasets.MNIST(transform=Compose([ToTensor(), Normalize(...)]))``
plus a ``DataLoader`` does, written out without torchvision (whose CPU build crashes on
import here): for every sample, a uint8 array becomes a PIL image, then a float
tensor scaled to [0, 1], then a normalised tensor; the DataLoader collates samples
into batches one by one. hetlab's pipeline (``hetlab.core.data``) does the same arithmetic
once for the whole set and slices batches from one tensor.
"""
from __future__ import annotations

import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader

from hetlab.core.data import MEAN, STD, Dataset


class PerSampleMNIST(torch.utils.data.Dataset):
    """MNIST served one sample at a time through PIL, as torchvision's MNIST does."""

    def __init__(self, data: Dataset):
        self.images = data.images.numpy()
        self.labels = data.labels.tolist()

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int):
        img = Image.fromarray(self.images[i], mode="L")                 # uint8 array -> PIL
        x = torch.from_numpy(np.array(img, dtype=np.uint8)).float().div_(255)  # ToTensor
        x = ((x - MEAN) / STD).unsqueeze(0)                            # Normalize, 1×28×28
        return x, self.labels[i]


def textbook_loader(data: Dataset, batch_size: int = 64, shuffle: bool = True,
                    seed: int = 0, num_workers: int = 0) -> DataLoader:
    """A ``DataLoader`` over ``PerSampleMNIST``: the per-sample pipeline most tutorials use."""
    return DataLoader(PerSampleMNIST(data), batch_size=batch_size, shuffle=shuffle,
                      num_workers=num_workers, generator=torch.Generator().manual_seed(seed))
