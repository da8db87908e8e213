"""The learner's files, kept in their figures folder: each machine's measured figures, every
notebook's saved run with its predictions and each graded exercise's last result (``measured``), and the pair notebook 04 connected (``saved_pair``).
The arithmetic reads no file: callers take step lines and the engine's cost from here.
"""
