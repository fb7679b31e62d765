"""saddle: the four functions ff, fr, rf, rr (forward or reverse mode for the outer minimum,
then for the inner maximum's gradient).

What is compiled: everything, as ONE program (@saddle of saddle.rly): the outer minimum over
p1 (@descend, GradBench's gd.hpp algorithm as a loop with a traced trip count) whose every
step runs the inner maximum @r1_cost(p1) (@ascend, a loop of its own) and the outer gradient
@dr1_cost of @r1_cost through that loop, by rl.grad (r) or rl.jvp (f), with the inner
gradient @dcost_dp from rl.grad (r) or two rl.jvp tangents (f); then the maximum over p for
that p1. Loops in a loop (for rl.grad, a gradient's loop inside the outer one): one XLA
program for every trip count. Should the jax backend refuse it, it runs on the interpreter
(tool.on_interpreter records it). `argmin` (gd.hpp in Python, on host values) is particle's
outer descent."""
import numpy as np

import relayish as rl
from tool import compiled, define, entry, load, multiple_runs


def gradient_program(f, argnum, mode, size=2):
    """The gradient of scalar f in parameter `argnum`: rl.grad (mode "r"), or one rl.jvp
    tangent per element of that (size-vector) parameter (mode "f")."""
    if mode == "r":
        return rl.grad(f, argnums=argnum)
    jvp = rl.jvp(f)
    main = jvp["main"] if isinstance(jvp, rl.Module) else jvp
    params = [rl.var(p.name_hint, type=p.type_annotation) for p in
              (f["main"] if isinstance(f, rl.Module) else f).params]
    columns = []
    for j in range(size):
        tangents = [rl.zeros_like(p) for p in params]
        tangents[argnum] = rl.const(np.eye(size)[j])
        columns.append(rl.TupleGetItem(rl.Call(main, params + tangents), 1))
    body = rl.stack(columns)
    if isinstance(jvp, rl.Module):
        out = jvp.copy()
        out["main"] = rl.Function(params, body)
        return out
    return rl.Function(params, body)


def with_inner_gradient(inner_mode):
    mod = load("saddle")
    return define(mod, "dcost_dp", gradient_program(entry(mod, "cost"), 1, inner_mode))


def argmin(f, g, x):
    """cpp/gradbench/gd.hpp's multivariate_argmin, on host values."""
    fx, gx = float(f(x)), np.asarray(g(x))
    i, eta = 0, 1e-5
    while True:
        if np.linalg.norm(gx) <= 1e-5:
            return x
        if i == 10:
            eta *= 2
            i = 0
            continue
        x_prime = x - eta * gx
        if np.linalg.norm(x - x_prime) <= 1e-5:
            return x
        fx_prime = float(f(x_prime))
        if fx_prime < fx:
            x, fx, gx = x_prime, fx_prime, np.asarray(g(x_prime))
            i += 1
        else:
            eta /= 2
            i = 0


def program(outer_mode, inner_mode):
    """@saddle(start) with the inner gradient in `inner_mode` and the outer in `outer_mode`."""
    mod = with_inner_gradient(inner_mode)
    define(mod, "dr1_cost", gradient_program(entry(mod, "r1_cost"), 0, outer_mode))
    return entry(mod, "saddle")


def saddle(outer_mode, inner_mode, start):
    run = compiled(("saddle", outer_mode + inner_mode),
                   lambda: program(outer_mode, inner_mode), fallback=True)
    return np.asarray(run(start))


def prepare(input):
    return np.asarray(input["start"], dtype=np.float64)


def variant(outer_mode, inner_mode):
    @multiple_runs(pre=prepare, post=lambda r: np.asarray(r).tolist())
    def run(start):
        return saddle(outer_mode, inner_mode, start)
    return run


ff, fr, rf, rr = (variant(o, i) for o, i in (("f", "f"), ("f", "r"), ("r", "f"), ("r", "r")))
