"""``hetlab doctor`` (notebook 04): one finding (``checks``), whether this machine can join the head
(``preflight``), its operating system for a long run (``oschecks``) and the Windows side seen from
WSL (``winchecks``).
"""
