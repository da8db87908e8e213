"""Ray and the machines (notebooks 03, 04): connecting (``connecting``, re-exported here with the rest, so
``cluster.connect()`` reads as before) to the address asked for (``address``), the roles (``roles``), what each
node runs (in ``connecting``), the practice cluster (``practice``), the printed ``ray start`` lines (``commands``) and running them (``starting``),
reachability (``reach``), the token (``authtoken``), who holds a GPU in Ray (``gpu_holders``), Ray's logs (``raylog``),
the Mac's figures (``figures``), the Mac's join from 04 (``joining``), the pair it saves (kept in ``hetlab.store``) and
a moved address on day two (``moved``), the link timed through Ray (``link``), each machine on itself (``machines``).
"""
from hetlab.cluster.roles import (  # noqa: F401 - re-exported
    ROLE_LABEL, SIMULATED_LABEL, ROLE_SLIVER, role_resource, role_label, node_labels, node_resources, placement,
    has_role, live_nodes, node_name)
from hetlab.cluster.address import Requested, requested_address  # noqa: F401
from hetlab.cluster.authtoken import enable_local_token_auth, token_mode  # noqa: F401
from hetlab.cluster.connecting import check_timeout, connect, driver_notice  # noqa: F401
from hetlab.cluster.connecting import TABLE_COLUMNS, check_same_code, nodes, NodeTable, node_table  # noqa: F401
