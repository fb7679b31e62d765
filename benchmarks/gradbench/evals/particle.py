"""particle: the four functions ff, fr, rf, rr (forward or reverse mode for the outer
minimum over w, then for the potential's gradient inside the Euler loop).

Compiled: @naive_euler(w) of particle.rly (its loop one XLA while loop) with @dpotential_dx
from rl.grad (r) or two rl.jvp tangents (f), and its derivative in w through the loop by
rl.jvp (f) or rl.grad (r). The outer descent runs GradBench's gd.hpp algorithm in Python
(a loop around the compiled loop: a loop in a loop does not compile yet), and a reverse-mode
derivative the jax backend refuses runs on the interpreter (tool.on_interpreter)."""
import numpy as np

import relayish as rl
from evals.saddle import argmin, gradient_program
from tool import compiled, define, entry, load, multiple_runs


def with_inner_gradient(inner_mode):
    mod = load("particle")
    return define(mod, "dpotential_dx", gradient_program(entry(mod, "potential"), 0, inner_mode))


def derivative_program(mod, mode):
    """d naive_euler / dw: rl.grad (r) or rl.jvp along 1 (f)."""
    f = entry(mod, "naive_euler")
    if mode == "r":
        return rl.grad(f)
    jvp = rl.jvp(f)
    w = rl.var("w", dtype="float64")
    out = jvp.copy()
    out["main"] = rl.Function([w], rl.TupleGetItem(rl.Call(jvp["main"], [w, rl.const(1.0, "float64")]), 1))
    return out


def particle(outer_mode, inner_mode, w0):
    key = ("particle", outer_mode + inner_mode)
    mod = lambda: with_inner_gradient(inner_mode)
    f = compiled(key + ("f",), lambda: entry(mod(), "naive_euler"))
    df = compiled(key + ("df",), lambda: derivative_program(mod(), outer_mode), fallback=True)
    w = argmin(lambda v: f(v[0]), lambda v: np.reshape(np.asarray(df(v[0])), (1,)),
               np.array([w0]))
    return w[0]


def variant(outer_mode, inner_mode):
    @multiple_runs(pre=lambda input: float(input["w"]), post=float)
    def run(w0):
        return particle(outer_mode, inner_mode, w0)
    return run


ff, fr, rf, rr = (variant(o, i) for o, i in (("f", "f"), ("f", "r"), ("r", "f"), ("r", "r")))
