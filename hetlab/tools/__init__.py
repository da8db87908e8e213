"""Tooling around the course, not part of its lessons: the ``hetlab`` command line (``cli``),
the pre-flight checks behind ``hetlab doctor`` (``preflight``), the two-host rehearsal on one
Linux machine (``rehearsal``) and the acceptance check for a real NVIDIA GPU (``gpucheck``).
A learner reads ``hetlab/`` for the ideas; this folder is how they are run and checked.
Each tool is a folder of modules: ``cli`` (``app``, ``base``, one per larger subcommand),
``doctor``, ``rehearsal`` (``hosts``, ``run``) and ``gpucheck`` (``claims``, ``pair``, …)."""
