"""kmeans: `cost` runs kmeans.rly; `dir` is its gradient in the centroids over the Hessian's
diagonal, both from one forward-over-reverse program: rl.jvp(rl.grad(cost)) along ones."""
import numpy as np

import relayish as rl
from tool import compiled, load, multiple_runs


def prepare(input):
    return (np.asarray(input["centroids"], dtype=np.float64),
            np.asarray(input["points"], dtype=np.float64))


def cost_function(centroids, points):
    (k, d), (n, _) = centroids.shape, points.shape
    return load("kmeans", k=k, d=d, n=n)["main"]


def dir_program(centroids, points):
    """fn(C, P) { let (J, Hv) = jvp(grad(cost))(C, P, ones, zeros); J / Hv }"""
    cost = cost_function(centroids, points)
    C, P = (rl.var(p.name_hint, type=p.type_annotation) for p in cost.params)
    both = rl.Call(rl.jvp(rl.grad(cost, argnums=0)),
                   [C, P, rl.ones_like(C), rl.zeros_like(P)])
    pair = rl.Var("pair")
    return rl.Function([C, P], rl.Let(pair, both, rl.divide(pair[0], pair[1])))


@multiple_runs(pre=prepare, post=float)
def cost(input):
    centroids, points = input
    return compiled(("kmeans", "cost", centroids.shape, points.shape),
                    lambda: cost_function(centroids, points))(centroids, points)


@multiple_runs(pre=prepare, post=lambda d: np.asarray(d).tolist())
def dir(input):
    centroids, points = input
    return compiled(("kmeans", "dir", centroids.shape, points.shape),
                    lambda: dir_program(centroids, points))(centroids, points)
