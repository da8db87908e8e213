"""Ray and the machines (notebooks 03, 04): connecting to the address asked for, the token kept private
and what each node runs (``connecting``, re-exported here with the roles, so ``cluster.connect()`` reads as
before), the roles and actors pinned to them (``roles``), the practice cluster (``practice``), the printed
``ray start`` lines and running them (``commands``), reachability (``reach``), who holds a GPU in Ray
(``gpu_holders``), Ray's logs (``raylog``), the Mac's figures (``figures``), the Mac's join from 04, the
pair it saves (kept in ``hetlab.store``) and a moved address on day two (``joining``), the link timed
through Ray (``link``), each machine on itself (``machines``).
"""
from hetlab.cluster.roles import (  # noqa: F401 - re-exported
    ROLE_LABEL, role_label, node_resources, placement, live_nodes, node_name)
from hetlab.cluster.connecting import (  # noqa: F401 - re-exported
    requested_address, token_mode, check_timeout, connect, nodes, node_table)
