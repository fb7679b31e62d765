"""ScopeBuilder: let / if_scope / else_scope / ret / get, and its misuse errors."""
import numpy as np
import pytest

import relayish as rl
from relayish.ir.visitor import let_chain


def test_lets_build_a_chain_around_the_result():
    x = rl.var("x")
    sb = rl.ScopeBuilder()
    y = sb.let("y", x * x)
    z = sb.let(("z", rl.TensorType()), y + x)
    sb.ret(z)
    body = sb.get()
    bindings, result = let_chain(body)
    assert [v for v, _ in bindings] == [y, z]
    assert y.name_hint == "y" and y.type_annotation is None
    assert z.type_annotation == rl.TensorType()
    assert bindings[1][1].args[0] is y and result is z


def test_let_accepts_a_var_and_python_values():
    sb = rl.ScopeBuilder()
    v = rl.var("v", dtype="float64")
    assert sb.let(v, 2.0) is v
    c = sb.let("c", 3)
    sb.ret(rl.Tuple([v, c]))
    bindings, _ = let_chain(sb.get())
    assert isinstance(bindings[0][1], rl.Constant) and isinstance(bindings[1][1], rl.Constant)
    assert bindings[1][1].data.dtype == np.int32


def test_if_else_scopes_build_an_if_with_their_own_lets():
    x = rl.var("x")
    sb = rl.ScopeBuilder()
    y = sb.let("y", x * x)
    cond = y > 1.0
    with sb.if_scope(cond):
        a = sb.let("a", y + 1.0)
        sb.ret(a)
    with sb.else_scope():
        sb.ret(-y)
    body = sb.get()
    assert isinstance(body, rl.Let) and body.var is y
    branch = body.body
    assert isinstance(branch, rl.If) and branch.cond is cond
    assert isinstance(branch.true_branch, rl.Let) and branch.true_branch.var is a
    assert branch.false_branch.op.name == "negative"


def test_nested_if_scopes():
    x = rl.var("x")
    sb = rl.ScopeBuilder()
    with sb.if_scope(x > 0.0):
        with sb.if_scope(x > 1.0):
            sb.ret(x)
        with sb.else_scope():
            sb.ret(x * 2.0)
    with sb.else_scope():
        sb.ret(-x)
    outer = sb.get()
    assert isinstance(outer, rl.If) and isinstance(outer.true_branch, rl.If)


def test_builder_result_type_checks_and_runs():
    x = rl.var("x", dtype="float64")
    sb = rl.ScopeBuilder()
    y = sb.let("y", x * x)
    with sb.if_scope(y > rl.const(1.0, "float64")):   # y has no annotation: 1.0 alone is float32
        sb.ret(y)
    with sb.else_scope():
        sb.ret(-y)
    f = rl.Function([x], sb.get())
    assert rl.typeof(f) == rl.FuncType([rl.TensorType((), "float64")], rl.TensorType((), "float64"))
    assert float(rl.evaluate(f, np.float64(3.0))) == 9.0
    assert float(rl.evaluate(f, np.float64(0.5))) == -0.25


def test_ret_twice_is_an_error():
    sb = rl.ScopeBuilder()
    sb.ret(rl.const(1.0))
    with pytest.raises(rl.RelayishError, match="ret"):
        sb.ret(rl.const(2.0))
    with pytest.raises(rl.RelayishError, match="ret"):
        sb.let("z", rl.const(2.0))


def test_get_without_ret_is_an_error():
    sb = rl.ScopeBuilder()
    sb.let("y", rl.const(1.0))
    with pytest.raises(rl.RelayishError, match="ret"):
        sb.get()


def test_if_without_else_is_an_error():
    sb = rl.ScopeBuilder()
    with sb.if_scope(rl.const(True)):
        sb.ret(rl.const(1.0))
    with pytest.raises(rl.RelayishError, match="else"):
        sb.get()
    with pytest.raises(rl.RelayishError, match="else"):
        sb.let("y", rl.const(1.0))
    with pytest.raises(rl.RelayishError, match="else"):
        with sb.if_scope(rl.const(True)):
            pass


def test_else_without_if_is_an_error():
    sb = rl.ScopeBuilder()
    with pytest.raises(rl.RelayishError, match="if_scope"):
        with sb.else_scope():
            sb.ret(rl.const(1.0))


def test_scope_without_ret_is_an_error():
    sb = rl.ScopeBuilder()
    with pytest.raises(rl.RelayishError, match="ret"):
        with sb.if_scope(rl.const(True)):
            sb.let("y", rl.const(1.0))
    sb2 = rl.ScopeBuilder()
    with sb2.if_scope(rl.const(True)):
        sb2.ret(rl.const(1.0))
    with pytest.raises(rl.RelayishError, match="ret"):
        with sb2.else_scope():
            pass


def test_get_inside_an_open_scope_is_an_error():
    sb = rl.ScopeBuilder()
    with pytest.raises(rl.RelayishError, match="open"):
        with sb.if_scope(rl.const(True)):
            sb.ret(rl.const(1.0))
            sb.get()


def test_let_with_a_non_type_annotation_is_an_error():
    sb = rl.ScopeBuilder()
    with pytest.raises(rl.RelayishError, match="Type"):
        sb.let(("y", "float32"), rl.const(1.0))
    with pytest.raises(rl.RelayishError):
        sb.let(3, rl.const(1.0))


def test_python_scalars_take_the_dtype_of_a_let_bound_value():
    x = rl.var("x", dtype="float64")
    sb = rl.ScopeBuilder()
    y = sb.let("y", x * x)
    with sb.if_scope(y > 1.0):
        sb.ret(y)
    with sb.else_scope():
        sb.ret(y * 2.0)
    f = rl.Function([x], sb.get())
    assert rl.typeof(f).ret_type == rl.TensorType((), "float64")
    assert float(rl.evaluate(f, 0.5)) == 0.5
