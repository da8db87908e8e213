"""What a learner looks at: plots and notebook 05's picture of one parameter-server step
(``plots``; a search's timeline too, notebook 09), the batch-split tuner (``widgets``, notebook 06)
and the hand-in page (``report``, ``hetlab report``: the page and its HTML, the learner's words
kept, what stays out). Thin views: numbers come from below.
"""
