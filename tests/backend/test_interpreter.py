"""The numpy reference interpreter: every construct, closures, recursion depth, argument checks."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import relayish as rl
from relayish.backend.interp import api as interp_api
from relayish.backend.interp.compiler import Program
from relayish.backend.interp import run as interp_run
from relayish.backend.interp.run import InterpreterClosure
from relayish.ir.op import registered
from relayish.ir.visitor import build_let_chain
from strategies import CHAIN_LENGTHS


def f64(name, shape=()):
    return rl.var(name, shape=shape, dtype="float64")


def i32(name):
    return rl.var(name, dtype="int32")


def c64(value):
    return rl.const(value, "float64")


# ---- basic constructs ------------------------------------------------------------------------

def test_op_calls_match_numpy():
    x, y = f64("x", (3,)), f64("y", (3,))
    f = rl.Function([x, y], rl.tanh(x * y) + rl.exp(x) / (y - c64(7.0)))
    a, b = np.array([0.5, -1.0, 2.0]), np.array([1.5, 2.0, -0.25])
    out = rl.evaluate(f, a, b)
    np.testing.assert_allclose(out, np.tanh(a * b) + np.exp(a) / (b - 7.0))
    assert out.dtype == np.float64


def test_scalar_results_are_0d_arrays_never_numpy_scalars():
    x = f64("x")
    out = rl.evaluate(rl.Function([x], rl.sum(rl.exp(x))), 1.0)
    assert type(out) is np.ndarray and out.shape == () and out == np.exp(1.0)
    assert type(rl.evaluate(c64(3.0))) is np.ndarray


def test_constant_tuple_and_projection():
    x = f64("x")
    t = rl.Tuple([x, c64(2.0), rl.Tuple([x * x])])
    f = rl.Function([x], rl.Tuple([t[1], t[2][0], t]))
    out = rl.evaluate(f, 3.0)
    assert out[0] == 2.0 and out[1] == 9.0
    assert isinstance(out[2], tuple) and len(out[2]) == 3 and out[2][2][0] == 9.0
    assert rl.evaluate(rl.Tuple([])) == ()


def test_let_and_let_alias():
    x = f64("x")
    a, b, c = rl.Var("a"), rl.Var("b"), rl.Var("c")
    body = rl.Let(a, x + c64(1.0), rl.Let(b, a, rl.Let(c, b * a, c)))
    assert rl.evaluate(rl.Function([x], body), 2.0) == 9.0


def test_if_in_tail_and_value_positions():
    x = f64("x")
    tail = rl.Function([x], rl.If(x > c64(0.0), x, -x))
    assert rl.evaluate(tail, 2.0) == 2.0 and rl.evaluate(tail, -3.0) == 3.0
    y = rl.Var("y")
    value = rl.Function([x], rl.Let(y, rl.If(x > c64(0.0), x * c64(10.0), c64(-1.0)), y + c64(1.0)))
    assert rl.evaluate(value, 2.0) == 21.0 and rl.evaluate(value, -2.0) == 0.0


def test_else_if_chain():
    x = f64("x")
    body = c64(-1.0)
    for k in range(50):
        body = rl.If(rl.equal(x, c64(float(k))), c64(float(k * k)), body)
    f = rl.Function([x], body)
    assert rl.evaluate(f, 7.0) == 49.0 and rl.evaluate(f, 70.0) == -1.0


def test_non_function_expression_evaluates_to_a_value():
    assert rl.evaluate(c64(2.0) * c64(4.0)) == 8.0


# ---- closures ----------------------------------------------------------------------------------

def test_closure_captures_environment():
    x, y = f64("x"), f64("y")
    g = rl.Var("g")
    f = rl.Function([x], rl.Let(g, rl.Function([y], x * y), g(c64(3.0)) + g(c64(4.0))))
    assert rl.evaluate(f, 2.0) == 14.0


def test_closure_returned_to_python_is_callable():
    x, y = f64("x"), f64("y")
    adder = rl.Function([x], rl.Function([y], x + y))
    add5 = rl.evaluate(adder, 5.0)
    assert isinstance(add5, rl.Closure)
    assert add5(2.0) == 7.0 and add5(np.float64(-5.0)) == 0.0
    assert add5.func is not None
    with pytest.raises(rl.EvaluationError, match="%y"):
        add5(np.ones(2))
    with pytest.raises(rl.EvaluationError, match="1 argument"):
        add5(1.0, 2.0)


def test_higher_order_compose():
    x, y = f64("x"), f64("y")
    fa = rl.var("fa", type=rl.FuncType([rl.TensorType((), "float64")], rl.TensorType((), "float64")))
    fb = rl.var("fb", type=fa.type_annotation)
    compose = rl.Function([fa, fb], rl.Function([x], fa(fb(x))))
    double = rl.Function([y], y * c64(2.0))
    z = f64("z")
    inc = rl.Function([z], z + c64(1.0))
    w = f64("w")
    main = rl.Function([w], compose(double, inc)(w))
    assert rl.evaluate(main, 3.0) == 8.0


def test_closure_passed_in_from_python_and_python_callables():
    x = f64("x")
    t = rl.TensorType((), "float64")
    g = rl.var("g", type=rl.FuncType([t], t))
    apply_twice = rl.Function([g, x], g(g(x)))
    y = f64("y")
    square = rl.evaluate(rl.Function([f64("u")], rl.Function([y], y * y)), 0.0)
    assert rl.evaluate(apply_twice, square, 3.0) == 81.0
    assert rl.evaluate(apply_twice, lambda v: v + 1.0, 3.0) == 5.0
    with pytest.raises(rl.EvaluationError, match="%g"):
        rl.evaluate(apply_twice, 2.0, 3.0)


def test_capture_through_intermediate_functions():
    x, y, z = f64("x"), f64("y"), f64("z")
    curried = rl.Function([x], rl.Function([y], rl.Function([z], x * c64(100.0) + y * c64(10.0) + z)))
    assert rl.evaluate(curried, 1.0)(2.0)(3.0) == 123.0
    w = f64("w")
    main = rl.Function([w], curried(w)(c64(5.0))(w))
    assert rl.evaluate(main, 2.0) == 252.0


def test_projections_of_tuples_built_in_frame_and_captured_by_closures():
    x = f64("x")
    d, f, u, k = rl.Var("d"), rl.Var("f"), rl.Var("u"), rl.Var("k")
    inner = rl.Tuple([x * c64(2.0), rl.RefCreate(x)])
    body = rl.Let(d, rl.Tuple([x, inner]), rl.Let(
        f, rl.Function([], d[1][0] + rl.RefRead(d[1][1]) + d[0]), rl.Let(
            u, rl.RefWrite(d[1][1], c64(10.0)), rl.Let(k, f(), rl.Tuple([k, d[1][0], d])))))
    total, doubled, whole = rl.evaluate(rl.Function([x], body), 3.0)
    assert total == 6.0 + 10.0 + 3.0 and doubled == 6.0
    assert whole[0] == 3.0 and whole[1][1].value == 10.0


def test_expression_evaluating_to_a_function_is_called_with_args():
    x = f64("x")
    g = rl.Var("g")
    e = rl.Let(g, rl.Function([x], x + c64(1.0)), g)
    assert rl.evaluate(e, 4.0) == 5.0
    with pytest.raises(rl.EvaluationError, match="not a function"):
        rl.evaluate(c64(1.0), 2.0)


def test_array_like_arguments_such_as_jax_arrays():
    import jax.numpy as jnp
    x = rl.var("x", shape=(2,), dtype="float32")
    out = rl.evaluate(rl.Function([x], x * x), jnp.asarray([1.0, 3.0], dtype="float32"))
    assert isinstance(out, np.ndarray) and list(out) == [1.0, 9.0]


def test_local_recursive_closure_letrec():
    n, acc = i32("n"), i32("acc")
    loop = rl.Var("loop")
    body = rl.If(rl.equal(n, rl.const(0)), acc, loop(n - rl.const(1), acc + n))
    m = i32("m")
    f = rl.Function([m], rl.Let(loop, rl.Function([n, acc], body), loop(m, rl.const(0))))
    assert rl.evaluate(f, 100) == 5050


# ---- globals and recursion -------------------------------------------------------------------

def sum_to_module():
    mod = rl.Module()
    s = rl.GlobalVar("sum_to")
    n = i32("n")
    mod[s] = rl.Function([n], rl.If(rl.equal(n, rl.const(0)), rl.const(0),
                                    n + s(n - rl.const(1))))
    m = i32("m")
    mod["main"] = rl.Function([m], s(m))
    return mod


def test_recursion_20000_deep_non_tail():
    out = rl.evaluate(sum_to_module(), 20000)
    assert out == 20000 * 20001 // 2 and out.dtype == np.int32


def test_tail_recursion_runs_in_constant_stack():
    mod = rl.Module()
    loop = rl.GlobalVar("loop")
    n, acc = i32("n"), rl.var("acc", dtype="int64")
    mod[loop] = rl.Function([n, acc], rl.If(rl.equal(n, rl.const(0)), acc,
                                            loop(n - rl.const(1), acc + rl.cast(n, "int64"))))
    m = i32("m")
    mod["main"] = rl.Function([m], loop(m, rl.const(0, "int64")))
    assert rl.evaluate(mod, 100000) == 100000 * 100001 // 2


def test_local_closure_recursion_20000_deep_non_tail():
    n = i32("n")
    f = rl.Var("f")
    body = rl.If(rl.equal(n, rl.const(0)), rl.const(0), n + f(n - rl.const(1)))
    m = i32("m")
    prog = rl.Function([m], rl.Let(f, rl.Function([n], body, rl.TensorType((), "int32")), f(m)))
    assert rl.evaluate(prog, 20000) == 20000 * 20001 // 2


def test_runaway_recursion_is_an_evaluation_error(monkeypatch):
    monkeypatch.setattr(interp_run, "MAX_CALL_DEPTH", 500)
    mod = rl.Module()
    loop = rl.GlobalVar("forever")
    n = i32("n")
    mod[loop] = rl.Function([n], rl.const(1) + loop(n + rl.const(1)), rl.TensorType((), "int32"))
    m = i32("m")
    mod["main"] = rl.Function([m], loop(m))
    with pytest.raises(rl.EvaluationError, match="call depth") as info:
        rl.evaluate(mod, 0)
    assert "@forever" in "".join(info.value.__notes__)


def test_function_with_globals_of_a_given_module():
    mod = sum_to_module()
    k = i32("k")
    f = rl.Function([k], rl.GlobalVar("sum_to")(k) * rl.const(2))
    assert rl.evaluate(f, 10, mod=mod) == 110


def test_mutual_recursion():
    mod = rl.Module()
    even, odd = rl.GlobalVar("even"), rl.GlobalVar("odd")
    n, k = i32("n"), i32("k")
    mod[even] = rl.Function([n], rl.If(rl.equal(n, rl.const(0)), rl.const(True),
                                       odd(n - rl.const(1))))
    mod[odd] = rl.Function([k], rl.If(rl.equal(k, rl.const(0)), rl.const(False),
                                      even(k - rl.const(1))))
    m = i32("m")
    mod["main"] = rl.Function([m], rl.Tuple([even(m), odd(m)]))
    assert rl.evaluate(mod, 7) == (False, True)
    assert rl.evaluate(mod, 10000) == (True, False)


def test_global_used_as_a_value():
    mod = rl.Module()
    sq = rl.GlobalVar("sq")
    x = f64("x")
    mod[sq] = rl.Function([x], x * x)
    t = rl.TensorType((), "float64")
    g, y = rl.var("g", type=rl.FuncType([t], t)), f64("y")
    app = rl.GlobalVar("app")
    mod[app] = rl.Function([g, y], g(y))
    z = f64("z")
    mod["main"] = rl.Function([z], app(sq, z))
    assert rl.evaluate(mod, 3.0) == 9.0


def test_missing_global_is_an_error():
    x = f64("x")
    f = rl.Function([x], rl.GlobalVar("nowhere")(x))
    with pytest.raises(rl.RelayishError, match="nowhere"):
        rl.evaluate(f, 1.0)


# ---- ADTs and match ---------------------------------------------------------------------------

def test_prelude_list_functions():
    mod = rl.Module()
    p = rl.Prelude(mod)
    t = rl.TensorType((), "float64")
    lst = rl.var("l", type=rl.TypeCall(p.List, [t]))
    x, acc, h = f64("x"), f64("acc"), f64("h")
    mod["main"] = rl.Function([lst], rl.Tuple([
        p.length(lst),
        p.map(rl.Function([x], x * c64(2.0)), lst),
        p.foldl(rl.Function([acc, h], acc + h), c64(0.0), lst),
    ]))
    n, doubled, total = rl.evaluate(mod, rl.list_value(mod, [1.0, 2.0, 3.5]))
    assert n == 3
    assert [float(v) for v in rl.from_list_value(doubled)] == [2.0, 4.0, 7.0]
    assert total == 6.5 and total.dtype == np.float64


def test_match_constructor_tuple_var_and_wildcard_patterns():
    mod = rl.Module()
    p = rl.Prelude(mod)
    t = rl.TensorType((), "float64")
    opt = rl.var("o", type=rl.TupleType([rl.TypeCall(p.Option, [t]), t]))
    v, w = rl.Var("v"), rl.Var("w")
    body = rl.Match(opt, [
        rl.Clause(rl.PatternTuple([rl.PatternConstructor(p.Some, [rl.PatternVar(v)]),
                                   rl.PatternVar(w)]), v + w),
        rl.Clause(rl.PatternTuple([rl.PatternWildcard(), rl.PatternVar(w)]), -w),
    ])
    mod["main"] = rl.Function([opt], body)
    some = rl.ConstructorValue(p.Some, [np.array(2.0)])
    nothing = rl.ConstructorValue(p.Nothing, [])
    assert rl.evaluate(mod, (some, 3.0)) == 5.0
    assert rl.evaluate(mod, (nothing, 3.0)) == -3.0


def test_nested_constructor_patterns_and_match_in_value_position():
    mod = rl.Module()
    p = rl.Prelude(mod)
    t = rl.TensorType((), "float64")
    lst = rl.var("l", type=rl.TypeCall(p.List, [t]))
    a, b, r = rl.Var("a"), rl.Var("b"), rl.Var("r")
    second = rl.Match(lst, [
        rl.Clause(rl.PatternConstructor(p.Cons, [rl.PatternWildcard(), rl.PatternConstructor(
            p.Cons, [rl.PatternVar(a), rl.PatternWildcard()])]), a),
        rl.Clause(rl.PatternConstructor(p.Cons, [rl.PatternVar(b), rl.PatternWildcard()]), b),
        rl.Clause(rl.PatternWildcard(), c64(0.0)),
    ])
    mod["main"] = rl.Function([lst], rl.Let(r, second, r * c64(10.0)))
    assert rl.evaluate(mod, rl.list_value(mod, [1.0, 2.0, 3.0])) == 20.0
    assert rl.evaluate(mod, rl.list_value(mod, [4.0])) == 40.0
    assert rl.evaluate(mod, rl.list_value(mod, [])) == 0.0


def test_constructor_as_a_function_value():
    mod = rl.Module()
    p = rl.Prelude(mod)
    t = rl.TensorType((), "float64")
    lst = rl.var("l", type=rl.TypeCall(p.List, [t]))
    mod["main"] = rl.Function([lst], p.map(p.Some, lst))
    out = rl.from_list_value(rl.evaluate(mod, rl.list_value(mod, [1.0, 2.0])))
    assert [v.constructor.name_hint for v in out] == ["Some", "Some"]
    assert [float(v.fields[0]) for v in out] == [1.0, 2.0]


def test_constructors_build_values():
    mod = rl.Module()
    p = rl.Prelude(mod)
    x = f64("x")
    mod["main"] = rl.Function([x], p.Cons(x, p.Cons(x * x, p.Nil())))
    out = rl.evaluate(mod, 3.0)
    assert isinstance(out, rl.ConstructorValue) and out.constructor is p.Cons
    assert [float(v) for v in rl.from_list_value(out)] == [3.0, 9.0]


def test_match_without_matching_clause_is_an_evaluation_error():
    mod = rl.Module()
    p = rl.Prelude(mod)
    t = rl.TensorType((), "float64")
    o = rl.var("o", type=rl.TypeCall(p.Option, [t]))
    v = rl.Var("v")
    mod["main"] = rl.Function([o], rl.Match(
        o, [rl.Clause(rl.PatternConstructor(p.Some, [rl.PatternVar(v)]), v)], complete=False))
    assert rl.evaluate(mod, rl.ConstructorValue(p.Some, [np.array(1.5)])) == 1.5
    with pytest.raises(rl.EvaluationError, match="no clause matches the value Nothing") as info:
        rl.evaluate(mod, rl.ConstructorValue(p.Nothing, []))
    assert "@main" in "".join(getattr(info.value, "__notes__", []))


def test_long_list_argument_is_converted_without_recursion():
    mod = rl.Module()
    p = rl.Prelude(mod)
    t = rl.TensorType((), "float64")
    lst = rl.var("l", type=rl.TypeCall(p.List, [t]))
    acc, h = f64("acc"), f64("h")
    mod["main"] = rl.Function([lst], p.foldl(rl.Function([acc, h], acc + h), c64(0.0), lst))
    assert rl.evaluate(mod, rl.list_value(mod, [1.0] * 30000)) == 30000.0


# ---- references -------------------------------------------------------------------------------

def test_ref_counter_loop():
    mod = rl.Module()
    count = rl.GlobalVar("count")
    r = rl.var("r", type=rl.RefType(rl.TensorType((), "int32")))
    n = i32("n")
    u = rl.Var("u")
    mod[count] = rl.Function([r, n], rl.If(
        rl.equal(n, rl.const(0)), rl.RefRead(r),
        rl.Let(u, rl.RefWrite(r, rl.RefRead(r) + n), count(r, n - rl.const(1)))))
    m, cell = i32("m"), rl.Var("cell")
    mod["main"] = rl.Function([m], rl.Let(cell, rl.RefCreate(rl.const(0)), count(cell, m)))
    assert rl.evaluate(mod, 1000) == 500500


def test_ref_write_returns_unit_and_refs_alias():
    x = f64("x")
    r, u = rl.Var("r"), rl.Var("u")
    f = rl.Function([x], rl.Let(r, rl.RefCreate(x), rl.Let(
        u, rl.RefWrite(r, x * c64(3.0)), rl.Tuple([u, rl.RefRead(r), r]))))
    unit, value, ref = rl.evaluate(f, 2.0)
    assert unit == () and value == 6.0
    assert isinstance(ref, rl.RefValue) and ref.value == 6.0


def test_ref_of_closures_chains_backpropagator_style():
    # bp := fn() { acc := !acc + k; old() }, three times, then (!bp)(): the AD pattern
    x = f64("x")
    unit_fn = rl.FuncType([], rl.TupleType([]))
    bp, acc = rl.Var("bp"), rl.Var("acc")
    steps = [(bp, rl.RefCreate(rl.Function([], rl.Tuple([])))), (acc, rl.RefCreate(c64(0.0)))]
    for k in (1.0, 10.0, 100.0):
        old, u = rl.Var("old"), rl.Var("u")
        w = rl.Var("w")
        closure = rl.Function([], rl.Let(w, rl.RefWrite(acc, rl.RefRead(acc) + x * c64(k)), old()))
        steps += [(old, rl.RefRead(bp)), (u, rl.RefWrite(bp, closure))]
    done = rl.Var("done")
    steps.append((done, rl.Call(rl.RefRead(bp), [])))
    f = rl.Function([x], build_let_chain(steps, rl.RefRead(acc)))
    assert rl.evaluate(f, 2.0) == 222.0
    assert unit_fn.arg_types == ()


def test_ref_argument_from_python_is_shared():
    r = rl.var("r", type=rl.RefType(rl.TensorType((), "float64")))
    f = rl.Function([r], rl.RefWrite(r, rl.RefRead(r) * c64(2.0)))
    cell = rl.RefValue(np.array(4.0))
    assert rl.evaluate(f, cell) == ()
    assert cell.value == 8.0
    cell = rl.RefValue(1.5)           # Python contents are converted in place
    rl.evaluate(f, cell)
    assert cell.value == 3.0 and cell.value.dtype == np.float64


# ---- argument checking ------------------------------------------------------------------------

def test_wrong_shape_names_parameter_and_types():
    x = rl.var("inputs", shape=(3,), dtype="float32")
    f = rl.Function([x], x * x)
    with pytest.raises(rl.EvaluationError) as info:
        rl.evaluate(f, np.ones(4, "float32"))
    text = str(info.value)
    assert "%inputs" in text and "(3" in text and "(4" in text


def test_wrong_dtype_is_an_error_but_python_values_convert():
    x = rl.var("x", shape=(2,), dtype="float32")
    f = rl.Function([x], x + x)
    with pytest.raises(rl.EvaluationError, match="float64"):
        rl.evaluate(f, np.ones(2))
    out = rl.evaluate(f, [1, 2.5])
    assert out.dtype == np.float32 and list(out) == [2.0, 5.0]
    n = i32("n")
    g = rl.Function([n], n + n)
    assert rl.evaluate(g, 4).dtype == np.int32
    with pytest.raises(rl.EvaluationError, match="%n"):
        rl.evaluate(g, 1.5)
    with pytest.raises(rl.EvaluationError, match="%n"):
        rl.evaluate(g, "three")
    with pytest.raises(rl.EvaluationError, match="out of range for int32"):
        rl.evaluate(g, 2**40)
    with pytest.raises(rl.EvaluationError, match="rectangular"):
        rl.evaluate(f, [[1.0, 2.0], [3.0]])


def test_wrong_arity():
    x, y = f64("x"), f64("y")
    f = rl.Function([x, y], x + y)
    with pytest.raises(rl.EvaluationError, match=r"2 argument\(s\) \(%x, %y\), got 1"):
        rl.evaluate(f, 1.0)
    with pytest.raises(rl.EvaluationError, match="got 3"):
        rl.evaluate(f, 1.0, 2.0, 3.0)


def test_wrong_structure_tuple_and_adt():
    t = rl.TensorType((), "float64")
    pair = rl.var("pair", type=rl.TupleType([t, rl.TupleType([t, t])]))
    f = rl.Function([pair], pair[1][0] + pair[0])
    assert rl.evaluate(f, (1.0, (2.0, 3.0))) == 3.0
    with pytest.raises(rl.EvaluationError, match="%pair"):
        rl.evaluate(f, (1.0, 2.0))
    with pytest.raises(rl.EvaluationError, match="field 1"):
        rl.evaluate(f, (1.0, (2.0,)))
    mod = rl.Module()
    p = rl.Prelude(mod)
    lst = rl.var("l", type=rl.TypeCall(p.List, [t]))
    mod["main"] = rl.Function([lst], p.length(lst))
    with pytest.raises(rl.EvaluationError, match="%l"):
        rl.evaluate(mod, rl.ConstructorValue(p.Some, [np.array(1.0)]))
    with pytest.raises(rl.EvaluationError, match="float32"):
        rl.evaluate(mod, rl.list_value(mod, [np.float32(1.0)]))
    assert rl.evaluate(mod, rl.list_value(mod, [1.0, 2.0])) == 2


def test_evaluate_rejects_non_programs():
    with pytest.raises(rl.RelayishError):
        rl.evaluate(42)


# ---- errors at run time -----------------------------------------------------------------------

def test_op_failure_is_an_evaluation_error_naming_the_call():
    def impl(xp, x):
        raise FloatingPointError("boom")
    # registered for this test only: a leftover op would reach every test that walks the registry
    with registered("_interp_test_fail", 1, type_rule=lambda types, attrs: types[0],
                    impl=impl) as op:
        x = f64("x")
        f = rl.Function([x], op(x * c64(2.0)))
        with pytest.raises(rl.EvaluationError, match="_interp_test_fail") as info:
            rl.evaluate(f, 1.0)
    assert "boom" in str(info.value)


def test_calling_a_non_function_value_is_an_evaluation_error():
    x = f64("x")
    # bypass type inference: the interpreter must still report the fault cleanly
    code = Program(None).compile_function(rl.Function([x], rl.Call(x, [x])), "fn")
    with pytest.raises(rl.EvaluationError, match="cannot call"):
        InterpreterClosure(code, ())(1.0)


# ---- scale ------------------------------------------------------------------------------------

@pytest.mark.parametrize("n", CHAIN_LENGTHS)
def test_let_chain_of_n(n):
    x = f64("x")
    bindings, cur = [], x
    for i in range(n):
        v = rl.Var(f"t{i}")
        bindings.append((v, cur + c64(1.0)))
        cur = v
    f = rl.Function([x], build_let_chain(bindings, cur))
    assert rl.evaluate(f, 0.5) == n + 0.5


def test_deeply_nested_expression_without_lets():
    x = f64("x")
    e = x
    for _ in range(5000):
        e = e + c64(1.0)
    assert rl.evaluate(rl.Function([x], e), 0.0) == 5000.0


# ---- caching ----------------------------------------------------------------------------------

def test_compiled_code_is_cached_per_function_and_module():
    x = f64("x")
    f = rl.Function([x], x * c64(2.0))
    rl.evaluate(f, 1.0)
    code = interp_api._FUNCTION_CACHE[f]
    assert rl.evaluate(f, 2.0) == 4.0 and interp_api._FUNCTION_CACHE[f] is code
    mod = sum_to_module()
    rl.evaluate(mod, 3)
    main = interp_api._MODULE_CACHE[mod][1]
    rl.evaluate(mod, 4)
    assert interp_api._MODULE_CACHE[mod][1] is main
    m = i32("m")
    mod["main"] = rl.Function([m], m * rl.const(2))   # a changed module is compiled again
    assert rl.evaluate(mod, 4) == 8


def test_caches_do_not_keep_programs_alive():
    import gc
    import weakref
    x = f64("x")
    f = rl.Function([x], x * c64(2.0))
    mod = sum_to_module()
    assert rl.evaluate(f, 1.0) == 2.0 and rl.evaluate(mod, 3) == 6
    refs = [weakref.ref(f), weakref.ref(mod)]
    del f, mod
    gc.collect()
    assert all(r() is None for r in refs)


# ---- random elementwise programs against numpy ------------------------------------------------

_UNARY = {"exp": np.exp, "sin": np.sin, "tanh": np.tanh, "negative": np.negative}
_BINARY = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply,
           "maximum": np.maximum}


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(sorted(_UNARY) + sorted(_BINARY)),
                          st.integers(0, 100), st.integers(0, 100)), min_size=1, max_size=30),
       st.lists(st.floats(-2, 2), min_size=4, max_size=4))
def test_random_let_programs_agree_with_numpy(ops, data):
    x = f64("x", (4,))
    a = np.array(data)
    exprs, values, bindings = [x], [a], []
    with np.errstate(all="ignore"):          # exp may overflow to inf: equal on both sides
        _agree_with_numpy(ops, x, a, exprs, values, bindings)


def _agree_with_numpy(ops, x, a, exprs, values, bindings):
    for name, i, j in ops:
        u, w = exprs[i % len(exprs)], exprs[j % len(exprs)]
        uv, wv = values[i % len(values)], values[j % len(values)]
        v = rl.Var(f"v{len(bindings)}")
        if name in _UNARY:
            bindings.append((v, rl.get_op(name)(u)))
            values.append(_UNARY[name](uv))
        else:
            bindings.append((v, rl.get_op(name)(u, w)))
            values.append(_BINARY[name](uv, wv))
        exprs.append(v)
    f = rl.Function([x], build_let_chain(bindings, rl.Tuple(exprs[1:])))
    out = rl.evaluate(f, a)
    for got, want in zip(out, values[1:]):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)


# ---- programs written as text ------------------------------------------------------------------

_TEXT_PROGRAM = """
type MyList[a] { MyCons(a, MyList[a]), MyNil }
def @total(%l: MyList[float64], %acc: ref(float64)) -> float64 {
  match (%l) {
    MyCons(%h, %t) => { %acc := !%acc + %h; @total(%t, %acc) },
    MyNil => !%acc,
  }
}
def @main(%x: Tensor[(2), float64], %n: int32) -> float64 {
  let %a = take(%x, 0);
  let %f = fn (%y: float64) { %y * %a };
  let %r = ref(%a);
  %r := !%r + 1f64;
  let %l = MyCons(%f(2f64), MyCons(!%r, MyNil));
  if (%a > 0f64) { @total(%l, ref(0f64)) } else { 2.5f64 }
}
"""


def test_parsed_program_with_adts_refs_closures_and_globals():
    mod = rl.parse(_TEXT_PROGRAM)
    assert rl.evaluate(mod, [3.0, 4.0], 1) == 3.0 * 2.0 + (3.0 + 1.0)
    assert rl.evaluate(mod, [-3.0, 4.0], 1) == 2.5


def test_bare_nullary_constructor_is_a_value():
    mod = rl.parse("type T { A, B(float64) }\ndef @main() -> T { A }")
    out = rl.evaluate(mod)
    assert isinstance(out, rl.ConstructorValue) and out.constructor.name_hint == "A"


# ---- any Python value as an argument: a value or a RelayishError, never a bare exception -------

_python_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True),
              st.text(max_size=3), st.just(np.ones(2)), st.just(np.ones((2, 2), "float32")),
              st.just(np.int64(3)), st.just(rl.RefValue(1.0))),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.tuples(inner, inner)),
    max_leaves=6)


def _param_types():
    t32, t64 = rl.TensorType((2,), "float32"), rl.TensorType((), "float64")
    ti = rl.TensorType((2, 2), "int32")
    fn = rl.FuncType([t64], t64)
    return [t32, t64, ti, rl.TupleType([t64, t32]), rl.RefType(t64), fn,
            rl.TupleType([rl.TupleType([ti]), rl.RefType(t32)])]


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 6), _python_values)
def test_arbitrary_arguments_give_values_or_relayish_errors(which, value):
    t = _param_types()[which]
    p = rl.var("p", type=t)
    f = rl.Function([p], rl.Tuple([]))
    try:
        assert rl.evaluate(f, value) == ()
    except rl.RelayishError as exc:
        assert "%p" in str(exc)


# ---- fast paths: direct numpy calls, fused accumulation, shared zero references --------------

def test_accumulation_into_fresh_zero_reference_broadcasts_and_adds():
    # `r := !r + g` into ref(zeros(..)): a plain write where g has the sum's type, a real
    # (broadcasting) add otherwise, and later accumulations add
    g, s = f64("g", (3,)), f64("s")
    r, q = rl.Var("r"), rl.Var("q")
    sb = rl.ScopeBuilder()
    sb.let(r, rl.RefCreate(rl.zeros((3,), "float64")))
    sb.let(q, rl.RefCreate(rl.zeros((3,), "float64")))
    sb.let("u", rl.RefWrite(r, rl.RefRead(r) + g))
    sb.let("u", rl.RefWrite(r, rl.RefRead(r) + g))
    sb.let("u", rl.RefWrite(q, rl.RefRead(q) + s))          # scalar into a vector: broadcast
    sb.ret(rl.Tuple([rl.RefRead(r), rl.RefRead(q)]))
    f = rl.Function([g, s], sb.get())
    a = np.array([1.0, -2.0, 0.5])
    for _ in range(2):                                       # the shared zeros stay zero
        out_r, out_q = rl.evaluate(f, a, 3.0)
        np.testing.assert_array_equal(out_r, 2 * a)
        np.testing.assert_array_equal(out_q, [3.0, 3.0, 3.0])
        assert out_q.flags.writeable and out_r.flags.writeable


def test_untouched_zero_reference_reads_as_a_fresh_writable_array():
    r = rl.Var("r")
    f = rl.Function([], rl.Let(r, rl.RefCreate(rl.zeros((2,), "float64")), rl.RefRead(r)))
    a = rl.evaluate(f)
    a += 5.0                                   # the caller's array, not the shared zeros
    b = rl.evaluate(f)
    np.testing.assert_array_equal(b, [0.0, 0.0])
    assert b is not a


def test_gradient_of_unused_input_is_a_fresh_zero_array():
    x, y = f64("x", (2,)), f64("y", (2,))
    gx, gy = rl.evaluate(rl.grad(rl.Function([x, y], rl.sum(x * x)), argnums=(0, 1)),
                         np.ones(2), np.ones(2))
    np.testing.assert_array_equal(gy, [0.0, 0.0])
    gy += 1.0                                  # writable, and later runs still see zeros
    _, gy2 = rl.evaluate(rl.grad(rl.Function([x, y], rl.sum(x * x)), argnums=(0, 1)),
                         np.ones(2), np.ones(2))
    np.testing.assert_array_equal(gy2, [0.0, 0.0])
    np.testing.assert_array_equal(gx, [2.0, 2.0])


def test_fast_op_path_reports_faults_with_the_call():
    x = f64("x", (2, 3))
    f = rl.Function([x], rl.matmul(x, x))      # ill-typed: inner dimensions 3 != 2
    with pytest.raises(rl.RelayishError):
        rl.evaluate(f, np.ones((2, 3)))


def test_numpy_fast_path_follows_the_registered_impl():
    from relayish.ir.op import get_op
    op = get_op("tanh")
    assert op.numpy_fast({}) is np.tanh
    old = op.impl
    try:
        op.impl = lambda xp, v: xp.asarray(xp.tanh(v) + 1.0)   # a user replacing the impl
        assert op.numpy_fast({}) is None
        x = f64("x", (2,))
        out = rl.evaluate(rl.Function([x], rl.tanh(x)), np.zeros(2))
        np.testing.assert_array_equal(out, [1.0, 1.0])
    finally:
        op.impl = old


def test_fast_ops_match_the_registered_impls():
    from relayish.ir.op import get_op
    rng = np.random.default_rng(3)
    a, b = rng.normal(size=(3, 4)), rng.normal(size=(4,))
    x, y = f64("x", (3, 4)), f64("y", (4,))
    cases = [rl.concatenate([y, y], axis=0), rl.matmul(x, y), rl.transpose(x),
             rl.op.expand_dims(y, axis=-1), rl.op.strided_slice(x, (1, 0), (3, 2)),
             rl.sum(x), rl.op.broadcast_to_like(y, x), rl.abs(x) - rl.negative(x)]
    for e in cases:
        f = rl.Function([x, y], e)
        got = rl.evaluate(f, a, b)
        ref = get_op(e.op.name).impl(np, *[rl.evaluate(rl.Function([x, y], arg), a, b)
                                            for arg in e.args], **e.attrs)
        np.testing.assert_array_equal(got, ref)
        assert type(got) is np.ndarray and got.dtype == np.float64
