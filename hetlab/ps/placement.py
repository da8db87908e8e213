"""Where a parameter-server worker runs (notebook 05): the Ray actor options that pin it to its
machine by role, and ask Ray for the GPU where it uses one, so that Ray keeps other GPU work off the
card. Refused in one line before any actor starts: a GPU worker without a role on several machines."""
from __future__ import annotations

from hetlab.cluster.roles import live_nodes, placement
from hetlab.errors import HetlabError
from hetlab.ps.specs import WorkerSpec


def actor_options(spec: WorkerSpec) -> dict:
    """Actor options pinning a worker to its machine; a GPU worker asks Ray for the GPU.

    ``device="cuda"``/``"mps"`` always asks for it (so Ray accounts for the card and
    keeps other GPU work off it), and on a cluster of several machines needs a role (Ray
    reports the Mac's GPU as ``GPU: 1`` too); ``"auto"`` asks when the worker's node has a GPU.
    """
    kind = str(spec.device).split(":")[0]
    if kind in ("cuda", "mps") and spec.role is None and len(live_nodes()) > 1:
        raise HetlabError(f"worker {spec.name!r} asks for device={spec.device!r} but has no role: Ray "
                          f"reports a GPU on the Mac too, so on several machines it could start there; "
                          f"give it role={'desktop' if kind == 'cuda' else 'mac'!r}.")
    gpu = kind in ("cuda", "mps") or (kind == "auto" and spec.role is not None and any(
        n["Resources"].get("GPU", 0) >= 1 for n in live_nodes(spec.role)))
    if spec.role is None and not gpu:
        return {}
    return placement(spec.role, gpu=gpu)
