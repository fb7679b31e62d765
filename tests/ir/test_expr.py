"""Expression nodes: identity (`is`, hashing), operator overloads building op calls (`==` too),
rl.const dtypes."""
import numpy as np
import pytest

import relayish as rl


def test_vars_are_binders_compared_by_identity():
    x1, x2 = rl.var("x"), rl.var("x")
    assert x1 is not x2 and x1 in [x1] and x2 not in {x1}
    assert len({x1, x2}) == 2
    assert x1.name_hint == "x" and x1.type_annotation == rl.TensorType((), "float32")


def test_var_types_from_shape_dtype_or_type():
    assert rl.var("x", shape=(3,), dtype="float64").type_annotation == rl.TensorType((3,), "float64")
    assert rl.var("x", shape=(2,)).type_annotation.dtype == "float32"
    t = rl.TupleType([rl.TensorType(), rl.TensorType((2,))])
    assert rl.var("t", type=t).type_annotation == t
    with pytest.raises(rl.RelayishError):
        rl.var("x", type=t, shape=(2,))
    with pytest.raises(rl.RelayishError):
        rl.var("x", type="float32")


def test_expressions_of_equal_structure_are_different_nodes():
    x = rl.var("x")
    a, b = rl.Tuple([x, x]), rl.Tuple([x, x])
    assert a is not b and len({a, b}) == 2 and a in {a} and b not in {a: 1}
    assert rl.GlobalVar("f") is not rl.GlobalVar("f")


@pytest.mark.parametrize("value, dtype", [
    (2.0, "float32"), (3, "int32"), (True, "bool"), (False, "bool"),
    (np.float64(1.5), "float64"), (np.ones(3, "float64"), "float64"),
    (np.zeros((2, 2), "int64"), "int64"), ([1.0, 2.0], "float32"), ([1, 2], "int32"),
    (np.array(1, "float16"), "float16"),
])
def test_const_dtypes(value, dtype):
    c = rl.const(value)
    assert isinstance(c, rl.Constant)
    assert isinstance(c.data, np.ndarray) and c.data.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(c.data, np.asarray(value))


def test_const_explicit_dtype_and_scalars_are_zero_d_arrays():
    c = rl.const(2, dtype="float64")
    assert c.data.dtype == np.float64 and c.data.shape == () and isinstance(c.data, np.ndarray)
    assert rl.const(1.0, "int32").data.dtype == np.int32


@pytest.mark.parametrize("value", ["text", 1 + 2j, object(), np.array(["a"])])
def test_const_of_unsupported_values_is_a_relayish_error(value):
    with pytest.raises(rl.RelayishError):
        rl.const(value)


@pytest.mark.parametrize("build, name", [
    (lambda x, y: x + y, "add"), (lambda x, y: x - y, "subtract"),
    (lambda x, y: x * y, "multiply"), (lambda x, y: x / y, "divide"),
    (lambda x, y: x @ y, "matmul"), (lambda x, y: x ** y, "power"),
    (lambda x, y: x < y, "less"), (lambda x, y: x > y, "greater"),
    (lambda x, y: x <= y, "less_equal"), (lambda x, y: x >= y, "greater_equal"),
])
def test_binary_overloads_build_op_calls(build, name):
    x, y = rl.var("x", shape=(2, 2)), rl.var("y", shape=(2, 2))
    call = build(x, y)
    assert isinstance(call, rl.Call)
    assert isinstance(call.op, rl.Op) and call.op.name == name
    assert call.args[0] is x and call.args[1] is y
    assert call.op is rl.get_op(name)


def test_negation_and_reflected_overloads():
    x = rl.var("x")
    neg = -x
    assert neg.op.name == "negative" and neg.args == [x]
    r = 2.0 - x
    assert r.op.name == "subtract" and r.args[1] is x
    assert isinstance(r.args[0], rl.Constant) and float(r.args[0].data) == 2.0
    assert (3.0 * x).op.name == "multiply" and (1.0 / x).args[1] is x


def test_python_scalars_take_the_dtype_of_the_other_operand():
    x = rl.var("x", dtype="float64")
    assert (x * 2.0).args[1].data.dtype == np.float64
    assert (2 + x).args[0].data.dtype == np.float64
    assert (rl.var("n", dtype="int64") + 1).args[1].data.dtype == np.int64
    assert (rl.var("y") * 2.0).args[1].data.dtype == np.float32
    # nested: the hint looks through an op call to its first argument
    assert ((x * x) + 1.0).args[1].data.dtype == np.float64


def test_finding7_equality_builds_equal_and_not_equal():
    # issue 25, finding 7: `x == 0.0` was Python's identity test, so rl.where(x == 0.0, x, 1.0)
    # built where(False, ...) and silently gave ones. It builds equal/not_equal now, as numpy
    # and jax arrays do, with a number or another expression on either side
    x, y = rl.var("x", shape=(3,), dtype="float64"), rl.var("y", shape=(3,), dtype="float64")
    for built, name, args in [(x == 0.0, "equal", (x, None)), (x != y, "not_equal", (x, y)),
                              (0.0 == x, "equal", (x, None)), (x == x, "equal", (x, x)),
                              (x == np.zeros(3), "equal", (x, None))]:
        assert isinstance(built, rl.Call) and built.op.name == name
        assert built.args[0] is args[0] and (args[1] is None or built.args[1] is args[1])
    assert (x == 0.0).args[1].data.dtype == np.float64      # the number takes x's dtype
    f = rl.Function([x], rl.where(x == 0.0, x, 1.0))
    np.testing.assert_array_equal(rl.evaluate(f, np.array([0.0, 2.0, 0.0])), [0.0, 1.0, 0.0])
    g = rl.Function([x, y], rl.where(x != y, x, y * 0.0))
    np.testing.assert_array_equal(rl.evaluate(g, np.array([1.0, 2.0, 3.0]),
                                             np.array([1.0, 5.0, 3.0])), [0.0, 2.0, 0.0])
    # values that are no program's values stay Python's comparison (identity: False)
    assert (x == None) is False and (x != "x") is True and (x == rl.TensorType(())) is False  # noqa: E711


def test_finding7_equality_in_a_python_if_raises():
    x = rl.var("x")
    for cond in (lambda: x == 0.0, lambda: x != 0.0, lambda: x == rl.var("y")):
        with pytest.raises(rl.RelayishError, match="truth value.*rl.where.*a is b"):
            if cond():
                pass
    # identity still works where Python looks for it: containers test `is` first, dicts hash ids
    assert x in [x] and {x: 1}[x] == 1 and [x].index(x) == 0


def test_projection_and_call_sugar():
    t = rl.var("t", type=rl.TupleType([rl.TensorType(), rl.TensorType()]))
    p = t[1]
    assert isinstance(p, rl.TupleGetItem) and p.tuple_value is t and p.index == 1
    with pytest.raises(rl.RelayishError):
        t["a"]
    f = rl.var("f", type=rl.FuncType([rl.TensorType()], rl.TensorType()))
    c = f(p)
    assert isinstance(c, rl.Call) and c.op is f and c.args == [p] and c.attrs == {}


def test_op_functions_fill_in_default_attrs():
    x = rl.var("x", shape=(2, 3))
    a = rl.sum(x)
    b = rl.sum(x, axis=None, keepdims=False)
    assert a.attrs == b.attrs
    assert "axis" in a.attrs and "keepdims" in a.attrs
    assert rl.op.sum is rl.sum or rl.op.sum(x).op is a.op


def test_op_arity_and_unknown_attributes_are_errors():
    x = rl.var("x")
    with pytest.raises(rl.RelayishError, match="add"):
        rl.get_op("add")(x)
    with pytest.raises(rl.RelayishError, match="bogus"):
        rl.get_op("sum")(x, bogus=1)
    with pytest.raises(rl.RelayishError, match="unknown operator"):
        rl.get_op("no_such_op")


def test_constructor_calls_and_nodes_hold_their_parts():
    mod = rl.Module()
    p = rl.Prelude(mod)
    one = rl.const(1.0)
    lst = p.Cons(one, p.Nil())
    assert isinstance(lst, rl.Call) and lst.op is p.Cons and lst.args[0] is one
    assert isinstance(lst.args[1], rl.Call) and lst.args[1].op is p.Nil and lst.args[1].args == []
    x = rl.var("x")
    let = rl.Let(x, one, x * x)
    assert let.var is x and let.value is one
    r = rl.RefCreate(one)
    w = rl.RefWrite(r, rl.RefRead(r))
    assert w.ref is r and w.value.ref is r
    i = rl.If(x < one, x, one)
    assert i.cond.op.name == "less" and i.true_branch is x
    h = rl.var("h")
    m = rl.Match(lst, [rl.Clause(rl.PatternConstructor(p.Cons, [rl.PatternVar(h), rl.PatternWildcard()]), h),
                       rl.Clause(rl.PatternWildcard(), one)])
    assert m.complete and len(m.clauses) == 2 and m.clauses[0].lhs.patterns[0].var is h


def test_checked_type_before_inference_is_a_relayish_error():
    with pytest.raises(rl.RelayishError, match="infer"):
        rl.var("x").checked_type


def test_repr_never_fails():
    x = rl.var("x")
    assert "Var" in repr(x)
    assert "Call" in repr(x + x)


@pytest.mark.parametrize("make, literal", [
    (lambda: rl.const(1e39, "float32"), "1e39f"),
    (lambda: rl.const(1e39), "1e39f"),
    (lambda: rl.const([1.0, -1e39]), "-1e39f"),
    (lambda: rl.const(np.array([0.0, 1e39]), "float32"), "1e39f32"),
    (lambda: rl.const(65505.0, "float16"), "65505f16"),
    (lambda: rl.var("x") * 1e39, "1e39f"),
])
def test_finding8_const_overflow_is_an_error_like_the_literal(make, literal):
    # issue 25, finding 8: rl.const(1e39, "float32") was silently inf while the literal 1e39f
    # is an error; both run the same range check (ir/types.py float_overflows)
    with pytest.raises(rl.RelayishError, match="out of range for float(32|16)") as built:
        make()
    with pytest.raises(rl.ParseError, match="out of range for float(32|16)") as parsed:
        rl.parse_expr(literal)
    assert "largest finite value" in str(built.value) and "largest finite value" in str(parsed.value)


def test_finding8_const_range_keeps_what_the_literals_keep():
    # what the literals accept, rl.const accepts: infinities, NaN, the largest value's text
    assert np.isinf(rl.const(np.inf).data) and np.isnan(rl.const(float("nan"), "float16").data)
    assert rl.const(3.4028235e38).data == np.finfo("float32").max
    assert rl.const(np.array([1e39]), "float64").data[0] == 1e39
    inf_array = rl.const(np.array([-np.inf, 1.0]), "float32")
    rl.assert_structural_equal(rl.parse_expr(str(inf_array)), inf_array)


@pytest.mark.parametrize("value, dtype", [(2.5, "int32"), (np.array([1.0, 2.5]), "int64"),
                                          (float("nan"), "int32"), (1.5, "bool"), (-0.5, "uint8")])
def test_finding8_const_never_truncates_a_float_to_an_integer(value, dtype):
    # numpy's asarray(2.5, "int32") is 2, silently; the text format has no such literal, and a
    # conversion that changes the value is spelled out with rl.cast
    with pytest.raises(rl.RelayishError, match=f"(not a value of {dtype}|cannot be made)"):
        rl.const(value, dtype)
    assert rl.const(2.0, "int32").data == 2 and rl.const(np.array([1.0, 0.0]), "bool").data[0]


def test_a_number_meeting_a_call_of_a_function_literal_takes_its_dtype():
    # found by tests/fuzz/test_builder_vs_eager.py: `call * call + 1.0` made a float32 1f
    p = rl.var("p", shape=(3,), dtype="float64")
    y = rl.Function([p], rl.Let(rl.var("q"), p, p))(rl.var("x", shape=(3,), dtype="float64"))
    assert (y * y + 1.0).args[1].data.dtype == np.float64
