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
from hetlab.ps.loop import drop_lost
from hetlab.ps.messages import Checkpoint, Resumed


def save(training, path=None) -> Path:
    """Save ``training`` to ``path`` (default: its checkpoint_dir/step-NNNNNN.pt) on the driver's
    disk. Call it when nothing is in flight (between ``run`` calls, or from a hook's ``at_rest``):
    the cursor then counts exactly the samples of the updates the server has applied. A worker
    gone since its last step (the Mac slept just then) is dropped first, as a step drops it."""
    if path is None:
        if not training.checkpoint_dir:
            raise HetlabError("give save_checkpoint(path) or checkpoint_dir=... when starting.")
        path = checkpoint_path(training.checkpoint_dir, training.step)
    pool, log = training.pool, training.log
    local, lost = pool.collect({m.spec.name: m.actor.local_state.remote() for m in pool.members})
    drop_lost(pool, training.stream, lost)
    state = {"format": FORMAT, "model": training.model_name, "signature": param_signature(training.factory),
             "options": training.options.saved(), "step": log.step, "samples_seen": log.samples_seen,
             "server": training.server.state(), "workers": [{"name": n, **local[n]} for n in pool.names],
             "batch_sizes": list(pool.batch_sizes), "local_steps": pool.local_steps, "stream": training.stream.state(),
             "data_len": training.data_len, "bytes_to_workers": pool.bytes_down, "bytes_to_server": pool.bytes_up}
    path = save_checkpoint(state, path)
    log.event(Checkpoint(log.step, str(path)))
    return path


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
        run.server.load_state(ckpt["server"])
        run.pool.answers({m.spec.name: m.actor.load_local_state.remote(w) for m, w in zip(run.pool.members, saved)},
                         "loading the checkpoint", then="check hetlab.cluster.node_table() and resume again")
        run.stream = Stream.from_state(ckpt["stream"])
        run.log.restore(ckpt["step"], ckpt["samples_seen"])
        run.pool.bytes_down, run.pool.bytes_up = ckpt["bytes_to_workers"], ckpt["bytes_to_server"]
        run.pool.publish(run.server.weights())
    except BaseException:
        run.shutdown()
        raise
    run.log.event(Resumed(run.step, str(path)))
    if run.progress:
        print(f"resumed from {path} at step {run.step}")
    return run
