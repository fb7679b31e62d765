"""det: the determinant of an l x l matrix by expansion by minors (cmpad's det_by_minor), the
same O(l!) products as the recursion, computed a row at a time over every partial choice of
columns: after row k, one entry per ordered choice of k distinct columns holds the signed
product of the chosen entries, with the columns still free beside it. `gradient` is rl.grad.

No .rly file: the tensors change shape from row to row (l!/(l-k)! choices after row k), so the
program is built with the Python builder, one block of bindings per row. The free columns are
computed from an argument (0..l-1), not from constants, so that XLA does not fold the l!-row
integer tables into the compiled program.
"""
import numpy as np

import relayish as rl
from tool import compiled, multiple_runs


def minors_program(ell):
    """fn(A: Tensor[(ell * ell)], columns: Tensor[(ell), int32]) -> det(A)."""
    a = rl.var("A", shape=(ell * ell,), dtype="float64")
    columns = rl.var("columns", shape=(ell,), dtype="int32")
    bindings = []

    def let(name, value):
        v = rl.Var(name)
        bindings.append((v, value))
        return v

    products = rl.ones((1,), "float64")
    free = rl.reshape(columns, (1, ell))
    choices = 1
    for k in range(ell):
        r = ell - k                                     # columns still free
        row = let(f"row{k}", rl.strided_slice(a, [k * ell], [(k + 1) * ell]))
        entries = let(f"entries{k}", rl.take(row, free))                      # (choices, r)
        signs = rl.const(np.array([(-1.0) ** j for j in range(r)]))
        products = let(f"products{k}", rl.reshape(
            rl.reshape(products, (choices, 1)) * signs * entries, (choices * r,)))
        if r > 1:
            drop = np.array([[i for i in range(r) if i != j] for j in range(r)], dtype=np.int32)
            free = let(f"free{k}", rl.reshape(rl.take(free, rl.const(drop), axis=1),
                                              (choices * r, r - 1)))
        choices *= r
    body = rl.sum(products)
    for var, value in reversed(bindings):
        body = rl.Let(var, value, body)
    return rl.Function([a, columns], body)


def prepare(input):
    ell = int(input["ell"])
    return ell, np.asarray(input["A"], dtype=np.float64), np.arange(ell, dtype=np.int32)


@multiple_runs(pre=prepare, post=float)
def primal(input):
    ell, a, columns = input
    return compiled(("det", "primal", ell), lambda: minors_program(ell))(a, columns)


@multiple_runs(pre=prepare, post=lambda g: np.asarray(g).tolist())
def gradient(input):
    ell, a, columns = input
    return compiled(("det", "gradient", ell),
                    lambda: rl.grad(minors_program(ell), argnums=0))(a, columns)
