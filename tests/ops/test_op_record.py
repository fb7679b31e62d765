"""The Op record holds every fact about an op (relayish/ir/op.py): a throwaway op declared in
one place parses, prints, type-checks, differentiates and runs on both backends; the facts the
consumers read (infix syntax, fast paths, effects, result dtypes, linearity, constant_in) agree
with what the ops compute."""
import numpy as np
import pytest

import relayish as rl
from relayish.ir.expr import dtype_hint
from relayish.ir.op import (EFFECTS, FAIL, Infix, get_op, list_ops, register_alias,
                            register_gradient, register_op, register_tangent, registered,
                            unregister)
from relayish.ir.text.operators import BY_OP, BY_SYMBOL, PREFIX_BY_OP, PREFIX_BY_SYMBOL
from relayish.ops import api
from relayish.ops._common import as_array, fixed_fast
from relayish.ops.elementwise import binary_rule


def f64(name, shape=(3,)):
    return rl.var(name, shape=shape, dtype="float64")


def _declare_sqdiff(calls):
    """(x - y)**2 as an op with the infix `?` at `*`'s level, a fast path counting its calls,
    a gradient and a tangent: everything a new op says, in one place."""
    def fast(x, y):
        calls.append(1)
        return np.square(x - y)
    op = register_op("test_sqdiff", 2, type_rule=binary_rule("test_sqdiff"),
                     impl=lambda xp, x, y: as_array(xp, (x - y) * (x - y)),
                     fast_impl=fixed_fast(fast), infix=Infix("?", "mul"),
                     doc="(x - y) ** 2, a test's op")

    @register_gradient("test_sqdiff")
    def sqdiff_grad(orig, g):
        x, y = orig.args
        d = g * (x - y) * 2.0
        return [d, -d]

    @register_tangent("test_sqdiff")
    def sqdiff_tangent(orig, ts):
        x, y = orig.args
        return (x - y) * (ts[0] - ts[1]) * 2.0
    return op


def test_a_new_op_declared_in_one_place_works_everywhere():
    calls = []
    _declare_sqdiff(calls)
    try:
        text = ("fn (%x: Tensor[(3), float64], %y: Tensor[(3), float64]) -> float64 "
                "{ sum(%x ? %y * 2f64) }")
        f = rl.parse_expr(text)
        body = f.body.args[0]                           # `?` binds like `*`, left to right
        assert body.op.name == "multiply" and body.args[0].op.name == "test_sqdiff"
        assert "%x ? %y * 2f64" in rl.astext(f)
        rl.assert_structural_equal(rl.parse_expr(rl.astext(f)), f)
        assert rl.typeof(f) == rl.FuncType([rl.TensorType((3,), "float64")] * 2,
                                           rl.TensorType((), "float64"))
        x, y = np.array([1.0, 2.0, 3.0]), np.array([0.5, 2.5, -1.0])
        expected = 2 * np.sum((x - y) ** 2)
        np.testing.assert_allclose(rl.evaluate(f, x, y), expected)
        assert calls                                    # the interpreter took the fast path
        np.testing.assert_allclose(rl.compile(f, backend="jax")(x, y), expected)
        grad = rl.grad(f, argnums=(0, 1))
        for run in (lambda *a: rl.evaluate(grad, *a), rl.compile(grad, backend="jax")):
            gx, gy = run(x, y)
            np.testing.assert_allclose(gx, 4 * (x - y))
            np.testing.assert_allclose(gy, -4 * (x - y))
        _, tangent = rl.evaluate(rl.jvp(f), x, y, np.ones(3), np.zeros(3))
        np.testing.assert_allclose(tangent, np.sum(4 * (x - y)))
    finally:
        unregister("test_sqdiff")
    assert "test_sqdiff" not in list_ops() and "?" not in BY_SYMBOL
    with pytest.raises(rl.ParseError):
        rl.parse_expr("fn (%x: float64) { %x ? %x }")


def test_registered_is_a_context_manager_for_throwaway_ops():
    with registered("test_twice", 1, type_rule=lambda ts, attrs: ts[0],
                    impl=lambda xp, x: as_array(xp, x + x), prefix="?",
                    doc="2 x, a test's op") as op:
        assert get_op("test_twice") is op and PREFIX_BY_SYMBOL["?"] == "test_twice"
        x = f64("x")
        f = rl.Function([x], op(op(x)))
        assert "??%x" in rl.astext(f).replace(" ", "")
        rl.assert_structural_equal(rl.parse_expr(rl.astext(f)), f)
        np.testing.assert_allclose(rl.evaluate(f, np.ones(3)), [4.0, 4.0, 4.0])
        with pytest.raises(rl.RelayishError, match="already registered"):
            with registered("test_twice", 1):
                pass
    assert "test_twice" not in list_ops() and "test_twice" not in PREFIX_BY_OP


def test_aliases_are_registered_through_the_public_function():
    with registered("test_ident", 1, type_rule=lambda ts, attrs: ts[0],
                    impl=lambda xp, x: x, doc="x, a test's op") as op:
        assert register_alias("test.ident", "test_ident") is op
        assert get_op("test.ident") is op
        with pytest.raises(rl.RelayishError, match="operator of its own"):
            register_alias("add", "test_ident")
    with pytest.raises(rl.RelayishError, match="unknown operator"):
        get_op("test.ident")                         # unregistering took the alias too
    assert get_op("nn.relu") is get_op("relu")


@pytest.mark.parametrize("record, message", [
    (dict(infix=Infix("+", "add")), "taken"),
    (dict(infix=Infix("%%", "add")), "not one token"),
    (dict(infix=Infix("?", "power")), "precedence must be one of"),
])
def test_a_bad_infix_record_is_an_error_naming_the_op(record, message):
    with registered("test_bad", 2, type_rule=lambda ts, attrs: ts[0], **record):
        with pytest.raises(rl.RelayishError, match=f"test_bad.*{message}"):
            rl.astext(f64("x") + f64("y"))
    rl.astext(f64("x") + f64("y"))                   # the tables recover once it is gone


@pytest.mark.parametrize("record, message", [
    (dict(effects={"io"}), "unknown effect"),
    (dict(infix=Infix("?", "mul")), "infix operator takes 2"),
    (dict(prefix="?"), None),
])
def test_register_op_checks_the_record(record, message):
    if message is None:
        with registered("test_rec", 1, **record):
            pass
        return
    with pytest.raises(rl.RelayishError, match=message):
        register_op("test_rec", 1, **record)
    assert "test_rec" not in list_ops()


def test_the_operator_tables_are_the_records():
    assert {s: i.op for s, i in BY_SYMBOL.items()} == {
        ":=": None, "==": "equal", "!=": "not_equal", "<": "less", ">": "greater",
        "<=": "less_equal", ">=": "greater_equal", "+": "add", "-": "subtract",
        "*": "multiply", "/": "divide"}
    assert set(BY_OP) == {n for n in list_ops() if get_op(n).infix is not None}
    assert dict(PREFIX_BY_OP) == {"negative": "-"}


def test_effects_name_the_ops_that_can_fail():
    failing = {n for n in list_ops() if FAIL in get_op(n).effects}
    assert failing == {"take", "take_backward", "gather", "scatter_add", "index_update", "index_add"}
    assert all(get_op(n).effects <= EFFECTS for n in list_ops())
    idx = rl.var("i", shape=(1,), dtype="int32")
    f = rl.Function([f64("x"), idx], rl.take(f64("x"), idx))
    f = rl.Function(f.params, rl.take(f.params[0], idx))
    with pytest.raises(rl.EvaluationError, match="out of range"):
        rl.evaluate(f, np.ones(3), np.array([5], "int32"))


def test_result_dtype_agrees_with_the_type_rule():
    x, b = f64("x"), rl.var("b", shape=(3,), dtype="bool")
    i = rl.var("i", shape=(3,), dtype="int32")
    calls = [rl.less(x, x), rl.logical_not(b), rl.where(b, x, x), rl.cast(x, "float16"),
             rl.zeros((2,), "int64"), rl.ones((2,), "float16"), rl.argmax(x),
             api._call("cast_like", i, x), rl.one_hot(i, rl.const(1.0), rl.const(0.0), 4),
             rl.cumsum(x, dtype="float32"), rl.full(rl.const(1.0, "float64"), (2,)),
             rl.sum(x), rl.exp(x)]
    for call in calls:
        hint = dtype_hint(call)
        assert hint == rl.typeof(rl.Function([x, b, i], call)).ret_type.dtype, call.op.name


@pytest.mark.parametrize("name, args", [
    ("add", [(3,), (3,)]), ("subtract", [(3,), (3,)]), ("divide", [(3,), (3,)]),
    ("negative", [(3,)]), ("sum", [(2, 3)]), ("transpose", [(2, 3)]),
    ("nn.bias_add", [(2, 3), (3,)]), ("multiply", [(3,), (3,)]), ("matmul", [(2, 3), (3, 4)]),
    ("nn.dense", [(2, 3), (4, 3)]),
])
def test_linear_in_and_bilinear_hold(name, args):
    """Zero at the declared linear arguments (or at either bilinear one) gives zero, whatever
    the others: what jax zero folding and linear_tangent rely on."""
    op = get_op(name)
    rng = np.random.default_rng(0)
    groups = [op.linear_in] if op.linear_in else [(0,), (1,)]
    assert op.linear_in or op.bilinear
    for group in groups:
        vals = [np.zeros(s) if k in group else rng.uniform(1, 2, s) for k, s in enumerate(args)]
        out = op.impl(np, *vals, **op.attr_defaults)
        assert not np.any(out), (name, group)


def test_constant_in_stops_only_those_arguments_gradients():
    """full_like(x, c): constant in x, but c's gradient flows (reverse mode built no
    backpropagator step for full_like at all before its record said constant_in=(0,))."""
    x, c = f64("x"), rl.var("c", dtype="float64")
    f = rl.Function([x, c], rl.sum(rl.full_like(x, c) * x))
    gx, gc = rl.evaluate(rl.grad(f, argnums=(0, 1)), np.arange(3.0), 2.0)
    np.testing.assert_allclose(gx, [2.0, 2.0, 2.0])
    np.testing.assert_allclose(gc, 3.0)
    assert get_op("zeros_like").constant_in == (0,) and get_op("full_like").constant_in == (0,)


def test_jax_zero_folding_follows_linear_in_and_bilinear():
    from relayish.backend.jax.zeros import ZeroTracker
    tracker = ZeroTracker()
    zero, ones = tracker.mark(np.zeros(3)), np.ones(3)

    def marked(name, *args):
        with np.errstate(all="ignore"):      # inf * 0, as the backend runs it
            out = np.asarray(get_op(name).impl(np, *args, **get_op(name).attr_defaults))
        tracker.note(get_op(name), list(args), out)
        return tracker.is_zero(out)
    assert marked("add", zero, zero) and not marked("add", zero, np.zeros(3))
    assert marked("multiply", ones, zero) and marked("divide", zero, ones)
    assert marked("matmul", zero, np.ones((3, 2)))                  # bilinear, not in a table
    assert not marked("multiply", np.full(3, np.inf), zero)         # nan: not a zero
    assert not marked("tanh", zero)                                 # tanh(0) = 0, not linear


def test_jax_zero_folding_reads_only_the_record():
    """A new op folds at trace time by what its register_op call declares, with no edit in
    backend/jax/zeros.py: a `like` argument (shape_only_in) gives a numpy result, a marked zero
    of an op with identity fill 0 gives the other operand, a marked zero of a bilinear op gives
    marked zeros of the call's type."""
    import jax.numpy as jnp
    from relayish.backend.jax.zeros import ZeroTracker
    tracker = ZeroTracker()
    zero, traced = tracker.mark(np.zeros(3, np.float32)), jnp.ones(3, jnp.float32)
    like = dict(type_rule=lambda ts, a: ts[1], linear_in=(0,), shape_only_in=(1,),
                impl=lambda xp, x, t: as_array(xp, xp.broadcast_to(x, t.shape) * 1.0))
    with registered("test_spread", 2, **like) as op:
        out = tracker.fold(op, [np.full(1, 2.0, np.float32), traced], {})
        assert isinstance(out, np.ndarray) and out.tolist() == [2.0, 2.0, 2.0]
        assert tracker.is_zero(tracker.fold(op, [tracker.mark(np.zeros(1, np.float32)), traced],
                                            {}))
    plus = dict(type_rule=binary_rule("test_plus"), identity_in={0: 0, 1: 0},
                impl=lambda xp, x, y: as_array(xp, x + y))
    with registered("test_plus", 2, **plus) as op:
        assert tracker.fold(op, [zero, traced], {}) is traced
        assert tracker.fold(op, [np.zeros(3, np.float32), traced], {}) is None   # unmarked
    times = dict(type_rule=binary_rule("test_times"), bilinear=True,
                 impl=lambda xp, x, y: as_array(xp, x * y))
    with registered("test_times", 2, **times) as op:
        out = tracker.fold(op, [traced, zero], {}, rl.TensorType((3,), "float32"))
        assert tracker.is_zero(out) and out.shape == (3,) and out.dtype == np.float32
        assert tracker.fold(op, [traced, zero], {}) is None            # no type: traced


def test_scatters_rows_is_read_from_the_record():
    """Reverse AD leaves `!r + op(..)` inline for the op whose record says it scatters rows
    (take's gradient), and the interpreter adds the rows in place; the record checks the shape
    of such an op."""
    assert get_op("take_backward").scatters_rows
    assert [n for n in list_ops() if get_op(n).scatters_rows] == ["take_backward"]
    with pytest.raises(rl.RelayishError, match="scatters rows takes 3 arguments"):
        register_op("test_scatter", 2, scatters_rows=True)
    x = rl.var("x", shape=(5, 2), dtype="float64")
    g = rl.grad(rl.Function([x], rl.sum(rl.take(x, rl.const(np.array([1, 3, 1])), axis=0))),
                optimize=False)                          # the transform, as AD emits it
    assert "+ take_backward(" in rl.astext(g)
    np.testing.assert_allclose(rl.evaluate(g, np.ones((5, 2))),
                               [[0, 0], [2, 2], [0, 0], [1, 1], [0, 0]])
