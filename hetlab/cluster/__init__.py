"""Ray and the machines (notebooks 03, 04): connecting to the address asked for, the token kept private,
the head's reach checked and what each node runs (``connecting``, re-exported here with the roles, so
``cluster.connect()`` reads as before), the roles, actors pinned to them and who holds a GPU (``roles``),
the practice cluster (``practice``), the printed ``ray start`` lines and running them (``commands``),
Ray's logs (``raylog``), what the Mac knows brought over Ray: its figures, the link, each machine's facts
(``figures``), the Mac's join from 04, the pair it saves (kept in ``hetlab.store``) and a moved address
on day two (``joining``).
"""
from hetlab.cluster.roles import (  # noqa: F401 - re-exported
    ROLE_LABEL, role_label, node_resources, placement, live_nodes, node_name)
from hetlab.cluster.connecting import (  # noqa: F401 - re-exported
    requested_address, token_mode, check_timeout, connect, nodes, node_table)
