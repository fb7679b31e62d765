"""Relay's tensor operators (relayish/ops/tensor.py) rule by rule: clip, split, squeeze,
expand_dims(num_newaxis), full, full_like(x, v), one_hot, argmax/argmin, erf, cumsum, gather,
scatter_add; values against numpy/jax, rules against central differences (first and second
order), shapes and attributes from hypothesis."""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import relayish as rl
from relayish.errors import EvaluationError, TypeCheckError
from opcheck import T, check_grad, check_impl, check_second_order, check_tangent, type_of_call

RNG = np.random.default_rng(21)
FEW = settings(max_examples=3, deadline=None)
shapes = st.lists(st.integers(1, 3), min_size=1, max_size=3)


def all_rules(name, values, attrs=None):
    check_grad(name, values, attrs)
    check_tangent(name, values, attrs)
    check_second_order(name, values, attrs)


def rand(*shape):
    return RNG.uniform(-1, 1, shape)


@FEW
@given(shapes, st.floats(-0.8, 0.0), st.floats(0.0, 0.8))
def test_clip(shape, lo, hi):
    x = rand(*shape)
    check_impl("clip", [x], {"a_min": lo, "a_max": hi}, expected=np.clip(x, lo, hi))
    all_rules("clip", [x], {"a_min": lo, "a_max": hi})


def test_clip_integers_and_errors():
    x = np.arange(-3, 4, dtype="int8")
    got = check_impl("clip", [x], {"a_min": -1.5, "a_max": 1e9})
    assert got.dtype == np.int8 and got.tolist() == [-1, -1, -1, 0, 1, 2, 3]
    with pytest.raises(TypeCheckError, match="a_min <= a_max"):
        type_of_call("clip", [T((3,))], {"a_min": 1.0, "a_max": 0.0})


@FEW
@given(shapes, st.data())
def test_split(shape, data):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    n = shape[axis]
    sections = data.draw(st.one_of(st.sampled_from([d for d in range(1, n + 1) if n % d == 0]),
                                   st.lists(st.integers(0, n), max_size=2).map(sorted)))
    x = rand(*shape)
    attrs = {"indices_or_sections": sections, "axis": axis}
    pieces = np.split(x, sections if isinstance(sections, int) else list(sections), axis=axis)
    assert type_of_call("split", [T(x.shape)], attrs) == rl.TupleType(
        [T(p.shape) for p in pieces])
    got = rl.evaluate(rl.split(rl.const(x), **attrs))
    for g, p in zip(got, pieces):
        np.testing.assert_array_equal(g, p)
    all_rules("split", [x], attrs)


def test_split_errors_and_gradient_through_fields():
    with pytest.raises(TypeCheckError, match="cannot split an axis of size 5 into 2"):
        type_of_call("split", [T((5,))], {"indices_or_sections": 2})
    with pytest.raises(TypeCheckError, match="increasing positions"):
        type_of_call("split", [T((5,))], {"indices_or_sections": (3, 1)})
    x = rl.var("x", shape=(6,), dtype="float64")
    parts = rl.split(x, 3)
    f = rl.Function([x], rl.sum(parts[0] * parts[2]))
    v = np.arange(6.0)
    np.testing.assert_allclose(rl.evaluate(rl.grad(f), v), [4, 5, 0, 0, 0, 1])
    _, tangent = rl.evaluate(rl.jvp(f), v, np.ones(6))
    np.testing.assert_allclose(tangent, 0 + 1 + 4 + 5)


@FEW
@given(st.lists(st.integers(1, 2), min_size=1, max_size=4), st.data())
def test_squeeze_and_expand_dims(shape, data):
    x = rand(*shape)
    ones = [k for k, d in enumerate(shape) if d == 1]
    axis = data.draw(st.one_of(st.none(), st.lists(st.sampled_from(ones), unique=True)
                               .map(tuple))) if ones else None
    check_impl("squeeze", [x], {"axis": axis}, expected=np.squeeze(x, axis))
    all_rules("squeeze", [x], {"axis": axis})
    at = data.draw(st.integers(-len(shape) - 1, len(shape)))
    k = data.draw(st.integers(0, 2))
    expected = x.reshape(shape[:at % (len(shape) + 1)] + [1] * k
                         + shape[at % (len(shape) + 1):])
    check_impl("expand_dims", [x], {"axis": at, "num_newaxis": k}, expected=expected)
    all_rules("expand_dims", [x], {"axis": at, "num_newaxis": k})


def test_squeeze_errors():
    with pytest.raises(TypeCheckError, match="axis 0 of .* has size 2, not 1"):
        type_of_call("squeeze", [T((2, 1))], {"axis": 0})


@FEW
@given(shapes, st.sampled_from([None, "float64", "int32"]))
def test_full_and_full_like(shape, dtype):
    v = np.asarray(RNG.uniform(-2, 2))
    out = check_impl("full", [v], {"shape": tuple(shape), "dtype": dtype},
                     expected=np.full(shape, v, dtype=dtype or v.dtype)
                     if dtype != "int32" else np.full(shape, int(v), "int32"))
    assert out.shape == tuple(shape)
    all_rules("full", [v], {"shape": tuple(shape), "dtype": dtype})
    x = rand(*shape)
    check_impl("full_like", [x, v], expected=np.full(shape, v))
    all_rules("full_like", [x, v])
    assert rl.astext(rl.full_like(rl.var("x"), rl.var("v"))) == "full_like(%x, %v)"


@FEW
@given(st.lists(st.integers(1, 3), max_size=2), st.integers(1, 4), st.data())
def test_one_hot(shape, depth, data):
    idx = RNG.integers(-1, depth + 1, shape).astype("int32")
    axis = data.draw(st.integers(-len(shape) - 1, len(shape)))
    on, off = np.asarray(RNG.uniform(1, 2)), np.asarray(RNG.uniform(-1, 0))
    hot = np.moveaxis(idx[..., None] == np.arange(depth), -1, axis % (len(shape) + 1))
    attrs = {"depth": depth, "axis": axis, "dtype": "float64"}
    check_impl("one_hot", [idx, on, off], attrs, expected=np.where(hot, on, off))
    all_rules("one_hot", [idx, on, off], attrs)


@FEW
@given(shapes, st.data(), st.booleans(), st.booleans())
def test_argmax_argmin(shape, data, keepdims, last):
    x = RNG.integers(0, 3, shape).astype("float64")          # ties on purpose
    axis = data.draw(st.one_of(st.none(), st.integers(-len(shape), len(shape) - 1)))
    attrs = {"axis": axis, "keepdims": keepdims, "select_last_index": last}
    for name, find in (("argmax", np.argmax), ("argmin", np.argmin)):
        if last:
            flipped = np.flip(x, axis) if axis is not None else x.ravel()[::-1]
            n = x.shape[axis] if axis is not None else x.size
            expected = n - 1 - find(flipped, axis=axis if axis is not None else 0)
            if keepdims:
                expected = (np.expand_dims(expected, axis) if axis is not None
                            else np.reshape(expected, (1,) * x.ndim))
        else:
            expected = find(x, axis=axis, keepdims=keepdims)
        got = check_impl(name, [x], attrs, expected=expected)
        assert got.dtype == np.int32


def test_argmax_has_a_zero_gradient():
    x = rl.var("x", shape=(4,), dtype="float64")
    i = rl.argmax(x)
    f = rl.Function([x], rl.take(x, i) * rl.cast(i, "float64"))
    v = np.array([0.5, 3.0, -1.0, 2.0])
    np.testing.assert_allclose(rl.evaluate(rl.grad(f), v), [0, 1, 0, 0])
    np.testing.assert_allclose(rl.compile(rl.grad(f), backend="jax")(v), [0, 1, 0, 0])
    with pytest.raises(TypeCheckError, match="exclude=True is not supported"):
        type_of_call("argmax", [T((3,))], {"exclude": True})


def test_erf():
    x = np.linspace(-3, 3, 13)
    check_impl("erf", [x], expected=[math.erf(v) for v in x])
    check_impl("erf", [x.astype("float32")], expected=[math.erf(v) for v in x])
    all_rules("erf", [rand(2, 3)])
    with pytest.raises(TypeCheckError, match="floating-point"):
        type_of_call("erf", [T((3,), "int32")])


@FEW
@given(shapes, st.data(), st.booleans())
def test_cumsum(shape, data, exclusive):
    x = rand(*shape)
    axis = data.draw(st.one_of(st.none(), st.integers(-len(shape), len(shape) - 1)))
    inclusive = np.cumsum(x, axis=axis)
    expected = inclusive - (x.ravel() if axis is None else x) if exclusive else inclusive
    attrs = {"axis": axis, "exclusive": exclusive}
    check_impl("cumsum", [x], attrs, expected=expected)
    all_rules("cumsum", [x], attrs)
    ints = np.arange(6, dtype="int32").reshape(2, 3)
    assert check_impl("cumsum", [ints], {"axis": 1, "dtype": "int64"}).dtype == np.int64


@FEW
@given(st.lists(st.integers(1, 3), min_size=1, max_size=3), st.data())
def test_gather_and_scatter_add(shape, data):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    ishape = [data.draw(st.integers(1, d)) for d in shape]
    ishape[axis] = data.draw(st.integers(1, 4))
    n = shape[axis]
    idx = RNG.integers(-n, n, ishape).astype("int32")
    x = rand(*shape)
    full = np.where(idx < 0, idx + n, idx)
    grids = list(np.ix_(*[np.arange(s) for s in ishape]))
    grids[axis] = full
    check_impl("gather", [x, idx], {"axis": axis}, expected=x[tuple(grids)])
    all_rules("gather", [x, idx], {"axis": axis})
    upd = rand(*ishape)
    expected = x.copy()
    np.add.at(expected, tuple(grids), upd)
    check_impl("scatter_add", [x, idx, upd], {"axis": axis}, expected=expected)
    all_rules("scatter_add", [x, idx, upd], {"axis": axis})


def test_gather_errors():
    with pytest.raises(TypeCheckError, match="rank of the data"):
        type_of_call("gather", [T((2, 3)), T((2,), "int32")], {"axis": 0})
    with pytest.raises(TypeCheckError, match="larger than the data"):
        type_of_call("gather", [T((2, 3)), T((2, 4), "int32")], {"axis": 0})
    with pytest.raises(EvaluationError, match="index 5 is out of range"):
        rl.evaluate(rl.gather(rl.const(np.ones((2, 3))), 1, np.array([[5], [0]], "int32")))
    assert rl.astext(rl.gather(rl.var("d"), 1, rl.var("i"))) == "gather(%d, %i, axis=1)"


def test_jax_reference_for_gather_matches_take_along_axis():
    x, idx = rand(3, 4), RNG.integers(0, 4, (3, 2)).astype("int32")
    with jax.enable_x64(True):
        np.testing.assert_allclose(check_impl("gather", [x, idx], {"axis": 1}),
                                   np.asarray(jnp.take_along_axis(x, idx, axis=1)))
