"""A parameter-server run saved and resumed exactly (notebook 08).

``save`` writes what the run needs to go on: the server's weights and optimizer, each worker's
own state (local SGD's inner Adam), the data cursor, the step and counters, the batch sizes
and the ``Options`` whole (``hetlab.core.checkpoint`` writes the file atomically). ``resume`` builds
a new ``ParameterServerTraining`` from it that continues bit for bit as the first would have.
"""
from __future__ import annotations

from pathlib import Path

from hetlab.core.checkpoint import FORMAT, checkpoint_path, load_checkpoint, param_signature, save_checkpoint
from hetlab.core.data import n_samples
from hetlab.core.stream import Stream
from hetlab.errors import HetlabError
from hetlab.ps.loop import collect, drop_lost
from hetlab.ps.records import Checkpoint, Resumed


def save(training, path=None) -> Path:
    """Save ``training`` to ``path`` (default: its checkpoint_dir/step-NNNNNN.pt) on the driver's
    disk. Call it when nothing is in flight (between ``run`` calls, or from a hook's ``at_rest``):
    the cursor then counts exactly the samples of the updates the server has applied. A worker
    gone since its last step (the Mac slept just then) is dropped first, as a step drops it."""
    if path is None:
        if not training.checkpoint_dir:
            raise HetlabError("give save_checkpoint(path) or checkpoint_dir=... when starting.")
        path = checkpoint_path(training.checkpoint_dir, training.step)
    t = training
    local, lost = collect(t, {m.name: m.actor.local_state.remote() for m in t.members})
    drop_lost(t, lost, {})   # nothing is in flight: no positions to give back
    state = {"format": FORMAT, "model": t.model_name, "signature": param_signature(t.factory),
             "options": t.options.saved(), "step": t.step, "samples_seen": t.samples_seen,
             "server": t.server.state(), "workers": [{"name": n, **local[n]} for n in t.names],
             "batch_sizes": t.batch_sizes, "local_steps": t.local_steps, "stream": t.stream.state(),
             "data_len": t.data_len, "bytes_to_workers": t.bytes_to_workers, "bytes_to_server": t.bytes_to_server}
    path = save_checkpoint(state, path)
    t.events.append(Checkpoint(t.step, str(path)))
    return path


def resume_state(checkpoint: dict, server) -> tuple[Stream, int]:
    """What makes a resumed run continue bit for bit (notebook 08): the weights and the optimizer's
    state (Adam's moments and step count) back into the new run's ``server``, and the data cursor
    and the step returned, so the next step trains the samples and makes the update the first
    run's next step would have."""
    server.load_state(checkpoint["server"])
    return Stream.from_state(checkpoint["stream"]), checkpoint["step"]


def resume(cls, path, workers: list, train_data, **overrides):
    """A new ``cls`` (``ParameterServerTraining``) continuing where the checkpoint at ``path``
    stopped; ``overrides``: keyword arguments of ``cls`` to change (``progress``, ...)."""
    model = overrides.pop("model", None)
    ckpt = load_checkpoint(path, model=model)
    saved = ckpt["workers"]
    if not isinstance(workers, (list, tuple)) or len(workers) != len(saved):
        raise HetlabError(f"{path} was saved with {len(saved)} workers ({[w['name'] for w in saved]}): "
                          f"give one WorkerSpec per saved worker.")
    if n_samples(train_data) != ckpt["data_len"]:
        raise HetlabError(f"{path} was trained on {ckpt['data_len']} samples, not {n_samples(train_data)}: "
                          f"resume with the same training data.")
    kwargs = {**ckpt["options"], "batch_sizes": ckpt["batch_sizes"], **overrides}
    if "local_steps" in ckpt:   # older checkpoints kept H among the options
        kwargs.setdefault("local_steps", ckpt["local_steps"])
    mode = ckpt["options"]["mode"]
    if (kwargs["mode"] == "local_sgd") != (mode == "local_sgd"):
        raise HetlabError(f"{path} is a {mode} checkpoint: local_sgd uses another optimizer, "
                          f"resume it in mode {mode!r}.")
    run = cls(workers, train_data, model=ckpt["model"] if model is None else model, **kwargs)
    try:
        run.stream, run.step = resume_state(ckpt, run.server)
        run.answers({m.name: m.actor.load_local_state.remote(w) for m, w in zip(run.members, saved)},
                    "loading the checkpoint", then="check hetlab.cluster.node_table() and resume again")
        run.samples_seen = ckpt["samples_seen"]
        run.bytes_to_workers, run.bytes_to_server = ckpt["bytes_to_workers"], ckpt["bytes_to_server"]
        run.publish(run.server.weights())
    except BaseException:
        run.shutdown()
        raise
    run.events.append(Resumed(run.step, str(path)))
    if run.progress:
        print(f"resumed from {path} at step {run.step}")
    return run
