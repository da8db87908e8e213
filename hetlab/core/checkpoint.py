"""Checkpoints of a parameter-server run (notebook 08): a plain dict of tensors and numbers (read with
``weights_only=True``), written atomically; it names the model and its shapes, so another's is refused.
"""
from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path

import torch

from hetlab.errors import HetlabError
from hetlab.core.models import MODELS, make_model

FORMAT = "hetlab-ps-checkpoint/3"  # /3: the options saved whole; /2: one data cursor; /1: shards
REQUIRED = ("model", "signature", "options", "step", "server", "workers", "batch_sizes", "stream")
CHECKPOINT_GLOB = "step-*.pt"   # what checkpoint_path names; zero-padded, so they sort by step


def param_signature(model) -> list[list]:
    """``[[parameter name, [shape…]], …]`` of a model: what a checkpoint must fit."""
    return [[name, list(p.shape)] for name, p in make_model(model, seed=None).named_parameters()]


def save_checkpoint(state: dict, path) -> Path:
    """Write ``state`` to ``path`` atomically (temp file in the same folder, fsync, os.replace)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def load_checkpoint(path, model=None) -> dict:
    """Read and check a checkpoint; ``model`` (a name or a factory; your own model needs it) must match."""
    path = Path(path)
    if not path.is_file():
        raise HetlabError(f"no checkpoint at {path}: check the path (see latest_checkpoint(dir)).")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - truncated zip, garbage bytes, pickle errors …
        raise HetlabError(f"{path} is not a readable checkpoint (truncated or corrupted: "
                          f"{type(e).__name__}); use an earlier checkpoint.") from None
    found = state.get("format") if isinstance(state, dict) else None
    if found != FORMAT or any(k not in state for k in REQUIRED):
        raise HetlabError(f"{path} is not a checkpoint this hetlab reads ({found or 'no hetlab format'}; it "
                          f"reads {FORMAT}, written by ParameterServerTraining.save_checkpoint): start a "
                          f"fresh run, or resume it with the hetlab that wrote it.")
    saved = state["model"]
    if isinstance(model, str) and model != saved:
        raise HetlabError(f"{path} holds model {saved!r}, not {model!r}: resume with model={saved!r}.")
    if model is None and saved not in MODELS:
        raise HetlabError(f"{path} holds your own model {saved!r}: resume with model= the same "
                          f"factory that trained it.")
    expected = param_signature(model if model is not None else saved)
    if state["signature"] != expected:
        raise HetlabError(f"{path} has parameter shapes that do not fit model {saved!r}: it is "
                          f"a checkpoint of a different network; start a fresh run instead.")
    weights = state["server"].get("weights") if isinstance(state["server"], dict) else None
    n = sum(math.prod(shape) for _, shape in expected)
    if not isinstance(weights, torch.Tensor) or weights.numel() != n:
        raise HetlabError(f"{path} holds {getattr(weights, 'numel', lambda: 0)()} weights, model "
                          f"{saved!r} has {n}: the file is damaged; use an earlier checkpoint.")
    return state


def checkpoint_path(directory, step: int) -> Path:
    """Where the checkpoint of ``step`` goes in ``directory``: ``step-NNNNNN.pt``."""
    return Path(directory) / f"step-{step:06d}.pt"


def latest_checkpoint(directory) -> Path | None:
    """The newest ``step-NNNNNN.pt`` in ``directory`` (highest step), or None."""
    found = sorted(Path(directory).glob(CHECKPOINT_GLOB))
    return found[-1] if found else None
