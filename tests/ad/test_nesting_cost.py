"""The AD transforms on deeply nested programs (issue 10, item 12).

Reverse mode looked up every node in the memo of each open scope, innermost first: a program
nested d deep (if inside if, fn inside fn) cost O(d^2) lookups (d = 10^4: 25 s for the nested
ifs below). The cost itself is measured by benchmarks/scaling.py (tests never time); these
tests check the values at depth.
"""
import numpy as np
import pytest

import relayish as rl

F64 = rl.TensorType((), "float64")


def nested_if(n):
    """if (%x < n) { (if (%x < n-1) { ... } else { %x }) + 1 } else { %x }: x + n at x = 0.5."""
    x = rl.var("x", type=F64)
    one = rl.const(1.0, "float64")
    e = x
    for k in range(n):
        e = rl.If(x < rl.const(float(k + 1), "float64"), e * rl.const(1.0001, "float64") + one, x)
    return rl.Function([x], e, F64)


def nested_fn(n):
    """(fn (%y1) { (fn (%y2) { ... })(%y1 * 1.0001 + 1) })(%x * 1.0001 + 1)."""
    x = rl.var("x", type=F64)
    one, c = rl.const(1.0, "float64"), rl.const(1.0001, "float64")
    ys = [x] + [rl.var(f"y{k}", type=F64) for k in range(1, n + 1)]
    e = ys[n]
    for k in range(n, 0, -1):
        e = rl.Call(rl.Function([ys[k]], e), [ys[k - 1] * c + one])
    return rl.Function([x], e, F64)


# the AD output goes through the default pipeline (about 2 ms a nested `if`): 200 levels by
# default, 1,200 (past Python's recursion limit) and 3,000 under -m slow
@pytest.mark.parametrize("build, n", [(nested_if, 200), (nested_fn, 300),
                                      pytest.param(nested_if, 1200, marks=pytest.mark.slow),
                                      pytest.param(nested_if, 3000, marks=pytest.mark.slow)],
                         ids=["if", "fn", "if-1200", "if-3000"])
def test_deeply_nested_gradient_and_jvp_values(build, n):
    # (the interpreter's cost grows quadratically with nested closures: notes/scaling.md)
    prog = build(n)
    expected = 1.0001 ** n                    # d/dx of the n-fold x * 1.0001 + 1
    value, (dx,) = rl.evaluate(rl.gradient(prog), 0.5)
    assert float(dx) == pytest.approx(expected, rel=1e-12)
    assert float(value) == pytest.approx(float(rl.evaluate(prog, 0.5)), rel=1e-14)
    _, tangent = rl.evaluate(rl.jvp(prog), 0.5, 1.0)
    assert float(tangent) == pytest.approx(expected, rel=1e-12)
    np.testing.assert_allclose(float(rl.evaluate(rl.grad(prog), 0.5)), expected, rtol=1e-12)
