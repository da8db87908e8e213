"""What a learner looks at: plots (``plots``), the pictures of the pair (``diagrams``), the
batch-ratio tuner (``widgets``, notebook 06), a search's timeline (``searchplot``, notebook 09) and
the hand-in page (``report``, ``hetlab report``; each prediction against the same thing measured
``reportclaims``, the exercises and what is missing ``reportwork``, the learner's words ``reportwords``,
what stays out ``reportprivate``, its HTML and CSV ``reportshare``). Thin views: numbers come from below.
"""
