"""Every estimate the course states about an M2 Mac and an RTX 4070 Ti desktop, in one place, each
saying how it was estimated. The README, notebooks and docs write a figure beside a marker
``<!-- estimate: NAME -->`` whose text is ``FIGURES[NAME]``'s.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from hetlab.arithmetic.steady import samples_per_s
from hetlab.arithmetic.steptime import StepTime, fit, independent_gain
from hetlab.errors import HetlabError

# The anchor, measured (docs/measured/2026-11-28-h100-gpucheck): an H100's warm plain loop on the small
# CNN at batch 128 and 256, and a cold first epoch at 128 (CUDA's start inside) for COLD_OVER_WARM.
H100_TRAIN = {128: 76_840.0, 256: 128_937.0}
COLD_OVER_WARM = 34_990.0 / 76_840.0
# Published FP32 peaks, TFLOP/s (an M2 with the 10-core GPU; the 8-core one has 2.9).
FP32_TFLOPS = {"H100": 67.0, "RTX 4070 Ti": 40.0, "M2 GPU": 3.6}
MPS_DISPATCH = 2.0   # an MPS step's fixed cost against a CUDA launch's: estimated, not measured
# The classic CNN against the small one on the same H100's sweep (notebook 02).
CLASSIC_OVER_SMALL = {"fixed": 2.52 / 2.22, "per_sample": 0.94 / 0.43}


H100_LINE = fit(list(H100_TRAIN), [b / s for b, s in H100_TRAIN.items()], "H100, notebook 01")


def _lines() -> dict:
    h100 = H100_LINE
    desktop = StepTime(h100.fixed_s, h100.per_sample_s * FP32_TFLOPS["H100"] / FP32_TFLOPS["RTX 4070 Ti"], "estimated")
    mac = StepTime(h100.fixed_s * MPS_DISPATCH, h100.per_sample_s * FP32_TFLOPS["H100"] / FP32_TFLOPS["M2 GPU"],
                   "estimated")
    scale = lambda line: StepTime(line.fixed_s * CLASSIC_OVER_SMALL["fixed"],  # noqa: E731
                                  line.per_sample_s * CLASSIC_OVER_SMALL["per_sample"], "estimated")
    return {"small": {"desktop": desktop, "mac": mac},
            "classic": {"desktop": scale(desktop), "mac": scale(mac)}}


# The estimated StepTime per model and role: an RTX 4070 Ti ("desktop") and an M2 GPU ("mac").
STEP = _lines()
STEP_HOW = ("estimated: an H100's warm training loop (76,840 and 128,937 samples/s at batch 128 and 256, "
            "2026-11-28, the warm-up left out), its fixed part kept for the card (launching kernels costs "
            "about the same on any recent NVIDIA card) and doubled for MPS, its per-sample part scaled by "
            "FP32 peaks. A first epoch in a fresh process is slower: see the cold estimate")
COLD_HOW = ("estimated: the warm estimate × 0.46, an H100's first epoch in a fresh process (34,990 samples/s at "
            "batch 128, CUDA's start and first kernels inside) over its warm loop (76,840), 2026-11-28")

SEARCH_BATCHES = (32, 128)   # notebook 09's trials train at batch 32 to 128, one trial per device


WHAT = {"desktop": "an RTX 4070 Ti", "mac": "an M2 GPU"}   # the machine each estimate stands for
COURSE_BATCH = 128          # the course's global batch (notebooks 02, 07, 08)

# The engine's own cost per exchange without the link, measured on the practice cluster
# (docs/measured/course-runs.md). Notebook 05 measures your pair's.
ENGINE_S = 4.0e-3
ENGINE_WHERE = "measured on the practice cluster (2 CPU cores), not on your pair"


def labelled(role: str, model: str = "small") -> StepTime:
    """The estimated step line of ``role`` for ``model``, labelled with the machine it stands for."""
    if model not in STEP or role not in STEP[model]:
        raise HetlabError(f"no estimated step time for {role!r} with model {model!r}: run notebook 02 on "
                          f"that machine to measure it (estimates exist for {sorted(STEP)}).")
    return dataclasses.replace(STEP[model][role],
                               source=f"{WHAT[role]}, estimated from an H100's training loop and FP32 peaks; not measured")


def estimated_samples_per_s(role: str, batch: int, model: str = "small") -> float:
    """Estimated samples/s of ``role`` at ``batch``."""
    return samples_per_s(batch, STEP[model][role](batch))


@dataclass(frozen=True)
class Estimate:
    """A figure as the course writes it, and how it was estimated."""

    text: str
    how: str


def _about(x: float, digits: int = 2) -> str:
    from math import floor, log10
    step = 10 ** (floor(log10(x)) - digits + 1)
    return f"{round(x / step) * step:,.0f}"


def _minutes(samples: int, batch: int, role: str, start_s: float) -> str:
    """A full run's minutes: its training samples at the estimated speed, plus start-up and evaluation."""
    return f"about {(samples / estimated_samples_per_s(role, batch) + start_s) / 60:.1f}"


# Notebook 09's search ends with each machine finishing its last trial alone: about a tenth of 16 trials.
SEARCH_PAIR_OVER_SUM = 0.9
# Both machines searching alone ÷ the desktop alone at 09's batches, and the pair's search ÷ the desktop.
_GAINS = [independent_gain(STEP["small"]["desktop"], STEP["small"]["mac"], b) for b in SEARCH_BATCHES]
_GAIN = (min(_GAINS), max(_GAINS))
_PAIR_GAIN = (_GAIN[0] * SEARCH_PAIR_OVER_SUM, _GAIN[1] * SEARCH_PAIR_OVER_SUM)
_NB_HOW = ("estimated: notebook 01's 6 epochs of 60,000 at batch 64 at the estimated step line, plus "
           "half a minute for loading and evaluating")
_RAY_HOW = ("estimated: the full run on a 2-core CPU with no GPU (measured) is the upper end; a Mac or "
            "a desktop has more cores, and its GPU trains faster; Ray's start-up stays")

FIGURES = {
    "desktop_line": Estimate(STEP["small"]["desktop"].formula, STEP_HOW),
    "mac_line": Estimate(STEP["small"]["mac"].formula, STEP_HOW),
    "desktop_classic_line": Estimate(STEP["classic"]["desktop"].formula, STEP_HOW + "; classic ÷ small as on the H100's sweep"),
    "mac_classic_line": Estimate(STEP["classic"]["mac"].formula, STEP_HOW + "; classic ÷ small as on the H100's sweep"),
    "desktop_128": Estimate(f"about {_about(estimated_samples_per_s('desktop', 128))} samples/s", STEP_HOW),
    "mac_128": Estimate(f"about {_about(estimated_samples_per_s('mac', 128))} samples/s", STEP_HOW),
    "desktop_64": Estimate(f"about {_about(estimated_samples_per_s('desktop', 64))} samples/s", STEP_HOW),
    "desktop_cold_128": Estimate(f"about {_about(estimated_samples_per_s('desktop', 128) * COLD_OVER_WARM)} samples/s", COLD_HOW),
    "mac_64": Estimate(f"about {_about(estimated_samples_per_s('mac', 64))} samples/s", STEP_HOW),
    "search_gain": Estimate(f"about {_GAIN[0]:.1f}–{_GAIN[1]:.1f}",
                            "estimated: 1 + the Mac's ÷ the desktop's estimated samples/s at batch 32 to 128"),
    "search_pair_gain": Estimate(f"about {_PAIR_GAIN[0]:.1f}–{_PAIR_GAIN[1]:.1f}",
                                 f"estimated: search_gain × pair ÷ sum ({SEARCH_PAIR_OVER_SUM}: with 16 trials, "
                                 f"each machine ends its last trial alone)"),
    "search_pair_over_sum": Estimate(f"about {SEARCH_PAIR_OVER_SUM}",
                                     "estimated: with 16 trials the search's end costs about one trial per "
                                     "machine of the eight each runs"),
    "ceiling_128": Estimate("about 1.00×", "exact arithmetic on the estimated step lines: the card's whole step "
                                           "at 128 is shorter than the Mac's step at one sample"),
    "nb01_mac": Estimate(f"{_minutes(360_000, 64, 'mac', 30)}", _NB_HOW),
    "nb01_desktop": Estimate(f"{_minutes(360_000, 64, 'desktop', 30)}", _NB_HOW),
    "nb00": Estimate("under 1", "estimated: versions, devices and one read of MNIST; measured under a minute "
                                "on a CPU with no GPU"),
    "nb03": Estimate("under 2", _RAY_HOW),
    "nb04": Estimate("2–4", _RAY_HOW),
    "nb04_pair": Estimate("30–60", "estimated: the first set-up of the pair by hand: addresses, both "
                                   "firewalls, the token, the join, and a fix or two"),
    "nb_quick": Estimate("1–5", "estimated: quick mode's shorter runs; Ray's start-up stays, 09's search is the longest"),
    "nb_light": Estimate("1–3", _RAY_HOW),
    "nb_ray": Estimate("2–6", _RAY_HOW),
    "nb09": Estimate("about 15", "estimated: the search's own time budget (3 minutes for ASHA) and three "
                                 "searches of 16 configurations, each trial at the estimated speeds"),
}
