"""Each search trial's last checkpoint, kept by a Ray actor on the driver's machine (notebook 09,
``hetlab.search.driver``). A trial sends its state here after every epoch, through Ray; a trial
retried on the other machine (its own was lost) reads it back. So a pair with no folder both
machines share, and no bucket, still resumes a moved trial where it stopped.

Why not Ray Tune's checkpoints: Tune writes them into its storage from the trial's machine and
reads them back from there, so without storage both machines see, a moved trial finds none.
The driver's machine is the one a search cannot lose: losing it ends the search anyway.
"""
from __future__ import annotations

import ray


class CheckpointKeeper:
    """Trial number → the bytes of its last saved state (``hetlab.search.trial._saved``)."""

    def __init__(self):
        self.saved: dict[int, bytes] = {}

    def put(self, trial: int, state: bytes) -> None:
        self.saved[trial] = state

    def get(self, trial: int) -> bytes | None:
        return self.saved.get(trial)

    def size(self) -> int:
        return sum(len(b) for b in self.saved.values())


def start_keeper():
    """A ``CheckpointKeeper`` actor on this process's node (no CPU reserved: it only stores)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    return ray.remote(num_cpus=0)(CheckpointKeeper).options(scheduling_strategy=here).remote()
