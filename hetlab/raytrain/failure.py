"""One line from the wall of text a failed Ray Train run raises (notebook 07).

``TorchTrainer.fit()`` wraps a rank's error in tens of lines of controller and worker
tracebacks. The learner needs one of four answers: hetlab's own check refused the run, gloo was
asked to join a Mac and a Linux machine (it cannot), a rank's machine went away (a Mac asleep, a
lost link), or the ranks could not reach each other (the rendezvous port blocked by a firewall).
"""
from __future__ import annotations

import re
from typing import Sequence

from hetlab.vocab import Ports

NETWORK_SIGNS = ("timed out", "wait timeout", "connect timeout", "connection refused", "socket", "tcpstore",
                 "rendezvous", "process group")
GLOO_SIGNS = ("unsupported gloo device", "unexpected opcode", "ss_family")  # gloo's two transports met
GONE_SIGNS = ("node has died", "actor died", "worker health check failed",  # a rank's machine left
              "failed to initialize")                                          # ... as the run started


def lost_ranks(text: str) -> list[int]:
    """The ranks whose error snippet says their machine or process went away."""
    snippets = re.findall(r"\[Rank (\d+) Error Snippet\]:(.*?)(?=\[Rank \d+ Error|$)", str(text), flags=re.S)
    return [int(rank) for rank, snippet in snippets if any(sign in snippet.lower() for sign in GONE_SIGNS)]


def explain_failure(text: str, port: int | None, timeout_s: int, roles: Sequence[str] = (),
                    backend: str = "hetlab") -> str:
    """One line from the wall of text a failed ``TorchTrainer.fit()`` raises (``roles``: each
    rank's machine, to name the one that went away). With ``backend="gloo"`` across two machines a
    timeout is gloo's too: a Mac's gloo and a Linux one wait for each other until it runs out."""
    lines = [line.strip() for line in str(text).strip().splitlines() if line.strip()]
    hetlab_line = next((line for line in lines if "HetlabError" in line), None)
    if hetlab_line:
        return f"Ray Train run failed: {hetlab_line}"
    lowered = " ".join(lines).lower()
    if "worker group startup timed out" in lowered:
        return ("Ray Train run failed: its ranks did not get their CPUs in time: a machine has no free CPU for a "
                "rank (another run or a notebook still holds it) or its node is gone: `hetlab.cluster.node_table()` "
                "shows the nodes; stop the other work and run again.")
    network = any(sign in lowered for sign in NETWORK_SIGNS)
    if (backend == "gloo" and len(set(roles)) > 1 and network) or any(sign in lowered for sign in GLOO_SIGNS):
        return ("Ray Train run failed: gloo cannot join these ranks: it speaks another transport on macOS "
                "than on Linux (pytorch/pytorch#144851). Use hetlab's exchange, train_mixed's default "
                "backend='hetlab'.")
    gone = lost_ranks(text)
    if gone or (not network and any(sign in lowered for sign in GONE_SIGNS)):
        who = (", ".join(f"the {roles[r]} (rank {r})" if r < len(roles) else f"rank {r}" for r in gone)
               or "a rank's machine")
        return (f"Ray Train run failed: {who} went away (its Ray node or a rank's process died: a Mac "
                f"asleep, a lost link). A Ray Train run needs every rank: bring that machine back "
                f"(`hetlab.cluster.node_table()` shows it) and run again; the parameter server goes on "
                f"without it (notebook 08).")
    if network:
        port = port or Ports.train_rendezvous
        return (f"Ray Train's ranks could not connect to each other within {timeout_s} s: open TCP {port} "
                f"(the rendezvous store, on rank 0's machine) to the other machine's IP: `hetlab head` "
                f"prints the rule (Ray Train only).")
    errors = [line for line in lines if re.match(r"^[\w.]+(Error|Exception)\b.*: ", line)]
    return f"Ray Train run failed: {(errors or lines or ['no reason given'])[-1]}"   # the innermost reason
