"""relayish.ops.api: one function per operator; the registry is complete and consistent."""
import numpy as np
import pytest

import relayish as rl
from relayish.ir.op import get_op, list_ops
from relayish.ops import api
from opcheck import T, infer

PUBLIC = ("add subtract multiply divide negative power maximum minimum exp log sin cos tan tanh "
          "sigmoid sqrt abs relu less greater less_equal greater_equal equal not_equal logical_and "
          "logical_or logical_not where sum mean max min matmul transpose reshape broadcast_to "
          "zeros_like ones_like zeros ones cast concatenate take stack log_softmax softmax").split()


RELAY = ("clip split squeeze expand_dims full full_like one_hot argmax argmin erf cumsum gather "
         "scatter_add").split()          # Relay's operators (ops/tensor.py); rl.nn.* in ops/layers.py
ISSUE_29 = ("log1p expm1 softplus logaddexp sign floor ceil round lgamma digamma polygamma "
            "multigammaln logsumexp cumprod roll einsum index_update index_add stop_gradient").split()
INTERNAL = ("collapse_sum_like broadcast_to_like reshape_like cast_like take_backward strided_slice "
            "slice_scatter").split()     # emitted by gradient rules


def test_every_op_function_is_exported_and_registered():
    assert sorted(api.__all__) == sorted(PUBLIC + RELAY + ISSUE_29 + INTERNAL + ["nn"])
    for name in PUBLIC + RELAY + ISSUE_29 + INTERNAL:
        assert getattr(rl, name) is getattr(api, name) is getattr(rl.op, name)
        assert name in list_ops()
    assert "np" not in api.__all__ and "make_call" not in api.__all__


@pytest.mark.parametrize("name", list_ops())
def test_every_op_has_all_rules(name):
    op = get_op(name)
    assert op.type_rule is not None and op.impl is not None
    assert op.grad is not None and op.tangent is not None
    assert op.doc


def test_python_scalars_take_the_dtype_of_the_tensor():
    x = rl.var("x", shape=(3,), dtype="float64")
    call = rl.add(x, 1.0)
    assert call.op is get_op("add") and call.args[0] is x
    assert call.args[1].data.dtype == np.float64
    assert rl.multiply(2, x).args[0].data.dtype == np.float64
    assert infer(rl.maximum(x, 0.0)) == [T((3,), "float64")]


def test_concatenate_and_stack_accept_lists_and_tuple_exprs():
    a = rl.var("a", shape=(2,))
    b = rl.var("b", shape=(3,))
    c = rl.concatenate([a, b])
    assert isinstance(c.args[0], rl.Tuple) and c.attrs == {"axis": 0}
    assert infer(c) == [T((5,))]
    t = rl.var("t", type=rl.TupleType([T((2,)), T((2,))]))
    assert rl.stack(t, axis=-1).args[0] is t
    assert infer(rl.stack(t, axis=-1)) == [T((2, 2))]
    with pytest.raises(rl.RelayishError, match="list of tensors"):
        rl.concatenate(3)


def test_attribute_normalization():
    x = rl.var("x", shape=(2, 3))
    assert rl.transpose(x, [1, 0]).attrs == {"axes": (1, 0)}
    assert rl.transpose(x).attrs == {"axes": None}
    assert rl.broadcast_to(x, [4, 2, 3]).attrs == {"shape": (4, 2, 3)}
    assert rl.cast(x, np.float64).attrs == {"dtype": "float64"}
    assert rl.cast(x, "float32").attrs == {"dtype": "float32"}
    assert rl.zeros(3).attrs == {"shape": (3,), "dtype": "float32"}
    assert rl.softmax(x).attrs == {"axis": -1}
    assert rl.take(x, 0).attrs == {"axis": None}
    with pytest.raises(rl.RelayishError, match="attribute axis must be an int"):
        rl.softmax(x, axis=(0,))
    with pytest.raises(rl.RelayishError, match="shape must be a tuple of ints"):
        rl.zeros((2.5,))
    with pytest.raises(rl.RelayishError, match="operator 'ones'"):
        rl.ones((2.5,))
    with pytest.raises(rl.RelayishError, match="non-negative"):
        rl.broadcast_to(x, (-1, 3))
    with pytest.raises(rl.RelayishError, match="no attribute"):
        get_op("exp")(x, axis=0)
    with pytest.raises(rl.RelayishError, match="takes 2 argument"):
        get_op("add")(x)


def test_expression_overloads_build_registered_calls():
    x = rl.var("x", shape=(2, 2))
    for expr, name in [(x + x, "add"), (x - 1.0, "subtract"), (x * x, "multiply"),
                       (x / 2.0, "divide"), (-x, "negative"), (x @ x, "matmul"),
                       (x ** 2.0, "power"), (x < x, "less"), (x >= 0.0, "greater_equal")]:
        assert expr.op is get_op(name)
        infer(expr)


def test_where_scalars_take_the_dtype_of_the_other_branch():
    x = rl.var("x", shape=(3,), dtype="float64")
    assert infer(rl.where(x > 0.0, x, 0.0)) == [T((3,), "float64")]
    assert infer(rl.where(x > 0.0, 1.0, x)) == [T((3,), "float64")]
    assert rl.where(True, 1.0, 2.0).args[0].data.dtype == np.bool_


def test_wrong_arguments_to_an_op_function_are_relayish_errors():
    x = rl.var("x")
    with pytest.raises(rl.RelayishError, match="missing a required argument"):
        rl.add(x)
    with pytest.raises(rl.RelayishError, match="unexpected keyword"):
        rl.sum(x, axs=0)
