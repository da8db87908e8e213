"""Ray Train's checkpoint of a ``train_mixed`` run, and its resume (notebook 07).

Rank 0 writes the weights (``model.pt``), the losses (``loss.json``) and ``state.pt``: the step,
Adam's state (the same on every rank after the all-reduced step) and each rank's random generators
(for dropout; step t's samples follow from the seed, the batch and t). To resume, the driver hands
the folder to every rank through Ray's object store: the Mac needs no shared folder. Ray Train V2's
own resume reads the latest checkpoint from ``storage_path``, which the Mac cannot reach.
"""
from __future__ import annotations

import json
import os

import torch
from torch import nn

from hetlab.errors import HetlabError

WEIGHTS, STATE, LOSSES = "model.pt", "state.pt", "loss.json"


def rng_state(device: torch.device) -> list:
    """This process's generators: the CPU's, and the card's where the rank trains on one."""
    card = [torch.get_device_module(device).get_rng_state()] if device.type in ("cuda", "mps") else []
    return [torch.get_rng_state()] + card


def set_rng_state(states: list, device: torch.device) -> None:
    torch.set_rng_state(states[0])
    if len(states) > 1 and device.type in ("cuda", "mps"):
        torch.get_device_module(device).set_rng_state(states[1])


def write(folder: str, model: nn.Module, opt: torch.optim.Optimizer, step: int, losses: list,
          rngs: list, seed: int, global_batch: int) -> None:
    """Rank 0's checkpoint of step ``step`` into ``folder`` (``rngs``: every rank's ``rng_state``)."""
    to_cpu = {k: v.cpu() for k, v in model.state_dict().items()}
    torch.save(to_cpu, os.path.join(folder, WEIGHTS))
    torch.save({"step": step, "optimizer": opt.state_dict(), "rngs": rngs, "seed": seed,
                "global_batch": global_batch}, os.path.join(folder, STATE))
    with open(os.path.join(folder, LOSSES), "w") as f:
        json.dump(losses, f)


def read(resume_from, model, steps: int, seed: int, global_batch: int) -> dict:
    """The checkpoint to resume from (a ``RayTrainResult`` or its ``checkpoint_path``), read on the
    driver and checked against this run's ``model`` factory, ``steps``, ``seed`` and ``global_batch``."""
    from hetlab.core.models import make_model

    folder = str(getattr(resume_from, "checkpoint_path", resume_from))
    try:
        state = torch.load(os.path.join(folder, STATE), map_location="cpu", weights_only=True)
        weights = torch.load(os.path.join(folder, WEIGHTS), map_location="cpu", weights_only=True)
        with open(os.path.join(folder, LOSSES)) as f:
            losses = json.load(f)
    except Exception as e:  # noqa: BLE001 - missing, truncated, garbage
        raise HetlabError(f"resume_from={folder!r} is not a readable train_mixed checkpoint ({type(e).__name__}): "
                          f"give a RayTrainResult or one of its checkpoints.") from None
    if (state["seed"], state["global_batch"]) != (seed, global_batch):
        raise HetlabError(f"the checkpoint at {folder} was trained with seed={state['seed']} and global_batch="
                          f"{state['global_batch']}: resume with the same, or its step is another run's.")
    if steps <= state["step"]:
        raise HetlabError(f"steps={steps}: the checkpoint at {folder} is at step {state['step']} already "
                          f"(steps counts from the run's start): give more.")
    try:
        make_model(model, seed=None).load_state_dict(weights)
    except RuntimeError:
        raise HetlabError(f"the checkpoint at {folder} holds another network's weights: resume with the "
                          f"model= that trained it.") from None
    return {**state, "weights": weights, "losses": losses}


def restore(resume, rank: int, model: nn.Module, opt: torch.optim.Optimizer, log) -> int:
    """Load the checkpoint ``read`` put in Ray's object store (``resume``: its reference; None for a
    fresh run) into this rank's model, optimizer, generators and ``log`` (a ``loop.RankLog``: the
    losses so far): the step to go on from."""
    import ray

    if resume is None:
        return 0
    saved = ray.get(resume)
    model.load_state_dict(saved["weights"])
    opt.load_state_dict(saved["optimizer"])   # Adam's moments and step count, onto the model's device
    if rank < len(saved["rngs"]):               # a run with more ranks: the new ones keep their own
        set_rng_state(saved["rngs"][rank], log.device)
    log.first_step, log.losses = saved["step"], list(saved["losses"])
    return saved["step"]
