"""Expression nodes: identity equality, operator overloads building op calls, rl.const dtypes."""
import numpy as np
import pytest

import relayish as rl


def test_vars_are_binders_compared_by_identity():
    x1, x2 = rl.var("x"), rl.var("x")
    assert x1 == x1 and x1 != x2
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
    assert a != b and a == a
    assert a is not b and len({a, b}) == 2
    assert rl.GlobalVar("f") != rl.GlobalVar("f")


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


def test_no_equality_overload_keeps_identity():
    x = rl.var("x")
    assert (x == x) is True and (x == rl.var("x")) is False
    assert rl.equal(x, x).op.name == "equal"


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
