"""JaxFunction.jax_function(): the pure jax function behind a compiled relayish program."""
import jax
import numpy as np
import pytest

import relayish as rl
from relayish.errors import CompileError


def _sum_squares(dtype):
    x = rl.var("x", shape=(3,), dtype=dtype)
    y = rl.var("y", shape=(), dtype=dtype)
    return rl.Function([x, y], rl.Tuple([rl.sum(x * x) * y, x + y]))


def test_jax_function_float64_vmap_and_no_retrace():
    run = rl.compile(_sum_squares("float64"))
    fn = run.jax_function()
    assert run.trace_count == 1 and run.uses_x64
    xs = np.arange(12.0).reshape(4, 3)
    with jax.enable_x64(True):
        s, shifted = jax.vmap(fn, in_axes=(0, None))(xs, np.float64(2.0))
        g = jax.grad(lambda x: fn(x, np.float64(1.0))[0])(np.ones(3))
    assert s.dtype == np.float64
    np.testing.assert_allclose(s, 2.0 * (xs * xs).sum(axis=1))
    np.testing.assert_allclose(shifted, xs + 2.0)
    np.testing.assert_allclose(g, 2.0 * np.ones(3))
    assert run.trace_count == 1                 # jax transformed the jitted jaxpr: no new trace
    out = run(np.ones(3), np.asarray(3.0))     # run itself is unaffected and does not retrace
    np.testing.assert_allclose(out[0], 9.0)
    assert run.trace_count == 1


def test_jax_function_float32_after_a_call():
    run = rl.compile(_sum_squares("float32"))
    run(np.ones(3, "float32"), np.asarray(1.0, "float32"))
    fn = run.jax_function()
    assert run.trace_count == 1 and not run.uses_x64
    s, _ = jax.jit(fn)(np.full(3, 2.0, "float32"), np.asarray(0.5, "float32"))
    assert s.dtype == np.float32 and float(s) == pytest.approx(6.0)


def test_jax_function_refuses_non_tensor_parameters_and_results():
    p = rl.var("p", rl.TupleType([rl.TensorType((2,), "float64")] * 2))
    with pytest.raises(CompileError, match="parameters are all tensors"):
        rl.compile(rl.Function([p], rl.TupleGetItem(p, 0))).jax_function()
    x = rl.var("x", shape=(2,), dtype="float64")
    returns_ref = rl.Function([x], rl.RefCreate(x))
    with pytest.raises(CompileError, match="result"):
        rl.compile(returns_ref).jax_function()
