"""What a learner looks at: plots (``plots``), the pictures of the pair (``diagrams``), the
batch-ratio tuner (``widgets``, notebook 06), a search's timeline (``searchplot``, notebook 09) and
the hand-in page (``report``, ``hetlab report``). Thin views: the numbers come from the layers below.
"""
