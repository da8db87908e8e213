"""A Windows desktop, through WSL2 (README, "Windows desktop"; notebook 04): what WSL tells about itself,
what ``.wslconfig`` lacks, and the steps printed for Windows (``wsl``).
"""
