"""The AD entry points: grad (argnums), value_and_grad, vjp, hessian, hvp, and their errors."""
import numpy as np
import pytest

import relayish as rl
from relayish.ad.api import hvp_reverse
from relayish.ir.op import register_op

F = "float64"


def two_arg():
    x, y = rl.var("x", shape=(3,), dtype=F), rl.var("y", dtype=F)
    return rl.Function([x, y], rl.sum(rl.sin(x) * y))


XV, YV = np.array([0.1, 0.2, 0.3]), np.array(1.5)


def test_grad_argnums():
    f = two_arg()
    np.testing.assert_allclose(rl.evaluate(rl.grad(f), XV, YV), np.cos(XV) * YV)
    np.testing.assert_allclose(rl.evaluate(rl.grad(f, argnums=1), XV, YV), np.sum(np.sin(XV)))
    np.testing.assert_allclose(rl.evaluate(rl.grad(f, argnums=-1), XV, YV), np.sum(np.sin(XV)))
    gx, gy = rl.evaluate(rl.grad(f, argnums=(0, 1)), XV, YV)
    np.testing.assert_allclose(gx, np.cos(XV) * YV)
    np.testing.assert_allclose(gy, np.sum(np.sin(XV)))
    (gy2,) = rl.evaluate(rl.grad(f, argnums=(1,)), XV, YV)
    np.testing.assert_allclose(gy2, gy)


def test_value_and_grad():
    f = two_arg()
    value, gy = rl.evaluate(rl.value_and_grad(f, argnums=1), XV, YV)
    np.testing.assert_allclose(value, np.sum(np.sin(XV)) * YV)
    np.testing.assert_allclose(gy, np.sum(np.sin(XV)))


def test_gradient_and_grad_types():
    f = two_arg()
    tx, ty = rl.TensorType((3,), F), rl.TensorType((), F)
    assert rl.infer_type(rl.gradient(f)).checked_type == rl.FuncType(
        [tx, ty], rl.TupleType([ty, rl.TupleType([tx, ty])]))
    assert rl.infer_type(rl.grad(f)).checked_type == rl.FuncType([tx, ty], tx)
    assert rl.infer_type(rl.vjp(f)).checked_type == rl.FuncType(
        [tx, ty], rl.TupleType([ty, rl.FuncType([ty], rl.TupleType([tx, ty]))]))


def test_vjp_tuple_output_with_cotangent():
    x = rl.var("x", shape=(2,), dtype=F)
    f = rl.Function([x], rl.Tuple([x * x, rl.sum(rl.exp(x))]))
    xv = np.array([0.3, -0.4])
    (sq, s), back = rl.evaluate(rl.vjp(f), xv)
    np.testing.assert_allclose(sq, xv * xv)
    (g,) = back((np.array([1.0, 2.0]), np.array(3.0)))
    np.testing.assert_allclose(g, 2 * xv * [1.0, 2.0] + 3 * np.exp(xv))
    (g0,) = back((np.zeros(2), np.array(1.0)))
    np.testing.assert_allclose(g0, np.exp(xv))


def rosenbrock():
    z = rl.var("z", shape=(2,), dtype=F)
    a, b = rl.take(z, rl.const(0)), rl.take(z, rl.const(1))
    one = rl.const(1.0, F)
    return rl.Function([z], (one - a) * (one - a) + rl.const(100.0, F) * (b - a * a) * (b - a * a))


def rosenbrock_hessian(a, b):
    return np.array([[2 - 400 * (b - 3 * a * a), -400 * a], [-400 * a, 200.0]])


@pytest.mark.parametrize("point", [(1.0, 2.0), (-1.2, 1.0), (0.3, -0.7)])
def test_hessian_rosenbrock_closed_form(point):
    h = rl.evaluate(rl.hessian(rosenbrock()), np.array(point))
    np.testing.assert_allclose(h, rosenbrock_hessian(*point), rtol=1e-12)


@pytest.mark.parametrize("hvp", [rl.hvp, hvp_reverse], ids=["forward-over-reverse",
                                                            "reverse-over-reverse"])
def test_hvp_rosenbrock(hvp):
    v = np.array([0.5, -2.0])
    for point in [(1.0, 2.0), (-1.2, 1.0)]:
        hv = rl.evaluate(hvp(rosenbrock()), np.array(point), v)
        np.testing.assert_allclose(hv, rosenbrock_hessian(*point) @ v, rtol=1e-12)


def test_hessian_of_gradient_program_is_again_differentiable():
    x = rl.var("x", shape=(3,), dtype=F)
    f = rl.Function([x], rl.sum(x * x * x))
    h = rl.hessian(f)
    np.testing.assert_allclose(rl.evaluate(h, np.array([1.0, 2.0, 3.0])), np.diag([6.0, 12, 18]))
    y = rl.var("y", shape=(3,), dtype=F)
    tr = rl.Function([y], rl.sum(h(y)))        # sum of H = 6 * sum(x); its gradient is 6
    np.testing.assert_allclose(rl.evaluate(rl.grad(tr), np.array([1.0, 2.0, 3.0])), 6 * np.ones(3))


RECURSIVE = {
    "a global calling itself": """
def @loop(%x: Tensor[(2), float64], %n: int32) -> Tensor[(2), float64] {
  if (%n > 0) { @loop(sin(%x) * %x, %n - 1) } else { %x }
}
def @main(%x: Tensor[(2), float64]) -> float64 { sum(@loop(%x, 3)) }""",
    "two globals calling each other": """
def @even(%x: Tensor[(2), float64], %n: int32) -> Tensor[(2), float64] {
  if (%n > 0) { @odd(sin(%x) * %x, %n - 1) } else { %x }
}
def @odd(%x: Tensor[(2), float64], %n: int32) -> Tensor[(2), float64] {
  if (%n > 0) { @even(%x * %x, %n - 1) } else { %x }
}
def @main(%x: Tensor[(2), float64]) -> float64 { sum(@even(%x, 3)) }""",
    "a let-bound function calling itself": """
def @main(%x: Tensor[(2), float64]) -> float64 {
  let %f = fn (%v: Tensor[(2), float64], %n: int32) -> Tensor[(2), float64] {
    if (%n > 0) { %f(sin(%v) * %x, %n - 1) } else { %v }
  };
  sum(%f(%x, 3))
}""",
}


@pytest.mark.parametrize("name", list(RECURSIVE))
def test_hessian_of_a_recursive_program_is_forward_over_reverse(name):
    # the jax backend compiles the forward-mode transform of a gradient's loop as a loop, not
    # the vjp of its backpropagators: rl.hessian takes that form for every program that recurses
    from relayish.ad.api import hessian_forward
    mod = rl.parse(RECURSIVE[name])
    h = rl.hessian(mod)
    assert rl.structural_equal(h["main"], hessian_forward(mod)["main"])
    x = np.array([0.4, -0.7])
    np.testing.assert_allclose(rl.evaluate(h, x), rl.evaluate(rl.jacobian(rl.grad(mod)), x),
                               rtol=1e-12)


def test_hessian_of_a_program_with_helpers_but_no_recursion_stays_reverse_over_reverse():
    from relayish.ad.api import hessian_forward
    mod = rl.parse("""
def @square(%x: Tensor[(2), float64]) -> Tensor[(2), float64] { %x * %x }
def @main(%x: Tensor[(2), float64]) -> float64 { sum(sin(@square(%x))) }""")
    h = rl.hessian(mod)
    assert not rl.structural_equal(h["main"], hessian_forward(mod)["main"])
    x = np.array([0.4, -0.7])
    np.testing.assert_allclose(rl.evaluate(h, x), rl.evaluate(hessian_forward(mod), x),
                               rtol=1e-12)


# ---- errors ------------------------------------------------------------------------------------

def test_non_float_output_is_an_error():
    x = rl.var("x", shape=(3,), dtype=F)
    with pytest.raises(rl.GradientError, match="float tensor"):
        rl.gradient(rl.Function([x], x > 0.0))
    with pytest.raises(rl.GradientError, match="float scalar"):
        rl.grad(rl.Function([x], x * x))
    n = rl.var("n", dtype="int32")
    with pytest.raises(rl.GradientError, match="int32"):
        rl.gradient(rl.Function([n], n + n))


def test_bad_argnums():
    with pytest.raises(rl.GradientError, match="out of range"):
        rl.grad(two_arg(), argnums=2)
    with pytest.raises(rl.GradientError, match="argnums"):
        rl.grad(two_arg(), argnums="x")


def test_not_a_program():
    with pytest.raises(rl.GradientError, match="Function or Module"):
        rl.grad(lambda x: x)
    with pytest.raises(rl.GradientError, match="main"):
        rl.gradient(rl.Module())


def test_global_without_module():
    x = rl.var("x", dtype=F)
    f = rl.Function([x], rl.GlobalVar("double")(x))
    with pytest.raises(rl.RelayishError):
        rl.gradient(f)


def test_function_input_is_an_error():
    h = rl.var("h", type=rl.FuncType([rl.TensorType((), F)], rl.TensorType((), F)))
    x = rl.var("x", dtype=F)
    with pytest.raises(rl.GradientError, match="parameter %h"):
        rl.gradient(rl.Function([h, x], h(x)))


def test_missing_gradient_rule_names_the_op():
    op = register_op("ad_test_square_nograd", 1, type_rule=lambda ts, attrs: ts[0],
                     impl=lambda xp, x: x * x)
    x = rl.var("x", dtype=F)
    f = rl.Function([x], rl.sin(op(x)))
    with pytest.raises(rl.GradientError, match="ad_test_square_nograd") as info:
        rl.grad(f)
    assert "%x" in str(info.value)
    # a user rule makes it differentiable, to any order
    rl.register_gradient("ad_test_square_nograd")(lambda orig, g: [g * orig.args[0] * rl.const(2.0, F)])
    np.testing.assert_allclose(rl.evaluate(rl.grad(f), 0.5), np.cos(0.25) * 1.0)
    np.testing.assert_allclose(rl.evaluate(rl.grad(rl.grad(f)), 0.5),
                               -np.sin(0.25) + 2 * np.cos(0.25))


def test_non_differentiable_op_result_has_zero_gradient():
    x = rl.var("x", shape=(3,), dtype=F)
    f = rl.Function([x], rl.sum(rl.cast(rl.cast(x, "int32"), F) * x))
    _, (g,) = rl.evaluate(rl.gradient(f), np.array([1.5, 2.5, -1.5]))
    np.testing.assert_allclose(g, [1.0, 2.0, -1.0])


def test_list_input_function_without_module_gives_module():
    mod = rl.Module()
    p = rl.Prelude(mod)
    lt = rl.TypeCall(p.List, [rl.TensorType((), F)])
    l, h, t = rl.var("l", type=lt), rl.Var("h"), rl.Var("t")
    f = rl.Function([l], rl.Match(l, [
        rl.Clause(rl.PatternConstructor(p.Cons, [rl.PatternVar(h), rl.PatternVar(t)]), h * h),
        rl.Clause(rl.PatternConstructor(p.Nil, []), rl.const(0.0, F))]))
    g = rl.gradient(f)
    assert isinstance(g, rl.Module)
    value, (gl,) = rl.evaluate(g, rl.list_value(mod, [np.array(3.0), np.array(4.0)]))
    assert float(value) == 9.0
    assert [float(v) for v in rl.from_list_value(gl)] == [6.0, 0.0]


@pytest.mark.parametrize("hvp", [rl.hvp, hvp_reverse], ids=["forward-over-reverse",
                                                            "reverse-over-reverse"])
def test_hvp_through_recursive_global(hvp):
    """main(x) = sum(pow(x, 4)) with @pow recursing over a Nat: H v = 12 x^2 v."""
    mod = rl.Module()
    p = rl.Prelude(mod)
    pw = rl.GlobalVar("pow")
    vt = rl.TensorType((2,), F)
    x, n, m = rl.var("x", type=vt), rl.var("n", type=rl.TypeCall(p.Nat, [])), rl.Var("m")
    mod[pw] = rl.Function([x, n], rl.Match(n, [
        rl.Clause(rl.PatternConstructor(p.Z, []), rl.const(np.ones(2))),
        rl.Clause(rl.PatternConstructor(p.S, [rl.PatternVar(m)]), x * pw(x, m))]), vt)
    x2 = rl.var("x", type=vt)
    mod["main"] = rl.Function([x2], rl.sum(pw(x2, p.make_nat(4))))
    xv, v = np.array([0.5, 1.5]), np.array([0.5, -2.0])
    hv = hvp(mod)
    assert isinstance(hv, rl.Module)
    np.testing.assert_allclose(rl.evaluate(hv, xv, v), 12 * xv ** 2 * v, rtol=1e-12)


def test_vjp_of_module_with_recursive_global_is_reusable():
    mod = rl.Module()
    p = rl.Prelude(mod)
    pw = rl.GlobalVar("pow")
    vt = rl.TensorType((2,), F)
    x, n, m = rl.var("x", type=vt), rl.var("n", type=rl.TypeCall(p.Nat, [])), rl.Var("m")
    mod[pw] = rl.Function([x, n], rl.Match(n, [
        rl.Clause(rl.PatternConstructor(p.Z, []), rl.const(np.ones(2))),
        rl.Clause(rl.PatternConstructor(p.S, [rl.PatternVar(m)]), x * pw(x, m))]), vt)
    x2 = rl.var("x", type=vt)
    mod["main"] = rl.Function([x2], pw(x2, p.make_nat(3)))         # x^3 elementwise
    xv = np.array([0.5, 1.5])
    value, back = rl.evaluate(rl.vjp(mod), xv)
    np.testing.assert_allclose(value, xv ** 3)
    for ct in ([1.0, 0.0], [0.0, 2.0], [1.0, 0.0]):
        np.testing.assert_allclose(back(np.array(ct))[0], 3 * xv ** 2 * ct)


def test_gradient_program_compiles_with_jax():
    """The closure property: the gradient is an ordinary program, so the jax backend runs it."""
    x = rl.var("x", shape=(3,), dtype=F)
    w = rl.var("w", dtype=F)
    f = rl.Function([x, w], rl.sum(rl.tanh(x * w) * x))
    g = rl.grad(f, argnums=(0, 1))
    xv, wv = np.array([0.1, -0.5, 0.9]), np.array(1.3)
    got = rl.compile(g, backend="jax")(xv, wv)
    want = rl.evaluate(g, xv, wv)
    for a, b in zip(got, want):
        np.testing.assert_allclose(np.asarray(a), b, rtol=1e-12)


def test_vjp_of_a_gradient_module_resets_list_gradients():
    """The vjp of a module made by rl.gradient must not reuse its (non-resetting) helpers:
    its backpropagator gives the same list gradient on every call."""
    mod = rl.Module()
    p = rl.Prelude(mod)
    s = rl.TensorType((), F)
    l, e, acc = rl.var("l", type=rl.TypeCall(p.List, [s])), rl.var("e", dtype=F), rl.var("acc", dtype=F)
    mod["main"] = rl.Function([l], p.foldl(rl.Function([acc, e], acc + e * e), rl.const(0.0, F), l))
    g = rl.gradient(mod)
    g["gmain"] = g["main"]
    l2 = rl.var("l", type=rl.TypeCall(p.List, [s]))
    g["main"] = rl.Function([l2], rl.TupleGetItem(rl.GlobalVar("gmain")(l2), 0))
    _, back = rl.evaluate(rl.vjp(g), rl.list_value(mod, [np.array(1.0), np.array(2.0)]))
    for _ in range(3):
        (gl,) = back(np.array(1.0))
        assert [float(v) for v in rl.from_list_value(gl)] == [2.0, 4.0]
