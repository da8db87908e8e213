"""The real pair rehearsed on one Linux box (``python -m harness.rehearsal``): ``hosts`` makes two network
namespaces with a capped link and firewalls; ``learner`` pastes the printed lines into their shells
as a learner does (on the "mac", among ``macos``'s command set); ``cells`` runs a notebook cell by
cell in the desktop host; ``run`` brings the pair up that way (re-exported here:
``from harness import rehearsal; rehearsal.up()``).
"""
from harness.rehearsal.run import (  # noqa: F401 - re-exported
    up, describe, stop_host, rejoin, lab, run_on)
from harness.rehearsal.hosts import (  # noqa: F401 - re-exported
    DESKTOP, HOSTS, MAC, PROFILES, ROOT, STATE, Host, down, firewall, host_env, missing, set_link, status)
