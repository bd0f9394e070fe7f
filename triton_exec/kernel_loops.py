"""Loop bounds of generated kernels, as `loops.bound(n)`: a loop over a runtime count
(`for r in range(0, loops.bound(n), ROWS)`, the column plan's loop over the rows). Compiled, it
is `n` itself. Triton's interpreter (3.6, with numpy 2) holds a scalar argument as a
one-element array, which Python's `range` cannot read; there it is that element as a Python
int. A Triton builtin: the compiler calls it with `_semantic`, the interpreter without.
"""
from __future__ import annotations


def bound(n, _semantic=None):
    """The runtime count `n`, as a loop's bound."""
    if _semantic is not None or not hasattr(n, "handle"):
        return n
    return int(n.handle.data.reshape(-1)[0])


bound.__triton_builtin__ = True
