"""The pair's arithmetic, plain Python with no torch and no Ray: a device's step time
(``steptime``), the split that ends both machines together (``balance``), what the pair can gain
and the verdict (``planner``), the figures a learner measured (``measured``), and the one definition of a measured speed,
warm-up apart (``steady``). Notebooks 02, 05,
06 and 09 print from here; tests call these functions directly.
"""
