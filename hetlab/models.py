"""The MNIST convolutional networks trained throughout the course (notebook 01).

``small`` (~29k parameters, no dropout or batch norm, so a step is deterministic
and all its state lives in its parameters: what a parameter server needs) is the
course default. ``classic`` is PyTorch's examples/mnist network (~1.2M parameters),
for seeing what a bigger model does to compute and communication.
"""
from __future__ import annotations

import torch
from torch import nn

from hetlab.errors import HetlabError


def small_cnn() -> nn.Module:
    """Three 3×3 conv blocks (16, 32, 64 channels) and one linear layer: 29,066 parameters."""
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),   # 16×14×14
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),  # 32×7×7
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),  # 64×3×3
        nn.Flatten(), nn.Linear(64 * 3 * 3, 10),
    )


def classic_cnn() -> nn.Module:
    """PyTorch's examples/mnist network: two convs, dropout, two linear layers (1.2M)."""
    return nn.Sequential(
        nn.Conv2d(1, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Dropout(0.25), nn.Flatten(), nn.Linear(9216, 128), nn.ReLU(), nn.Dropout(0.5),
        nn.Linear(128, 10),
    )


MODELS = {"small": small_cnn, "classic": classic_cnn}


def make_model(name: str = "small", seed: int | None = 0) -> nn.Module:
    """Build a model by name with reproducible initial weights (same seed, same weights)."""
    if name not in MODELS:
        raise HetlabError(f"unknown model {name!r}: choose one of {sorted(MODELS)}.")
    if seed is not None:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return MODELS[name]()
    return MODELS[name]()


def count_params(model: nn.Module) -> int:
    """Number of trainable parameters."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
