"""One device, one process: MNIST and your own data (``data``, with the textbook per-sample loader 01
races), one shuffled stream shared by unequal batches (``stream``), the models (``models``), the
training step, the plain loop and its speed (``train``), the devices (``devices``), the machine's
facts (``machine``), the same code on every node (``samecode``), flat weights (``flat``), a simulated
slower device (``simulate``) and checkpoints (``checkpoint``).
Notebooks 01 and 02 build on it; every engine reuses it.
"""
