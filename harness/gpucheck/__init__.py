"""The GPU machine's half of the GPU check, for maintainers (docs/gpu-machine.md): every check of
``hetlab gpu-check`` (the card's own claims) and the card in a pair with this machine's CPU (``pair``:
the parameter server and Ray Train; ``wire``: its gradients sent as fp16), the plain
loop's figure at batch 128 (``train_128``), the dry run without a GPU (``--stand-in``) and the dated record a maintainer
commits (``record``). ``python -m harness.gpucheck`` from the repository's root (scripts/gpu_run.sh).
"""
