"""ba: `objective` runs ba.rly's @main; `jacobian` is the sparse Jacobian of the reprojection
and weight errors in GradBench's COO lists (rows as CSR row starts, as ADBench's BASparseMat),
its values from rl.vjp of @local: a backpropagator called with the cotangent of each error
component gives the 15 derivatives of that component of every observation at once."""
import numpy as np

import relayish as rl
from tool import compiled, entry, load, multiple_runs

N_CAM = 11


def prepare(input):
    """The input duplicated as the eval asks (and as GradBench's PyTorch tool does): n copies
    of the camera, m of the point, p observations cycling through both."""
    n, m, p = input["n"], input["m"], input["p"]
    cams = np.tile(np.asarray(input["cam"], dtype=np.float64), (n, 1))
    x = np.tile(np.asarray(input["x"], dtype=np.float64), (m, 1))
    w = np.full(p, float(input["w"]))
    feats = np.tile(np.asarray(input["feat"], dtype=np.float64), (p, 1))
    i = np.arange(p)
    return (n, m, p), (cams, x, w, feats, (i % n).astype(np.int32), (i % m).astype(np.int32))


def sizes_of(sizes):
    n, m, p = sizes
    return load("ba", n=n, m=m, p=p)


@multiple_runs(pre=prepare, post=lambda e: {
    "reproj_error": {"elements": np.asarray(e[0])[0].tolist(), "repeated": len(e[0])},
    "w_err": {"element": float(np.asarray(e[1])[0]), "repeated": len(e[1])}})
def objective(input):
    sizes, args = input
    return compiled(("ba", "objective", sizes), lambda: sizes_of(sizes))(*args)


def values_program(sizes):
    """fn(cams, x, w, feats, cam_index, point_index) -> the Jacobian's nonzero values in
    BASparseMat's order: per observation its two rows of 15 (camera, point, weight), then
    the weight errors' derivatives -2 w."""
    n, m, p = sizes
    mod = sizes_of(sizes)
    vjp = rl.vjp(entry(mod, "local"))
    types = [rl.TensorType(s, d) for s, d in (((n, N_CAM), "float64"), ((m, 3), "float64"),
                                              ((p,), "float64"), ((p, 2), "float64"),
                                              ((p,), "int32"), ((p,), "int32"))]
    cams, x, w, feats, cam_index, point_index = (rl.var(name, type=t) for name, t in zip(
        ("cams", "x", "w", "feats", "cam_index", "point_index"), types))
    out = vjp.copy() if isinstance(vjp, rl.Module) else rl.Module()
    local_vjp = out.get_global_var("local_vjp", create=True)
    out[local_vjp] = vjp["main"] if isinstance(vjp, rl.Module) else vjp
    result = rl.Var("result")
    rows = []
    for component in range(2):
        seed = np.zeros((p, 2))
        seed[:, component] = 1.0
        g = rl.Var(f"g{component}")
        rows.append((g, rl.Call(rl.TupleGetItem(result, 1), [rl.const(seed)])))
    blocks = [rl.concatenate([g[0], g[1], rl.reshape(g[2], (p, 1))], axis=1) for g, _ in rows]
    values = rl.concatenate([rl.reshape(rl.stack(blocks, axis=1), (-1,)), w * rl.const(-2.0, "float64")])
    body = values
    for g, call in reversed(rows):
        body = rl.Let(g, call, body)
    body = rl.Let(result, rl.Call(local_vjp, [rl.take(cams, cam_index, axis=0),
                                              rl.take(x, point_index, axis=0), w, feats]), body)
    out["main"] = rl.Function([cams, x, w, feats, cam_index, point_index], body)
    return out


def structure(sizes, cam_index, point_index):
    """BASparseMat's row starts and column indices (they depend on the sizes and indices only)."""
    n, m, p = sizes
    per_row = N_CAM + 3 + 1
    rows = np.concatenate([np.arange(2 * p + 1) * per_row, 2 * p * per_row + 1 + np.arange(p)])
    block = np.concatenate([N_CAM * cam_index[:, None] + np.arange(N_CAM),
                            N_CAM * n + 3 * point_index[:, None] + np.arange(3),
                            (N_CAM * n + 3 * m + np.arange(p))[:, None]], axis=1)
    cols = np.concatenate([np.repeat(block, 2, axis=0).reshape(-1), N_CAM * n + 3 * m + np.arange(p)])
    return rows, cols


def dedup(a):
    return np.concatenate([a[:30], a[-1:]])


@multiple_runs(pre=prepare, post=lambda j: {"rows": dedup(j[0]).tolist(),
                                             "cols": dedup(j[1]).tolist(),
                                             "vals": dedup(np.asarray(j[2])).tolist()})
def jacobian(input):
    sizes, args = input
    values = compiled(("ba", "jacobian", sizes), lambda: values_program(sizes))(*args)
    rows, cols = structure(sizes, args[4], args[5])
    return rows, cols, values
