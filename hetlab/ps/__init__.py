"""The parameter server, one idea per module (notebooks 05, 06, 08).

* ``specs``: plain data and arithmetic, no Ray: ``WorkerSpec``, ``StepRecord``, the weighting
  Σ (b_i/Σb)·g_i, the async scale, the staleness bound, input checks, samples/s;
* ``worker`` and ``server``: the Ray actor of a device with the data; the weights and the optimizer (in the driver);
* ``engine``: ``Engine``, the base class whose methods drive a step (sync round, async
  updates, a lost worker);
* ``training``: ``ParameterServerTraining``, the object a learner holds: start, run, measure,
  checkpoint, resume, shut down; one ``Member`` per worker.

``from hetlab.ps import ParameterServerTraining, WorkerSpec`` is what notebooks need.
"""
from hetlab.ps.specs import StepRecord, WorkerSpec
from hetlab.ps.training import ParameterServerTraining

__all__ = ["ParameterServerTraining", "StepRecord", "WorkerSpec"]
