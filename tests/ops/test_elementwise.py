"""Elementwise operators: type rules, numpy/jax implementations, gradient and tangent rules."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import relayish as rl
from relayish.errors import TypeCheckError
from opcheck import (T, check_grad, check_impl, check_second_order, check_tangent,
                     type_of_call)

RNG = np.random.default_rng(0)
A = RNG.uniform(-1, 1, (3, 4))
B = RNG.uniform(-1, 1, (4,))

BINARY = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply,
          "divide": np.divide, "maximum": np.maximum, "minimum": np.minimum}
UNARY = {"exp": np.exp, "log": np.log, "sin": np.sin, "cos": np.cos, "tan": np.tan,
         "tanh": np.tanh, "sigmoid": lambda x: 1 / (1 + np.exp(-x)), "sqrt": np.sqrt,
         "abs": np.abs, "relu": lambda x: np.maximum(x, 0), "negative": np.negative}
POSITIVE_ONLY = ("log", "sqrt")


def _unary_input(name, shape=(3, 4), dtype="float64"):
    x = RNG.uniform(-1, 1, shape)
    if name in POSITIVE_ONLY:
        x = np.abs(x) + 0.25
    return np.asarray(x, dtype=dtype)


# ---- type rules -----------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(BINARY) + ["power"])
def test_binary_type_broadcasts(name):
    assert type_of_call(name, [T((3, 1)), T((4,))]) == T((3, 4))
    assert type_of_call(name, [T(()), T((2, 5), "float32")]) == T((2, 5))
    assert type_of_call(name, [T((2, 1, 3), "float64"), T((4, 1), "float64")]) == T((2, 4, 3), "float64")


@pytest.mark.parametrize("name", list(BINARY) + ["power"])
def test_binary_type_errors(name):
    with pytest.raises(TypeCheckError, match="same dtype.*float32.*float64"):
        type_of_call(name, [T((3,), "float32"), T((3,), "float64")])
    with pytest.raises(TypeCheckError, match=r"\(3,\) and \(4,\) cannot be broadcast"):
        type_of_call(name, [T((3,)), T((4,))])
    with pytest.raises(TypeCheckError, match="must be a tensor"):
        type_of_call(name, [rl.TupleType([T(())]), T(())])
    with pytest.raises(TypeCheckError, match="numeric"):
        type_of_call(name, [T((), "bool"), T((), "bool")])


@pytest.mark.parametrize("name", [n for n in UNARY if n not in ("abs", "relu", "negative")])
def test_float_unary_rejects_integers(name):
    assert type_of_call(name, [T((2,), "float64")]) == T((2,), "float64")
    with pytest.raises(TypeCheckError, match=f"{name}: expects floating-point"):
        type_of_call(name, [T((2,), "int32")])


def test_integer_unary_allowed_where_numeric():
    for name in ("abs", "relu", "negative"):
        assert type_of_call(name, [T((2,), "int32")]) == T((2,), "int32")


def test_where_type():
    assert type_of_call("where", [T((3, 1), "bool"), T((4,)), T(())]) == T((3, 4))
    with pytest.raises(TypeCheckError, match="condition must be a bool"):
        type_of_call("where", [T((3,)), T((3,)), T((3,))])
    with pytest.raises(TypeCheckError, match="same dtype"):
        type_of_call("where", [T((3,), "bool"), T((3,)), T((3,), "float64")])


def test_constructors_and_cast_types():
    assert type_of_call("zeros_like", [T((2,), "int32")]) == T((2,), "int32")
    assert type_of_call("ones_like", [T((2, 3))]) == T((2, 3))
    assert rl.op.zeros((2, 3), "float64").attrs == {"shape": (2, 3), "dtype": "float64"}
    assert type_of_call("zeros", [], {"shape": 3, "dtype": "int64"}) == T((3,), "int64")
    assert type_of_call("ones", [], {"shape": (2, 2)}) == T((2, 2))
    assert type_of_call("cast", [T((2,))], {"dtype": "bool"}) == T((2,), "bool")
    assert type_of_call("cast_like", [T((2,)), T((5,), "float64")]) == T((2,), "float64")
    with pytest.raises(rl.RelayishError, match="unknown dtype"):
        rl.cast(rl.var("x"), "complex-ish")


# ---- implementations ------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", list(BINARY))
def test_binary_impl(name, dtype):
    a, b = A.astype(dtype), (B + 2).astype(dtype)
    check_impl(name, [a, b], expected=BINARY[name](a, b))
    s = np.asarray(1.5, dtype)
    check_impl(name, [s, s], expected=BINARY[name](s, s))        # 0-d stays an array


@pytest.mark.parametrize("name", ["add", "subtract", "multiply", "divide", "maximum", "minimum"])
def test_binary_impl_int(name):
    a = np.array([[7, -3, 4]], dtype="int32")
    b = np.array([2, 5, -3], dtype="int32")
    expected = np.floor_divide(a, b) if name == "divide" else BINARY[name](a, b)
    check_impl(name, [a, b], expected=expected)


def test_power_impl():
    x = np.abs(A) + 0.1
    check_impl("power", [x, B], expected=np.power(x, B))
    check_impl("power", [x.astype("float32"), np.float32(2) * np.ones((), "float32")],
               expected=x.astype("float32") ** 2)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", list(UNARY))
def test_unary_impl(name, dtype):
    x = _unary_input(name, dtype=dtype)
    check_impl(name, [x], expected=UNARY[name](x.astype("float64")))
    check_impl(name, [x[0, 0]], expected=UNARY[name](x[0, 0].astype("float64")))


def test_sigmoid_no_overflow():
    x = np.array([-1000.0, 0.0, 1000.0], dtype="float32")
    with np.errstate(all="raise"):
        got = check_impl("sigmoid", [x])
    np.testing.assert_allclose(got, [0.0, 0.5, 1.0])


def test_where_and_constructor_impls():
    c = A > 0
    check_impl("where", [c, A, B], expected=np.where(c, A, B))
    check_impl("zeros_like", [A.astype("float32")], expected=np.zeros((3, 4)))
    check_impl("ones_like", [np.arange(3, dtype="int32")], expected=np.ones(3))
    check_impl("full_like", [A], {"fill_value": 0.5}, expected=np.full((3, 4), 0.5))
    check_impl("zeros", [], {"shape": (2, 3), "dtype": "float64"}, expected=np.zeros((2, 3)))
    check_impl("ones", [], {"shape": (), "dtype": "int32"}, expected=np.ones(()))
    check_impl("cast", [A], {"dtype": "int32"}, expected=A.astype("int32"))
    check_impl("cast", [A], {"dtype": "float32"}, expected=A.astype("float32"))
    check_impl("cast_like", [A, np.zeros(2, "float32")], expected=A.astype("float32"))


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(1, 3), min_size=0, max_size=3),
       st.lists(st.integers(1, 3), min_size=0, max_size=3))
def test_add_broadcasting_matches_numpy(s1, s2):
    s1 = tuple(s1)
    s2 = tuple(1 if i % 2 else d for i, d in enumerate(s2))   # keep shapes mostly compatible
    try:
        expected_shape = np.broadcast_shapes(s1, s2)
    except ValueError:
        with pytest.raises(TypeCheckError):
            type_of_call("add", [T(s1), T(s2)])
        return
    assert type_of_call("add", [T(s1), T(s2)]).shape == expected_shape
    a, b = np.ones(s1, "float32"), np.full(s2, 2.0, "float32")
    check_impl("add", [a, b], expected=a + b)


# ---- gradients and tangents -----------------------------------------------------------------

@pytest.mark.parametrize("shapes", [((3, 4), (4,)), ((3, 4), (3, 4)), ((), (2, 3)), ((2, 1), (1, 3))])
@pytest.mark.parametrize("name", list(BINARY) + ["power"])
def test_binary_rules(name, shapes):
    a = RNG.uniform(-1, 1, shapes[0])
    b = RNG.uniform(-1, 1, shapes[1])
    if name == "power":
        a = np.abs(a) + 0.5
    if name == "divide":
        b = b + 2.0 * np.sign(b) + (b == 0)
    check_grad(name, [a, b])
    check_tangent(name, [a, b])
    check_second_order(name, [a, b])


@pytest.mark.parametrize("name", list(UNARY))
def test_unary_rules(name):
    x = _unary_input(name)
    check_grad(name, [x])
    check_tangent(name, [x])
    check_second_order(name, [x])


def test_maximum_splits_ties():
    from opcheck import infer, run, setup
    xs, call = setup("maximum", [T((2,), "float64"), T((2,), "float64")])
    g = rl.Var("g", T((2,), "float64"))
    grads = rl.get_op("maximum").grad(call, g)
    infer(*grads)
    gx, gy = run(grads, {xs[0]: np.array([1.0, 2.0]), xs[1]: np.array([1.0, 3.0]),
                         g: np.array([4.0, 4.0])})
    np.testing.assert_allclose(gx, [2.0, 0.0])
    np.testing.assert_allclose(gy, [2.0, 4.0])


def test_power_grad_at_zero_base_is_finite():
    from opcheck import infer, run, setup
    xs, call = setup("power", [T((1,), "float64"), T((1,), "float64")])
    g = rl.Var("g", T((1,), "float64"))
    grads = rl.get_op("power").grad(call, g)
    infer(*grads)
    _, gy = run(grads, {xs[0]: np.zeros(1), xs[1]: np.full(1, 2.0), g: np.ones(1)})
    np.testing.assert_allclose(gy, [0.0])


def test_where_rules():
    c = A > 0
    check_grad("where", [c, A, B])
    check_tangent("where", [c, A, B])
    check_second_order("where", [c, A, B])


def test_cast_rules():
    check_grad("cast", [A], {"dtype": "float64"})
    check_tangent("cast", [A], {"dtype": "float64"})
    from opcheck import infer, setup
    _, call = setup("cast", [T((3,), "float64")], {"dtype": "int32"})
    (gx,) = rl.get_op("cast").grad(call, rl.Var("g", T((3,), "int32")))
    assert gx.op.name == "zeros_like"
    _, call = setup("cast", [T((3,), "float64")], {"dtype": "float32"})
    (gx,) = rl.get_op("cast").grad(call, rl.Var("g", T((3,), "float32")))
    assert infer(gx)[0] == T((3,), "float64")


@pytest.mark.parametrize("name", ["zeros_like", "ones_like", "full_like", "cast_like"])
def test_like_ops_rules(name):
    if name == "cast_like":
        check_grad(name, [A, np.zeros(2)])
        check_tangent(name, [A, np.zeros(2)])
        return
    check_grad(name, [A])
    check_tangent(name, [A])


def test_gradients_keep_float64():
    """Gradient rules never introduce float32 constants into float64 programs."""
    from opcheck import infer, setup
    for name in list(BINARY) + ["power"]:
        _, call = setup(name, [T((2,), "float64"), T((), "float64")])
        grads = rl.get_op(name).grad(call, rl.Var("g", T((2,), "float64")))
        assert infer(*grads) == [T((2,), "float64"), T((), "float64")]


def test_power_with_constant_exponent_skips_log():
    from opcheck import infer, run
    x = rl.var("x", shape=(2,), dtype="float64")
    call = rl.power(x, 2.0)
    infer(call)
    g = rl.Var("g", T((2,), "float64"))
    gx, gy = rl.get_op("power").grad(call, g)
    assert gy.op.name == "zeros_like"
    with np.errstate(all="raise"):
        (got,) = run([gx], {x: np.array([-3.0, 2.0]), g: np.ones(2)})
    np.testing.assert_allclose(got, [-6.0, 4.0])
    t = rl.get_op("power").tangent(call, [rl.Var("t", T((2,), "float64")), rl.Var("u", T((), "float64"))])
    infer(t)


@pytest.mark.parametrize("name", list(UNARY) + list(BINARY) + ["power", "sum", "mean", "max",
                                                                 "softmax", "log_softmax"])
def test_float16_stays_float16(name):
    import jax
    import jax.numpy as jnp
    from opcheck import run, setup
    n = 2 if name in BINARY or name == "power" else 1
    vals = [np.asarray(np.abs(A) + 0.5, "float16")] * n
    xs, call = setup(name, [T((3, 4), "float16")] * n)
    assert call.checked_type.dtype == "float16"
    (got,) = run([call], dict(zip(xs, vals)))
    assert isinstance(got, np.ndarray) and got.dtype == np.float16
    with jax.enable_x64(True):
        (jgot,) = run([call], dict(zip(xs, [jnp.asarray(v) for v in vals])), xp=jnp)
        assert jgot.dtype == jnp.float16
    np.testing.assert_allclose(np.asarray(jgot, "float64"), got.astype("float64"), rtol=5e-3, atol=5e-3)
