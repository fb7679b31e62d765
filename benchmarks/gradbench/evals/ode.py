"""ode: `primal` runs ode.rly, `gradient` is rl.grad of its last element. The loop's trip
count s is a run-time argument; the gradient's recorded loop is sized to s steps (capacity),
so it compiles once per s."""
import numpy as np

import relayish as rl
from tool import compiled, entry, load, multiple_runs


def prepare(input):
    return np.asarray(input["x"], dtype=np.float64), np.int32(input["s"])


@multiple_runs(pre=prepare, post=lambda y: np.asarray(y).tolist())
def primal(input):
    x, s = input
    return compiled(("ode", "primal", x.size),
                    lambda: entry(load("ode", n=x.size, n1=x.size - 1), "ode"))(x, s)


@multiple_runs(pre=prepare, post=lambda g: np.asarray(g).tolist())
def gradient(input):
    x, s = input
    build = lambda: rl.grad(entry(load("ode", n=x.size, n1=x.size - 1), "last"), argnums=0)
    return compiled(("ode", "gradient", x.size, int(s)), build,
                    capacity={"steps": int(s) + 1})(x, s)
