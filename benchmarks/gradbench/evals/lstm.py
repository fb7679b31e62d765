"""lstm: `objective` runs lstm.rly, `jacobian` is rl.grad of it in the main and extra
parameters, flattened row by row and concatenated as the eval asks. The time loop's trip count
is fixed by the sequence's length, so the gradient's recorded loop is sized to it."""
import numpy as np

import relayish as rl
from tool import compiled, load, multiple_runs

LAYER = """  let %h{i} = @cell(take(%w, {w}, axis=0), take(%w, {bias}, axis=0),
                   take(%s, {w}, axis=0), take(%s, {bias}, axis=0), %x{i});
  let %x{next} = %h{i}.0;"""


def module(layers, b, c):
    text = "\n".join(LAYER.format(i=i, next=i + 1, w=2 * i, bias=2 * i + 1)
                     for i in range(layers))
    states = ", ".join(f"%h{i}.0, %h{i}.1" for i in range(layers))
    return load("lstm", layers=text, states=states, l=layers, l2=2 * layers, b=b, b2=2 * b,
                b3=3 * b, b4=4 * b, c=c, count=(c - 1) * b)


def prepare(input):
    arrays = tuple(np.asarray(input[k], dtype=np.float64)
                   for k in ("main_params", "extra_params", "state", "sequence"))
    main, _, _, sequence = arrays
    steps = np.int32(sequence.shape[0] - 1)
    return (main.shape[0] // 2, main.shape[1] // 4, sequence.shape[0]), arrays + (steps,)


@multiple_runs(pre=prepare, post=float)
def objective(input):
    sizes, args = input
    return compiled(("lstm", "objective", sizes), lambda: module(*sizes))(*args)


def jacobian_program(sizes):
    """@main(main, extra, state, sequence) = the gradient in main and extra, flattened and
    concatenated; the gradient's own @main renamed @gradient."""
    layers, b, c = sizes
    grad = rl.grad(module(*sizes), argnums=(0, 1))
    out = grad.copy()
    shapes = [(2 * layers, 4 * b), (3, b), (2 * layers, b), (c, b)]
    params = [rl.var(f"a{i}", shape=s, dtype="float64") for i, s in enumerate(shapes)]
    params.append(rl.var("steps", dtype="int32"))
    gradient = out.get_global_var("gradient", create=True)
    out[gradient] = grad["main"]
    g = rl.Var("g")
    out["main"] = rl.Function(params, rl.Let(g, rl.Call(gradient, params), rl.concatenate(
        [rl.reshape(g[0], (-1,)), rl.reshape(g[1], (-1,))])))
    return out


@multiple_runs(pre=prepare, post=lambda g: np.asarray(g).tolist())
def jacobian(input):
    sizes, args = input
    layers, b, c = sizes
    return compiled(("lstm", "jacobian", sizes), lambda: jacobian_program(sizes),
                    capacity={"steps": c + 1})(*args)
