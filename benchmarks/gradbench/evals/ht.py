"""ht: `objective` runs ht.rly's @simple or @complicated (the latter when the input has us);
`jacobian` takes forward mode (rl.jvp): one tangent per pose parameter, and for the
complicated inputs two more, all of the points' first and all of their second barycentric
coordinates at once (each point's error depends on its own us only), which give the two
columns of its 3 x 2 block."""
import numpy as np

import relayish as rl
from tool import compiled, entry, load, multiple_runs

N_THETA = 26


def pose_index(bones):
    """Where each of the (bones + 3) x 3 pose parameters comes from, as ADBench arranges
    them: 0 is 0, 1 is 1, 2 + j is theta_j (global rotation, scale 1, translation, then per
    finger four angles on three joints, the first joint with two)."""
    index = np.zeros((bones + 3, 3), dtype=np.int32)
    index[0] = 2 + np.arange(3)
    index[1] = 1
    index[2] = 2 + np.arange(3, 6)
    j, row = 6, 5
    for _finger in range(5):
        for joint in range(3):
            index[row, 0] = 2 + j
            j += 1
            if joint == 0:
                index[row, 1] = 2 + j
                j += 1
            row += 1
        row += 1
    return index.reshape(-1)


def absolutes_text(parents):
    lines = []
    for i, parent in enumerate(parents):
        own = f"take(%relatives, {i}, axis=0)"
        lines.append(f"  let %a{i} = {own if parent < 0 else f'matmul(%a{parent}, {own})'};")
    lines.append("  stack((" + ", ".join(f"%a{i}" for i in range(len(parents))) + "))")
    return "\n".join(lines)


def prepare(input):
    model, data = input["data"]["model"], input["data"]
    parents = tuple(int(p) for p in model["parents"])
    bones = len(parents)
    theta = np.asarray(input["theta"], dtype=np.float64)
    points = np.asarray(data["points"], dtype=np.float64)
    correspondences = np.asarray(data["correspondences"], dtype=np.int32)
    arrays = [np.asarray(model[k], dtype=np.float64) for k in
              ("base_relatives", "inverse_base_absolutes", "base_positions", "weights")]
    us = np.asarray(input.get("us", []), dtype=np.float64)
    sizes = (parents, arrays[2].shape[0], points.shape[0], us.size > 0)
    model_args = [pose_index(bones), *arrays, points]
    if us.size:
        corners = np.asarray(model["triangles"], dtype=np.int32)[correspondences]
        return sizes, [theta, us.reshape(-1, 2), *model_args, corners]
    return sizes, [theta, *model_args, correspondences]


def module(sizes):
    parents, v, n, _ = sizes
    b = len(parents)
    return load("ht", b=b, b3=b + 3, b3x3=3 * (b + 3), v=v, n=n, absolutes=absolutes_text(parents))


def objective_module(sizes):
    return entry(module(sizes), "complicated" if sizes[3] else "simple")


@multiple_runs(pre=prepare, post=lambda e: np.asarray(e).reshape(-1).tolist())
def objective(input):
    sizes, args = input
    return compiled(("ht", "objective", sizes), lambda: objective_module(sizes))(*args)


def jacobian_program(sizes):
    """@main(args...) -> the (3n, [2 +] 26) Jacobian: the tangents of the errors along each
    direction, as columns."""
    parents, v, n, complicated = sizes
    jvp = rl.jvp(objective_module(sizes))
    out = jvp.copy()
    tangent = out.get_global_var("tangent", create=True)
    out[tangent] = jvp["main"]
    params = [rl.var(p.name_hint, type=p.type_annotation)
              for p in objective_module(sizes)["main"].params]
    differentiable = 2 if complicated else 1
    directions = []
    if complicated:
        for column in range(2):
            seed = np.zeros((n, 2))
            seed[:, column] = 1.0
            directions.append([rl.zeros((N_THETA,), "float64"), rl.const(seed)])
    for j in range(N_THETA):
        seed = np.zeros(N_THETA)
        seed[j] = 1.0
        directions.append([rl.const(seed)] + ([rl.zeros((n, 2), "float64")] if complicated else []))
    columns = []
    for direction in directions:
        zero_rest = [rl.zeros_like(p) for p in params[differentiable:]]
        call = rl.Call(tangent, params + direction + zero_rest)
        columns.append(rl.reshape(rl.TupleGetItem(call, 1), (3 * n,)))
    out["main"] = rl.Function(params, rl.stack(columns, axis=1))
    return out


@multiple_runs(pre=prepare, post=lambda j: np.asarray(j).tolist())
def jacobian(input):
    sizes, args = input
    # the 28 tangent programs trace as one chain of about 11,600 dependent operations, past
    # the backend's default bound of 10^4 (which guards XLA against much deeper chains)
    return compiled(("ht", "jacobian", sizes), lambda: jacobian_program(sizes),
                    limits={"max_depth": 20000})(*args)
