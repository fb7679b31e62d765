"""Each eval's functions of benchmarks/gradbench against the same computation written in jax
(values and derivatives), on small inputs, through the functions' `wrapped` entry points (the
JSON input in, the JSON output out, as run.py answers an evaluate message)."""
import math
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "benchmarks",
                                "gradbench"))
jax.config.update("jax_enable_x64", True)

RUNS = {"min_runs": 1, "min_seconds": 0}


def answer(module, function, input):
    import importlib
    if isinstance(input, dict):
        input = input | RUNS
    response = getattr(importlib.import_module(f"evals.{module}"), function).wrapped(input)
    assert response["success"] and len(response["timings"]) >= 1
    return response["output"]


def close(actual, expected, rtol=1e-10, atol=1e-12):
    np.testing.assert_allclose(np.asarray(actual, dtype=np.float64), np.asarray(expected),
                               rtol=rtol, atol=atol)


rng = np.random.default_rng(29)


def test_hello():
    assert answer("hello", "square", 1.5) == 2.25 and answer("hello", "double", 1.5) == 3.0


def jax_lse(x):
    a = jnp.max(x)
    return a + jnp.log(jnp.sum(jnp.exp(x - a)))


def test_lse():
    x = rng.normal(size=7) * 30
    close(answer("lse", "primal", {"x": x.tolist()}), jax_lse(x))
    close(answer("lse", "gradient", {"x": x.tolist()}), jax.jit(jax.grad(jax_lse))(x))


def jax_llsq(x, n):
    t = -1.0 + jnp.arange(n) * 2.0 / (n - 1.0)
    powers = t[:, None] ** jnp.arange(x.size)[None, :]
    return jnp.sum((jnp.sign(t) - powers @ x) ** 2) / 2.0


def test_llsq():
    x, n = rng.random(5), 9          # n odd: one t is exactly 0, whose sign is 0
    close(answer("llsq", "primal", {"x": x.tolist(), "n": n}), jax_llsq(x, n))
    close(answer("llsq", "gradient", {"x": x.tolist(), "n": n}),
          jax.jit(jax.grad(jax_llsq), static_argnums=1)(x, n))


def jax_kmeans(centroids, points):
    d = jnp.sum((points[:, None, :] - centroids[None, :, :]) ** 2, axis=2)
    return jnp.sum(jnp.min(d, axis=1))


def test_kmeans():
    points = rng.random((12, 3))
    centroids = points[-4:]          # every cluster has a point, as the eval guarantees
    input = {"points": points.tolist(), "centroids": centroids.tolist()}
    close(answer("kmeans", "cost", input), jax_kmeans(centroids, points))
    g = jax.grad(jax_kmeans)
    direction = jax.jit(lambda c: jnp.divide(*jax.jvp(lambda c: g(c, points), (c,),
                                                       (jnp.ones_like(c),))))
    close(answer("kmeans", "dir", input), direction(centroids))


def jax_gmm(alpha, mu, q, l, x, gamma, m):
    (k, d), n = mu.shape, x.shape[0]
    Q = jnp.zeros((k, d, d))
    rows, cols = np.tril_indices(d, -1)
    order = np.lexsort((rows, cols))          # l fills the lower part column by column
    Q = Q.at[:, rows[order], cols[order]].set(l) + jax.vmap(jnp.diag)(jnp.exp(q))
    xc = x[:, None, :] - mu[None]
    beta = alpha + q.sum(1) - 0.5 * jnp.sum(jnp.einsum("kij,nkj->nki", Q, xc) ** 2, axis=2)
    lse = jax.scipy.special.logsumexp
    nw = d + m + 1
    prior = (k * (nw * d * jnp.log(gamma / jnp.sqrt(2.0))
                  - jax.scipy.special.multigammaln(0.5 * nw, d))
             - 0.5 * gamma ** 2 * jnp.sum(Q ** 2) + m * q.sum())
    return -n * d * 0.5 * math.log(2 * math.pi) - n * lse(alpha) + lse(beta, axis=1).sum() + prior


def test_gmm():
    d, k, n, m, gamma = 3, 4, 6, 2, 1.5
    ind = {"alpha": rng.normal(size=k), "mu": rng.random((k, d)), "q": rng.normal(size=(k, d)),
           "l": rng.normal(size=(k, d * (d - 1) // 2))}
    x = rng.normal(size=(n, d))
    input = {"d": d, "k": k, "n": n, "m": m, "gamma": gamma, "x": x.tolist()} | {
        name: v.tolist() for name, v in ind.items()}
    args = (*ind.values(), x, gamma, m)
    close(answer("gmm", "objective", input), jax.jit(jax_gmm)(*args))
    grads = jax.jit(jax.grad(jax_gmm, argnums=(0, 1, 2, 3)))(*args)
    out = answer("gmm", "jacobian", input)
    for name, g in zip(ind, grads):
        close(out[name], g)


def jax_ode(x, s):
    h = 2.0 / s

    def f(y):
        return x * jnp.concatenate([jnp.ones(1), y[:-1]])

    def step(y, _):
        k1 = f(y)
        k2 = f(y + h / 2 * k1)
        k3 = f(y + h / 2 * k2)
        k4 = f(y + h * k3)
        return y + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4), None
    return jax.lax.scan(step, jnp.zeros_like(x), None, length=s)[0]


def test_ode():
    x, s = rng.random(5), 3
    close(answer("ode", "primal", {"x": x.tolist(), "s": s}), jax_ode(x, s))
    close(answer("ode", "gradient", {"x": x.tolist(), "s": s}),
          jax.jit(jax.grad(lambda x: jax_ode(x, s)[-1]))(x))


def jax_lstm(main, extra, state, sequence):
    b = sequence.shape[1]

    def cell(weight, bias, hidden, c, x):
        gates = jnp.concatenate([x, hidden, x, hidden]) * weight + bias
        f, i, o = (jax.nn.sigmoid(gates[j * b:(j + 1) * b]) for j in range(3))
        c = c * f + i * jnp.tanh(gates[3 * b:])
        return o * jnp.tanh(c), c

    def step(carry, t):
        s, x, total = carry
        x = x * extra[0]
        new = []
        for i in range(0, s.shape[0], 2):
            h, c = cell(main[i], main[i + 1], s[i], s[i + 1], x)
            new += [h, c]
            x = h
        y = x * extra[1] + extra[2]
        gold = sequence[t + 1]
        return (jnp.stack(new), gold, total + jnp.sum(gold * (y - jnp.log(jnp.sum(jnp.exp(y)))))), None
    (_, _, total), _ = jax.lax.scan(step, (state, sequence[0], 0.0),
                                    jnp.arange(sequence.shape[0] - 1))
    return -total / ((sequence.shape[0] - 1) * b)


def test_lstm():
    layers, b, c = 2, 3, 5
    args = (rng.random((2 * layers, 4 * b)), rng.random((3, b)), rng.random((2 * layers, b)),
            rng.integers(0, 2, size=(c, b)).astype(np.float64))
    input = dict(zip(("main_params", "extra_params", "state", "sequence"),
                     (a.tolist() for a in args)))
    close(answer("lstm", "objective", input), jax.jit(jax_lstm)(*args))
    gm, ge = jax.jit(jax.grad(jax_lstm, argnums=(0, 1)))(*args)
    close(answer("lstm", "jacobian", input), np.concatenate([gm.ravel(), ge.ravel()]))
