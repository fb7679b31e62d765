"""Relay's operators through the whole pipeline: rl.grad on the interpreter (rl.evaluate) and
on the jax backend (rl.compile) against jax.grad, and second order (the gradient of
<grad f(x), v>) against jax, for every differentiable new operator. Each case is a scalar
function of one float64 tensor x (other operands constant); the shape of x is drawn by
hypothesis where the op allows it."""
import jax
import jax.numpy as jnp
import jax.scipy.special
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import relayish as rl

RNG = np.random.default_rng(31)


def _c(a):
    return rl.const(np.asarray(a))


# name: (shape of x, relayish body of x, jax body of x), constants closed over
def cases():
    w4 = RNG.uniform(-1, 1, (3, 2, 2, 2))
    dw = RNG.uniform(-1, 1, (4, 6))
    b4 = RNG.uniform(-1, 1, (4,))
    g = RNG.uniform(0.5, 1.5, (5,))
    idx = RNG.integers(0, 3, (2, 3)).astype("int32")
    y = RNG.uniform(-1, 1, (2, 4, 5))
    return {
        "conv2d": ((1, 2, 4, 4),
                   lambda x: rl.nn.conv2d(x, _c(w4), strides=2, padding=(1, 0, 0, 1)),
                   lambda x: jax.lax.conv_general_dilated(x, w4, (2, 2), ((1, 0), (0, 1)))),
        "conv2d_groups": ((1, 4, 4, 4),
                          lambda x: rl.nn.conv2d(x, _c(w4[:2]), groups=2, dilation=(1, 2)),
                          lambda x: jax.lax.conv_general_dilated(
                              x, w4[:2], (1, 1), "VALID", rhs_dilation=(1, 2),
                              feature_group_count=2)),
        "max_pool2d": ((1, 2, 5, 5), lambda x: rl.nn.max_pool2d(x, (2, 2), (2, 2), padding=1),
                       lambda x: jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 1, 2, 2),
                                                       (1, 1, 2, 2),
                                                       ((0, 0), (0, 0), (1, 1), (1, 1)))),
        "avg_pool2d": ((1, 2, 4, 4), lambda x: rl.nn.avg_pool2d(x, (3, 3), (1, 1), padding=1),
                       lambda x: jax.lax.reduce_window(x, 0.0, jax.lax.add, (1, 1, 3, 3),
                                                       (1, 1, 1, 1), "SAME")
                       / jax.lax.reduce_window(jnp.ones_like(x), 0.0, jax.lax.add,
                                               (1, 1, 3, 3), (1, 1, 1, 1), "SAME")),
        "global_avg_pool2d": ((2, 3, 2, 2), rl.nn.global_avg_pool2d,
                              lambda x: jnp.mean(x, axis=(2, 3), keepdims=True)),
        "dense_bias_flatten": ((2, 3, 2), lambda x: rl.nn.bias_add(
            rl.nn.dense(rl.nn.batch_flatten(x), _c(dw)), _c(b4), axis=-1),
            lambda x: x.reshape(2, -1) @ dw.T + b4),
        "layer_norm": ((3, 5), lambda x: rl.nn.layer_norm(x, _c(g), _c(g - 1.0)),
                       lambda x: (x - x.mean(-1, keepdims=True))
                       / jnp.sqrt(x.var(-1, keepdims=True) + 1e-5) * g + (g - 1.0)),
        "batch_matmul": ((2, 3, 5), lambda x: rl.nn.batch_matmul(x, _c(y)),
                         lambda x: jnp.matmul(x, jnp.swapaxes(y, 1, 2))),
        "softmax_relu_dropout": ((2, 3), lambda x: rl.nn.softmax(rl.nn.relu(
            rl.nn.dropout(x))) + rl.nn.log_softmax(x, axis=0),
            lambda x: jax.nn.softmax(jax.nn.relu(x)) + jax.nn.log_softmax(x, axis=0)),
        "clip_erf_cumsum": ((2, 3), lambda x: rl.cumsum(rl.erf(rl.clip(x, -0.5, 0.7)), axis=1)
                            + rl.cumsum(x, axis=0, exclusive=True),
                            lambda x: jnp.cumsum(jax.scipy.special.erf(jnp.clip(x, -0.5, 0.7)),
                                                 axis=1)
                            + jnp.concatenate([jnp.zeros((1, 3)), jnp.cumsum(x, 0)[:-1]])),
        "split_squeeze": ((2, 1, 4), lambda x: rl.split(rl.squeeze(x, 1), (1,), axis=1)[1]
                          * rl.expand_dims(rl.take(rl.squeeze(x), 0, axis=1), 1, 1),
                          lambda x: jnp.split(x[:, 0], [1], axis=1)[1] * x[:, 0, 0][:, None]),
        "gather_scatter": ((2, 3), lambda x: rl.scatter_add(x, idx, rl.gather(x * x, 1, idx),
                                                            axis=1),
                           lambda x: jnp.asarray(x).at[np.arange(2)[:, None], idx].add(
                               jnp.take_along_axis(x * x, idx, axis=1))),
        "full_one_hot": ((3,), lambda x: rl.full(rl.sum(x * x), (2, 3)) * rl.one_hot(
            _c(np.array([0, 2], "int32")), rl.take(x, 0), rl.take(x, 1), depth=3,
            dtype="float64"),
            lambda x: jnp.full((2, 3), jnp.sum(x * x)) * jnp.where(
                np.array([0, 2])[:, None] == np.arange(3), x[0], x[1])),
    }


CASES = cases()
W = {k: RNG.uniform(-1, 1, 64) for k in CASES}     # weights making the output scalar


def _functions(name):
    shape, body, jbody = CASES[name]
    size = int(np.prod(shape))
    x = rl.var("x", shape=shape, dtype="float64")
    out = rl.infer_type(rl.Function([x], body(x))).body
    n = int(np.prod(rl.typeof(out).shape))
    w = W[name][:n].reshape(rl.typeof(out).shape)
    f = rl.Function([x], rl.sum(body(x) * rl.const(w)))
    return f, (lambda v: jnp.sum(jbody(v) * w)), shape, size


# second order compiled by jax for these by default (each compile takes seconds); all under -m slow
JAX_SECOND = ("conv2d", "max_pool2d", "gather_scatter")


@pytest.mark.parametrize("name", [n if n in JAX_SECOND else
                                  pytest.param(n, marks=pytest.mark.slow) for n in CASES])
def test_second_order_on_jax_backend(name):
    f, jf, shape, _ = _functions(name)
    x, v = RNG.uniform(-1, 1, shape), RNG.uniform(-1, 1, shape)
    with jax.enable_x64(True):
        # the references are jitted: one compilation each, not one per jax primitive run eagerly
        want2 = np.asarray(jax.jit(jax.grad(lambda u: jnp.sum(jax.grad(jf)(u) * v)))(x))
    np.testing.assert_allclose(np.asarray(rl.compile(_second(f, v, shape), backend="jax")(x)),
                               want2, rtol=1e-8, atol=1e-9)


def _second(f, v, shape):
    """x -> grad of <grad f(x), v>: a Hessian-vector product built from rl.grad twice."""
    u = rl.var("u", shape=shape, dtype="float64")
    return rl.grad(rl.Function([u], rl.sum(rl.Call(rl.grad(f), [u]) * rl.const(v))))


# every case under -m slow; by default a representative few (the per-op finite-difference table
# in tests/ad/test_op_gradients.py checks every rule to second order on the interpreter)
DEFAULT_CASES = ("conv2d", "layer_norm", "gather_scatter", "split_squeeze")


@pytest.mark.parametrize("name", [n if n in DEFAULT_CASES else
                                  pytest.param(n, marks=pytest.mark.slow) for n in CASES])
def test_gradient_and_second_order_match_jax(name):
    f, jf, shape, size = _functions(name)
    x = RNG.uniform(-1, 1, shape)
    v = RNG.uniform(-1, 1, shape)
    with jax.enable_x64(True):
        want = np.asarray(jax.jit(jax.grad(jf))(x))
        want2 = np.asarray(jax.jit(jax.grad(lambda u: jnp.sum(jax.grad(jf)(u) * v)))(x))
        value = float(jax.jit(jf)(x))
    np.testing.assert_allclose(rl.evaluate(f, x), value, rtol=1e-10)
    df = rl.grad(f)
    np.testing.assert_allclose(rl.evaluate(df, x), want, rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(np.asarray(rl.compile(df, backend="jax")(x)), want, rtol=1e-9,
                               atol=1e-10)
    np.testing.assert_allclose(rl.evaluate(_second(f, v, shape), x), want2, rtol=1e-8,
                               atol=1e-9)


@settings(max_examples=2, deadline=None)
@given(st.integers(1, 2), st.integers(1, 3), st.integers(3, 5), st.integers(1, 2))
def test_conv_pool_gradients_on_drawn_shapes(n, c, size, stride):
    x = RNG.uniform(-1, 1, (n, c, size, size))
    w = RNG.uniform(-1, 1, (2, c, 2, 2))
    xv = rl.var("x", shape=x.shape, dtype="float64")
    body = rl.nn.max_pool2d(rl.nn.conv2d(xv, rl.const(w), strides=stride, padding=1), (2, 2))
    f = rl.Function([xv], rl.sum(body * body))

    def jf(v):
        y = jax.lax.conv_general_dilated(v, w, (stride, stride), ((1, 1), (1, 1)))
        y = jax.lax.reduce_window(y, -jnp.inf, jax.lax.max, (1, 1, 2, 2), (1, 1, 1, 1), "VALID")
        return jnp.sum(y * y)
    with jax.enable_x64(True):
        want = np.asarray(jax.jit(jax.grad(jf))(x))
    np.testing.assert_allclose(rl.evaluate(rl.grad(f), x), want, rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(np.asarray(rl.compile(rl.grad(f), backend="jax")(x)), want,
                               rtol=1e-9, atol=1e-10)
