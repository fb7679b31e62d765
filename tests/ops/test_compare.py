"""Comparisons and logical operators: bool results, non-differentiable, zero gradients."""
import numpy as np
import pytest

import relayish as rl
from relayish.errors import TypeCheckError
from opcheck import T, check_impl, infer, run, setup, type_of_call

COMPARE = {"less": np.less, "greater": np.greater, "less_equal": np.less_equal,
           "greater_equal": np.greater_equal, "equal": np.equal, "not_equal": np.not_equal}
LOGICAL = {"logical_and": np.logical_and, "logical_or": np.logical_or}


@pytest.mark.parametrize("name", list(COMPARE))
def test_comparison_types(name):
    assert type_of_call(name, [T((3, 1)), T((4,))]) == T((3, 4), "bool")
    assert type_of_call(name, [T((), "int32"), T((2,), "int32")]) == T((2,), "bool")
    with pytest.raises(TypeCheckError, match="same dtype"):
        type_of_call(name, [T((), "int32"), T((), "float32")])
    with pytest.raises(TypeCheckError, match="broadcast"):
        type_of_call(name, [T((2,)), T((3,))])


@pytest.mark.parametrize("name", list(LOGICAL) + ["logical_not"])
def test_logical_types(name):
    n = 1 if name == "logical_not" else 2
    assert type_of_call(name, [T((2,), "bool")] * n) == T((2,), "bool")
    with pytest.raises(TypeCheckError, match="expects bool"):
        type_of_call(name, [T((2,), "float32")] * n)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32"])
@pytest.mark.parametrize("name", list(COMPARE))
def test_comparison_impl(name, dtype):
    a = np.array([[1, 2, 3]], dtype=dtype)
    b = np.array([[2], [2]], dtype=dtype)
    check_impl(name, [a, b], expected=COMPARE[name](a, b))
    check_impl(name, [a[0, 0], b[0, 0]], expected=COMPARE[name](a[0, 0], b[0, 0]))


def test_logical_impl():
    p = np.array([True, True, False, False])
    q = np.array([True, False, True, False])
    for name, fn in LOGICAL.items():
        check_impl(name, [p, q], expected=fn(p, q))
    check_impl("logical_not", [p], expected=~p)


@pytest.mark.parametrize("name", list(COMPARE) + list(LOGICAL) + ["logical_not"])
def test_non_differentiable_with_zero_rules(name):
    op = rl.get_op(name)
    assert op.differentiable is False
    n = 1 if name == "logical_not" else 2
    dtype = "bool" if name.startswith("logical") else "float64"
    xs, call = setup(name, [T((2,), dtype)] * n)
    grads = op.grad(call, rl.Var("g", T((2,), "bool")))
    assert infer(*grads) == [T((2,), dtype)] * n
    vals = run(grads, {x: np.ones(2, dtype) for x in xs})
    assert all(not v.any() for v in vals)
    tangent = op.tangent(call, [rl.Var("t", T((2,), dtype))] * n)
    assert infer(tangent) == [T((2,), "bool")]
