"""gmm: `objective` runs gmm.rly, `jacobian` is its gradient in alpha, mu, q and l
(rl.grad with argnums)."""
import math

import numpy as np

import relayish as rl
from tool import compiled, load, multiple_runs

INDEPENDENT = ("alpha", "mu", "q", "l")


def tril_index(d):
    """For each entry (i, j) of a d x d matrix, row-major: 1 + the position of l_k's value
    there (strictly below the diagonal, filled column by column), else 0."""
    index = np.zeros((d, d), dtype=np.int32)
    position = 0
    for j in range(d):
        for i in range(j + 1, d):
            position += 1
            index[i, j] = position
    return index.reshape(-1)


def multigammaln(a, d):
    """log Gamma_d(a): the Wishart normaliser, a constant of the eval's d and m."""
    return d * (d - 1) / 4 * math.log(math.pi) + sum(math.lgamma(a + (1 - j) / 2)
                                                    for j in range(1, d + 1))


def prepare(input):
    d, k, n, m = input["d"], input["k"], input["n"], input["m"]
    arrays = [np.asarray(input[name], dtype=np.float64).reshape(shape) for name, shape in
              (("alpha", (k,)), ("mu", (k, d)), ("q", (k, d)), ("l", (k, d * (d - 1) // 2)),
               ("x", (n, d)))]
    scalars = [np.float64(input["gamma"]), np.float64(m),
               np.float64(multigammaln(0.5 * (d + m + 1), d))]
    return (d, k, n), (*arrays, tril_index(d), *scalars)


def objective_module(d, k, n):
    return load("gmm", d=d, k=k, n=n, p=d * (d - 1) // 2, dd=d * d,
                constant=repr(-n * d * 0.5 * math.log(2 * math.pi)))


@multiple_runs(pre=prepare, post=float)
def objective(input):
    sizes, args = input
    return compiled(("gmm", "objective", sizes), lambda: objective_module(*sizes))(*args)


@multiple_runs(pre=prepare, post=lambda g: {name: np.asarray(v).tolist()
                                            for name, v in zip(INDEPENDENT, g)})
def jacobian(input):
    sizes, args = input
    return compiled(("gmm", "jacobian", sizes),
                    lambda: rl.grad(objective_module(*sizes), argnums=(0, 1, 2, 3)))(*args)
