"""A Windows desktop, through WSL2 (README, "Windows desktop"; notebook 04): what WSL tells about itself
and ``.wslconfig`` edited safely (``wsl``), the steps printed for Windows (``steps``).
"""
