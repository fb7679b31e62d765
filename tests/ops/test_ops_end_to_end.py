"""The op rules through the whole pipeline: rl.grad / rl.hessian on the interpreter and the jax
backend, against jax.grad / jax.hessian on the same function written in jax."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import relayish as rl

RNG = np.random.default_rng(11)
X = RNG.uniform(0.3, 1.2, (4,))
W = RNG.uniform(-1, 1, (3, 4))

# name: (relayish body of x (4,) and w (3, 4), the same in jax) -> scalar
CASES = {
    "binary": (lambda x, w: rl.sum(rl.maximum(w * x, rl.minimum(x - w, w / x)) ** 2.0),
               lambda x, w: jnp.sum(jnp.maximum(w * x, jnp.minimum(x - w, w / x)) ** 2.0)),
    "unary": (lambda x, w: rl.sum(rl.exp(rl.sin(w) * rl.log(x)) + rl.tanh(rl.cos(w) * rl.sqrt(x))
                                  + rl.sigmoid(rl.tan(w)) * rl.abs(w) + rl.relu(w) * x),
              lambda x, w: jnp.sum(jnp.exp(jnp.sin(w) * jnp.log(x)) + jnp.tanh(jnp.cos(w) * jnp.sqrt(x))
                                   + jax.nn.sigmoid(jnp.tan(w)) * jnp.abs(w) + jax.nn.relu(w) * x)),
    "where": (lambda x, w: rl.sum(rl.where(rl.greater(w, x), w * w, -x)),
              lambda x, w: jnp.sum(jnp.where(w > x, w * w, -x))),
    "reduce": (lambda x, w: rl.sum(rl.max(w * x, axis=1) * rl.mean(w, axis=0, keepdims=True)[0] if False
                                   else rl.max(w * x, axis=1)) * rl.sum(rl.min(w, axis=0) * x),
               lambda x, w: jnp.sum(jnp.max(w * x, axis=1)) * jnp.sum(jnp.min(w, axis=0) * x)),
    "mean": (lambda x, w: rl.mean(rl.mean(w * x, axis=-1, keepdims=True) * w),
             lambda x, w: jnp.mean(jnp.mean(w * x, axis=-1, keepdims=True) * w)),
    "matmul": (lambda x, w: rl.sum(rl.matmul(w, x) * rl.matmul(x, rl.transpose(w)) ),
               lambda x, w: jnp.sum(jnp.matmul(w, x) * jnp.matmul(x, w.T))),
    "shape": (lambda x, w: rl.sum(rl.reshape(rl.transpose(rl.broadcast_to(x, (3, 4)) * w, (1, 0)), (2, -1))
                                  * rl.reshape(w, (2, 6))),
              lambda x, w: jnp.sum(jnp.transpose(jnp.broadcast_to(x, (3, 4)) * w, (1, 0)).reshape(2, -1)
                                   * w.reshape(2, 6))),
    "join": (lambda x, w: rl.sum(rl.concatenate([w, rl.stack([x, x * x], axis=0)], axis=0) ** 2.0)
                          + rl.sum(rl.take(w, rl.const(np.array([2, 0, 2], "int32")), axis=0) * x),
             lambda x, w: jnp.sum(jnp.concatenate([w, jnp.stack([x, x * x], axis=0)], axis=0) ** 2.0)
                          + jnp.sum(jnp.take(w, jnp.array([2, 0, 2]), axis=0) * x)),
    "softmax": (lambda x, w: rl.sum(rl.softmax(w * x) * w) + rl.sum(rl.log_softmax(w, axis=0) * x),
                lambda x, w: jnp.sum(jax.nn.softmax(w * x) * w) + jnp.sum(jax.nn.log_softmax(w, axis=0) * x)),
    "cast": (lambda x, w: rl.sum(rl.cast(rl.cast(w, "float32") * rl.cast(x, "float32"), "float64")
                                 * rl.cast(rl.cast(x * 3.0, "int32"), "float64")),
             lambda x, w: jnp.sum((w.astype("float32") * x.astype("float32")).astype("float64")
                                  * (x * 3.0).astype("int32").astype("float64"))),
}


def _function(body):
    x = rl.var("x", shape=(4,), dtype="float64")
    w = rl.var("w", shape=(3, 4), dtype="float64")
    return rl.Function([x, w], body(x, w))


@pytest.mark.parametrize("case", list(CASES))
def test_gradient_matches_jax(case):
    body, jfn = CASES[case]
    f = _function(body)
    with jax.enable_x64(True):
        # jitted: one compilation of the reference, not one per jax primitive run eagerly
        expected = jax.jit(jax.grad(jfn, argnums=(0, 1)))(jnp.asarray(X), jnp.asarray(W))
    got = rl.evaluate(rl.grad(f, argnums=(0, 1)), X, W)
    tol = 1e-5 if case == "cast" else 1e-9
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, np.asarray(e), rtol=tol, atol=tol)


@pytest.mark.parametrize("case", ["binary"] + [pytest.param(c, marks=pytest.mark.slow) for c in
                                              ("unary", "matmul", "join", "softmax", "reduce")])
def test_hessian_matches_jax(case):
    body, jfn = CASES[case]
    x = rl.var("x", shape=(4,), dtype="float64")
    f = rl.Function([x], body(x, rl.const(W)))
    with jax.enable_x64(True):
        expected = jax.jit(jax.hessian(lambda v: jfn(v, jnp.asarray(W))))(jnp.asarray(X))
    got = rl.evaluate(rl.hessian(f), X)
    np.testing.assert_allclose(got, np.asarray(expected), rtol=1e-8, atol=1e-9)


def test_jax_backend_runs_every_rule():
    """One program using most ops, differentiated, on both backends."""
    def body(x, w):
        total = rl.const(0.0, "float64")
        for b, _ in CASES.values():
            total = total + b(x, w)
        return total
    g = rl.grad(_function(body), argnums=(0, 1))
    got = rl.compile(g, backend="jax")(X, W)
    ref = rl.evaluate(g, X, W)
    for a, b in zip(got, ref):
        np.testing.assert_allclose(np.asarray(a), b, rtol=1e-9, atol=1e-9)
