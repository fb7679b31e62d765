"""The jax backend against the interpreter: rl.compile(f, backend="jax") must agree with
rl.evaluate on every construct, including joins of closures, ADT values and references under
traced conditions, and must trace once per argument structure."""
import numpy as np
import pytest

import relayish as rl
from relayish.backend.values import ConstructorValue, RefValue
from strategies import CHAIN_LENGTHS

F32, F64 = "float32", "float64"


# ---- helpers -------------------------------------------------------------------------------

def c64(v):
    return rl.const(v, F64)


def same_value(a, b, path="result", rtol=1e-6, atol=1e-9):
    """Interpreter value `a` and jax value `b` agree in structure, dtype and numbers."""
    if isinstance(a, tuple):
        assert isinstance(b, tuple) and len(a) == len(b), f"{path}: {a!r} vs {b!r}"
        for k, (x, y) in enumerate(zip(a, b)):
            same_value(x, y, f"{path}.{k}", rtol, atol)
    elif isinstance(a, ConstructorValue):
        assert isinstance(b, ConstructorValue), f"{path}: {a!r} vs {b!r}"
        assert a.constructor is b.constructor, f"{path}: {a!r} vs {b!r}"
        for k, (x, y) in enumerate(zip(a.fields, b.fields)):
            same_value(x, y, f"{path}.{a.constructor.name_hint}.{k}", rtol, atol)
    elif isinstance(a, RefValue):
        assert isinstance(b, RefValue), f"{path}: {a!r} vs {b!r}"
        same_value(a.value, b.value, f"!{path}", rtol, atol)
    else:
        a_arr, b_arr = np.asarray(a), np.asarray(b)
        assert a_arr.dtype == b_arr.dtype, f"{path}: dtype {a_arr.dtype} vs {b_arr.dtype}"
        assert a_arr.shape == b_arr.shape, f"{path}: shape {a_arr.shape} vs {b_arr.shape}"
        if a_arr.dtype.kind == "f":
            np.testing.assert_allclose(b_arr, a_arr, rtol=rtol, atol=atol, err_msg=path)
        else:
            np.testing.assert_array_equal(b_arr, a_arr, err_msg=path)


def both(f_or_mod, *args, **tol):
    """Run on both backends, check they agree, and return the jax result."""
    expected = rl.evaluate(f_or_mod, *args)
    got = rl.compile(f_or_mod, backend="jax")(*args)
    same_value(expected, got, **tol)
    return got


def scalar(name, dtype=F64):
    return rl.var(name, shape=(), dtype=dtype)


# ---- plain programs and dtypes ---------------------------------------------------------------

@pytest.mark.parametrize("dtype", [F32, F64])
def test_dtype_preserved(dtype):
    x = rl.var("x", shape=(3,), dtype=dtype)
    f = rl.Function([x], rl.sum(rl.tanh(x) * x) + rl.const(1.5, dtype))
    out = both(f, np.linspace(-1, 1, 3).astype(dtype))
    assert np.asarray(out).dtype == np.dtype(dtype)


def test_float64_without_global_config():
    import jax
    assert not jax.config.jax_enable_x64
    x = scalar("x")
    f = rl.Function([x], x + c64(1e-12))
    out = rl.compile(f)(np.float64(1.0))
    assert np.asarray(out).dtype == np.float64
    assert np.asarray(out) - 1.0 == pytest.approx(1e-12, rel=1e-3)
    assert not jax.config.jax_enable_x64


def test_int_bool_tuples():
    i = rl.var("i", shape=(2,), dtype="int32")
    x = rl.var("x", shape=(2,), dtype=F32)
    body = rl.Tuple([i + i, x > rl.const(0.0), rl.Tuple([x * x, rl.cast(i, F32)])])
    out = both(rl.Function([i, x], body), np.array([1, 2], "int32"), np.array([-1, 2], F32))
    assert np.asarray(out[1]).dtype == np.bool_


def test_constant_if_is_taken_at_trace_time():
    x = scalar("x")
    f = rl.Function([x], rl.If(c64(1.0) > c64(0.0), x * c64(2.0), rl.log(x)))
    run = rl.compile(f)
    assert float(run(np.float64(3.0))) == 6.0


def test_python_scalars_and_lists_convert():
    x = rl.var("x", shape=(2,), dtype=F64)
    s = scalar("s")
    f = rl.Function([x, s], x * s)
    got = rl.compile(f)([1, 2], 3)
    np.testing.assert_allclose(np.asarray(got), [3.0, 6.0])


# ---- closures joined under traced conditions -----------------------------------------------------

def closure_choice():
    """let h = if (y > 0) { fn(v) { v * y } } else { fn(w) { w + a + a } }; h(y) * 3"""
    y, a = scalar("y"), scalar("a")
    v, w = scalar("v"), scalar("w")
    sb = rl.ScopeBuilder()
    b = sb.let("b", a * c64(2.0))
    h = sb.let("h", rl.If(y > c64(0.0), rl.Function([v], v * y), rl.Function([w], w + b + a)))
    sb.ret(h(y) * c64(3.0) + h(a))
    return rl.Function([y, a], sb.get())


@pytest.mark.parametrize("y", [2.0, -2.0])
def test_closure_from_traced_if(y):
    both(closure_choice(), np.float64(y), np.float64(0.5))


def test_closure_join_traces_once():
    run = rl.compile(closure_choice())
    for y in (2.0, -2.0, 0.25):
        expected = rl.evaluate(closure_choice(), np.float64(y), np.float64(0.5))
        same_value(expected, run(np.float64(y), np.float64(0.5)))
    assert run.trace_count == 1


def test_nested_traced_ifs_of_closures():
    y = scalar("y")
    u = scalar("u")
    inner = rl.If(y > c64(1.0), rl.Function([u], u * u), rl.Function([u], u - y))
    outer = rl.If(y > c64(0.0), inner, rl.Function([u], rl.sin(u)))
    sb = rl.ScopeBuilder()
    h = sb.let("h", outer)
    sb.ret(h(y + c64(1.0)))
    f = rl.Function([y], sb.get())
    run = rl.compile(f)
    for value in (2.0, 0.5, -1.0):
        same_value(rl.evaluate(f, np.float64(value)), run(np.float64(value)))
    assert run.trace_count == 1


# ---- ADT values under traced conditions --------------------------------------------------------

def test_option_built_under_traced_condition():
    mod = rl.Module()
    p = rl.Prelude(mod)
    x = scalar("x")
    opt = rl.If(x > c64(0.0), p.Some(x * c64(2.0)), p.Nothing())
    sb = rl.ScopeBuilder()
    o = sb.let("o", opt)
    z = scalar("z")
    m = rl.Match(o, [rl.Clause(rl.PatternConstructor(p.Some, [rl.PatternVar(z)]), z + c64(1.0)),
                     rl.Clause(rl.PatternConstructor(p.Nothing, []), c64(-1.0))])
    sb.ret(rl.Tuple([m, o]))
    mod["main"] = rl.Function([x], sb.get())
    run = rl.compile(mod)
    for value in (3.0, -3.0):
        expected = rl.evaluate(mod, np.float64(value))
        got = run(np.float64(value))
        same_value(expected, got)
    assert run.trace_count == 1


def test_lists_of_different_lengths_joined():
    mod = rl.Module()
    p = rl.Prelude(mod)
    x = rl.var("x", shape=(2,), dtype=F64)
    s = rl.sum(x)
    short = p.Cons(x, p.Nil())
    long = p.Cons(x * c64(2.0), p.Cons(x + c64(1.0), p.Cons(-x, p.Nil())))
    sb = rl.ScopeBuilder()
    lst = sb.let("lst", rl.If(s > c64(0.0), short, long))
    acc, item = rl.var("acc", shape=(2,), dtype=F64), rl.var("item", shape=(2,), dtype=F64)
    total = p.foldl(rl.Function([acc, item], acc + item * item), x, lst)
    sb.ret(rl.Tuple([total, p.length(lst), lst]))
    mod["main"] = rl.Function([x], sb.get())
    run = rl.compile(mod)
    for value in ([1.0, 2.0], [-1.0, -2.0]):
        arg = np.array(value)
        same_value(rl.evaluate(mod, arg), run(arg))
    assert run.trace_count == 1


# ---- references ------------------------------------------------------------------------------------

def counting_loop(mod, p):
    """@loop(n: Nat, r, x) adds x (or -x when !r > 3) to !r n times: a counted loop on refs."""
    loop = rl.GlobalVar("loop")
    n = rl.var("n", type=rl.TypeCall(p.Nat, []))
    r = rl.var("r", type=rl.RefType(rl.TensorType((), F64)))
    x = scalar("x")
    m = rl.var("m", type=rl.TypeCall(p.Nat, []))
    sb = rl.ScopeBuilder()
    cur = sb.let("cur", rl.RefRead(r))
    sb.let("_", rl.If(cur > c64(3.0), rl.RefWrite(r, cur - x), rl.RefWrite(r, cur + x)))
    sb.ret(loop(m, r, x * c64(1.1)))
    step = sb.get()
    mod[loop] = rl.Function([n, r, x], rl.Match(n, [
        rl.Clause(rl.PatternConstructor(p.Z, []), rl.RefRead(r)),
        rl.Clause(rl.PatternConstructor(p.S, [rl.PatternVar(m)]), step)]),
        rl.TensorType((), F64))
    return loop


def test_refs_in_counted_loop():
    mod = rl.Module()
    p = rl.Prelude(mod)
    loop = counting_loop(mod, p)
    x = scalar("x")
    sb = rl.ScopeBuilder()
    r = sb.let("r", rl.RefCreate(c64(0.0)))
    out = sb.let("out", loop(p.make_nat(8), r, x))
    sb.ret(rl.Tuple([out, rl.RefRead(r)]))
    mod["main"] = rl.Function([x], sb.get())
    for value in (0.7, 2.5, -1.0):
        both(mod, np.float64(value))


def test_ref_holding_closures_written_under_traced_if():
    y = scalar("y")
    u = scalar("u")
    sb = rl.ScopeBuilder()
    r = sb.let("r", rl.RefCreate(rl.Function([u], u)))
    sb.let("_", rl.If(y > c64(0.0), rl.RefWrite(r, rl.Function([u], u * y)), rl.Tuple([])))
    g = sb.let("g", rl.RefRead(r))
    sb.ret(g(c64(3.0)) + g(y))
    f = rl.Function([y], sb.get())
    for value in (2.0, -2.0):
        both(f, np.float64(value))


def test_fresh_refs_joined_keep_identity():
    # the if returns a new reference in each branch, and a closure reading it; writes through the
    # joined reference must be seen by the joined closure
    y = scalar("y")
    sb = rl.ScopeBuilder()
    pair = sb.let("pair", rl.If(
        y > c64(0.0),
        _ref_and_reader(y * c64(2.0), c64(1.0)),
        _ref_and_reader(y - c64(1.0), c64(10.0))))
    sb.let("_", rl.RefWrite(rl.TupleGetItem(pair, 0), rl.RefRead(rl.TupleGetItem(pair, 0)) + y))
    sb.ret(rl.Call(rl.TupleGetItem(pair, 1), []))
    f = rl.Function([y], sb.get())
    for value in (2.0, -2.0):
        both(f, np.float64(value))


def _ref_and_reader(init, scale):
    sb = rl.ScopeBuilder()
    r = sb.let("r", rl.RefCreate(init))
    sb.ret(rl.Tuple([r, rl.Function([], rl.RefRead(r) * scale)]))
    return sb.get()


def test_refvalue_argument_written_back():
    r = rl.var("r", type=rl.RefType(rl.TensorType((3,), F64)))
    x = rl.var("x", shape=(3,), dtype=F64)
    sb = rl.ScopeBuilder()
    sb.let("_", rl.RefWrite(r, rl.RefRead(r) - x * c64(0.5)))
    sb.ret(rl.sum(rl.RefRead(r)))
    f = rl.Function([r, x], sb.get())
    run = rl.compile(f)
    cell = RefValue(np.ones(3))
    out = run(cell, np.arange(3.0))
    np.testing.assert_allclose(np.asarray(cell.value), [1.0, 0.5, 0.0])
    assert float(out) == pytest.approx(1.5)
    run(cell, np.arange(3.0))
    np.testing.assert_allclose(np.asarray(cell.value), [1.0, 0.0, -1.0])
    assert run.trace_count == 1
    assert run.effects(cell, np.arange(3.0)) == {"read": ["x"], "written": ["r"]}


def test_read_only_ref_is_not_written():
    r = rl.var("r", type=rl.RefType(rl.TensorType((), F64)))
    f = rl.Function([r], rl.RefRead(r) * c64(2.0))
    run = rl.compile(f)
    cell = RefValue(np.asarray(1.0))
    before = cell.value
    assert float(run(cell)) == 2.0
    assert cell.value is before
    assert run.effects(cell) == {"read": ["r"], "written": []}
    # contents that are not yet a value of the type (a numpy scalar) are converted in place on
    # the way in, as the interpreter does (runtime/args.py); that is not a write
    cell = RefValue(np.float64(1.0))
    assert float(run(cell)) == 2.0
    assert type(cell.value) is np.ndarray and cell.value.shape == () and cell.value == 1.0


# ---- prelude and recursion ---------------------------------------------------------------------------

def test_map_and_fold_with_closures():
    mod = rl.Module()
    p = rl.Prelude(mod)
    lst_t = rl.TypeCall(p.List, [rl.TensorType((2,), F64)])
    l = rl.var("l", type=lst_t)
    k = rl.var("k", shape=(2,), dtype=F64)
    e = rl.var("e", shape=(2,), dtype=F64)
    acc, item = scalar("acc"), rl.var("item", shape=(2,), dtype=F64)
    sb = rl.ScopeBuilder()
    mapped = sb.let("mapped", p.map(rl.Function([e], rl.tanh(e * k)), l))
    total = sb.let("total", p.foldl(rl.Function([acc, item], acc + rl.sum(item)), c64(0.0), mapped))
    sb.ret(rl.Tuple([total, mapped]))
    mod["main"] = rl.Function([l, k], sb.get())
    items = [np.array([0.1, 0.2]), np.array([-0.5, 1.0]), np.array([2.0, 3.0])]
    run = rl.compile(mod)
    both(mod, rl.list_value(mod, items), np.array([1.0, -2.0]))
    run(rl.list_value(mod, items), np.array([1.0, -2.0]))
    run(rl.list_value(mod, items[:1] + items), np.array([1.0, -2.0]))   # a longer list: retrace
    run(rl.list_value(mod, items), np.array([3.0, -2.0]))
    assert run.trace_count == 2


def tree_module():
    mod = rl.Module()
    p = rl.Prelude(mod)
    tree_t = rl.TypeCall(p.Tree, [rl.TensorType((2,), F64)])
    t = rl.var("t", type=tree_t)
    w = rl.var("w", shape=(2, 2), dtype=F64)
    leaf = rl.var("leaf", shape=(2,), dtype=F64)
    left, right = rl.var("left", type=tree_t), rl.var("right", type=tree_t)
    net = rl.GlobalVar("net")
    sb = rl.ScopeBuilder()
    h = sb.let("h", net(left, w) + net(right, w))
    sb.ret(rl.If(rl.sum(h) > c64(0.0), rl.tanh(rl.matmul(w, h)), h * c64(0.5)))
    mod[net] = rl.Function([t, w], rl.Match(t, [
        rl.Clause(rl.PatternConstructor(p.Leaf, [rl.PatternVar(leaf)]), rl.tanh(leaf)),
        rl.Clause(rl.PatternConstructor(p.Node, [rl.PatternVar(left), rl.PatternVar(right)]),
                  sb.get())]), rl.TensorType((2,), F64))
    t2, w2 = rl.var("t", type=tree_t), rl.var("w", shape=(2, 2), dtype=F64)
    mod["main"] = rl.Function([t2, w2], rl.sum(net(t2, w2)))
    return mod, p


def make_tree(mod, rng, depth):
    leaf, node = mod.get_constructor("Leaf"), mod.get_constructor("Node")
    if depth == 0 or rng.random() < 0.25:
        return ConstructorValue(leaf, [rng.normal(size=2)])
    return ConstructorValue(node, [make_tree(mod, rng, depth - 1), make_tree(mod, rng, depth - 1)])


def test_static_recursion_over_trees():
    mod, _ = tree_module()
    rng = np.random.default_rng(0)
    w = rng.normal(size=(2, 2))
    run = rl.compile(mod)
    for _ in range(3):
        tree = make_tree(mod, rng, 4)
        same_value(rl.evaluate(mod, tree, w), run(tree, w))


@pytest.mark.slow      # tests/backend/test_jax_limits.py checks the bounds by default
def test_unbounded_recursion_is_a_compile_error():
    # @countdown(x) = if x > 0 { countdown(x - 1) + 1 } else { 0 }: its depth depends on x
    x = scalar("x")
    down = rl.GlobalVar("countdown")
    mod = rl.Module()
    mod[down] = rl.Function([x], rl.If(x > c64(0.0), down(x - c64(1.0)) + c64(1.0), c64(0.0)),
                            rl.TensorType((), F64))
    y = scalar("y")
    mod["main"] = rl.Function([y], down(y))
    assert float(rl.evaluate(mod, np.float64(3.0))) == 3.0
    with pytest.raises(rl.CompileError, match="countdown.*rl.evaluate"):
        rl.compile(mod)(np.float64(3.0))


def test_a_tail_recursion_bounded_by_a_traced_value_is_one_while_loop():
    # was a CompileError (unrolled until the trace gave up); now one lax.while_loop (issue 17,
    # backend/jax/dynamic_tail.py), and a run past capacity={"steps": N} is an EvaluationError
    x, acc = scalar("x"), scalar("acc")
    loop = rl.GlobalVar("loop")
    mod = rl.Module()
    mod[loop] = rl.Function([x, acc], rl.If(x > c64(0.0), loop(x - c64(1.0), acc + x), acc),
                            rl.TensorType((), F64))
    y = scalar("y")
    mod["main"] = rl.Function([y], loop(y, c64(0.0)))
    run = rl.compile(mod)
    for v in (0.0, 3.0, 10.0):
        assert float(run(np.float64(v))) == float(rl.evaluate(mod, np.float64(v)))
    with pytest.raises(rl.EvaluationError, match="@loop"):
        rl.compile(mod, capacity={"steps": 2})(np.float64(5.0))


def test_tail_calls_in_traced_branches_join():
    # @walk(n: Nat, x): both branches of a traced if tail-call @walk: traced once per level
    mod = rl.Module()
    p = rl.Prelude(mod)
    walk = rl.GlobalVar("walk")
    n, m = rl.var("n", type=rl.TypeCall(p.Nat, [])), rl.var("m", type=rl.TypeCall(p.Nat, []))
    x = scalar("x")
    step = rl.If(rl.sin(x) > c64(0.0), walk(m, x * c64(1.5)), walk(m, x + c64(1.0)))
    mod[walk] = rl.Function([n, x], rl.Match(n, [
        rl.Clause(rl.PatternConstructor(p.Z, []), x),
        rl.Clause(rl.PatternConstructor(p.S, [rl.PatternVar(m)]), step)]), rl.TensorType((), F64))
    y = scalar("y")
    mod["main"] = rl.Function([y], walk(p.make_nat(30), y))
    for value in (0.3, -0.7):
        both(mod, np.float64(value))


def test_deep_static_recursion():
    mod = rl.Module()
    p = rl.Prelude(mod)
    count = rl.GlobalVar("count")
    n, m = rl.var("n", type=rl.TypeCall(p.Nat, [])), rl.var("m", type=rl.TypeCall(p.Nat, []))
    x = scalar("x")
    mod[count] = rl.Function([n, x], rl.Match(n, [
        rl.Clause(rl.PatternConstructor(p.Z, []), x),
        rl.Clause(rl.PatternConstructor(p.S, [rl.PatternVar(m)]),
                  count(m, x) * c64(1.0001))]), rl.TensorType((), F64))
    nat = rl.var("nat", type=rl.TypeCall(p.Nat, []))
    mod["main"] = rl.Function([nat, x], count(nat, x))
    z, s = mod.get_constructor("Z"), mod.get_constructor("S")
    value = ConstructorValue(z, [])
    for _ in range(3000):
        value = ConstructorValue(s, [value])
    out = rl.compile(mod)(value, np.float64(1.0))
    assert float(out) == pytest.approx(1.0001 ** 3000)


@pytest.mark.parametrize("n", CHAIN_LENGTHS)
def test_long_let_chain(n):
    # 10^5 lets (as in AD output): walked with a loop; mostly tuple shuffles, so XLA stays small
    from relayish.ir.visitor import build_let_chain
    x = scalar("x")
    chain, cur = [], rl.Tuple([x, x * c64(2.0)])
    for i in range(n):
        v = rl.Var("v")
        if i % 1000 == 0:
            value = rl.Tuple([cur[0] + c64(1.0), cur[1]])
        else:
            value = rl.Tuple([cur[1], cur[0]])
        chain.append((v, value))
        cur = v
    f = rl.Function([x], build_let_chain(chain, rl.Tuple([cur[0], cur[1]])))
    a, b = rl.compile(f)(np.float64(1.0))
    # n/1000 increments, applied alternately to the two fields (the swap count between is odd)
    half = n // 2000
    assert sorted([float(a), float(b)]) == [1.0 + half, 2.0 + half]


# ---- arguments, caching, devices ---------------------------------------------------------------------

def test_second_call_does_not_retrace():
    x = rl.var("x", shape=(4,), dtype=F32)
    run = rl.compile(rl.Function([x], rl.sum(x * x)))
    for k in range(3):
        run(np.full(4, k, F32))
    assert run.trace_count == 1


def test_wrong_arguments_name_the_parameter():
    x = rl.var("x", shape=(4,), dtype=F32)
    run = rl.compile(rl.Function([x], rl.sum(x * x)))
    assert float(run(np.ones(4, F32))) == 4.0         # traced: later calls take the fast path
    import jax.numpy as jnp
    assert float(run(jnp.ones(4, F32))) == 4.0        # jax arrays too
    with pytest.raises(rl.RelayishError, match="%x"):
        run(np.ones(3, F32))
    with pytest.raises(rl.RelayishError, match="%x.*float32"):
        run(np.ones(4, F64))
    with pytest.raises(rl.RelayishError, match="1 argument"):
        run()
    with pytest.raises(rl.RelayishError, match="%x"):
        run(np.ones(4, F32), np.ones(4, F32))
    assert run.trace_count == 1


def test_gpu_without_cuda_is_a_clear_error():
    import jax
    x = scalar("x")
    f = rl.Function([x], x)
    if any(d.platform == "gpu" for d in jax.devices()):
        assert float(rl.compile(f, device="gpu")(np.float64(2.0))) == 2.0
    else:
        with pytest.raises(rl.CompileError, match="gpu.*no CUDA device"):   # as the tutorial says
            rl.compile(f, device="gpu")


def test_unknown_backend_and_device():
    x = scalar("x")
    f = rl.Function([x], x)
    with pytest.raises(rl.RelayishError, match="backend"):
        rl.compile(f, backend="tpu-magic")
    with pytest.raises(rl.RelayishError, match="device"):
        rl.compile(f, device="abacus")


def test_interpreter_backend():
    x = scalar("x")
    run = rl.compile(rl.Function([x], x * c64(2.0)), backend="interpreter")
    assert isinstance(run(np.float64(2.0)), np.ndarray)
    assert float(run(np.float64(2.0))) == 4.0


def test_returning_a_function_is_a_compile_error():
    x = scalar("x")
    u = scalar("u")
    f = rl.Function([x], rl.Function([u], u * x))
    with pytest.raises(rl.CompileError, match="cannot return a function"):
        rl.compile(f)(np.float64(1.0))


# ---- gradients and Hessians of the same programs -------------------------------------------------

def option_module():
    mod = rl.Module()
    p = rl.Prelude(mod)
    x = scalar("x")
    sb = rl.ScopeBuilder()
    o = sb.let("o", rl.If(x > c64(0.0), p.Some(x * x), p.Nothing()))
    z = scalar("z")
    sb.ret(rl.Match(o, [
        rl.Clause(rl.PatternConstructor(p.Some, [rl.PatternVar(z)]), rl.sin(z) + x),
        rl.Clause(rl.PatternConstructor(p.Nothing, []), x * c64(3.0))]))
    mod["main"] = rl.Function([x], sb.get())
    return mod


def refs_loop_module():
    mod = rl.Module()
    p = rl.Prelude(mod)
    loop = counting_loop(mod, p)
    x = scalar("x")
    sb = rl.ScopeBuilder()
    r = sb.let("r", rl.RefCreate(x * x))
    out = sb.let("out", loop(p.make_nat(6), r, x))
    sb.ret(out * rl.RefRead(r))
    mod["main"] = rl.Function([x], sb.get())
    return mod


def walk_module():
    mod = rl.Module()
    p = rl.Prelude(mod)
    walk = rl.GlobalVar("walk")
    n, m = rl.var("n", type=rl.TypeCall(p.Nat, [])), rl.var("m", type=rl.TypeCall(p.Nat, []))
    x = scalar("x")
    step = rl.If(rl.sin(x) > c64(0.0), walk(m, x * c64(1.5)), walk(m, rl.tanh(x) + c64(1.0)))
    mod[walk] = rl.Function([n, x], rl.Match(n, [
        rl.Clause(rl.PatternConstructor(p.Z, []), x),
        rl.Clause(rl.PatternConstructor(p.S, [rl.PatternVar(m)]), step)]), rl.TensorType((), F64))
    y = scalar("y")
    mod["main"] = rl.Function([y], walk(p.make_nat(12), y))
    return mod


def fold_module():
    mod = rl.Module()
    p = rl.Prelude(mod)
    lst_t = rl.TypeCall(p.List, [rl.TensorType((2,), F64)])
    l = rl.var("l", type=lst_t)
    k = rl.var("k", shape=(2,), dtype=F64)
    e = rl.var("e", shape=(2,), dtype=F64)
    acc, item = scalar("acc"), rl.var("item", shape=(2,), dtype=F64)
    mapped = p.map(rl.Function([e], rl.tanh(e * k)), l)
    mod["main"] = rl.Function([l, k], p.foldl(
        rl.Function([acc, item], acc * c64(0.5) + rl.sum(item * item)), c64(0.0), mapped))
    return mod


GRAD_CASES = {
    "closure_if": (lambda: closure_choice(), [(2.0, 0.5), (-2.0, 0.5)]),
    "option": (option_module, [(1.5,), (-1.5,)]),
    "refs_loop": (refs_loop_module, [(0.7,), (2.5,)]),
    "walk": (walk_module, [(0.3,), (-0.7,)]),
}


@pytest.mark.parametrize("name", sorted(GRAD_CASES))
def test_gradient_agrees(name):
    make, points = GRAD_CASES[name]
    g = rl.gradient(make())
    run = rl.compile(g)
    for point in points:
        args = [np.float64(v) for v in point]
        same_value(rl.evaluate(g, *args), run(*args))
    assert run.trace_count == 1


def test_gradient_of_fold_over_list_keeps_structure():
    mod = fold_module()
    g = rl.gradient(mod)
    items = [np.array([0.1, 0.2]), np.array([-0.5, 1.0]), np.array([2.0, 3.0])]
    args = (rl.list_value(mod, items), np.array([1.0, -2.0]))
    out = both(g, *args)
    grads = rl.from_list_value(out[1][0])
    assert len(grads) == 3


def test_gradient_of_tree_recursion():
    mod, _ = tree_module()
    g = rl.gradient(mod)
    rng = np.random.default_rng(1)
    w = rng.normal(size=(2, 2))
    run = rl.compile(g)
    for _ in range(2):
        tree = make_tree(mod, rng, 3)
        same_value(rl.evaluate(g, tree, w), run(tree, w))


def vec(name, n=3):
    return rl.var(name, shape=(n,), dtype=F64)


def hess_closure_if():
    x, v, w = vec("x"), vec("v"), vec("w")
    sb = rl.ScopeBuilder()
    h = sb.let("h", rl.If(rl.sum(x) > c64(0.0), rl.Function([v], v * x),
                          rl.Function([w], rl.sin(w) + x * x)))
    sb.ret(rl.sum(h(x) * rl.tanh(x)))
    return rl.Function([x], sb.get())


def fold_join_module():
    """A list whose length depends on a traced condition, mapped and folded with closures."""
    mod = rl.Module()
    p = rl.Prelude(mod)
    x, e, item = vec("x"), vec("e"), vec("item")
    acc = scalar("acc")
    sb = rl.ScopeBuilder()
    lst = sb.let("lst", rl.If(rl.sum(x) > c64(0.0),
                              p.Cons(x * c64(2.0), p.Cons(rl.tanh(x), p.Nil())),
                              p.Cons(rl.sin(x), p.Nil())))
    mapped = sb.let("mapped", p.map(rl.Function([e], e * x), lst))
    sb.ret(p.foldl(rl.Function([acc, item], acc + rl.sum(rl.tanh(item))), c64(0.0), mapped))
    mod["main"] = rl.Function([x], sb.get())
    return mod


def test_gradient_of_list_joined_under_traced_if():
    g = rl.grad(fold_join_module())
    run = rl.compile(g)
    for sign in (1.0, -1.0):
        x = sign * np.linspace(0.3, 0.9, 3)
        same_value(rl.evaluate(g, x), run(x))
    assert run.trace_count == 1


def hess_fold():
    """map/foldl with closures over a static list; a traced if inside the mapped closure."""
    mod = rl.Module()
    p = rl.Prelude(mod)
    x, e, item = vec("x"), vec("e"), vec("item")
    acc = scalar("acc")
    lst = p.Cons(x * c64(2.0), p.Cons(rl.tanh(x), p.Cons(-x, p.Nil())))
    body = rl.If(rl.sum(e * x) > c64(0.0), e * x, rl.sin(e) + x)
    mapped = p.map(rl.Function([e], body), lst)
    mod["main"] = rl.Function([x], p.foldl(
        rl.Function([acc, item], acc * c64(0.9) + rl.sum(rl.tanh(item))), c64(0.0), mapped))
    return mod


def hess_refs():
    mod = rl.Module()
    p = rl.Prelude(mod)
    loop = counting_loop(mod, p)
    x = vec("x")
    sb = rl.ScopeBuilder()
    r = sb.let("r", rl.RefCreate(rl.sum(x * x)))
    out = sb.let("out", loop(p.make_nat(4), r, rl.sum(rl.sin(x))))
    sb.ret(out * rl.RefRead(r))
    mod["main"] = rl.Function([x], sb.get())
    return mod


def hess_tree():
    mod, p = tree_module()
    x = rl.var("x", shape=(4,), dtype=F64)
    w = rl.reshape(x, (2, 2))
    leaf = lambda k: p.Leaf(rl.tanh(x[k:k + 2] if False else rl.take(x, rl.const(np.array([k, k + 1], "int32")))))  # noqa: E731
    tree = p.Node(p.Node(leaf(0), leaf(1)), leaf(2))
    mod["main"] = rl.Function([x], rl.sum(rl.GlobalVar("net")(tree, w)))
    return mod


HESS_CASES = {"closure_if": (hess_closure_if, 3), "fold": (hess_fold, 3), "refs": (hess_refs, 3),
              "tree": (hess_tree, 4)}


# each Hessian compiles for a second or two: the default run takes closure_if, -m slow the rest
@pytest.mark.parametrize("name", ["closure_if"] + [pytest.param(n, marks=pytest.mark.slow)
                                                  for n in sorted(HESS_CASES) if n != "closure_if"])
def test_hessian_agrees(name):
    make, n = HESS_CASES[name]
    h = rl.hessian(make())
    run = rl.compile(h)
    for sign in (1.0, -1.0):
        x = sign * np.linspace(0.3, 0.9, n)
        same_value(rl.evaluate(h, x), run(x), rtol=1e-5, atol=1e-8)


# ---- batched independent calls (the rows of rl.hessian) --------------------------------------------

def _rows_program(reads_accumulator_in_row, reads_accumulator_after):
    """(f(c0).0, f(c1).0, f(c2).0) where f accumulates into an outer reference."""
    x = vec("x")
    c = vec("c")
    sb = rl.ScopeBuilder()
    r = sb.let("r", rl.RefCreate(rl.zeros((3,), F64)))
    inner = rl.ScopeBuilder()
    inner.let("_", rl.RefWrite(r, rl.RefRead(r) + c * x))
    row = rl.sin(c * x) + (rl.RefRead(r) if reads_accumulator_in_row else c64(0.0))
    inner.ret(rl.Tuple([row]))
    f = sb.let("f", rl.Function([c], inner.get()))
    eye = np.eye(3)
    rows = sb.let("rows", rl.Tuple([rl.TupleGetItem(f(rl.const(eye[i])), 0) for i in range(3)]))
    sb.ret(rl.Tuple([rows, rl.RefRead(r)]) if reads_accumulator_after else rows)
    return rl.Function([x], sb.get())


@pytest.mark.parametrize("in_row,after", [(False, False), (True, False), (False, True)])
def test_batched_calls_keep_sequential_semantics(in_row, after):
    f = _rows_program(in_row, after)
    both(f, np.array([0.5, -1.0, 2.0]))


def test_rosenbrock_hessian_is_one_batched_computation():
    n = 8
    x = rl.var("x", shape=(n,), dtype=F64)
    head = rl.op.strided_slice(x, (0,), (n - 1,))
    tail = rl.op.strided_slice(x, (1,), (n,))
    d = tail - head * head
    e = c64(1.0) - head
    h = rl.hessian(rl.Function([x], rl.sum(c64(100.0) * d * d + e * e)))
    point = np.linspace(-1.0, 1.5, n)
    out = np.asarray(both(h, point, rtol=1e-9))
    expected = np.zeros((n, n))                 # the closed form
    for i in range(n - 1):
        expected[i, i] += 1200 * point[i] ** 2 - 400 * point[i + 1] + 2
        expected[i, i + 1] += -400 * point[i]
        expected[i + 1, i] += -400 * point[i]
        expected[i + 1, i + 1] += 200
    np.testing.assert_allclose(out, expected, rtol=1e-9)


def test_batched_calls_with_reads_inside_traced_ifs():
    # each call reads the shared reference inside a traced if, then the join writes it: the calls
    # are not independent and must run one after another
    x = vec("x")
    c = vec("c")
    sb = rl.ScopeBuilder()
    r = sb.let("r", rl.RefCreate(rl.ones((3,), F64)))
    inner = rl.ScopeBuilder()
    v = inner.let("v", rl.If(rl.sum(x) > c64(0.0), rl.RefRead(r) * c64(2.0), c * x))
    inner.let("_", rl.RefWrite(r, v))
    inner.ret(rl.Tuple([rl.sin(v)]))
    f = sb.let("f", rl.Function([c], inner.get()))
    eye = np.eye(3)
    sb.ret(rl.Tuple([rl.TupleGetItem(f(rl.const(eye[i])), 0) for i in range(3)]))
    prog = rl.Function([x], sb.get())
    for sign in (1.0, -1.0):
        both(prog, sign * np.array([0.5, 1.0, 2.0]))


def test_a_constructor_is_a_function_value():
    # let %f = Some; match %f(%x) {...}: a constructor passed around as a value is called later
    from relayish.ir.expr import Var
    mod = rl.Module()
    p = rl.Prelude(mod)
    x, f, z = rl.var("x", shape=(), dtype="float32"), Var("f"), Var("z")
    use = rl.Match(rl.Call(f, [x]), [rl.Clause(rl.PatternConstructor(p.Some, [rl.PatternVar(z)]),
                                               z * x),
                                     rl.Clause(rl.PatternWildcard(), x)])
    mod["main"] = rl.Function([x], rl.Let(f, p.Some, use))
    assert float(rl.compile(mod)(np.float32(3))) == float(rl.evaluate(mod, np.float32(3))) == 9.0


def test_an_op_is_not_a_value():
    # ops are only called: a bare op is refused before tracing, naming the operator
    from relayish.ir.expr import Var
    from relayish.ir.op import get_op
    y, g = rl.var("y", shape=(), dtype="float32"), Var("g")
    f = rl.Function([y], rl.Let(g, get_op("sin"), rl.Call(g, [y])))
    with pytest.raises(rl.RelayishError, match="operator 'sin' is not a value"):
        rl.compile(f)(np.float32(1))


def _head_module():
    # @main(%l: List[Tensor[(2), float32]], %n: int32): the head of %l, or zeros
    from relayish.ir.expr import Var
    mod = rl.Module()
    p = rl.Prelude(mod)
    l = Var("l", rl.TypeCall(p.List, [rl.TensorType((2,), "float32")]))
    n, h = rl.var("n", shape=(), dtype="int32"), Var("h")
    head = rl.PatternConstructor(p.Cons, [rl.PatternVar(h), rl.PatternWildcard()])
    mod["main"] = rl.Function([l, n], rl.Match(l, [rl.Clause(head, h), rl.Clause(
        rl.PatternWildcard(), rl.zeros((2,), "float32"))]))
    return mod


def test_argument_errors_are_the_interpreters():
    # one rule for every backend (relayish/backend/runtime/args.py): the same error text
    mod = _head_module()
    good = rl.list_value(mod, [np.ones(2, "float32")])
    bad_list = rl.list_value(mod, [np.ones(2, "float32"), np.ones(3, "float32")])
    cases = [((bad_list, np.int32(1)), r"parameter %l of @main \(field 0 of Cons of field 1 of "
                                       r"Cons\): expected Tensor\[\(2\), float32\], got "
                                       r"Tensor\[\(3\), float32\]"),
             ((good, 1.5), "the float value 1.5"),
             ((good, 2 ** 40), "out of range for int32"),
             ((good,), r"@main takes 2 argument\(s\) \(%l, %n\), got 1"),
             (((1, 2), 1), "expected List.*got a tuple of 2 field")]
    for args, pattern in cases:
        messages = []
        for backend in ("jax", "interpreter"):
            with pytest.raises(rl.EvaluationError, match=pattern) as info:
                rl.compile(mod, backend=backend)(*args)
            messages.append(str(info.value))
        assert messages[0] == messages[1]
    assert float(rl.compile(mod)(good, 3)[0]) == 1.0


def test_a_new_shape_on_the_fast_path_names_the_parameter():
    x = rl.var("x", shape=(3,))
    run = rl.compile(rl.Function([x], rl.sum(x * x)))
    assert float(run(np.ones(3, "float32"))) == 3.0        # traced: the fast path is installed
    with pytest.raises(rl.EvaluationError, match=r"bad argument for parameter %x of @main: "
                                                 r"expected Tensor\[\(3\), float32\], got "
                                                 r"Tensor\[\(4\), float32\]"):
        run(np.ones(4, "float32"))


def test_a_function_argument_is_a_compile_error():
    from relayish.ir.expr import Var
    t = rl.TensorType((), "float32")
    f, x = Var("f", rl.FuncType([t], t)), rl.var("x", shape=())
    run = rl.compile(rl.Function([f, x], rl.Call(f, [x])))
    with pytest.raises(rl.CompileError, match="parameter %f of @main: the jax backend takes no "
                                              "function arguments"):
        run(lambda v: v, np.float32(1))
