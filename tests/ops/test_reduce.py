"""Reductions: sum, mean, max, min with axis None/int/tuple (negative too) and keepdims."""
import numpy as np
import pytest

import relayish as rl
from relayish.errors import TypeCheckError
from opcheck import (T, check_grad, check_impl, check_second_order, check_tangent, infer, run,
                     setup, type_of_call)

RNG = np.random.default_rng(3)
X = RNG.uniform(-1, 1, (2, 3, 4))
NP = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min}
AXES = [None, 0, -1, (0, 2), (-1, 1), ()]


@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("axis", AXES)
@pytest.mark.parametrize("name", list(NP))
def test_reduce_type_and_impl(name, axis, keepdims):
    attrs = {"axis": axis, "keepdims": keepdims}
    expected = NP[name](X, axis=axis, keepdims=keepdims)
    assert type_of_call(name, [T(X.shape, "float64")], attrs) == T(expected.shape, "float64")
    check_impl(name, [X], attrs, expected=expected)
    check_impl(name, [X.astype("float32")], attrs, expected=expected)


@pytest.mark.parametrize("name", ["sum", "max", "min"])
def test_reduce_keeps_integer_dtype(name):
    x = np.arange(12, dtype="int32").reshape(3, 4)
    got = check_impl(name, [x], {"axis": 1}, expected=NP[name](x, axis=1))
    assert got.dtype == np.int32
    got = check_impl(name, [x.astype("int8")], expected=NP[name](x.astype("int8")))
    assert got.dtype == np.int8 and got.shape == ()


def test_reduce_type_errors():
    with pytest.raises(TypeCheckError, match="axis 3 is out of range .* rank 3"):
        type_of_call("sum", [T((2, 3, 4))], {"axis": 3})
    with pytest.raises(TypeCheckError, match="axis -4 is out of range"):
        type_of_call("max", [T((2, 3, 4))], {"axis": -4})
    with pytest.raises(TypeCheckError, match="names an axis twice"):
        type_of_call("sum", [T((2, 3))], {"axis": (1, -1)})
    with pytest.raises(TypeCheckError, match="mean: expects floating-point"):
        type_of_call("mean", [T((2,), "int32")])
    with pytest.raises(TypeCheckError, match="sum: expects numeric"):
        type_of_call("sum", [T((2,), "bool")])
    with pytest.raises(TypeCheckError, match="empty axis"):
        type_of_call("max", [T((2, 0))], {"axis": 1})
    with pytest.raises(rl.RelayishError, match="axis must be None, an int or a tuple"):
        rl.sum(rl.var("x"), axis="0")
    with pytest.raises(rl.RelayishError, match="keepdims must be True or False"):
        rl.sum(rl.var("x"), keepdims=1)


def test_axis_attribute_canonical():
    x = rl.var("x", shape=(2, 3))
    assert rl.sum(x, axis=[0, 1]).attrs == {"axis": (0, 1), "keepdims": False}
    assert rl.mean(x, axis=np.int64(1)).attrs["axis"] == 1
    assert type(rl.mean(x, axis=np.int64(1)).attrs["axis"]) is int


@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("axis", AXES)
@pytest.mark.parametrize("name", list(NP))
def test_reduce_rules(name, axis, keepdims):
    attrs = {"axis": axis, "keepdims": keepdims}
    check_grad(name, [X], attrs)
    check_tangent(name, [X], attrs)
    check_second_order(name, [X], attrs)


@pytest.mark.parametrize("name", ["max", "min"])
def test_extremum_gradient_splits_ties(name):
    xs, call = setup(name, [T((2, 3), "float64")], {"axis": 1})
    g = rl.Var("g", T((2,), "float64"))
    (gx,) = rl.get_op(name).grad(call, g)
    infer(gx)
    v = 5.0 if name == "max" else -5.0
    x = np.array([[v, 1.0, v], [0.0, v, 2.0]])
    (got,) = run([gx], {xs[0]: x, g: np.array([1.0, 3.0])})
    np.testing.assert_allclose(got, [[0.5, 0.0, 0.5], [0.0, 3.0, 0.0]])


def test_mean_gradient_without_static_types():
    """Without inferred types the mean gradient counts the elements with an expression."""
    x = rl.Var("x")   # no annotation: the rule cannot know the shape
    call = rl.op.mean(x, axis=1)
    g = rl.Var("g")
    (gx,) = rl.get_op("mean").grad(call, g)
    x.type_annotation = T((2, 4), "float64")
    g.type_annotation = T((2,), "float64")
    infer(gx)
    (got,) = run([gx], {x: np.zeros((2, 4)), g: np.array([4.0, 8.0])})
    np.testing.assert_allclose(got, [[1.0] * 4, [2.0] * 4])


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=20, deadline=None)
@given(st.lists(st.integers(1, 3), min_size=0, max_size=3), st.data(), st.booleans(),
       st.sampled_from(list(NP)))
def test_reduce_shape_rule_matches_numpy(shape, data, keepdims, name):
    ndim = len(shape)
    axis = data.draw(st.one_of(st.none(), st.integers(-ndim - 1, ndim),
                               st.lists(st.integers(-ndim, max(ndim - 1, 0)), max_size=ndim).map(tuple)))
    x = np.arange(int(np.prod(shape)), dtype="float64").reshape(shape)
    try:
        if ndim == 0 and axis not in (None, ()):
            raise ValueError("numpy accepts axis 0/-1 on 0-d arrays; relayish (like jax) does not")
        expected = NP[name](x, axis=axis, keepdims=keepdims)
    except (ValueError, TypeError, np.exceptions.AxisError):
        with pytest.raises(TypeCheckError):
            type_of_call(name, [T(tuple(shape), "float64")], {"axis": axis, "keepdims": keepdims})
        return
    check_impl(name, [x], {"axis": axis, "keepdims": keepdims}, expected=expected)
