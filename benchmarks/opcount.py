"""Count the torch operations a piece of code issues and its reads back to the host (``train_loop.py``).

At a small batch a card waits on the loop, not on arithmetic: each operation is a launch and each
read to the host (``item``, ``tolist``, ``.cpu()``, ``bool(t)``) waits for the card. Both can be
counted on any machine: ``with count_ops() as c: ...`` then ``c.ops`` and ``c.reads``
(``train_loop.py`` compares ``train`` with a bare loop this way; ``tests/test_train.py`` checks it).
"""
from __future__ import annotations

from collections import Counter

from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

# Tensor methods that copy a value to the host (the host waits for the device first).
READS = frozenset({"item", "tolist", "numpy", "cpu", "__bool__", "__float__", "__int__", "__index__"})


class _Ops(TorchDispatchMode):
    """Every operator that reaches torch's dispatcher, the backward's included."""

    def __init__(self, counter: Counter):
        super().__init__()
        self.counter = counter

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.counter[str(func.overloadpacket)] += 1
        return func(*args, **(kwargs or {}))


class _Reads(TorchFunctionMode):
    """Every call of a tensor method in ``READS``."""

    def __init__(self, counter: Counter):
        super().__init__()
        self.counter = counter

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in READS:
            self.counter[name] += 1
        return func(*args, **(kwargs or {}))


class count_ops:
    """A context manager: ``ops`` (operator → calls) and ``reads`` (method → calls) of the code inside it."""

    def __init__(self):
        self.ops: Counter = Counter()
        self.reads: Counter = Counter()
        self._modes = (_Ops(self.ops), _Reads(self.reads))

    def __enter__(self) -> "count_ops":
        for mode in self._modes:
            mode.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        for mode in reversed(self._modes):
            mode.__exit__(*exc)

    def per_step(self, steps: int) -> tuple[float, float]:
        """(operations, host reads) per step, for code that took ``steps`` steps."""
        return sum(self.ops.values()) / steps, sum(self.reads.values()) / steps
