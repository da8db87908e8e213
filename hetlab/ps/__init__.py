"""The parameter server, one idea per module (notebooks 05, 06, 08).

* ``loop``: the loops themselves, ``sync_step`` (the code notebook 05 has the learner write),
  ``local_sgd_round`` and ``async_updates``;
* ``pool`` and ``server``: the workers and the messages to them; the weights and the
  optimizer (in the driver's process);
* ``worker``: the Ray actor of a device with the data;
* ``messages``: what travels (a worker's reply, a message in flight, a server update) and
  what a run keeps (``History``);
* ``options``: how a run trains, one frozen ``Options``; ``hooks``: what happens around the
  steps (progress, automatic checkpoints, the split that follows the machine);
* ``specs``: plain data and arithmetic, no Ray: ``WorkerSpec``, ``StepRecord``, the weighting
  Σ (b_i/Σb)·g_i, the async scale, the staleness bound, samples/s;
* ``training``: ``ParameterServerTraining``, the object a learner holds; ``saving``: its
  checkpoints and ``resume``.

``from hetlab.ps import ParameterServerTraining, WorkerSpec`` is what notebooks need.
"""
from hetlab.ps.hooks import AutoCheckpoint, FollowSpeeds, Hook, Progress
from hetlab.ps.options import Options
from hetlab.ps.specs import StepRecord, WorkerSpec
from hetlab.ps.training import ParameterServerTraining

__all__ = ["AutoCheckpoint", "FollowSpeeds", "Hook", "Options", "ParameterServerTraining", "Progress",
           "StepRecord", "WorkerSpec"]
