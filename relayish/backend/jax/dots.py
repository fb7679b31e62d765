"""Transposes folded into dots: `matmul(transpose(a), g)` traced as ONE `lax.dot_general`.

Contract. While a program is traced (trace.py), `DotFolding.note(out, x, axes)` is told of
every traced `transpose` result; `DotFolding.matmul(x, y)` returns the product as a
`lax.dot_general` that contracts the *untransposed* operand along the right axis when `x` or
`y` is such a result swapping its last two axes (batch axes, if any, in place and the same on
both sides), and None otherwise (the caller then runs matmul's own impl). The value is the
same product; only the lowering differs.

Why: relayish's matmul gradient is written `matmul(transpose(x), g)` / `matmul(g,
transpose(y))` (ops/nn.py), which jnp lowers to a transpose and a dot with the standard
contracting dimensions. XLA on CPU does not fold the transpose into the dot: it copies the
operand into a transposed buffer at every step (the 256x64 -> 256 MLP of benchmarks/eager.py:
507 us a step with the transposes, 420 with dot_general's contracting dimensions, in plain
jax). A dot_general naming the contracting dimension reads the operand where it is.

The transpose itself is still traced; when nothing else reads it, XLA removes it as dead code.
"""
from __future__ import annotations


class DotFolding:
    """The traced transposes of one trace, by identity of their result (kept alive here, so an
    id is never reused while the map holds it)."""
    __slots__ = ("swapped",)

    def __init__(self):
        self.swapped: dict = {}      # id(transpose result) -> (result, its operand)

    def note(self, out, x, axes) -> None:
        """`out = transpose(x, axes)` was traced: remember it when it swaps the last two axes
        and keeps any others in place."""
        nd = getattr(x, "ndim", 0)
        if nd < 2:
            return
        swap = tuple(range(nd - 2)) + (nd - 1, nd - 2)
        if (axes is None and nd == 2) or (axes is not None and
                                          tuple(a % nd for a in axes) == swap):
            self.swapped[id(out)] = (out, x)

    def _source(self, v):
        known = self.swapped.get(id(v))
        return known[1] if known is not None and known[0] is v else None

    def matmul(self, x, y):
        """`x @ y` as one dot_general reading a transposed operand's source, or None."""
        if not self.swapped:
            return None
        nd = getattr(x, "ndim", 0)
        if nd < 2 or getattr(y, "ndim", 0) != nd or x.shape[:-2] != y.shape[:-2] \
                or x.dtype != y.dtype:
            return None             # a vector, broadcast batch axes, mixed dtypes: matmul's own
        a, b = self._source(x), self._source(y)
        if a is None and b is None:
            return None
        from jax import lax
        batch = tuple(range(nd - 2))
        # x's contracted axis is its last: the source of a transposed x holds it at nd - 2;
        # y's is its nd - 2: the source of a transposed y holds it last
        lhs, lc = (x, nd - 1) if a is None else (a, nd - 2)
        rhs, rc = (y, nd - 2) if b is None else (b, nd - 1)
        return lax.dot_general(lhs, rhs, (((lc,), (rc,)), (batch, batch)))
