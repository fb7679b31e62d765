"""Bounds on tracing for XLA (relayish.backend.jax.TRACE_LIMITS, overridable with rl.compile(...,
limits=)): a program too deep for XLA's compiler (which segfaults on chains of some 28,000
dependent ops), a trace that records too many operations, and one that never ends are
CompileErrors that name the function being unrolled and point to the interpreter; the process
never crashes and never traces forever."""
import time

import numpy as np
import pytest

import relayish as rl
from relayish.backend.jax import TRACE_LIMITS


def fold_module(n):
    mod = rl.Module()
    p = rl.Prelude(mod)
    lt = rl.TypeCall(p.List, [rl.TensorType((), "float32")])
    acc = rl.var("acc", shape=(), dtype="float32")
    h = rl.var("h", shape=(), dtype="float32")
    lst = rl.var("l", type=lt)
    mod["main"] = rl.Function([lst], rl.Call(p.foldl, [rl.Function([acc, h], acc + h * acc),
                                                       rl.const(0.0), lst]))
    return mod, rl.list_value(mod, [np.float32(1)] * n)


def test_too_deep_for_xla_is_a_compile_error_before_xla_sees_it():
    mod, items = fold_module(300)
    with pytest.raises(rl.CompileError) as info:
        rl.compile(mod, limits={"max_depth": 200})(items)
    message = str(info.value)
    assert "chain of" in message and "@foldl" in message and "limit 200" in message
    assert "rl.evaluate" in message and "max_depth" in message
    # under the bound it compiles and agrees with the interpreter
    out = rl.compile(mod, limits={"max_depth": 1000})(items)
    assert float(out) == float(rl.evaluate(mod, items))


def test_the_default_depth_bound_is_10000():
    # the bound itself is checked by the test above (limit 200), at the default size below
    assert TRACE_LIMITS["max_depth"] == 10_000


@pytest.mark.slow       # unrolls 10^4 levels before the bound stops it (2 s of CPU)
def test_the_default_depth_bound_stops_a_10000_deep_unrolling():
    # 10^4 levels unrolled: the program once handed to XLA segfaulted the process
    assert TRACE_LIMITS["max_depth"] == 10_000
    mod, items = fold_module(10_000)
    with pytest.raises(rl.CompileError, match=r"chain of \d+ dependent operations.*@foldl"):
        rl.compile(mod)(items)


def test_operation_budget_names_the_unrolled_function():
    mod, items = fold_module(3000)
    with pytest.raises(rl.CompileError, match=r"more than 1000 tensor operations while "
                                              r"unrolling @foldl.*interpreter"):
        rl.compile(mod, limits={"max_ops": 1000})(items)


def test_non_terminating_tail_recursion_ends_quickly_with_a_compile_error():
    # f(x) = f(x + 1): no condition ends it, so the trace would run (and grow) forever
    mod = rl.Module()
    f = rl.GlobalVar("f")
    x = rl.var("x", shape=(), dtype="float32")
    mod[f] = rl.Function([x], f(x + rl.const(1.0)), ret_type=rl.TensorType((), "float32"))
    y = rl.var("y", shape=(), dtype="float32")
    mod["main"] = rl.Function([y], f(y))
    start = time.monotonic()
    with pytest.raises(rl.CompileError, match=r"while unrolling @f"):
        # a fraction of a second is enough: the bound is checked as the trace runs
        rl.compile(mod, limits={"max_seconds": 0.4})(np.float32(0))
    assert time.monotonic() - start < 60


def test_a_trace_that_records_nothing_still_ends():
    # g(x) = g(x): no operations at all, only calls: the time budget ends it
    mod = rl.Module()
    g = rl.GlobalVar("g")
    x = rl.var("x", shape=(), dtype="float32")
    mod[g] = rl.Function([x], g(x), ret_type=rl.TensorType((), "float32"))
    y = rl.var("y", shape=(), dtype="float32")
    mod["main"] = rl.Function([y], g(y))
    with pytest.raises(rl.CompileError, match=r"ran for more than 0.25 s while unrolling @g"):
        rl.compile(mod, limits={"max_seconds": 0.25})(np.float32(0))


@pytest.mark.parametrize("limits, message", [
    ({"depth": 3}, "unknown limit 'depth'"),
    ({"max_ops": -1}, "positive number"),
    ({"max_ops": True}, "positive number"),
    ([1], "must be a dict"),
])
def test_bad_limits_are_reported(limits, message):
    x = rl.var("x", shape=(), dtype="float32")
    with pytest.raises(rl.RelayishError, match=message):
        rl.compile(rl.Function([x], x), limits=limits)


def test_the_interpreter_takes_no_limits():
    x = rl.var("x", shape=(), dtype="float32")
    with pytest.raises(rl.RelayishError, match="interpreter takes none"):
        rl.compile(rl.Function([x], x), backend="interpreter", limits={"max_ops": 5})
