"""llsq: `primal` runs llsq.rly, `gradient` is its reverse-mode gradient."""
import numpy as np

import relayish as rl
from tool import compiled, load, multiple_runs


def prepare(input):
    return np.asarray(input["x"], dtype=np.float64), int(input["n"])


def program(kind, x, n):
    def build():
        mod = load("llsq", m=x.size, n=n)
        return mod if kind == "primal" else rl.grad(mod)
    return compiled(("llsq", kind, x.size, n), build)


@multiple_runs(pre=prepare, post=float)
def primal(input):
    x, n = input
    return program("primal", x, n)(x)


@multiple_runs(pre=prepare, post=lambda g: np.asarray(g).tolist())
def gradient(input):
    x, n = input
    return program("gradient", x, n)(x)
