"""The learner's files, kept in their figures folder: each machine's measured figures and every
notebook's saved run (``measured``), what each prediction and measurement is about (``claims``),
each graded exercise's last result (``graded``), and the pair notebook 04 connected (``saved_pair``).
The arithmetic reads no file: callers take step lines and the engine's cost from here.
"""
