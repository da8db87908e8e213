"""Tooling around the course, not part of its lessons: the ``hetlab`` command line (``cli``), the checks behind ``hetlab
doctor`` (``doctor``) and the course's CUDA claims on a learner's NVIDIA card (``gpucheck``). A learner
reads ``hetlab/`` for the ideas; this folder is how they are run and checked. The maintainers' harness
(the pair played on one Linux box, the GPU machine's call) is ``harness/`` at the repository's root,
not installed."""
