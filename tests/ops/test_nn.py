"""matmul with numpy semantics, softmax and log_softmax."""
import numpy as np
import pytest

from relayish.errors import TypeCheckError
from opcheck import T, check_grad, check_impl, check_second_order, check_tangent, type_of_call

RNG = np.random.default_rng(7)
SHAPES = [((3,), (3,)), ((3,), (3, 4)), ((2, 3), (3,)), ((2, 3), (3, 4)), ((5, 2, 3), (3, 4)),
          ((2, 3), (5, 3, 4)), ((5, 1, 2, 3), (4, 3, 2)), ((3,), (2, 3, 4)), ((2, 3, 4), (4,)),
          ((1, 2, 3), (6, 3, 2))]


@pytest.mark.parametrize("sa,sb", SHAPES)
def test_matmul(sa, sb):
    a, b = RNG.uniform(-1, 1, sa), RNG.uniform(-1, 1, sb)
    expected = a @ b
    assert type_of_call("matmul", [T(sa, "float64"), T(sb, "float64")]) == T(expected.shape, "float64")
    check_impl("matmul", [a, b], expected=expected)
    check_impl("matmul", [a.astype("float32"), b.astype("float32")], expected=expected)
    check_grad("matmul", [a, b])
    check_tangent("matmul", [a, b])
    check_second_order("matmul", [a, b])


def test_matmul_int():
    a = np.arange(6, dtype="int32").reshape(2, 3)
    check_impl("matmul", [a, a.T.copy()], expected=a @ a.T)


def test_matmul_errors():
    with pytest.raises(TypeCheckError, match=r"inner dimensions differ: \(2, 3\) @ \(4, 5\)"):
        type_of_call("matmul", [T((2, 3)), T((4, 5))])
    with pytest.raises(TypeCheckError, match="at least one dimension"):
        type_of_call("matmul", [T(()), T((3,))])
    with pytest.raises(TypeCheckError, match="same dtype"):
        type_of_call("matmul", [T((3,)), T((3,), "float64")])
    with pytest.raises(TypeCheckError, match="cannot be broadcast"):
        type_of_call("matmul", [T((2, 2, 3)), T((5, 3, 4))])


def _softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@pytest.mark.parametrize("axis", [-1, 0, 1])
@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax(name, axis):
    x = RNG.uniform(-3, 3, (3, 4))
    expected = _softmax(x, axis) if name == "softmax" else np.log(_softmax(x, axis))
    assert type_of_call(name, [T((3, 4))], {"axis": axis}) == T((3, 4))
    check_impl(name, [x], {"axis": axis}, expected=expected)
    check_impl(name, [x.astype("float32")], {"axis": axis}, expected=expected)
    check_grad(name, [x], {"axis": axis})
    check_tangent(name, [x], {"axis": axis})
    check_second_order(name, [x], {"axis": axis})


def test_softmax_large_inputs_and_errors():
    x = np.array([1000.0, 0.0, -1000.0])
    got = check_impl("log_softmax", [x])
    assert np.isfinite(got[:2]).all()
    with pytest.raises(TypeCheckError, match="out of range"):
        type_of_call("softmax", [T((3,))], {"axis": 1})
    with pytest.raises(TypeCheckError, match="floating-point"):
        type_of_call("log_softmax", [T((3,), "int32")])


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=20, deadline=None)
@given(st.lists(st.integers(1, 3), min_size=1, max_size=4),
       st.lists(st.integers(1, 3), min_size=1, max_size=4))
def test_matmul_shape_rule_matches_numpy(sa, sb):
    a, b = np.ones(sa), np.ones(sb)
    try:
        expected = np.matmul(a, b).shape
    except ValueError:
        with pytest.raises(TypeCheckError):
            type_of_call("matmul", [T(tuple(sa)), T(tuple(sb))])
        return
    assert type_of_call("matmul", [T(tuple(sa)), T(tuple(sb))]).shape == expected
