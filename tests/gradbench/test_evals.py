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
