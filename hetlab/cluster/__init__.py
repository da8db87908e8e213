"""Ray and the machines (notebooks 03, 04): connecting and the nodes' roles (``ray_cluster``,
re-exported here, so ``from hetlab import cluster; cluster.connect()`` reads as before), the
practice cluster (``practice``), the printed ``ray start`` lines (``commands``), reachability
(``reach``), the token (``authtoken``), who holds a GPU in Ray (``gpu_holders``), Ray's logs
(``raylog``), the Mac's figures read over the cluster (``figures``), the Mac's join from notebook 04
(``joining``, which keeps the pair in ``hetlab.store``), the link timed through Ray (``link``)
and each machine described on itself (``machines``).
"""
from hetlab.cluster.ray_cluster import (  # noqa: F401 - re-exported
    ROLE_LABEL, SIMULATED_LABEL, ROLE_SLIVER, role_resource, role_label, node_labels,
    node_resources, placement, has_role, live_nodes, requested_address, enable_local_token_auth, token_mode,
    check_timeout, connect, check_same_code, driver_notice, TABLE_COLUMNS, node_name, nodes, NodeTable, node_table)
