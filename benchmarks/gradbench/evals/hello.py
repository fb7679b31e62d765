"""hello: `square` runs hello.rly, `double` its gradient (rl.grad)."""
import numpy as np

import relayish as rl
from tool import compiled, load, single_run


def to_float(x):
    return np.asarray(x, dtype=np.float64)


@single_run(pre=to_float, post=float)
def square(x):
    return compiled(("hello", "square"), lambda: load("hello"))(x)


@single_run(pre=to_float, post=float)
def double(x):
    return compiled(("hello", "double"), lambda: rl.grad(load("hello")))(x)
