"""Tooling around the course, not part of its lessons: the ``hetlab`` command line (``cli``),
the pre-flight checks behind ``hetlab doctor`` (``preflight``) and the course's CUDA claims on a
learner's NVIDIA card (``gpucheck``). A learner reads ``hetlab/`` for the ideas; this folder is how
they are run and checked. Each tool is a folder of modules: ``cli`` (``app``, ``base``, one per
larger subcommand), ``doctor`` and ``gpucheck`` (``claims``, ``device``, ``report``). The maintainers'
harness (the pair played on one Linux box, the GPU machine's call) is ``harness/`` at the repository's
root, not installed."""
