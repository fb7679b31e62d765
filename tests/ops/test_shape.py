"""Shape operators and the internal ops their gradients use."""
import numpy as np
import pytest

import relayish as rl
from relayish.errors import EvaluationError, TypeCheckError
from opcheck import (T, check_grad, check_impl, check_second_order, check_tangent, infer, run,
                     setup, type_of_call)

RNG = np.random.default_rng(5)
A = RNG.uniform(-1, 1, (3, 4))
X3 = RNG.uniform(-1, 1, (2, 3, 4))


def all_rules(name, values, attrs=None):
    check_grad(name, values, attrs)
    check_tangent(name, values, attrs)
    check_second_order(name, values, attrs)


# ---- transpose ------------------------------------------------------------------------------

@pytest.mark.parametrize("axes", [None, (1, 0, 2), (2, 0, 1), (-1, 0, -2)])
def test_transpose(axes):
    expected = np.transpose(X3, axes)
    assert type_of_call("transpose", [T(X3.shape)], {"axes": axes}) == T(expected.shape)
    check_impl("transpose", [X3], {"axes": axes}, expected=expected)
    all_rules("transpose", [X3], {"axes": axes})


def test_transpose_errors():
    for bad in [(0, 1), (0, 0, 1), (0, 1, 3)]:
        with pytest.raises(TypeCheckError, match="not a permutation"):
            type_of_call("transpose", [T((2, 3, 4))], {"axes": bad})


# ---- reshape --------------------------------------------------------------------------------

@pytest.mark.parametrize("newshape", [(12, 2), (-1,), (4, -1, 3), (2, 3, 4), (24,)])
def test_reshape(newshape):
    expected = np.reshape(X3, newshape)
    assert type_of_call("reshape", [T(X3.shape)], {"newshape": newshape}) == T(expected.shape)
    check_impl("reshape", [X3], {"newshape": newshape}, expected=expected)
    all_rules("reshape", [X3], {"newshape": newshape})


def test_reshape_errors():
    with pytest.raises(TypeCheckError, match=r"cannot reshape .* \(size 24\) to \(5, 5\)"):
        type_of_call("reshape", [T((2, 3, 4))], {"newshape": (5, 5)})
    with pytest.raises(TypeCheckError, match="one -1"):
        type_of_call("reshape", [T((2, 3, 4))], {"newshape": (-1, -1)})
    with pytest.raises(TypeCheckError, match="cannot reshape"):
        type_of_call("reshape", [T((2, 3, 4))], {"newshape": (5, -1)})
    assert rl.reshape(rl.var("x"), 1).attrs == {"newshape": (1,)}


# ---- broadcasting ---------------------------------------------------------------------------

def test_broadcast_to():
    b = A[:1]
    assert type_of_call("broadcast_to", [T((1, 4))], {"shape": (2, 3, 4)}) == T((2, 3, 4))
    got = check_impl("broadcast_to", [b], {"shape": (2, 3, 4)}, expected=np.broadcast_to(b, (2, 3, 4)))
    got[0, 0, 0] = 1.0                      # an ordinary writable array, not a view
    all_rules("broadcast_to", [b], {"shape": (2, 3, 4)})
    with pytest.raises(TypeCheckError, match=r"cannot broadcast .* to shape \(3, 3\)"):
        type_of_call("broadcast_to", [T((1, 4))], {"shape": (3, 3)})


def test_broadcast_to_like_and_collapse_sum_like():
    assert type_of_call("broadcast_to_like", [T((4,)), T((3, 4), "float64")]) == T((3, 4))
    check_impl("broadcast_to_like", [A[0], A], expected=np.broadcast_to(A[0], A.shape))
    all_rules("broadcast_to_like", [A[0], A])
    all_rules("broadcast_to_like", [A[:, :1], A])
    like = np.zeros((3, 1))
    assert type_of_call("collapse_sum_like", [T((2, 3, 4)), T((3, 1))]) == T((3, 1))
    check_impl("collapse_sum_like", [X3, like], expected=X3.sum(axis=(0, 2))[:, None])
    check_impl("collapse_sum_like", [X3, np.zeros(())], expected=X3.sum())
    check_impl("collapse_sum_like", [X3, X3], expected=X3)
    ints = np.arange(6, dtype="int32").reshape(2, 3)
    assert check_impl("collapse_sum_like", [ints, np.zeros(3, "int32")]).dtype == np.int32
    all_rules("collapse_sum_like", [X3, like])
    with pytest.raises(TypeCheckError, match="does not broadcast"):
        type_of_call("collapse_sum_like", [T((3,)), T((2, 3))])


def test_reshape_like_and_expand_dims():
    assert type_of_call("reshape_like", [T((3, 4)), T((12,), "int32")]) == T((12,))
    check_impl("reshape_like", [A, np.zeros((2, 6))], expected=A.reshape(2, 6))
    all_rules("reshape_like", [A, np.zeros((2, 6))])
    with pytest.raises(TypeCheckError, match="reshape_like"):
        type_of_call("reshape_like", [T((3, 4)), T((5,))])
    for axis in [0, -1, (0, 2), (-1, 1)]:
        expected = np.expand_dims(A, axis)
        assert type_of_call("expand_dims", [T((3, 4))], {"axis": axis}) == T(expected.shape)
        check_impl("expand_dims", [A], {"axis": axis}, expected=expected)
        all_rules("expand_dims", [A], {"axis": axis})
    with pytest.raises(TypeCheckError, match="out of range"):
        type_of_call("expand_dims", [T((3, 4))], {"axis": 3})


# ---- concatenate / stack / slices -----------------------------------------------------------

@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concatenate(axis):
    parts = (X3, X3[:, :, :1] if axis != 0 and axis != 1 else X3[:1] if axis == 0 else X3[:, :2])
    expected = np.concatenate(parts, axis=axis)
    tt = rl.TupleType([T(p.shape) for p in parts])
    assert type_of_call("concatenate", [tt], {"axis": axis}) == T(expected.shape)
    check_impl("concatenate", [parts], {"axis": axis}, expected=expected)
    check_grad("concatenate", [parts], {"axis": axis})
    check_tangent("concatenate", [parts], {"axis": axis})


def test_concatenate_errors():
    with pytest.raises(TypeCheckError, match="tuple type"):
        type_of_call("concatenate", [T((2,))])
    with pytest.raises(TypeCheckError, match="at least one"):
        type_of_call("concatenate", [rl.TupleType([])])
    with pytest.raises(TypeCheckError, match="does not match"):
        type_of_call("concatenate", [rl.TupleType([T((2, 3)), T((2, 4))])], {"axis": 0})
    with pytest.raises(TypeCheckError, match="same dtype"):
        type_of_call("concatenate", [rl.TupleType([T((2,)), T((2,), "float64")])])
    with pytest.raises(TypeCheckError, match="scalars"):
        type_of_call("concatenate", [rl.TupleType([T(()), T(())])])
    with pytest.raises(TypeCheckError, match="out of range"):
        type_of_call("concatenate", [rl.TupleType([T((2,)), T((2,))])], {"axis": 1})


@pytest.mark.parametrize("axis", [0, 1, -1, 2])
def test_stack(axis):
    parts = (A, A * 2, A - 1)
    expected = np.stack(parts, axis=axis)
    tt = rl.TupleType([T(A.shape)] * 3)
    assert type_of_call("stack", [tt], {"axis": axis}) == T(expected.shape)
    check_impl("stack", [parts], {"axis": axis}, expected=expected)
    check_grad("stack", [parts], {"axis": axis})
    check_tangent("stack", [parts], {"axis": axis})
    with pytest.raises(TypeCheckError, match="one shape"):
        type_of_call("stack", [rl.TupleType([T((2,)), T((3,))])])


def test_slices():
    attrs = {"begin": (1, 0), "end": (3, 2)}
    assert type_of_call("strided_slice", [T((3, 4))], attrs) == T((2, 2))
    check_impl("strided_slice", [A], attrs, expected=A[1:3, 0:2])
    all_rules("strided_slice", [A], attrs)
    expected = np.zeros((3, 4))
    expected[1:3, 0:2] = A[:2, :2]
    check_impl("slice_scatter", [A[:2, :2], A], attrs, expected=expected)
    all_rules("slice_scatter", [A[:2, :2], A], attrs)
    with pytest.raises(TypeCheckError, match="does not fit"):
        type_of_call("strided_slice", [T((3, 4))], {"begin": (0, 0), "end": (4, 1)})
    with pytest.raises(TypeCheckError, match="one entry per axis"):
        type_of_call("strided_slice", [T((3, 4))], {"begin": (0,), "end": (1,)})


# ---- take -----------------------------------------------------------------------------------

TAKES = [(np.array([0, 2, -1, 2]), 1), (np.array([[0, 5], [11, 2]]), None), (np.array(1), 0),
         (np.array(-2), None), (np.array([[1, 0], [1, 1]]), 0), (np.array([0, 1]), -2)]


@pytest.mark.parametrize("indices,axis", TAKES)
def test_take(indices, axis):
    indices = indices.astype("int32")
    expected = np.take(A, indices, axis=axis)
    t = type_of_call("take", [T((3, 4)), T(indices.shape, "int32")], {"axis": axis})
    assert t == T(expected.shape)
    got = check_impl("take", [A, indices], {"axis": axis}, expected=expected)
    assert isinstance(got, np.ndarray)
    all_rules("take", [A, indices], {"axis": axis})


@pytest.mark.parametrize("indices,axis", TAKES)
def test_take_backward(indices, axis):
    indices = indices.astype("int64")
    g = RNG.uniform(-1, 1, np.take(A, indices, axis=axis).shape)
    expected = np.zeros_like(A)
    if axis is None:
        np.add.at(expected.reshape(-1), indices, g)
    else:
        moved = np.moveaxis(expected, axis, 0)
        np.add.at(moved, indices, np.moveaxis(g, tuple(range(axis % 2, axis % 2 + indices.ndim)),
                                              tuple(range(indices.ndim))))
    check_impl("take_backward", [g, indices, A], {"axis": axis}, expected=expected)
    all_rules("take_backward", [g, indices, A], {"axis": axis})


def test_take_errors():
    with pytest.raises(TypeCheckError, match="indices must be an integer"):
        type_of_call("take", [T((3,)), T((), "float32")])
    with pytest.raises(TypeCheckError, match="axis 2 is out of range"):
        type_of_call("take", [T((3, 4)), T((), "int32")], {"axis": 2})
    with pytest.raises(TypeCheckError, match="scalar"):
        type_of_call("take", [T(()), T((), "int32")], {"axis": 0})
    xs, call = setup("take", [T((3,)), T((2,), "int32")], {"axis": 0})
    with pytest.raises(EvaluationError, match="index 3 is out of range for an axis of size 3"):
        run([call], {xs[0]: np.zeros(3, "float32"), xs[1]: np.array([0, 3], "int32")})


def test_take_api_index_constants_are_int32():
    x = rl.var("x", shape=(4,), dtype="float64")
    call = rl.take(x, 1)
    assert call.args[1].data.dtype == np.int32
    assert rl.take(x, [0, 1], axis=0).args[1].data.dtype == np.int32
    assert rl.take(x, np.array([1], "int64")).args[1].data.dtype == np.int64
    with pytest.raises(rl.RelayishError, match="indices must be integers"):
        rl.take(x, 1.5)
    assert infer(call)[0] == T((), "float64")


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(1, 3), min_size=1, max_size=4), st.randoms(use_true_random=False))
def test_transpose_and_reshape_match_numpy(shape, rnd):
    x = np.arange(int(np.prod(shape)), dtype="float32").reshape(shape)
    axes = list(range(len(shape)))
    rnd.shuffle(axes)
    axes = [a - len(shape) if rnd.random() < 0.3 else a for a in axes]
    check_impl("transpose", [x], {"axes": tuple(axes)}, expected=np.transpose(x, axes))
    new = list(reversed(shape))
    new[rnd.randrange(len(new))] = -1
    check_impl("reshape", [x], {"newshape": tuple(new)}, expected=np.reshape(x, new))
