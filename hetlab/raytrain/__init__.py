"""Ray Train on mixed devices (notebook 07): ``mixed`` runs it (``train_mixed``, re-exported here),
``config`` builds Ray Train's settings for a Mac and a CUDA desktop, ``exchange`` is the ranks'
backend across the two systems (their collectives through the rendezvous store), and ``loop`` is
each rank's loop, which reports rank 0's weights as Ray Train's checkpoint.
"""
from hetlab.raytrain.mixed import (  # noqa: F401 - re-exported
    RayTrainResult, train_mixed)
