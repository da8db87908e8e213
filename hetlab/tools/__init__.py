"""Tooling around the course, not part of its lessons: the ``hetlab`` command line (``cli``),
the pre-flight checks behind ``hetlab doctor`` (``preflight``), the two-host rehearsal on one
Linux machine (``rehearsal``) and the acceptance check for a real NVIDIA GPU (``gpucheck``).
A learner reads ``hetlab/`` for the ideas; this folder is how they are run and checked.
A larger tool is split into modules named after it: ``cli_train``, ``rehearsal_hosts``,
``gpucheck_pair`` and the like."""
