"""Ray and the machines (notebooks 03, 04): connecting to the address asked for, the token kept private,
the head's reach and what each node runs (``connecting``, re-exported here with the roles), the roles
and actors pinned to them (``roles``), the practice cluster (``practice``), the printed ``ray start``
lines and running them (``commands``), Ray's token notice (``raylog``), what the Mac knows brought over
Ray (``figures``), the Mac's join from notebook 04 (``joining``).
"""
from hetlab.cluster.roles import (  # noqa: F401 - re-exported
    ROLE_LABEL, role_label, node_resources, placement, live_nodes, node_name)
from hetlab.cluster.connecting import (  # noqa: F401 - re-exported
    requested_address, token_mode, check_timeout, connect, nodes, node_table)
