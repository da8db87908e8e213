"""The pair's arithmetic, plain Python with no torch and no Ray: a device's step time and the
step's arithmetic on it (``steptime``), the split that ends both machines together (``balance``),
what the pair can gain and the verdict (``planner``), the course's stated estimates
(``estimates``), the one definition of a measured speed, warm-up apart (``steady``), and a
technique's figures from its records (``outcome``). Notebooks 02, 05, 06 and 09 print from here;
the figures a learner measured are kept in ``hetlab.store``.
"""
