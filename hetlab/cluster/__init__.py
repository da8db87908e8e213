"""Ray and the machines (notebooks 03, 04): connecting to the address asked for, the token kept private
and what each node runs (``connecting``, re-exported here with the roles, so ``cluster.connect()`` reads as
before), the roles and actors pinned to them (``roles``), the practice cluster (``practice``), the printed
``ray start`` lines and running them (``commands``), reachability (``reach``), who holds a GPU in Ray
(``gpu_holders``), Ray's logs (``raylog``), the Mac's figures (``figures``), the Mac's join from 04, the
pair it saves (kept in ``hetlab.store``) and a moved address on day two (``joining``), the link timed
through Ray (``link``), each machine on itself (``machines``).
"""
from hetlab.cluster.roles import (  # noqa: F401 - re-exported
    ROLE_LABEL, SIMULATED_LABEL, ROLE_SLIVER, role_resource, role_label, node_labels, node_resources, placement,
    has_role, live_nodes, node_name)
from hetlab.cluster.connecting import (  # noqa: F401 - re-exported
    Requested, requested_address, enable_local_token_auth, token_mode, check_timeout, connect, driver_notice,
    TABLE_COLUMNS, check_same_code, nodes, NodeTable, node_table)
