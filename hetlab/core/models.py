"""The MNIST networks of the course (notebook 01): ``small``, the default, and ``classic`` (PyTorch's
examples/mnist, 1.2M parameters), a bigger one. Your own model: ``model=`` a *factory*, a picklable
zero-argument callable returning an ``nn.Module``.
"""
from __future__ import annotations

import sys
import sysconfig
from typing import Callable

import torch
from torch import nn

from hetlab.errors import HetlabError


def small_cnn(width: int = 16) -> nn.Module:
    """Three 3×3 conv blocks (16, 32, 64 channels; ``width`` scales them) and one linear layer: 29,066."""
    w = int(width)
    return nn.Sequential(
        nn.Conv2d(1, w, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),          # 16×14×14
        nn.Conv2d(w, 2 * w, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),      # 32×7×7
        nn.Conv2d(2 * w, 4 * w, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),  # 64×3×3
        nn.Flatten(), nn.Linear(4 * w * 3 * 3, 10),
    )


def classic_cnn() -> nn.Module:
    """PyTorch's examples/mnist network: two convs, dropout, two linear layers."""
    return nn.Sequential(
        nn.Conv2d(1, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Dropout(0.25), nn.Flatten(), nn.Linear(9216, 128), nn.ReLU(), nn.Dropout(0.5),
        nn.Linear(128, 10),
    )


MODELS = {"small": small_cnn, "classic": classic_cnn}


def as_factory(model) -> Callable[[], nn.Module]:
    """A built-in name or a factory → a factory, checked on the driver: callable, picklable (Ray sends it
    to every worker), returning an ``nn.Module`` with parameters. A built model is refused."""
    if isinstance(model, str):
        if model not in MODELS:
            raise HetlabError(f"unknown model {model!r}: choose one of {sorted(MODELS)}, "
                              f"or give a function that returns an nn.Module.")
        return MODELS[model]
    if isinstance(model, nn.Module):
        raise HetlabError(f"model= got a built {type(model).__name__}: give a function that builds it, "
                          f"e.g. model=lambda: {type(model).__name__}(), or a built-in name.")
    if not callable(model):
        raise HetlabError(f"model= must be a built-in name {sorted(MODELS)} or a function returning "
                          f"an nn.Module, got {type(model).__name__}.")
    _check_picklable(model, "model factory")
    make_model(model, seed=0)
    return model


def _send_by_value(fn) -> None:
    """Have Ray send ``fn``'s module by value when it is the learner's code (a ``mynets.py`` next to the
    notebook), which the other machine cannot import; installed code goes by name as usual."""
    name = getattr(fn, "__module__", None) or ""
    module = sys.modules.get(name)
    path = getattr(module, "__file__", None)
    if module is None or name == "__main__" or not path or name.split(".")[0] in ("hetlab", "torch"):
        return
    installed = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    if any(str(path).startswith(str(p)) for p in installed):
        return
    from ray import cloudpickle
    cloudpickle.register_pickle_by_value(module)


def _check_picklable(fn, what: str) -> None:
    """One line if Ray cannot send ``fn`` (a factory or a loss) to its workers."""
    try:
        from ray import cloudpickle
        _send_by_value(fn)
        cloudpickle.dumps(fn)
    except Exception as e:  # noqa: BLE001 - whatever cloudpickle refuses (locks, sockets, …)
        detail = str(e).splitlines()[0][:120] if str(e) else ""
        raise HetlabError(f"{what} {model_label(fn)} cannot be pickled for Ray ({type(e).__name__}: {detail}): "
                          f"define it at the top level of a module or notebook, without open files or locks.") from None


def model_label(model) -> str:
    """What a checkpoint or a result calls a model: its built-in name, else ``module.name`` (or "custom")."""
    if isinstance(model, str):
        return model
    for name, factory in MODELS.items():
        if model is factory:
            return name
    qual = getattr(model, "__qualname__", None)
    return f"{getattr(model, '__module__', '?')}.{qual}" if qual else "custom"


def make_model(model="small", seed: int | None = 0) -> nn.Module:
    """Build a model (a built-in name or a factory); the same seed gives the same weights."""
    factory = as_factory(model) if isinstance(model, str) else model
    with torch.random.fork_rng(devices=[]):  # the CPU's generator only: a GPU's (dropout there) stays as it was
        if seed is not None:
            torch.default_generator.manual_seed(seed)
        built = factory()
    if not isinstance(built, nn.Module) or not any(True for _ in built.parameters()):
        raise HetlabError(f"model factory {model_label(model)} returned {type(built).__name__}, not an "
                          f"nn.Module with parameters: it must return the network, e.g. `return MyNet()`.")
    return built


def as_loss(loss=None) -> Callable:
    """``loss(outputs, labels)`` → a 0-d tensor, picklable; None → cross-entropy."""
    if loss is None:
        return nn.functional.cross_entropy
    if not callable(loss):
        raise HetlabError(f"loss= must be a function loss(outputs, labels), e.g. "
                          f"torch.nn.functional.cross_entropy, got {type(loss).__name__}.")
    _check_picklable(loss, "loss")
    return loss


def check_model_and_loss(model, loss, x: torch.Tensor, y: torch.Tensor) -> None:
    """One forward pass and loss on two samples: shapes that do not fit fail here, before any worker starts."""
    net = make_model(model, seed=0)
    try:
        value = loss(net(x[:2].float()), y[:2])
    except Exception as e:  # noqa: BLE001 - the learner's model or loss, any error
        raise HetlabError(f"model {model_label(model)!r} and loss do not fit the data (inputs "
                          f"{list(x.shape[1:])}, labels {y.dtype}): {type(e).__name__}: "
                          f"{' '.join(str(e).split())[:160]}.") from None
    if not isinstance(value, torch.Tensor) or value.numel() != 1:
        raise HetlabError(f"loss must return one number (a 0-d tensor) for a batch, got "
                          f"{type(value).__name__} {list(getattr(value, 'shape', []))}.")


def count_params(model: nn.Module) -> int:
    """Number of trainable parameters."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
