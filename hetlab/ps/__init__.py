"""The parameter server (notebooks 05, 06, 08): ``training`` (``ParameterServerTraining``, what a
learner holds), ``loop`` (the steps), ``worker`` (the Ray actor of a device), ``server`` (the weights
and the optimizer), ``hooks`` (callbacks between the steps), ``records`` (what a run keeps, with no
Ray) and ``specs`` (what a worker is, where it runs, the ``Options``).
``from hetlab.ps import ParameterServerTraining, WorkerSpec`` is what notebooks need; the events of
``training.events`` (``Event``) come from here too.
"""
from hetlab.ps.hooks import FollowSplit
from hetlab.ps.records import Event, StepRecord
from hetlab.ps.specs import Options, WorkerSpec
from hetlab.ps.training import ParameterServerTraining

__all__ = ["Event", "FollowSplit", "Options", "ParameterServerTraining", "StepRecord", "WorkerSpec"]
