"""What a learner looks at: plots (``plots``), the pictures of the pair (``diagrams``), the
batch-split tuner (``widgets``, notebook 06), a search's timeline (in ``plots``, notebook 09) and
the hand-in page (``report``, ``hetlab report``: the page and its HTML, the learner's words
kept, what stays out). Thin views: numbers come from below.
"""
