"""Python callables passed where the program expects a function (rl.evaluate): their results are
checked against the declared return type and their arity against the parameter's, with an
EvaluationError naming the parameter and the call (before: a string or a wrong-shaped array
returned where float64 is declared flowed on as the program's result)."""
import numpy as np
import pytest

import relayish as rl

F64 = rl.TensorType((), "float64")
UNARY = rl.FuncType([F64], F64)


def apply_plus_one():
    f = rl.var("f", type=UNARY)
    x = rl.var("x", shape=(), dtype="float64")
    return rl.Function([f, x], f(x) + rl.const(1.0, "float64"))


@pytest.mark.parametrize("result, shown", [
    ("hello", "got str 'hello'"),
    (np.ones(3), "got Tensor[(3), float64]"),
    (np.float32(1), "got float32"),
    (None, "got NoneType"),
])
def test_a_bad_result_is_an_evaluation_error(result, shown):
    with pytest.raises(rl.EvaluationError) as info:
        rl.evaluate(apply_plus_one(), lambda v: result, 1.0)
    message = str(info.value)
    assert "the Python function passed for parameter %f" in message
    assert "expected float64" in message and shown in message
    assert "%f(%x)" in message                    # the call that got it


def test_good_results_are_converted():
    assert float(rl.evaluate(apply_plus_one(), lambda v: v * 2, 1.0)) == 3.0
    out = rl.evaluate(apply_plus_one(), lambda v: 2.5, 1.0)      # a Python float: float64
    assert isinstance(out, np.ndarray) and out.dtype == np.float64 and float(out) == 3.5


def test_a_callable_of_the_wrong_arity_is_rejected_when_passed():
    with pytest.raises(rl.EvaluationError, match=r"parameter %f.*cannot take 1 argument"):
        rl.evaluate(apply_plus_one(), lambda a, b: a, 1.0)


def test_callables_inside_tuples_and_returned_functions_are_checked():
    x = rl.var("x", shape=(), dtype="float64")
    pair = rl.var("p", type=rl.TupleType([UNARY, F64]))
    prog = rl.Function([pair], rl.TupleGetItem(pair, 0)(rl.TupleGetItem(pair, 1)))
    assert float(rl.evaluate(prog, (lambda v: v + 1, 2.0))) == 3.0
    with pytest.raises(rl.EvaluationError, match=r"field 0 of parameter %p.*got str"):
        rl.evaluate(prog, (lambda v: "no", 2.0))

    maker = rl.var("g", type=rl.FuncType([], UNARY))
    prog = rl.Function([maker, x], maker()(x))
    assert float(rl.evaluate(prog, lambda: (lambda v: v * 3), 2.0)) == 6.0
    with pytest.raises(rl.EvaluationError, match=r"the result of the Python function passed "
                                                 r"for parameter %g.*got str"):
        rl.evaluate(prog, lambda: (lambda v: "s"), 1.0)


def test_a_callable_given_to_a_prelude_function():
    mod = rl.Module()
    p = rl.Prelude(mod)
    lt = rl.TypeCall(p.List, [F64])
    f = rl.var("f", type=UNARY)
    xs = rl.var("xs", type=lt)
    mod["main"] = rl.Function([f, xs], rl.Call(p.map, [f, xs]))
    items = rl.list_value(mod, [np.float64(1), np.float64(2)])
    out = rl.evaluate(mod, lambda v: v * 10, items)
    assert [float(v) for v in rl.from_list_value(out)] == [10.0, 20.0]
    with pytest.raises(rl.EvaluationError, match="returned a bad result"):
        rl.evaluate(mod, lambda v: np.zeros((2, 2)), items)
