"""The maintainers' harness, outside the package a learner installs (pyproject finds only ``hetlab*``):
``rehearsal``, the real pair rehearsed on one Linux box (``python -m harness.rehearsal up|run|down``,
tests/test_rehearsal.py). Run from the repository's root, where ``conftest.py`` and ``-m`` put it on
``sys.path``; the processes it starts get the checkout on ``PYTHONPATH``. No module in ``hetlab/``
imports it (tests/test_layers.py), and a host it runs says so through the one plain origin label
``HETLAB_ORIGIN`` (``hetlab.core.machine.origin_label``).
"""
