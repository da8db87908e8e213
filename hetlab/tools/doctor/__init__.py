"""``hetlab doctor`` (notebook 04): whether this machine can join the head (``preflight``), and its
operating system for a long run, the Windows side seen from WSL among it (``oschecks``).
"""
