"""The parameter server (notebooks 05, 06, 08): ``training`` (``ParameterServerTraining``), ``loop``
(the steps, and ``FollowSplit`` between them), ``worker`` (a device's Ray actor), ``server`` (the weights
and optimizer), ``records`` (what a run keeps) and ``specs`` (``WorkerSpec`` and the checks).
"""
from hetlab.ps.loop import FollowSplit
from hetlab.ps.records import Event, StepRecord
from hetlab.ps.specs import WorkerSpec
from hetlab.ps.training import ParameterServerTraining

__all__ = ["Event", "FollowSplit", "ParameterServerTraining", "StepRecord", "WorkerSpec"]
