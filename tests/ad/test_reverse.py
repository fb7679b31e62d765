"""The reverse-mode transform: the cases of TVM Relay's gradient test suite, re-expressed in
relayish (identity, add, sub, broadcasting, tuples, tuple arguments, nat_iterate, refs, second
order, if, tuple results, concatenate, global functions), plus the gaps relayish closes."""
import numpy as np
import pytest

import relayish as rl
from adcheck import check_fd

F32 = "float32"
T = rl.TensorType((10, 10), F32)


def rand(*shape, dtype=F32, seed=0):
    return np.random.default_rng(seed).random(shape).astype(dtype)


def grad_type(arg_types, out_type):
    return rl.FuncType(list(arg_types), rl.TupleType([out_type, rl.TupleType(list(arg_types))]))


def typed(prog):
    """The checked type of a gradient Function (or of a Module's main)."""
    if isinstance(prog, rl.Module):
        return rl.infer_type(prog)["main"].checked_type
    return rl.infer_type(prog).checked_type


# ---- TVM Relay's cases -------------------------------------------------------------------------

def test_identity():
    x = rl.var("x", type=T)
    g = rl.gradient(rl.Function([x], x))
    assert typed(g) == grad_type([T], T)
    xv = rand(10, 10)
    forward, (gx,) = rl.evaluate(g, xv)
    np.testing.assert_allclose(forward, xv)
    np.testing.assert_allclose(gx, np.ones_like(xv))


def test_relu_types():
    x = rl.var("x", type=T)
    assert typed(rl.gradient(rl.Function([x], rl.relu(x)))) == grad_type([T], T)


def test_add_same_var():
    x = rl.var("x", type=T)
    g = rl.gradient(rl.Function([x], x + x))
    assert typed(g) == grad_type([T], T)
    xv = rand(10, 10)
    forward, (gx,) = rl.evaluate(g, xv)
    np.testing.assert_allclose(forward, 2 * xv)
    np.testing.assert_allclose(gx, 2 * np.ones_like(xv))


def test_two_inputs():
    x, y = rl.var("x", type=T), rl.var("y", type=T)
    f = rl.Function([x, y], x + y)
    forward, (gx, gy) = rl.evaluate(rl.gradient(f), rand(10, 10), rand(10, 10, seed=1))
    np.testing.assert_allclose(gx, np.ones((10, 10)))
    np.testing.assert_allclose(gy, np.ones((10, 10)))


def test_let_bound_temporary():
    x = rl.var("x", type=T)
    sb = rl.ScopeBuilder()
    y = sb.let("y", x + x)
    sb.ret(y + y)
    g = rl.gradient(rl.Function([x], sb.get()))
    assert typed(g) == grad_type([T], T)
    xv = rand(10, 10)
    forward, (gx,) = rl.evaluate(g, xv)
    np.testing.assert_allclose(forward, 4 * xv)
    np.testing.assert_allclose(gx, 4 * np.ones_like(xv))


def test_sub_same_var():
    x = rl.var("x", type=T)
    g = rl.gradient(rl.Function([x], x - x))
    forward, (gx,) = rl.evaluate(g, rand(10, 10))
    np.testing.assert_allclose(forward, np.zeros((10, 10)))
    np.testing.assert_allclose(gx, np.zeros((10, 10)))


@pytest.mark.parametrize("name, sign", [("add", 1.0), ("subtract", -1.0)])
def test_broadcast(name, sign):
    t1, t2 = rl.TensorType((3, 4, 1), F32), rl.TensorType((1, 5), F32)
    x, y = rl.var("x", type=t1), rl.var("y", type=t2)
    g = rl.gradient(rl.Function([x, y], getattr(rl, name)(x, y)))
    assert typed(g) == grad_type([t1, t2], rl.TensorType((3, 4, 5), F32))
    xv, yv = rand(3, 4, 1), rand(1, 5, seed=1)
    forward, (gx, gy) = rl.evaluate(g, xv, yv)
    np.testing.assert_allclose(forward, xv + sign * yv, rtol=1e-6)
    ones = np.ones((3, 4, 5))
    np.testing.assert_allclose(gx, ones.sum(axis=2, keepdims=True))
    np.testing.assert_allclose(gy, sign * ones.sum(axis=(0, 1), keepdims=True).squeeze(axis=0))


@pytest.mark.parametrize("let_bound", [True, False])
def test_tuple(let_bound):
    x, y, z = (rl.var(n, type=T) for n in "xyz")
    if let_bound:
        tup = rl.Var("tup")
        body = rl.Let(tup, rl.Tuple([x, y, z]), tup[0] + tup[1] - tup[2])
    else:
        tup = rl.Tuple([x, y, z])
        body = tup[0] + tup[1] - tup[2]
    g = rl.gradient(rl.Function([x, y, z], body))
    assert typed(g) == grad_type([T, T, T], T)
    xv, yv, zv = rand(10, 10), rand(10, 10, seed=1), rand(10, 10, seed=2)
    forward, (gx, gy, gz) = rl.evaluate(g, xv, yv, zv)
    np.testing.assert_allclose(forward, xv + yv - zv, rtol=1e-6)
    np.testing.assert_allclose(gx, np.ones((10, 10)))
    np.testing.assert_allclose(gy, np.ones((10, 10)))
    np.testing.assert_allclose(gz, -np.ones((10, 10)))


def test_tuple_argument():
    """Relay marks this one as an expected failure; relayish's gradients keep the tuple."""
    tt = rl.TupleType([T, T])
    t = rl.var("t", type=tt)
    g = rl.gradient(rl.Function([t], t[0] * t[1]))
    assert typed(g) == grad_type([tt], T)
    a, b = rand(10, 10), rand(10, 10, seed=1)
    forward, ((ga, gb),) = rl.evaluate(g, (a, b))
    np.testing.assert_allclose(forward, a * b)
    np.testing.assert_allclose(ga, b)
    np.testing.assert_allclose(gb, a)


def test_nat_iterate_pow():
    mod = rl.Module()
    p = rl.Prelude(mod)
    x, i = rl.var("x", type=T), rl.var("i", type=T)
    double = rl.Function([x], x + x)
    mod["main"] = rl.Function([i], p.nat_iterate(double, p.make_nat(3))(i))
    g = rl.gradient(mod)
    assert isinstance(g, rl.Module)
    assert typed(g) == grad_type([T], T)
    iv = rand(10, 10)
    forward, (gi,) = rl.evaluate(g, iv)
    np.testing.assert_allclose(forward, 8 * iv)
    np.testing.assert_allclose(gi, 8 * np.ones((10, 10)))


def test_ref():
    x = rl.var("x", type=T)
    r, u = rl.Var("r"), rl.Var("u")
    body = rl.Let(r, rl.RefCreate(x),
                  rl.Let(u, rl.RefWrite(r, rl.RefRead(r) + rl.RefRead(r)), rl.RefRead(r)))
    g = rl.gradient(rl.Function([x], body))
    assert typed(g) == grad_type([T], T)
    xv = rand(10, 10)
    forward, (gx,) = rl.evaluate(g, xv)
    np.testing.assert_allclose(forward, 2 * xv)
    np.testing.assert_allclose(gx, 2 * np.ones((10, 10)))


def test_square_second_order():
    x = rl.var("x", type=T)
    g = rl.gradient(rl.Function([x], x * x))
    assert typed(g) == grad_type([T], T)
    y = rl.var("y", type=T)
    dx = rl.Function([y], rl.Call(g, [y])[1][0])
    gg = rl.gradient(dx)
    xv = rand(10, 10)
    forward, (gx,) = rl.evaluate(gg, xv)
    np.testing.assert_allclose(forward, 2 * xv)
    np.testing.assert_allclose(gx, 2 * np.ones((10, 10)))


def test_if_on_parameter():
    tt = rl.TensorType((1, 4, 6, 6), F32)
    x, y = rl.var("x", type=tt), rl.var("y", type=tt)
    cond = rl.var("cond", shape=(), dtype="bool")
    f = rl.Function([cond, x, y], rl.log(rl.If(cond, x, y)))
    g = rl.gradient(f)
    assert typed(g) == grad_type([rl.TensorType((), "bool"), tt, tt], tt)
    xv, yv = rand(1, 4, 6, 6) + 0.5, rand(1, 4, 6, 6, seed=1) + 0.5
    for c in (True, False):
        _, (gc, gx, gy) = rl.evaluate(g, np.array(c), xv, yv)
        assert gc.dtype == np.bool_ and not gc
        np.testing.assert_allclose(gx, 1 / xv if c else 0 * xv, rtol=1e-6)
        np.testing.assert_allclose(gy, 0 * yv if c else 1 / yv, rtol=1e-6)


def test_tuple_result_seeds_first_field():
    x = rl.var("x", type=T)
    sb = rl.ScopeBuilder()
    y = sb.let("y", x + x)
    sb.ret(rl.Tuple([y + y, y]))
    g = rl.gradient(rl.Function([x], sb.get()))
    assert typed(g) == rl.FuncType([T], rl.TupleType([rl.TupleType([T, T]), rl.TupleType([T])]))
    xv = rand(10, 10)
    (four, two), (gx,) = rl.evaluate(g, xv)
    np.testing.assert_allclose(four, 4 * xv)
    np.testing.assert_allclose(two, 2 * xv)
    np.testing.assert_allclose(gx, 4 * np.ones((10, 10)))


def test_concatenate():
    x = rl.var("x", type=T)
    g = rl.gradient(rl.Function([x], rl.concatenate([x, x * 3.0], axis=1)))
    assert typed(g) == grad_type([T], rl.TensorType((10, 20), F32))
    xv = rand(10, 10)
    forward, (gx,) = rl.evaluate(g, xv)
    np.testing.assert_allclose(forward, np.concatenate([xv, 3 * xv], axis=1), rtol=1e-6)
    np.testing.assert_allclose(gx, 4 * np.ones((10, 10)))


def test_no_duplicated_forward_work():
    """Relay's test_no_duplication: one matmul forward, two backward."""
    x, y = rl.var("x", shape=(12, 12)), rl.var("y", shape=(12, 12))
    xy = rl.matmul(x, y)
    g = rl.gradient(rl.Function([x, y], rl.sum(xy - rl.sum(xy, keepdims=True))))
    assert rl.astext(g).count("matmul(") == 3


def test_global_function():
    mod = rl.Module()
    x, y = rl.var("x", type=T), rl.var("y", type=T)
    double = rl.GlobalVar("double")
    mod[double] = rl.Function([x], x + x)
    mod["q"] = rl.Function([y], double(double(y)))
    z = rl.var("z", type=T)
    g = rl.gradient(rl.Function([z], rl.GlobalVar("q")(z)), mod=mod)
    assert isinstance(g, rl.Module)
    assert typed(g) == grad_type([T], T)
    xv = rand(10, 10)
    forward, (gx,) = rl.evaluate(g, xv)
    np.testing.assert_allclose(forward, 4 * xv)
    np.testing.assert_allclose(gx, 4 * np.ones((10, 10)))


# ---- beyond Relay ------------------------------------------------------------------------------

F = "float64"
S = rl.TensorType((), F)


def test_integer_inputs_get_zero_gradients():
    x, n = rl.var("x", shape=(3,), dtype=F), rl.var("n", shape=(), dtype="int32")
    f = rl.Function([x, n], rl.sum(x * rl.cast(n, F)))
    _, (gx, gn) = rl.evaluate(rl.gradient(f), np.arange(3.0), np.array(4, "int32"))
    np.testing.assert_allclose(gx, 4 * np.ones(3))
    assert gn.dtype == np.int32 and gn == 0


def test_comparisons_have_no_backprop_step():
    x = rl.var("x", dtype=F)
    f = rl.Function([x], rl.where(x > 0.0, x * x, -x))
    g = rl.gradient(f)
    assert "greater" in rl.astext(g)
    assert rl.evaluate(g, 3.0)[1][0] == 6.0
    assert rl.evaluate(g, -3.0)[1][0] == -1.0


def test_closures_and_higher_order():
    x, y, h = rl.var("x", dtype=F), rl.var("y", dtype=F), rl.var("h", type=rl.FuncType([S], S))
    twice = rl.Function([h, y], h(h(y)))
    scale = rl.Function([y], rl.sin(y) * x)          # captures x
    f = rl.Function([x], twice(scale, x))
    check_fd(f, [np.array(0.7)])


def test_ref_updated_in_recursive_loop():
    """r := !r * x, n times, by a recursive global: d/dx x^n = n x^(n-1)."""
    mod = rl.Module()
    loop = rl.GlobalVar("loop")
    r = rl.var("r", type=rl.RefType(S))
    x, n = rl.var("x", dtype=F), rl.var("n", dtype="int32")
    body = rl.If(n > rl.const(0), rl.Let(rl.Var("u"), rl.RefWrite(r, rl.RefRead(r) * x),
                                         loop(r, x, n - rl.const(1))), rl.Tuple([]))
    mod[loop] = rl.Function([r, x, n], body, rl.TupleType([]))
    x2, cell = rl.var("x", dtype=F), rl.Var("cell")
    mod["main"] = rl.Function([x2], rl.Let(cell, rl.RefCreate(rl.const(1.0, F)),
                                           rl.Let(rl.Var("u"), loop(cell, x2, rl.const(5)),
                                                  rl.RefRead(cell))))
    _, (gx,) = rl.evaluate(rl.gradient(mod), 1.3)
    np.testing.assert_allclose(gx, 5 * 1.3 ** 4)


def test_list_input_gets_list_of_gradients():
    mod = rl.Module()
    p = rl.Prelude(mod)
    lt = rl.TypeCall(p.List, [S])
    l, e, acc = rl.var("l", type=lt), rl.var("e", dtype=F), rl.var("acc", dtype=F)
    sq = rl.Function([e], rl.sin(e) * e)
    plus = rl.Function([acc, e], acc + e)
    mod["main"] = rl.Function([l], p.foldl(plus, rl.const(0.0, F), p.map(sq, l)))
    xs = [np.array(0.3), np.array(1.2), np.array(-0.7)]
    value, (gl,) = rl.evaluate(rl.gradient(mod), rl.list_value(mod, xs))
    np.testing.assert_allclose(value, sum(np.sin(v) * v for v in xs))
    np.testing.assert_allclose([float(v) for v in rl.from_list_value(gl)],
                               [np.sin(v) + v * np.cos(v) for v in xs])


def user_tree_module():
    """type Net { L(Tensor[(3,)]), N(Net, Net) }: a float field, so the AD makes a lifted twin."""
    mod = rl.Module()
    net = rl.GlobalVar("enc")
    tree = rl.GlobalTypeVar("Net")
    tt = rl.TypeCall(tree, [])
    leaf = rl.Constructor("L", [rl.TensorType((3,), F)], tree)
    node = rl.Constructor("N", [tt, tt], tree)
    mod.add_type(rl.TypeData(tree, [], [leaf, node]))
    w, t = rl.var("W", shape=(3, 6), dtype=F), rl.var("t", type=tt)
    a, b, v = rl.var("a", type=tt), rl.var("b", type=tt), rl.var("v", shape=(3,), dtype=F)
    mod[net] = rl.Function([w, t], rl.Match(t, [
        rl.Clause(rl.PatternConstructor(leaf, [rl.PatternVar(v)]), v),
        rl.Clause(rl.PatternConstructor(node, [rl.PatternVar(a), rl.PatternVar(b)]),
                  rl.tanh(rl.matmul(w, rl.concatenate([net(w, a), net(w, b)], axis=0))))]))
    w2, t2 = rl.var("W", shape=(3, 6), dtype=F), rl.var("t", type=tt)
    mod["main"] = rl.Function([w2, t2], rl.sum(net(w2, t2)))
    rng = np.random.default_rng(3)
    L = lambda: rl.ConstructorValue(leaf, [rng.normal(size=3)])  # noqa: E731
    N = lambda x, y: rl.ConstructorValue(node, [x, y])  # noqa: E731
    return mod, [rng.normal(size=(3, 6)), N(L(), N(L(), L()))]


def test_user_adt_with_tensor_fields_twin():
    mod, args = user_tree_module()
    g = rl.gradient(mod)
    names = [gtv.name for gtv in g.type_definitions]
    assert "Net" in names and "Net_ad" in names
    gW, gt = check_fd(mod, args)
    assert isinstance(gt, rl.ConstructorValue) and gt.constructor.name_hint == "N"


def test_adt_second_order_through_twin():
    """grad of sum(grad_W(sum(enc(W, t)))^2) w.r.t. W: the second transform lifts the twin."""
    mod, args = user_tree_module()
    dmod = rl.grad(mod)                       # main: d sum(enc(W, t)) / dW
    dmod["inner"] = dmod["main"]
    w = rl.var("W", shape=(3, 6), dtype=F)
    t = rl.var("t", type=mod["main"].params[1].type_annotation)
    dmod["main"] = rl.Function([w, t], rl.sum(rl.GlobalVar("inner")(w, t) ** rl.const(2.0, F)))
    second = rl.grad(dmod)
    names = sorted(t.name for t in second.type_definitions)
    assert names == ["Net", "Net_ad", "Net_ad_ad"]        # the first twin is reused, not copied
    gW = rl.evaluate(second, *args)
    d = np.random.default_rng(5).normal(size=(3, 6))
    eps = 1e-6
    val = lambda W: float(rl.evaluate(dmod, W, args[1]))  # noqa: E731
    numeric = (val(args[0] + eps * d) - val(args[0] - eps * d)) / (2 * eps)
    np.testing.assert_allclose(np.sum(gW * d), numeric, rtol=1e-5)


def test_perturbation_confusion():
    """d/dx (x * d/dy (x + y)) = 1; confusing the two perturbations gives 2."""
    x, y = rl.var("x", dtype=F), rl.var("y", dtype=F)
    inner = rl.grad(rl.Function([y], x + y))          # x is free in the inner function
    outer = rl.Function([x], x * inner(x))
    assert float(rl.evaluate(rl.grad(outer), 3.0)) == 1.0


def test_nested_gradient_of_closure_capturing_outer_variable():
    """d/dx [d/dy (x * y^2) at y = x] = d/dx 2 x^2 = 4 x."""
    x, y = rl.var("x", dtype=F), rl.var("y", dtype=F)
    inner = rl.grad(rl.Function([y], x * y * y))
    outer = rl.Function([x], inner(x))
    np.testing.assert_allclose(rl.evaluate(rl.grad(outer), 1.5), 6.0)


def test_vjp_backpropagator_is_reusable():
    v = rl.var("v", shape=(2,), dtype=F)
    f = rl.Function([v], rl.sin(v) * v)
    value, back = rl.evaluate(rl.vjp(f), np.array([0.5, 1.0]))
    d = np.sin([0.5, 1.0]) + np.array([0.5, 1.0]) * np.cos([0.5, 1.0])
    for _ in range(3):
        np.testing.assert_allclose(back(np.array([1.0, 0.0]))[0], [d[0], 0.0])
        np.testing.assert_allclose(back(np.array([0.0, 2.0]))[0], [0.0, 2 * d[1]])


def test_gradient_program_runs_twice_from_fresh_state():
    x = rl.var("x", dtype=F)
    g = rl.gradient(rl.Function([x], x * x * x))
    assert rl.evaluate(g, 2.0)[1][0] == 12.0
    assert rl.evaluate(g, 2.0)[1][0] == 12.0


def test_print_parse_typecheck_roundtrip():
    mod, _ = user_tree_module()
    g = rl.gradient(mod)
    text = rl.astext(g)
    again = rl.parse(text)
    rl.assert_structural_equal(again, g)
    rl.infer_type(again)
    x = rl.var("x", shape=(3,), dtype=F)
    gf = rl.gradient(rl.Function([x], rl.sum(rl.tanh(x) * x)))
    rl.assert_structural_equal(rl.parse_expr(rl.astext(gf)), gf)


def test_long_let_chain():
    """A 1000-long let-chain differentiates with loops (its gradient has ~13000 lets)."""
    x = rl.var("x", dtype=F)
    sb = rl.ScopeBuilder()
    y = x
    for _ in range(1000):
        y = sb.let("y", y * rl.const(1.0001, F))
    sb.ret(y)
    g = rl.gradient(rl.Function([x], sb.get()))
    _, (gx,) = rl.evaluate(g, 1.0)
    np.testing.assert_allclose(gx, 1.0001 ** 1000)


def test_deep_nesting_without_lets():
    x = rl.var("x", dtype=F)
    y = x
    for _ in range(1000):
        y = y * rl.const(1.001, F)
    _, (gx,) = rl.evaluate(rl.gradient(rl.Function([x], y)), 1.0)
    np.testing.assert_allclose(gx, 1.001 ** 1000)


def test_constructor_as_function_value():
    """foldr(Cons, Nil, l) copies a list: the constructor is passed as a function."""
    mod = rl.Module()
    p = rl.Prelude(mod)
    l, e, acc = rl.var("l", type=rl.TypeCall(p.List, [S])), rl.var("e", dtype=F), rl.var("acc", dtype=F)
    plus = rl.Function([acc, e], acc + e * e)
    mod["main"] = rl.Function([l], p.foldl(plus, rl.const(0.0, F), p.foldr(p.Cons, p.Nil(), l)))
    value, (gl,) = rl.evaluate(rl.gradient(mod), rl.list_value(mod, [np.array(1.0), np.array(2.0)]))
    assert float(value) == 5.0
    assert [float(v) for v in rl.from_list_value(gl)] == [2.0, 4.0]


def test_ref_holding_closures():
    """fr := fn(y) { sin(old(y)) * x } where old = fn(y) { y * x }: f(x) = sin(x^2) x."""
    x, y = rl.var("x", dtype=F), rl.var("y", dtype=F)
    fr, old = rl.Var("fr"), rl.Var("old")
    body = rl.Let(fr, rl.RefCreate(rl.Function([y], y * x)), rl.Let(old, rl.RefRead(fr), rl.Let(
        rl.Var("u"), rl.RefWrite(fr, rl.Function([y], rl.sin(old(y)) * x)), rl.RefRead(fr)(x))))
    f = rl.Function([x], body)
    np.testing.assert_allclose(rl.evaluate(rl.grad(f), 0.7),
                               np.sin(0.49) + 2 * 0.49 * np.cos(0.49), rtol=1e-12)
    check_fd(f, [np.array(0.7)])


def test_adt_with_function_field_gets_a_twin():
    """type Layer { Layer(fn (Tensor) -> Tensor) }: a function field changes, so a twin."""
    mod = rl.Module()
    layer_t = rl.GlobalTypeVar("Layer")
    layer = rl.Constructor("Layer", [rl.FuncType([S], S)], layer_t)
    mod.add_type(rl.TypeData(layer_t, [], [layer]))
    x, y, k = rl.var("x", dtype=F), rl.var("y", dtype=F), rl.Var("k")
    v = rl.Var("v")
    mod["main"] = rl.Function([x], rl.Let(v, layer(rl.Function([y], rl.tanh(y * x))), rl.Match(v, [
        rl.Clause(rl.PatternConstructor(layer, [rl.PatternVar(k)]), k(k(x)))])))
    g = rl.gradient(mod)
    assert "Layer_ad" in [t.name for t in g.type_definitions]
    check_fd(mod, [np.array(0.4)])
    rl.assert_structural_equal(rl.parse(rl.astext(g)), g)


def test_option_holding_a_closure():
    mod = rl.Module()
    p = rl.Prelude(mod)
    x, y, o, k = rl.var("x", dtype=F), rl.var("y", dtype=F), rl.Var("o"), rl.Var("k")
    body = rl.Let(o, p.Some(rl.Function([y], y * x * x)), rl.Match(o, [
        rl.Clause(rl.PatternConstructor(p.Some, [rl.PatternVar(k)]), k(x)),
        rl.Clause(rl.PatternConstructor(p.Nothing, []), x)]))
    np.testing.assert_allclose(rl.evaluate(rl.grad(rl.Function([x], body), mod=mod), 0.7),
                               3 * 0.49, rtol=1e-12)


def test_long_list_deep_backpropagator_chain():
    """foldl over 5000 elements: a 5000-deep recursion forward and a 5000-long closure chain."""
    mod = rl.Module()
    p = rl.Prelude(mod)
    l, e, acc = rl.var("l", type=rl.TypeCall(p.List, [S])), rl.var("e", dtype=F), rl.var("acc", dtype=F)
    step = rl.Function([acc, e], acc * rl.const(0.999, F) + rl.sin(e))
    mod["main"] = rl.Function([l], p.foldl(step, rl.const(0.0, F), l))
    n = 5000
    xs = 0.001 * np.arange(n)
    _, (gl,) = rl.evaluate(rl.gradient(mod), rl.list_value(mod, [np.array(v) for v in xs]))
    got = np.array([float(v) for v in rl.from_list_value(gl)])
    np.testing.assert_allclose(got, np.cos(xs) * 0.999 ** (n - 1 - np.arange(n)), rtol=1e-12)
