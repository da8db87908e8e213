"""The plain loop at the course's batch on the card (``python -m harness.gpucheck``'s ``train_128``): the
figure the reference pages quote (docs/reference-figures.md), not a goal.
"""
from __future__ import annotations

import time

from hetlab.tools.gpucheck import Row


def check_train_128(ctx) -> list[Row]:
    """``train`` at batch 128 (notebook 01's model and loop): the warm samples/s (``History.steady``: the
    warm-up, with cudnn's first search, apart, its seconds beside it) and the test accuracy. Not a goal:
    the figure the reference pages quote. A whole number of batches, so that no partial last batch is a
    new shape inside the timed windows."""
    from hetlab.core.data import load_mnist
    from hetlab.core.models import make_model
    from hetlab.core.train import train
    batch = 128
    n = max(batch, ctx.sizes.plain_samples // batch * batch)
    data, test = load_mnist("train").subset(n, seed=0), ctx.test_data()
    t0 = time.perf_counter()
    hist = train(make_model("small", seed=0), data, test, epochs=ctx.sizes.plain_epochs, batch_size=batch,
                 device=ctx.device, progress=False)
    warm, accuracy = hist.steady, hist.final_accuracy
    return [Row("train_128_plain", warm.samples_per_s, "samples/s", None,
                f"the plain loop: {n:,} samples × {ctx.sizes.plain_epochs}, batch {batch}; warm "
                f"{warm.low:,.0f}–{warm.high:,.0f} over {len(warm.windows)} windows, warm-up "
                f"{warm.warmup_steps} steps {warm.warmup_s:.2f} s (apart); test accuracy {accuracy:.2%}",
                details={"steady": warm.as_dict(), "accuracy": accuracy,
                         "whole_run_samples_per_s": hist.samples_per_s,
                         "seconds_with_evaluation": time.perf_counter() - t0, "final_loss": hist.loss[-1]})]
