"""Where the pair pays: a hyperparameter search across both machines with Ray Tune (notebook 09).
``driver`` runs it and decides which machine takes which trial (re-exported here: ``from hetlab
import search; search.search()``), ``trial`` is one trial's training (its last checkpoint kept
beside the driver), ``results`` what comes back.
"""
from hetlab.search.driver import (  # noqa: F401 - re-exported
    SPACE, check_space, sample, search, check_numbers)
