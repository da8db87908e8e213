"""What a learner looks at: plots (``plots``), the pictures of the pair (``diagrams``), the
batch-ratio tuner (``widgets``, notebook 06), a search's timeline (``searchplot``, notebook 09) and
the hand-in page (``report``, ``hetlab report``; the learner's words ``reportwords``, what stays
out ``reportprivate``, its HTML and CSV ``reportshare``). Thin views: the numbers come from the layers below.
"""
