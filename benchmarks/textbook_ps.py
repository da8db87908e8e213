"""hetlab's parameter server against the textbook Ray one, side by side (notebook 05).

The textbook is the synchronous loop of Ray's "Parameter Server" example, written out
below: a ``ParameterServer`` actor and ``DataWorker`` actors, the driver chaining
``compute_gradients`` → ``apply_gradients`` without ever waiting. Both engines train
the same ConvNet (Ray's, ``ray_example_cnn`` below, 1,960 parameters, same initial
weights), with plain SGD, 2 workers × 128 samples, 200 sync steps per run, on one local
Ray. Ray's ConvNet ends in log_softmax + nll_loss; here both use cross-entropy on the
same logits (the same thing), and the textbook sums the gradients with lr/2 where hetlab
takes Σ (b_i/B)·g_i with lr: the same update.

Four variants, alternating ``--repeats`` times (median run of each kept):

* ``textbook per-sample``: each worker iterates a DataLoader over PerSampleMNIST
  (``hetlab.core.data``), as in Ray's example;
* ``textbook tensors``: each worker slices batches from one normalised tensor;
* ``hetlab``: ``ParameterServerTraining`` (weighting, per-step timings, fault handling);
* ``Ray's floor``: the fewest Ray calls a synchronous step can make — one call per worker, one
  ``ray.get``, the weights and the gradient as one flat numpy array, the SGD update in the
  driver — and nothing else (no timings, no deadline, no lost worker): what any engine built
  on Ray's actor calls can reach on this machine. ``hetlab ÷ floor`` is the engine's own cost.
  Its workers gather each batch on its own, as hetlab's do, so both pay the same data path: a whole
  epoch gathered at once (``batches``) is a large copy that only the run crossing an epoch pays.

Samples/s is wall clock, driver included, after a few warm-up steps. Goal: hetlab ≥ 0.9×
the textbook on tensors. The ratio is taken in every alternation between hetlab's run and
the textbook-on-tensors run next to it (the order alternates, so they are always
neighbours): this shared box drifts ±10 % within a minute, and a ratio of neighbours
cancels most of it. The ratio printed is the median of those; each one is shown too.
The last line printed is one JSON object.

    .venv/bin/python benchmarks/textbook_ps.py [--steps 200] [--repeats 5]
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import time

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import numpy as np  # noqa: E402
import ray  # noqa: E402
import torch  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from hetlab.cluster.connecting import connect  # noqa: E402
from hetlab.core.data import batches, epoch_order, load_mnist  # noqa: E402
from hetlab.core.flat import flat_grad, flat_weights, load_flat  # noqa: E402
from hetlab.core.models import make_model  # noqa: E402
from hetlab.ps import ParameterServerTraining, WorkerSpec  # noqa: E402
from hetlab.core.data import textbook_loader  # noqa: E402
from hetlab.core.train import evaluate  # noqa: E402


def ray_example_cnn() -> torch.nn.Module:
    """The ConvNet of Ray's parameter-server example: Conv2d(1, 3, 3) → ReLU → MaxPool 3 → Linear(192, 10)."""
    nn = torch.nn
    return nn.Sequential(nn.Conv2d(1, 3, 3), nn.ReLU(), nn.MaxPool2d(3), nn.Flatten(), nn.Linear(192, 10))

LR = 0.01


def get_weights(model):
    return {k: v.cpu() for k, v in model.state_dict().items()}


def get_gradients(model):
    return [None if p.grad is None else p.grad.cpu().numpy() for p in model.parameters()]


def set_gradients(model, gradients):
    for g, p in zip(gradients, model.parameters()):
        if g is not None:
            p.grad = torch.from_numpy(g)


@ray.remote
class ParameterServer:
    def __init__(self, lr):
        self.model = make_model(ray_example_cnn, seed=0)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=lr)

    def apply_gradients(self, *gradients):
        summed = [np.stack(z).sum(axis=0) for z in zip(*gradients)]
        self.optimizer.zero_grad()
        set_gradients(self.model, summed)
        self.optimizer.step()
        return get_weights(self.model)

    def get_weights(self):
        return get_weights(self.model)


@ray.remote
class DataWorker:
    def __init__(self, data, batch_size, seed, per_sample):
        self.model = make_model(ray_example_cnn, seed=0)
        self.data, self.batch_size, self.seed, self.per_sample = data, batch_size, seed, per_sample
        if not per_sample:  # the tensors variant slices batches from these
            self.x, self.y = data.normalized(), data.labels
        self.epoch = 0
        self.data_iterator = self._epoch()

    def _epoch(self):
        seed = self.seed * 1000 + self.epoch
        if self.per_sample:
            return iter(textbook_loader(self.data, self.batch_size, shuffle=True, seed=seed))
        return batches(self.x, self.y, self.batch_size, shuffle=True, seed=seed)

    def compute_gradients(self, weights):
        self.model.load_state_dict(weights)
        try:
            data, target = next(self.data_iterator)
        except StopIteration:  # next epoch
            self.epoch, self.data_iterator = self.epoch + 1, self._epoch()
            data, target = next(self.data_iterator)
        self.model.zero_grad()
        loss = F.cross_entropy(self.model(data), target)
        loss.backward()
        return get_gradients(self.model)


class Textbook:
    """The textbook loop on its own actors; ``run(steps)`` goes on from the current weights."""

    def __init__(self, data_ref, n_workers, batch_size, per_sample):
        self.ps = ParameterServer.remote(LR / n_workers)  # summed gradients: lr/n = the mean with lr
        self.workers = [DataWorker.remote(data_ref, batch_size, i, per_sample) for i in range(n_workers)]
        self.current_weights = self.ps.get_weights.remote()

    def run(self, steps):
        for _ in range(steps):
            gradients = [w.compute_gradients.remote(self.current_weights) for w in self.workers]
            self.current_weights = self.ps.apply_gradients.remote(*gradients)
        return ray.get(self.current_weights)

    def model(self):
        model = make_model(ray_example_cnn, seed=0)
        model.load_state_dict(ray.get(self.current_weights))
        return model

    def shutdown(self):
        for actor in [self.ps, *self.workers]:
            ray.kill(actor)


@ray.remote
class FloorWorker:
    """The textbook's worker on tensors, with the weights and the gradient as one flat numpy array."""

    def __init__(self, data, batch_size, seed):
        self.model = make_model(ray_example_cnn, seed=0)
        self.params = list(self.model.parameters())
        x, y = data.normalized(), data.labels
        # epoch after epoch in the textbook worker's orders, each batch gathered on its own as hetlab's are
        self.data_iterator = ((x[i], y[i]) for epoch in itertools.count()
                              for i in epoch_order(len(y), seed * 1000 + epoch, 0).split(batch_size))

    def compute_gradients(self, flat):
        load_flat(self.params, torch.from_numpy(flat))
        data, target = next(self.data_iterator)
        self.model.zero_grad()
        F.cross_entropy(self.model(data), target).backward()
        return flat_grad(self.params).numpy()


class Floor:
    """Ray's floor: one call per worker and one get a step, the update in the driver, nothing else."""

    def __init__(self, data_ref, n_workers, batch_size):
        self.workers = [FloorWorker.remote(data_ref, batch_size, i) for i in range(n_workers)]
        self.weights = flat_weights(make_model(ray_example_cnn, seed=0)).numpy()

    def run(self, steps):
        for _ in range(steps):
            grads = ray.get([w.compute_gradients.remote(self.weights) for w in self.workers])
            self.weights = self.weights - LR * sum(grads) / len(grads)   # SGD on the mean gradient

    def model(self):
        model = make_model(ray_example_cnn, seed=0)
        load_flat(model, torch.from_numpy(self.weights))
        return model

    def shutdown(self):
        for actor in self.workers:
            ray.kill(actor)


class Hetlab:
    """hetlab's engine, same model, data, SGD and batch sizes."""

    def __init__(self, data, n_workers, batch_size):
        self.ps = ParameterServerTraining([WorkerSpec(f"w{i}", device="cpu") for i in range(n_workers)],
                                          data, model=ray_example_cnn, lr=LR, optimizer="sgd",
                                          batch_sizes=[batch_size] * n_workers, progress=False)

    def run(self, steps):
        self.ps.run(steps)

    def model(self):
        return self.ps.model()

    def shutdown(self):
        self.ps.shutdown()


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=200, help="sync steps per run")
    p.add_argument("--repeats", type=int, default=5, help="alternations of the three variants")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=128, help="per worker")
    args = p.parse_args(argv)
    train, test = load_mnist("train"), load_mnist("test")
    connect(num_cpus=2)
    data_ref = ray.put(train)
    engines = {"textbook per-sample": Textbook(data_ref, args.workers, args.batch_size, per_sample=True),
               "textbook tensors": Textbook(data_ref, args.workers, args.batch_size, per_sample=False),
               "hetlab": Hetlab(train, args.workers, args.batch_size),
               "Ray's floor": Floor(data_ref, args.workers, args.batch_size)}
    rates: dict[str, list[float]] = {name: [] for name in engines}
    samples = args.steps * args.workers * args.batch_size
    try:
        for engine in engines.values():
            engine.run(5)  # warm-up: actors started, first shapes run
        for r in range(args.repeats):
            for name in (list(engines) if r % 2 == 0 else reversed(list(engines))):
                t0 = time.perf_counter()
                engines[name].run(args.steps)
                rates[name].append(samples / (time.perf_counter() - t0))
        accuracy = {name: evaluate(e.model(), test, "cpu") for name, e in engines.items()}
    finally:
        for engine in engines.values():
            engine.shutdown()
        ray.shutdown()

    rate = {name: statistics.median(r) for name, r in rates.items()}
    base = rate["textbook tensors"]
    each = [h / t for h, t in zip(rates["hetlab"], rates["textbook tensors"])]  # neighbours' ratios
    ratio = statistics.median(each)
    floor_each = [f / t for f, t in zip(rates["Ray's floor"], rates["textbook tensors"])]
    own_each = [h / f for h, f in zip(rates["hetlab"], rates["Ray's floor"])]  # neighbours too
    print(f"textbook_ps: {args.workers} workers × {args.batch_size}, {args.steps} sync steps per run, "
          f"median of {args.repeats} alternating runs, SGD lr {LR}, Ray's ConvNet")
    print(f"  {'engine':22s} {'samples/s':>10} {'runs':>42} {'vs tensors':>11} {'accuracy':>9}")
    for name in engines:
        runs = ", ".join(f"{x:,.0f}" for x in rates[name])
        print(f"  {name:22s} {rate[name]:10,.0f} {runs:>42} {rate[name] / base:10.2f}× {accuracy[name]:9.4f}")
    print(f"  hetlab ÷ textbook tensors, run by neighbouring run: {', '.join(f'{r:.3f}' for r in each)}"
          f" (median {ratio:.3f})")
    print(f"  Ray's floor ÷ textbook tensors: {', '.join(f'{r:.3f}' for r in floor_each)}"
          f" (median {statistics.median(floor_each):.3f}): the most any engine on Ray's calls reaches here")
    print(f"  hetlab ÷ Ray's floor: {', '.join(f'{r:.3f}' for r in own_each)}"
          f" (median {statistics.median(own_each):.3f}): what hetlab's own work costs")
    result = {"bench": "textbook_ps", "samples_per_s": {k: round(v) for k, v in rate.items()},
              "hetlab_vs_textbook_tensors": round(ratio, 3),
              "hetlab_vs_textbook_tensors_each": [round(r, 3) for r in each],
              "hetlab_vs_textbook_per_sample": round(rate["hetlab"] / rate["textbook per-sample"], 3),
              "floor_vs_textbook_tensors": round(statistics.median(floor_each), 3),
              "hetlab_vs_floor": round(statistics.median(own_each), 3),
              "hetlab_vs_floor_each": [round(r, 3) for r in own_each],
              "accuracy": {k: round(v, 4) for k, v in accuracy.items()},
              "steps": args.steps, "workers": args.workers, "batch_size": args.batch_size,
              "repeats": args.repeats}
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
