"""Each eval's functions of benchmarks/gradbench against the same computation written in jax
(values and derivatives), on small inputs, through the functions' `wrapped` entry points (the
JSON input in, the JSON output out, as run.py answers an evaluate message)."""
import math
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "benchmarks",
                                "gradbench"))
RUNS = {"min_runs": 1, "min_seconds": 0}


def answer(module, function, input):
    import importlib
    if isinstance(input, dict):
        input = input | RUNS
    response = getattr(importlib.import_module(f"evals.{module}"), function).wrapped(input)
    assert response["success"] and len(response["timings"]) >= 1
    return response["output"]


def close(actual, expected, rtol=1e-10, atol=1e-12):
    np.testing.assert_allclose(np.asarray(actual, dtype=np.float64), np.asarray(expected),
                               rtol=rtol, atol=atol)


rng = np.random.default_rng(29)


@pytest.fixture(autouse=True)
def float64_jax():
    """jax's references in float64 for these tests only: a switch set at import would hold for
    the whole run, and tests/backend/test_jax.py checks that relayish never needs it."""
    old = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    yield
    jax.config.update("jax_enable_x64", old)


def test_hello():
    assert answer("hello", "square", 1.5) == 2.25 and answer("hello", "double", 1.5) == 3.0


def jax_lse(x):
    a = jnp.max(x)
    return a + jnp.log(jnp.sum(jnp.exp(x - a)))


def test_lse():
    x = rng.normal(size=7) * 30
    close(answer("lse", "primal", {"x": x.tolist()}), jax_lse(x))
    close(answer("lse", "gradient", {"x": x.tolist()}), jax.jit(jax.grad(jax_lse))(x))


def jax_llsq(x, n):
    t = -1.0 + jnp.arange(n) * 2.0 / (n - 1.0)
    powers = t[:, None] ** jnp.arange(x.size)[None, :]
    return jnp.sum((jnp.sign(t) - powers @ x) ** 2) / 2.0


def test_llsq():
    x, n = rng.random(5), 9          # n odd: one t is exactly 0, whose sign is 0
    close(answer("llsq", "primal", {"x": x.tolist(), "n": n}), jax_llsq(x, n))
    close(answer("llsq", "gradient", {"x": x.tolist(), "n": n}),
          jax.jit(jax.grad(jax_llsq), static_argnums=1)(x, n))


def jax_kmeans(centroids, points):
    d = jnp.sum((points[:, None, :] - centroids[None, :, :]) ** 2, axis=2)
    return jnp.sum(jnp.min(d, axis=1))


def test_kmeans():
    points = rng.random((12, 3))
    centroids = points[-4:]          # every cluster has a point, as the eval guarantees
    input = {"points": points.tolist(), "centroids": centroids.tolist()}
    close(answer("kmeans", "cost", input), jax_kmeans(centroids, points))
    g = jax.grad(jax_kmeans)
    direction = jax.jit(lambda c: jnp.divide(*jax.jvp(lambda c: g(c, points), (c,),
                                                       (jnp.ones_like(c),))))
    close(answer("kmeans", "dir", input), direction(centroids))


def jax_gmm(alpha, mu, q, l, x, gamma, m):
    (k, d), n = mu.shape, x.shape[0]
    Q = jnp.zeros((k, d, d))
    rows, cols = np.tril_indices(d, -1)
    order = np.lexsort((rows, cols))          # l fills the lower part column by column
    Q = Q.at[:, rows[order], cols[order]].set(l) + jax.vmap(jnp.diag)(jnp.exp(q))
    xc = x[:, None, :] - mu[None]
    beta = alpha + q.sum(1) - 0.5 * jnp.sum(jnp.einsum("kij,nkj->nki", Q, xc) ** 2, axis=2)
    lse = jax.scipy.special.logsumexp
    nw = d + m + 1
    prior = (k * (nw * d * jnp.log(gamma / jnp.sqrt(2.0))
                  - jax.scipy.special.multigammaln(0.5 * nw, d))
             - 0.5 * gamma ** 2 * jnp.sum(Q ** 2) + m * q.sum())
    return -n * d * 0.5 * math.log(2 * math.pi) - n * lse(alpha) + lse(beta, axis=1).sum() + prior


def test_gmm():
    d, k, n, m, gamma = 3, 4, 6, 2, 1.5
    ind = {"alpha": rng.normal(size=k), "mu": rng.random((k, d)), "q": rng.normal(size=(k, d)),
           "l": rng.normal(size=(k, d * (d - 1) // 2))}
    x = rng.normal(size=(n, d))
    input = {"d": d, "k": k, "n": n, "m": m, "gamma": gamma, "x": x.tolist()} | {
        name: v.tolist() for name, v in ind.items()}
    args = (*ind.values(), x, gamma, m)
    close(answer("gmm", "objective", input), jax.jit(jax_gmm)(*args))
    grads = jax.jit(jax.grad(jax_gmm, argnums=(0, 1, 2, 3)))(*args)
    out = answer("gmm", "jacobian", input)
    for name, g in zip(ind, grads):
        close(out[name], g)


def jax_ode(x, s):
    h = 2.0 / s

    def f(y):
        return x * jnp.concatenate([jnp.ones(1), y[:-1]])

    def step(y, _):
        k1 = f(y)
        k2 = f(y + h / 2 * k1)
        k3 = f(y + h / 2 * k2)
        k4 = f(y + h * k3)
        return y + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4), None
    return jax.lax.scan(step, jnp.zeros_like(x), None, length=s)[0]


def test_ode():
    x, s = rng.random(5), 3
    close(answer("ode", "primal", {"x": x.tolist(), "s": s}), jax_ode(x, s))
    close(answer("ode", "gradient", {"x": x.tolist(), "s": s}),
          jax.jit(jax.grad(lambda x: jax_ode(x, s)[-1]))(x))


def jax_lstm(main, extra, state, sequence):
    """ADBench's LSTM objective, with its + 2 inside the normalising logarithm."""
    b = sequence.shape[1]

    def cell(weight, bias, hidden, c, x):
        gates = jnp.concatenate([x, hidden, x, hidden]) * weight + bias
        f, i, o = (jax.nn.sigmoid(gates[j * b:(j + 1) * b]) for j in range(3))
        c = c * f + i * jnp.tanh(gates[3 * b:])
        return o * jnp.tanh(c), c

    def step(carry, t):
        s, x, total = carry
        x = x * extra[0]
        new = []
        for i in range(0, s.shape[0], 2):
            h, c = cell(main[i], main[i + 1], s[i], s[i + 1], x)
            new += [h, c]
            x = h
        y = x * extra[1] + extra[2]
        gold = sequence[t + 1]
        return (jnp.stack(new), gold, total + jnp.sum(gold * (y - jnp.log(jnp.sum(jnp.exp(y)) + 2)))), None
    (_, _, total), _ = jax.lax.scan(step, (state, sequence[0], 0.0),
                                    jnp.arange(sequence.shape[0] - 1))
    return -total / ((sequence.shape[0] - 1) * b)


@pytest.mark.slow     # two compiled loops, the gradient's with a backward pass: test_ode covers the shape
def test_lstm():
    layers, b, c = 2, 3, 5
    args = (rng.random((2 * layers, 4 * b)), rng.random((3, b)), rng.random((2 * layers, b)),
            rng.integers(0, 2, size=(c, b)).astype(np.float64))
    input = dict(zip(("main_params", "extra_params", "state", "sequence"),
                     (a.tolist() for a in args)))
    close(answer("lstm", "objective", input), jax.jit(jax_lstm)(*args))
    gm, ge = jax.jit(jax.grad(jax_lstm, argnums=(0, 1)))(*args)
    close(answer("lstm", "jacobian", input), np.concatenate([gm.ravel(), ge.ravel()]))


def test_det():
    ell = 4
    a = rng.random((ell, ell))
    input = {"A": a.ravel().tolist(), "ell": ell}
    close(answer("det", "primal", input), jnp.linalg.det(a))
    close(answer("det", "gradient", input), jax.jit(jax.grad(jnp.linalg.det))(a).ravel())


def jax_project(cam, x):
    rot, xc = cam[:3], x - cam[3:6]
    theta = jnp.sqrt(jnp.sum(rot ** 2))
    w = rot / theta
    rotated = (xc * jnp.cos(theta) + jnp.cross(w, xc) * jnp.sin(theta)
               + w * jnp.dot(w, xc) * (1 - jnp.cos(theta)))
    proj = rotated[:2] / rotated[2]
    rsq = jnp.sum(proj ** 2)
    return proj * (1 + cam[9] * rsq + cam[10] * rsq ** 2) * cam[6] + cam[7:9]


def test_ba():
    n, m, p = 3, 4, 7
    cam = np.concatenate([rng.normal(size=3) * 0.3, rng.normal(size=3), [300.0],
                          rng.normal(size=2), rng.normal(size=2) * 1e-3])
    x, w, feat = rng.normal(size=3) + [0, 0, 5], 0.8, rng.normal(size=2)
    input = {"n": n, "m": m, "p": p, "cam": cam.tolist(), "x": x.tolist(), "w": w,
             "feat": feat.tolist()}
    err = lambda c, x, w: w * (jax_project(c, x) - feat)
    out = answer("ba", "objective", input)
    close(out["reproj_error"]["elements"], err(cam, x, w))
    assert out["reproj_error"]["repeated"] == p and out["w_err"]["repeated"] == p
    close(out["w_err"]["element"], 1 - w * w)
    jac = answer("ba", "jacobian", input)
    blocks = jax.jit(jax.jacfwd(lambda v: err(v[:11], v[11:14], v[14])))(
        np.concatenate([cam, x, [w]]))
    close(jac["vals"][:30], blocks.ravel())          # the first observation's two rows
    close(jac["vals"][-1], -2 * w)
    # the columns of observation 0 (camera 0, point 0, weight 0), then the last weight's
    assert jac["cols"] == (list(range(11)) + [33, 34, 35, 33 + 12]) * 2 + [33 + 12 + p - 1]
    rows = [15 * i for i in range(2 * p + 1)] + [30 * p + 1 + i for i in range(p)]
    assert jac["rows"] == rows[:30] + rows[-1:]     # CSR row starts, deduplicated


def ht_input(complicated):
    """A small hand: ADBench's 22 bones (the pose layout needs them), each one's parent an
    earlier bone, 5 vertices, 4 points (or triangles for us)."""
    bones, v, n = 22, 5, 4

    def transform():
        q, _ = np.linalg.qr(rng.normal(size=(3, 3)))
        t = np.eye(4)
        t[:3, :3], t[:3, 3] = q, rng.normal(size=3)
        return t
    weights = rng.random((v, bones))
    parents = [-1] + [int(rng.integers(0, i)) for i in range(1, bones)]
    model = {"bone_count": bones, "bone_names": [f"b{i}" for i in range(bones)], "parents": parents,
             "base_relatives": [transform().tolist() for _ in range(bones)],
             "inverse_base_absolutes": [transform().tolist() for _ in range(bones)],
             "base_positions": np.concatenate([rng.normal(size=(v, 3)), np.ones((v, 1))],
                                              axis=1).tolist(),
             "weights": (weights / weights.sum(1, keepdims=True)).tolist(),
             "triangles": rng.integers(0, v, size=(3, 3)).tolist(), "is_mirrored": False}
    data = {"model": model, "correspondences": rng.integers(0, 3 if complicated else v,
                                                            size=n).tolist(),
            "points": rng.normal(size=(n, 3)).tolist()}
    theta = rng.normal(size=26) * 0.3
    us = rng.random((n, 2)) * 0.5 if complicated else np.zeros((0, 2))
    return {"theta": theta.tolist(), "data": data, "us": us.tolist()}


def jax_ht(theta, us, input):
    """ADBench's hand objective (after its PyTorch form), for a pose of 3 + bones rows."""
    model, data = input["data"]["model"], input["data"]
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir, os.pardir,
                                    "benchmarks", "gradbench"))
    from evals.ht import pose_index
    bones = model["bone_count"]
    pose = jnp.concatenate([jnp.array([0.0, 1.0]), theta])[pose_index(bones)].reshape(-1, 3)

    def euler(p):
        tx, tz, ty = p
        rx = jnp.array([[1, 0, 0], [0, jnp.cos(tx), -jnp.sin(tx)], [0, jnp.sin(tx), jnp.cos(tx)]])
        ry = jnp.array([[jnp.cos(ty), 0, -jnp.sin(ty)], [0, 1, 0], [jnp.sin(ty), 0, jnp.cos(ty)]])
        rz = jnp.array([[jnp.cos(tz), -jnp.sin(tz), 0], [jnp.sin(tz), jnp.cos(tz), 0], [0, 0, 1]])
        return rz @ ry @ rx
    base = np.asarray(model["base_relatives"])
    absolutes = []
    for i, parent in enumerate(model["parents"]):
        rel = base[i] @ jnp.eye(4).at[:3, :3].set(euler(pose[3 + i]))
        absolutes.append(rel if parent < 0 else absolutes[parent] @ rel)
    transforms = jnp.stack(absolutes) @ np.asarray(model["inverse_base_absolutes"])
    positions = jnp.einsum("bij,vj->vbi", transforms, np.asarray(model["base_positions"]))
    skinned = jnp.sum(positions * np.asarray(model["weights"])[:, :, None], axis=1)[:, :3]
    aa = pose[0]
    angle = jnp.sqrt(jnp.sum(aa ** 2))
    x, y, z = aa / angle
    s, c = jnp.sin(angle), jnp.cos(angle)
    r = jnp.array([[x * x + (1 - x * x) * c, x * y * (1 - c) - z * s, x * z * (1 - c) + y * s],
                   [x * y * (1 - c) + z * s, y * y + (1 - y * y) * c, y * z * (1 - c) - x * s],
                   [x * z * (1 - c) - y * s, z * y * (1 - c) + x * s, z * z + (1 - z * z) * c]])
    vertices = skinned @ (r * pose[1]).T + pose[2]
    points, corr = np.asarray(data["points"]), np.asarray(data["correspondences"])
    if us.size == 0:
        return (points - vertices[corr]).ravel()
    tri = np.asarray(model["triangles"])[corr]
    hand = (us[:, :1] * vertices[tri[:, 0]] + us[:, 1:] * vertices[tri[:, 1]]
            + (1 - us[:, :1] - us[:, 1:]) * vertices[tri[:, 2]])
    return (points - hand).ravel()


@pytest.mark.slow     # 28 forward-mode tangents: the compilation takes tens of seconds
@pytest.mark.parametrize("complicated", [False, True])
def test_ht(complicated):
    input = ht_input(complicated)
    theta, us = np.asarray(input["theta"]), np.asarray(input["us"])
    close(answer("ht", "objective", input), jax_ht(theta, us, input))
    j_theta = jax.jacfwd(lambda t: jax_ht(t, us, input))(theta)
    expected = j_theta
    if complicated:
        j_us = jax.jacfwd(lambda u: jax_ht(theta, u, input))(us)       # (3n, n, 2)
        n = us.shape[0]
        blocks = np.stack([j_us[3 * i + k, i] for i in range(n) for k in range(3)])
        expected = np.concatenate([blocks, j_theta], axis=1)
    close(answer("ht", "jacobian", input), expected)


@pytest.mark.slow     # the reverse-mode variants compile a recorded loop for 1-2 minutes
@pytest.mark.parametrize("function", ["ff", "fr", "rf", "rr"])
def test_saddle_all_modes(function):
    close(answer("saddle", function, {"start": [1.0, 1.0]}), [8.246324826140356e-06] * 4,
          rtol=1e-8)


def test_saddle_forward():
    # GradBench's expected answer (its evals/saddle/run.py)
    close(answer("saddle", "fr", {"start": [1.0, 1.0]}), [8.246324826140356e-06] * 4,
          rtol=1e-8)


@pytest.mark.slow
@pytest.mark.parametrize("function", ["ff", "fr", "rf", "rr"])
def test_particle_all_modes(function):
    close(answer("particle", function, {"w": 0.0}), 0.2071918746486116, rtol=1e-8)


def test_particle_forward():
    # GradBench's expected answer (its evals/particle/run.py)
    close(answer("particle", "fr", {"w": 0.0}), 0.2071918746486116, rtol=1e-8)
