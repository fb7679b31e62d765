"""Objectives shared by the optimizer tests: relayish programs and their numpy twins."""
import os
import sys

import numpy as np

import relayish as rl

EXAMPLES = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "examples")
sys.path.insert(0, os.path.abspath(EXAMPLES))

import logistic_regression  # noqa: E402  (examples/logistic_regression.py)

F64 = "float64"


def rosenbrock(n):
    """sum_i 100 (x[i+1] - x[i]^2)^2 + (1 - x[i])^2 over Tensor[(n), float64]."""
    x = rl.var("x", shape=(n,), dtype=F64)
    a = rl.op.strided_slice(x, [0], [n - 1])
    b = rl.op.strided_slice(x, [1], [n])
    return rl.Function([x], rl.sum(100.0 * (b - a * a) * (b - a * a) + (1.0 - a) * (1.0 - a)))


def rosenbrock_start(n):
    return np.array([-1.2] + [1.0] * (n - 1))


def rosenbrock_module():
    with open(os.path.join(EXAMPLES, "rosenbrock.rly")) as fh:
        return rl.parse(fh.read())


def quadratic(n=5, seed=0):
    """0.5 x'Ax - b'x with A symmetric positive definite; returns (f, A, b)."""
    rng = np.random.default_rng(seed)
    M = rng.standard_normal((n, n))
    A = M @ M.T + n * np.eye(n)
    b = rng.standard_normal(n)
    x = rl.var("x", shape=(n,), dtype=F64)
    Ax = rl.matmul(rl.const(A), x)
    f = rl.Function([x], rl.const(0.5, F64) * rl.sum(x * Ax) - rl.sum(rl.const(b) * x))
    return f, A, b


def logistic(n_samples=60, n_features=8, seed=1, lam=1e-2):
    """(objective fn(w, X, y), X, y, numpy (fun, grad, hess))."""
    X, y = logistic_regression.make_data(n_samples, n_features, seed)
    f = logistic_regression.make_objective(n_samples, n_features, lam)
    return f, X, y, logistic_regression.numpy_objective(X, y, lam)


def is_local_min(H, g, tol=1e-6):
    return np.linalg.norm(g) < tol and np.linalg.eigvalsh(0.5 * (H + H.T)).min() > 0


def refuse_recursion_early(monkeypatch, activations=16):
    """Let the jax backend give up on a recursion under a traced condition after `activations`
    activations instead of MAX_ACTIVATIONS_UNDER_JOIN (512: 2.5 s of tracing nested joins).
    For tests of what the optimizer does with jax's refusal; the bound itself is
    tests/backend's (test_jax_nesting.py, test_jax_dynamic_tail.py)."""
    from relayish.backend.jax import trace
    monkeypatch.setattr(trace, "MAX_ACTIVATIONS_UNDER_JOIN", activations)
