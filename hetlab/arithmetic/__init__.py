"""The pair's arithmetic, plain Python with no torch and no Ray: a device's step time (``steptime``), the
split that ends both machines together (``balance``), what the pair can gain (``planner``), the
course's stated estimates (``estimates``), the one definition of a measured speed (``steady``), and a
technique's figures from its records (``outcome``). Notebooks 02, 05, 06, 08 and 09 print from here.
"""
