"""The parameter server, one idea per module (notebooks 05, 06, 08): ``loop`` the loops, ``pool`` the
workers and messages, ``server`` the weights and optimizer, ``worker`` the Ray actor of a device,
``messages`` what travels, ``options``, ``hooks``, ``specs`` (what a worker is), ``placement`` (where it
runs), ``rules`` (the server's arithmetic) and ``records`` (where a step's time went), both with no Ray,
``training`` (``ParameterServerTraining``, what a learner holds) and ``saving`` (checkpoints, ``resume``).
``from hetlab.ps import ParameterServerTraining, WorkerSpec`` is what notebooks need; the events
of ``training.events`` (``Resplit``, ``WorkerLost``, …) come from here too.
"""
from hetlab.ps.hooks import AutoCheckpoint, FollowSpeeds, Hook, Progress, RunView
from hetlab.ps.messages import AllWorkersLost, Checkpoint, Event, Resplit, Resumed, Slowdown, WorkerLost
from hetlab.ps.options import Options
from hetlab.ps.specs import WorkerSpec
from hetlab.ps.records import StepRecord
from hetlab.ps.training import ParameterServerTraining

__all__ = ["AllWorkersLost", "AutoCheckpoint", "Checkpoint", "Event", "FollowSpeeds", "Hook", "Options",
           "ParameterServerTraining", "Progress", "Resplit", "Resumed", "RunView", "Slowdown", "StepRecord",
           "WorkerLost", "WorkerSpec"]
