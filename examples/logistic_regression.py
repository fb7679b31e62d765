"""L2-regularized logistic regression, minimized with Newton's method.

    python examples/logistic_regression.py [--backend jax|interpreter] [--method newton]

The objective is a relayish function of the weights w (the data are fixed arguments):

    loss(w; X, y) = mean(softplus(X w) - y * (X w)) + lam / 2 * |w|^2
    softplus(z)   = log(1 + exp(z))       (rl.softplus: no overflow, gradient sigmoid(z))

rl.optim.minimize builds its gradient and exact Hessian by AD, compiles them once with jax and
runs Newton's method; it converges in a handful of iterations.
"""
import argparse

import numpy as np

import relayish as rl


def make_data(n_samples=200, n_features=50, seed=0):
    """A random classification problem: X (n, d) float64, labels y in {0, 1}."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n_samples, n_features)) / np.sqrt(n_features)
    w_true = rng.standard_normal(n_features) * 3.0
    p = 1.0 / (1.0 + np.exp(-X @ w_true))
    y = (rng.random(n_samples) < p).astype(np.float64)
    return X, y


def make_objective(n_samples, n_features, lam=1e-2):
    """fn(w: (d), X: (n, d), y: (n)) -> float64, the regularized mean logistic loss."""
    w = rl.var("w", shape=(n_features,), dtype="float64")
    X = rl.var("X", shape=(n_samples, n_features), dtype="float64")
    y = rl.var("y", shape=(n_samples,), dtype="float64")
    half_lam = rl.const(lam / 2.0, "float64")
    sb = rl.ScopeBuilder()
    z = sb.let("z", rl.matmul(X, w))
    # a real softplus: relu(z) + log(1 + exp(-|z|)) has the derivatives of relu and abs at
    # z = 0, which are 0, so its gradient at w = 0 (the starting point) was wrong
    loss = sb.let("loss", rl.mean(rl.softplus(z) - y * z))
    sb.ret(loss + half_lam * rl.sum(w * w))
    return rl.Function([w, X, y], sb.get())


def numpy_objective(X, y, lam=1e-2):
    """The same loss, gradient and Hessian written by hand in numpy (for checks)."""
    def fun(w):
        z = X @ w
        return np.mean(np.logaddexp(0.0, z) - y * z) + lam / 2 * w @ w

    def grad(w):
        s = 1.0 / (1.0 + np.exp(-(X @ w)))
        return X.T @ (s - y) / len(y) + lam * w

    def hess(w):
        s = 1.0 / (1.0 + np.exp(-(X @ w)))
        return (X.T * (s * (1 - s))) @ X / len(y) + lam * np.eye(X.shape[1])
    return fun, grad, hess


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="jax", choices=("jax", "interpreter"))
    parser.add_argument("--method", default="newton", choices=sorted(rl.optim.METHODS))
    args = parser.parse_args(argv)
    X, y = make_data()
    f = make_objective(*X.shape)
    res = rl.optim.minimize(f, np.zeros(X.shape[1]), method=args.method, args=(X, y),
                            backend=args.backend, verbose=True)
    accuracy = np.mean(((X @ res.x) > 0) == (y > 0.5))
    print(f"{res.method}: converged={res.converged} in {res.n_iter} iterations, "
          f"loss {res.fun:.6f}, training accuracy {accuracy:.3f}")
    return res


if __name__ == "__main__":
    main()
