"""Forward mode: jvp against finite differences and against vjp (<J v, u> = <v, J^T u>), on
programs with closures, refs, ADTs, if, match and recursion; forward-over-reverse HVPs and
Hessians against the reverse-over-reverse Hessian and finite differences of the gradient."""
import numpy as np
import pytest

import relayish as rl
from relayish.ad.api import hessian_forward, hvp_forward_over_reverse, jvp
from relayish.ad.forward import dual_type
from relayish.errors import GradientError, RelayishError
from strategies import CHAIN_LENGTHS

F64 = "float64"


def vec(name, n=3):
    return rl.var(name, shape=(n,), dtype=F64)


def run(prog, *args):
    return rl.evaluate(prog, *args)


def fd_jvp(f, xs, vs, eps=1e-6):
    """Central difference of f along the direction vs (f: Python callable on arrays)."""
    plus = f(*[x + eps * v for x, v in zip(xs, vs)])
    minus = f(*[x - eps * v for x, v in zip(xs, vs)])
    return (np.asarray(plus) - np.asarray(minus)) / (2 * eps)


def check_jvp(prog, xs, rng, vs=None):
    """jvp(prog)(x, v) == (prog(x), finite difference), as arrays."""
    vs = vs if vs is not None else [rng.standard_normal(np.shape(x)) for x in xs]
    j = jvp(prog)
    value, tangent = run(j, *xs, *vs)
    np.testing.assert_allclose(value, run(prog, *xs), rtol=1e-12, atol=1e-12)
    expected = fd_jvp(lambda *a: run(prog, *a), xs, vs)
    np.testing.assert_allclose(tangent, expected, rtol=1e-6, atol=1e-7)
    return j


def check_closure_property(prog):
    """The jvp output is an ordinary program: it type-checks and prints."""
    out = rl.infer_type(prog)
    assert isinstance(rl.astext(out), str)
    return out


# ---- programs ---------------------------------------------------------------------------------

def elementwise():
    x = vec("x")
    return rl.Function([x], rl.sum(rl.tanh(x) * x * rl.exp(x) / (1.0 + x * x)))


def closure():
    x = vec("x")
    y = rl.var("y", shape=(3,), dtype=F64)
    f = rl.var("f", type=rl.FuncType([rl.TensorType((3,), F64)], rl.TensorType((3,), F64)))
    body = rl.Let(f, rl.Function([y], y * rl.sin(x)), rl.sum(f(x) + f(rl.cos(x)) * x))
    return rl.Function([x], body)


def refs():
    x = vec("x")
    r = rl.var("r", type=rl.RefType(rl.TensorType((3,), F64)))
    u = rl.var("u", type=rl.TupleType([]))
    body = rl.Let(r, rl.RefCreate(x),
                  rl.Let(u, rl.RefWrite(r, rl.RefRead(r) * rl.exp(x)),
                         rl.sum(rl.RefRead(r) * x)))
    return rl.Function([x], body)


def branches():
    x = vec("x")
    return rl.Function([x], rl.If(rl.sum(x) > 0.0, rl.sum(x * x * x), rl.sum(rl.sin(x))))


def vector_output():
    x = vec("x")
    W = rl.const(np.arange(12.0).reshape(4, 3) / 10.0)
    return rl.Function([x], rl.tanh(rl.matmul(W, x)) * rl.sum(x))


def two_params_tuple_out():
    x, y = vec("x"), vec("y", 3)
    return rl.Function([x, y], rl.Tuple([rl.sum(x * y), rl.exp(x) - y]))


# ---- jvp against finite differences ------------------------------------------------------------

@pytest.mark.parametrize("make", [elementwise, closure, refs, branches, vector_output])
def test_jvp_matches_finite_differences(make):
    rng = np.random.default_rng(0)
    prog = make()
    for _ in range(2):
        x = rng.standard_normal(3)
        j = check_jvp(prog, [x], rng)
    check_closure_property(j)


def test_jvp_if_takes_both_branches():
    rng = np.random.default_rng(1)
    prog = branches()
    j = jvp(prog)
    for x in (np.array([1.0, 2.0, 0.5]), np.array([-1.0, -2.0, 0.5])):
        v = rng.standard_normal(3)
        check_jvp(prog, [x], rng, [v])
    _, t_pos = run(j, np.array([1.0, 2.0, 0.5]), np.ones(3))
    np.testing.assert_allclose(t_pos, 3 * (1 + 4 + 0.25))


def test_jvp_several_params_and_tuple_output():
    rng = np.random.default_rng(2)
    prog = two_params_tuple_out()
    x, y = rng.standard_normal(3), rng.standard_normal(3)
    vx, vy = rng.standard_normal(3), rng.standard_normal(3)
    (s, e), (ds, de) = run(jvp(prog), x, y, vx, vy)
    np.testing.assert_allclose(s, np.sum(x * y))
    np.testing.assert_allclose(ds, np.sum(vx * y + x * vy))
    np.testing.assert_allclose(de, np.exp(x) * vx - vy)


def test_jvp_integer_input_has_no_tangent():
    x = vec("x")
    k = rl.var("k", dtype="int32")
    prog = rl.Function([x, k], rl.sum(x * rl.cast(k, F64)))
    value, tangent = run(jvp(prog), np.ones(3), np.asarray(3, "int32"), np.arange(3.0),
                         np.asarray(0, "int32"))
    assert value == 9.0 and tangent == 9.0


def test_jvp_tuple_input():
    pair = rl.var("p", type=rl.TupleType([rl.TensorType((3,), F64), rl.TensorType((), F64)]))
    prog = rl.Function([pair], rl.sum(rl.TupleGetItem(pair, 0) * rl.TupleGetItem(pair, 1)))
    a, b = np.arange(3.0), np.asarray(2.0)
    va, vb = np.ones(3), np.asarray(0.5)
    value, tangent = run(jvp(prog), (a, b), (va, vb))
    assert value == pytest.approx(6.0)
    assert tangent == pytest.approx(np.sum(va * b + a * vb))


# ---- jvp against vjp ---------------------------------------------------------------------------

@pytest.mark.parametrize("make", [elementwise, closure, refs, vector_output])
def test_jvp_vjp_inner_product_identity(make):
    rng = np.random.default_rng(3)
    prog = make()
    x, v = rng.standard_normal(3), rng.standard_normal(3)
    value, jv = run(jvp(prog), x, v)
    u = rng.standard_normal(np.shape(value))
    _, back = run(rl.vjp(prog), x)
    (jtu,) = back(u)
    assert np.sum(np.asarray(jv) * u) == pytest.approx(np.sum(v * np.asarray(jtu)), rel=1e-10)


# ---- modules: ADTs, match, recursion ------------------------------------------------------------

def list_module():
    """@main(x) = foldl(fn(acc, h) { acc + sum(h * h * x) }, 0, [x, sin(x), x * 2])."""
    mod = rl.Module()
    p = rl.Prelude(mod)
    x = vec("x")
    acc, h = rl.var("acc", dtype=F64), vec("h")
    step = rl.Function([acc, h], acc + rl.sum(h * h * x))
    items = p.Cons(x, p.Cons(rl.sin(x), p.Cons(x * 2.0, p.Nil())))
    mod["main"] = rl.Function([x], p.foldl(step, rl.const(0.0, F64), items))
    return mod


def recursive_module():
    """@power(x, n) = if n == 0 { 1 } else { x * @power(x, n - 1) }; @main(x) = sum(@power(x, 3))."""
    mod = rl.Module()
    power = rl.GlobalVar("power")
    x, n = vec("x"), rl.var("n", dtype="int32")
    mod[power] = rl.Function(
        [x, n], rl.If(rl.equal(n, rl.const(0)), rl.ones_like(x), x * power(x, n - rl.const(1))),
        rl.TensorType((3,), F64))
    y = vec("y")
    mod["main"] = rl.Function([y], rl.sum(power(y, rl.const(3)) + rl.sin(y)))
    return mod


def layer_adt_module():
    """An ADT with float fields (it needs a dual ADT): type Layer { Dense(Tensor[(3), f64]) }."""
    mod = rl.Module()
    layer = rl.GlobalTypeVar("Layer")
    dense = rl.Constructor("Dense", [rl.TensorType((3,), F64)], layer)
    mod.add_type(rl.TypeData(layer, [], [dense]))
    x, w = vec("x"), vec("w")
    lv = rl.var("l", type=rl.TypeCall(layer, []))
    apply_ = rl.Match(lv, [rl.Clause(rl.PatternConstructor(dense, [rl.PatternVar(w)]),
                                     rl.sum(rl.tanh(w * x)))])
    mod["main"] = rl.Function([x], rl.Let(lv, dense(x * x), apply_))
    return mod


@pytest.mark.parametrize("make", [list_module, recursive_module, layer_adt_module])
def test_jvp_module_programs(make):
    rng = np.random.default_rng(4)
    mod = make()
    j = jvp(mod)
    assert isinstance(j, rl.Module)
    rl.infer_type(j)
    for _ in range(2):
        x, v = rng.standard_normal(3), rng.standard_normal(3)
        value, tangent = run(j, x, v)
        np.testing.assert_allclose(value, run(mod, x), rtol=1e-12)
        np.testing.assert_allclose(tangent, fd_jvp(lambda a: run(mod, a), [x], [v]), rtol=1e-6,
                                   atol=1e-7)
        _, back = run(rl.vjp(mod), x)
        (g,) = back(np.asarray(1.0))
        assert tangent == pytest.approx(np.dot(g, v), rel=1e-10)


def test_dual_type_mapping():
    t = rl.TensorType((2,), F64)
    i = rl.TensorType((), "int32")
    assert dual_type(t) == rl.TupleType([t, t])
    assert dual_type(i) == i
    assert dual_type(rl.TupleType([t, i])) == rl.TupleType([rl.TupleType([t, t]), i])
    assert dual_type(rl.RefType(t)) == rl.RefType(rl.TupleType([t, t]))
    assert dual_type(rl.FuncType([t], i)) == rl.FuncType([rl.TupleType([t, t])], i)
    mod = rl.Module()
    p = rl.Prelude(mod)
    lt = rl.TypeCall(p.List, [t])
    assert dual_type(lt, mod) == rl.TypeCall(p.List, [rl.TupleType([t, t])])


def test_dual_adt_is_added_to_the_module():
    j = jvp(layer_adt_module())
    names = {h.name for h in j.type_definitions}
    assert "Layer" in names and "Layer_fwd" in names
    assert "Dense_fwd" in j.constructors


# ---- errors -----------------------------------------------------------------------------------

def test_jvp_rejects_non_functions():
    with pytest.raises(RelayishError, match="Function or Module"):
        jvp(42)


def test_jvp_rejects_list_inputs_clearly():
    mod = rl.Module()
    p = rl.Prelude(mod)
    l = rl.var("l", type=rl.TypeCall(p.List, [rl.TensorType((), F64)]))
    mod["main"] = rl.Function([l], p.foldl(rl.Function([a := rl.var("a", dtype=F64),
                                                        b := rl.var("b", dtype=F64)], a + b),
                                          rl.const(0.0, F64), l))
    with pytest.raises(GradientError, match="not supported yet"):
        jvp(mod)


def test_missing_tangent_rule_is_named():
    op = rl.register_op("test_fwd_square", 1, type_rule=lambda ts, attrs: ts[0],
                        impl=lambda xp, x: x * x)
    x = vec("x")
    prog = rl.Function([x], rl.sum(rl.Call(op, [x])))
    with pytest.raises(GradientError, match="test_fwd_square"):
        jvp(prog)


# ---- second order -----------------------------------------------------------------------------

def rosenbrock(n=4):
    x = vec("x", n)
    a = rl.op.strided_slice(x, [0], [n - 1])
    b = rl.op.strided_slice(x, [1], [n])
    return rl.Function([x], rl.sum(100.0 * (b - a * a) * (b - a * a) + (1.0 - a) * (1.0 - a)))


def rosen_hess(x):
    from scipy.optimize import rosen_hess as h
    return h(x)


@pytest.mark.parametrize("make", [elementwise, closure, refs, branches, rosenbrock])
def test_hvp_forward_over_reverse_matches_hessian(make):
    rng = np.random.default_rng(5)
    prog = make()
    n = prog.params[0].type_annotation.shape[0]
    x, v = rng.standard_normal(n), rng.standard_normal(n)
    hv = run(hvp_forward_over_reverse(prog), x, v)
    H = run(hessian_forward(prog), x)
    np.testing.assert_allclose(hv, H @ v, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(H, H.T, rtol=1e-10, atol=1e-10)
    grad = rl.grad(prog)
    fd = fd_jvp(lambda a: run(grad, a), [x], [v])
    np.testing.assert_allclose(hv, fd, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(H, run(rl.hessian(prog), x), rtol=1e-10, atol=1e-10)


def test_hessian_forward_rosenbrock_closed_form():
    x = np.array([-1.2, 1.0, 0.5, 2.0])
    H = run(hessian_forward(rosenbrock()), x)
    np.testing.assert_allclose(H, rosen_hess(x), rtol=1e-12)


def test_hvp_and_hessian_of_modules():
    rng = np.random.default_rng(6)
    for make in (list_module, recursive_module):
        mod = make()
        x, v = rng.standard_normal(3), rng.standard_normal(3)
        hv_mod = hvp_forward_over_reverse(mod)
        H_mod = hessian_forward(mod)
        assert isinstance(hv_mod, rl.Module) and isinstance(H_mod, rl.Module)
        H = run(H_mod, x)
        np.testing.assert_allclose(run(hv_mod, x, v), H @ v, rtol=1e-10, atol=1e-10)
        fd = fd_jvp(lambda a: run(rl.grad(mod), a), [x], [v])
        np.testing.assert_allclose(H @ v, fd, rtol=1e-5, atol=1e-6)


def test_jvp_of_jvp_gives_second_directional_derivative():
    x = rl.var("x", dtype=F64)
    prog = rl.Function([x], rl.sin(x) * x)
    j = rl.infer_type(jvp(prog))
    # d/dx [J(x) v] along w, with v = w = 1: f''(x) = 2 cos x - x sin x
    x2, v2 = rl.var("x", dtype=F64), rl.var("v", dtype=F64)
    tangent_of = rl.Function([x2, v2], rl.TupleGetItem(rl.Call(j, [x2, v2]), 1))
    jj = jvp(tangent_of)
    _, second = run(jj, np.asarray(0.7), np.asarray(1.0), np.asarray(1.0), np.asarray(0.0))
    assert second == pytest.approx(2 * np.cos(0.7) - 0.7 * np.sin(0.7), rel=1e-12)


def test_hessian_rejects_non_scalar_objectives():
    with pytest.raises(GradientError, match="float scalar"):
        hessian_forward(vector_output())


def _chain(n):
    """x -> y1 = sin(x) -> y2 = y1 * 1.0001 -> ... (a let-chain n long)."""
    x = rl.var("x", dtype=F64)
    bindings, prev = [], x
    for i in range(n):
        v = rl.Var(f"y{i}")
        value = rl.Call(rl.get_op("multiply"), [prev, rl.const(1.0001, F64)]) if i % 2 \
            else rl.Call(rl.get_op("sin"), [prev])
        bindings.append((v, value))
        prev = v
    body = prev
    for v, value in reversed(bindings):
        body = rl.Let(v, value, body)
    return rl.Function([x], body)


@pytest.mark.parametrize("n", CHAIN_LENGTHS)
def test_deep_let_chain_is_transformed_without_recursion(n):
    # the transform's own output: the default pipeline folds a chain this short (2,000) to
    # fewer lets; past 35,000 nodes (the 10^4 this test had) it only removes dead code
    j = jvp(_chain(n), optimize=False)
    node, lets = j.body, 0
    while isinstance(node, rl.Let):
        lets += 1
        node = node.body
    inner = j.body.body.value          # let %x_dual = ...; let %r = { the transformed chain }
    while isinstance(inner, rl.Let):
        lets += 1
        inner = inner.body
    assert lets >= 2 * n


def test_long_let_chain_values():
    n = 400
    x0 = 0.3
    value, tangent = run(jvp(_chain(n)), np.asarray(x0), np.asarray(1.0))
    y, dy = x0, 1.0
    for i in range(n):
        y, dy = (y * 1.0001, dy * 1.0001) if i % 2 else (np.sin(y), dy * np.cos(y))
    assert value == pytest.approx(y, rel=1e-12) and tangent == pytest.approx(dy, rel=1e-10)


def test_function_with_mod_calls_globals():
    mod = recursive_module()
    y = vec("y")
    f = rl.Function([y], rl.sum(rl.GlobalVar("power")(y, rl.const(2))))
    x, v = np.array([1.0, 2.0, -1.0]), np.array([0.5, 1.0, 2.0])
    value, tangent = run(jvp(f, mod=mod), x, v)
    assert value == pytest.approx(np.sum(x * x))
    assert tangent == pytest.approx(np.sum(2 * x * v))
    hv = run(hvp_forward_over_reverse(f, mod=mod), x, v)
    np.testing.assert_allclose(hv, 2 * v)
    with pytest.raises(RelayishError, match="mod= must be"):
        jvp(f, mod=42)


@pytest.mark.parametrize("make", [closure, refs, branches, list_module, recursive_module])
def test_jvp_and_hvp_run_on_the_jax_backend(make):
    rng = np.random.default_rng(7)
    prog = make()
    x, v = rng.standard_normal(3), rng.standard_normal(3)
    for transform in (jvp, hvp_forward_over_reverse):
        out = transform(prog)
        expected = run(out, x, v)
        got = rl.compile(out, backend="jax")(x, v)
        if isinstance(expected, tuple):
            for e, g in zip(expected, got):
                np.testing.assert_allclose(np.asarray(g), e, rtol=1e-10, atol=1e-12)
        else:
            np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-10, atol=1e-12)


def test_ops_with_tuple_integer_and_bool_arguments():
    """concatenate/stack take one tuple argument; cast/take/where mix integer or bool inputs."""
    x = vec("x")
    k = rl.var("k", shape=(3,), dtype="int32")
    body = (rl.sum(rl.concatenate([x, rl.sin(x) * x], axis=0) * rl.const(np.arange(6.0)))
            + rl.sum(rl.stack([x, x * x])) + rl.sum(rl.cast(k, F64) * x)
            + rl.sum(rl.take(x, rl.const(np.array([0, 2], "int32"))))
            + rl.sum(rl.where(x > 0.0, x * x, -x)))
    prog = rl.Function([x, k], body)
    xv, kv = np.array([0.3, -0.2, 1.1]), np.array([1, 2, 3], "int32")
    v = np.array([1.0, 2.0, -0.5])
    value, tangent = run(jvp(prog), xv, kv, v, np.zeros(3, "int32"))
    assert value == pytest.approx(run(prog, xv, kv))
    assert tangent == pytest.approx(fd_jvp(lambda a: run(prog, a, kv), [xv], [v]), rel=1e-7)


def test_dual_types_of_mutually_recursive_adts():
    """A { MkA(B) }, B { MkB(A) | Leaf(float tensor) }: both need duals, whichever is reached
    first. (The forward mode's own builder assumed "no dual" for a type under computation and
    kept that answer for A when B was reached first: A stayed A while its field became B_fwd.)"""
    t = rl.TensorType((2,), F64)
    mod = rl.Module()
    a_t, b_t = rl.GlobalTypeVar("A"), rl.GlobalTypeVar("B")
    ta, tb = rl.TypeCall(a_t, []), rl.TypeCall(b_t, [])
    mod.add_type(rl.TypeData(a_t, [], [rl.Constructor("MkA", [tb], a_t)]))
    mod.add_type(rl.TypeData(b_t, [], [rl.Constructor("MkB", [ta], b_t),
                                       rl.Constructor("Leaf", [t], b_t)]))
    mapped = dual_type(rl.TupleType([tb, ta]), mod)
    assert [f.func.name for f in mapped.fields] == ["B_fwd", "A_fwd"]


def test_both_modes_build_twins_with_one_builder():
    from relayish.ad import forward, lifted, reverse
    from relayish.ad.twins import TwinTypes
    assert isinstance(forward.dual_types({}), TwinTypes)
    assert isinstance(lifted.lifted_types(rl.Module()), TwinTypes)
    assert not hasattr(forward, "_TypeMap") and not hasattr(reverse, "TypeLifter")
