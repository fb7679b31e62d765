"""Any order: rl.grad(rl.grad(rl.grad(f))) against closed forms, through closures, if, match,
references and recursion; one program for every order."""
import numpy as np
import pytest

import relayish as rl

F = "float64"
S = rl.TensorType((), F)


def c(v):
    return rl.const(v, F)


def nth(f, n, **kw):
    for _ in range(n):
        f = rl.grad(f, **kw)
    return f


def closed(expr_fn):
    x = rl.var("x", dtype=F)
    return rl.Function([x], expr_fn(x))


POINTS = [0.3, -1.1, 1.7]


@pytest.mark.parametrize("n, expected", [
    (1, lambda x: np.cos(x) * np.exp(x) + np.sin(x) * np.exp(x)),
    (2, lambda x: 2 * np.cos(x) * np.exp(x)),
    (3, lambda x: 2 * np.cos(x) * np.exp(x) - 2 * np.sin(x) * np.exp(x)),
    (4, lambda x: -4 * np.sin(x) * np.exp(x)),
])
def test_sin_exp_derivatives(n, expected):
    f = nth(closed(lambda x: rl.sin(x) * rl.exp(x)), n)
    for x in POINTS:
        np.testing.assert_allclose(rl.evaluate(f, x), expected(x), rtol=1e-12)


def test_polynomial_third_and_fourth():
    d3 = nth(closed(lambda x: x * x * x * x * x), 3)           # x^5
    d4 = rl.grad(d3)
    for x in POINTS:
        np.testing.assert_allclose(rl.evaluate(d3, x), 60 * x ** 2, rtol=1e-12)
        np.testing.assert_allclose(rl.evaluate(d4, x), 120 * x, rtol=1e-12)


def test_tanh_third_derivative():
    f = nth(closed(rl.tanh), 3)
    for x in POINTS:
        t = np.tanh(x)
        np.testing.assert_allclose(rl.evaluate(f, x), -2 * (1 - t * t) * (1 - 3 * t * t),
                                   rtol=1e-10)


def test_third_order_through_closure_and_if():
    """f(x) = let k = fn(y) { y * y * x }; if x > 0 { k(x) } else { k(sin(x)) }."""
    x, y = rl.var("x", dtype=F), rl.var("y", dtype=F)
    k = rl.Var("k")
    f = rl.Function([x], rl.Let(k, rl.Function([y], y * y * x),
                                rl.If(x > c(0.0), k(x), k(rl.sin(x)))))
    d3 = nth(f, 3)
    np.testing.assert_allclose(rl.evaluate(d3, 0.8), 6.0, rtol=1e-12)          # x^3
    xv = -0.6                                  # x sin(x)^2 = x/2 - x cos(2x)/2

    def f3(x):
        return 6 * np.cos(2 * x) - 4 * x * np.sin(2 * x)
    np.testing.assert_allclose(rl.evaluate(d3, xv), f3(xv), rtol=1e-10)


def test_fourth_order_through_match_and_recursion():
    """@pow(x, n: Nat) = match n { Z => 1, S(m) => x * pow(x, m) }: d^4/dx^4 x^6 = 360 x^2."""
    mod = rl.Module()
    p = rl.Prelude(mod)
    pw = rl.GlobalVar("pow")
    x, n, m = rl.var("x", dtype=F), rl.var("n", type=rl.TypeCall(p.Nat, [])), rl.Var("m")
    mod[pw] = rl.Function([x, n], rl.Match(n, [
        rl.Clause(rl.PatternConstructor(p.Z, []), c(1.0)),
        rl.Clause(rl.PatternConstructor(p.S, [rl.PatternVar(m)]), x * pw(x, m))]), S)
    x2 = rl.var("x", dtype=F)
    mod["main"] = rl.Function([x2], pw(x2, p.make_nat(6)))
    d4 = nth(mod, 4)
    assert isinstance(d4, rl.Module)
    for xv in POINTS:
        np.testing.assert_allclose(rl.evaluate(d4, xv), 360 * xv ** 2, rtol=1e-12)


def test_third_order_through_refs():
    """r = ref(x); r := !r * !r; r := !r * x: x^3, third derivative 6."""
    x = rl.var("x", dtype=F)
    r = rl.Var("r")
    body = rl.Let(r, rl.RefCreate(x), rl.Let(
        rl.Var("u"), rl.RefWrite(r, rl.RefRead(r) * rl.RefRead(r)),
        rl.Let(rl.Var("u"), rl.RefWrite(r, rl.RefRead(r) * x), rl.RefRead(r))))
    f = rl.Function([x], body)
    np.testing.assert_allclose(rl.evaluate(nth(f, 3), 1.3), 6.0, rtol=1e-12)
    np.testing.assert_allclose(rl.evaluate(nth(f, 2), 1.3), 6 * 1.3, rtol=1e-12)


def test_nat_iterate_third_order():
    """nat_iterate(fn(y) { y * x }, 3)(x) = x^4: third derivative 24 x."""
    mod = rl.Module()
    p = rl.Prelude(mod)
    x, y = rl.var("x", dtype=F), rl.var("y", dtype=F)
    mod["main"] = rl.Function([x], p.nat_iterate(rl.Function([y], y * x), p.make_nat(3))(x))
    np.testing.assert_allclose(rl.evaluate(nth(mod, 3), 0.7), 24 * 0.7, rtol=1e-12)


def test_mixed_partials_with_argnums():
    """f(x, y) = x^3 y^2: d/dy d/dx f = 6 x^2 y; d/dx d/dx f = 6 x y^2."""
    x, y = rl.var("x", dtype=F), rl.var("y", dtype=F)
    f = rl.Function([x, y], x * x * x * y * y)
    fx = rl.grad(f, argnums=0)
    np.testing.assert_allclose(rl.evaluate(rl.grad(fx, argnums=1), 1.5, 0.5), 6 * 2.25 * 0.5)
    np.testing.assert_allclose(rl.evaluate(rl.grad(fx, argnums=0), 1.5, 0.5), 6 * 1.5 * 0.25)


def test_gradient_text_of_every_order_parses():
    f = closed(lambda x: rl.sin(x) * x)
    g = f
    for _ in range(3):
        g = rl.grad(g)
        again = rl.parse_expr(rl.astext(g))
        rl.assert_structural_equal(again, g)
        np.testing.assert_allclose(rl.evaluate(again, 0.4), rl.evaluate(g, 0.4))
