"""Gradients of relayish programs against jax.grad of the same functions written in jax (float64),
and against finite differences: closures, higher-order functions, map/fold over lists,
recursion over trees, data-dependent if inside recursion, refs updated in recursive loops."""
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import relayish as rl
from adcheck import assert_values_close, check_fd

EXAMPLES = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "examples")
sys.path.insert(0, os.path.abspath(EXAMPLES))
from tree_network import random_tree, to_value, tree_module  # noqa: E402


@pytest.fixture(autouse=True)
def float64_jax():
    """jax in float64 for these tests only (other tests check that relayish never needs the
    global switch)."""
    old = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    yield
    jax.config.update("jax_enable_x64", old)


F = "float64"
rng = np.random.default_rng(2024)
V3 = rl.TensorType((3,), F)
S = rl.TensorType((), F)


def c(v):
    return rl.const(v, F)


def jax_grads(fn, args):
    # jitted: one compilation of the reference, not one per jax primitive run eagerly
    grad = jax.jit(jax.grad(fn, argnums=tuple(range(len(args)))))
    return grad(*[jnp.asarray(a) for a in args])


def rl_grads(prog, args):
    value, grads = rl.evaluate(rl.gradient(prog), *args)
    return grads


def test_closure_capturing_parameter():
    x, y, z = rl.var("x", type=V3), rl.var("y", type=V3), rl.var("z", type=V3)
    k = rl.Var("k")
    f = rl.Function([x, y], rl.Let(k, rl.Function([z], rl.sin(z * x)),
                                   rl.sum(k(y) * k(x))))

    def jf(x, y):
        k = lambda z: jnp.sin(z * x)  # noqa: E731
        return jnp.sum(k(y) * k(x))
    args = [rng.normal(size=3), rng.normal(size=3)]
    assert_values_close(rl_grads(f, args), jax_grads(jf, args))
    check_fd(f, args)


def test_higher_order_compose():
    x, z = rl.var("x", type=V3), rl.var("z", type=V3)
    ft = rl.FuncType([V3], V3)
    f1, g1, w = rl.var("f", type=ft), rl.var("g", type=ft), rl.var("w", type=V3)
    compose = rl.Function([f1, g1], rl.Function([w], f1(g1(w))))
    scale = rl.Function([z], rl.tanh(z * x))          # captures x
    h = rl.Var("h")
    f = rl.Function([x], rl.Let(h, compose(scale, rl.Function([z], rl.sin(z))),
                                rl.sum(h(h(x)) * x)))

    def jf(x):
        compose = lambda f, g: (lambda w: f(g(w)))  # noqa: E731
        h = compose(lambda z: jnp.tanh(z * x), jnp.sin)
        return jnp.sum(h(h(x)) * x)
    args = [rng.normal(size=3)]
    assert_values_close(rl_grads(f, args), jax_grads(jf, args))
    check_fd(f, args)


def test_map_and_fold_over_list_input():
    mod = rl.Module()
    p = rl.Prelude(mod)
    lt = rl.TypeCall(p.List, [V3])
    w, l, v, acc = rl.var("w", type=V3), rl.var("l", type=lt), rl.var("v", type=V3), rl.var("acc", type=S)
    sq = rl.Function([v], v * v * w)
    step = rl.Function([acc, v], acc * c(0.9) + rl.sum(rl.tanh(v * w)))
    mod["main"] = rl.Function([w, l], p.foldl(step, c(0.0), p.map(sq, l)))

    def jf(w, xs):
        acc = 0.0
        for v in xs:
            acc = acc * 0.9 + jnp.sum(jnp.tanh(v * v * w * w))
        return acc
    wv, xs = rng.normal(size=3), [rng.normal(size=3) for _ in range(4)]
    gw, gl = rl_grads(mod, [wv, rl.list_value(mod, xs)])
    jw, jxs = jax.jit(jax.grad(jf, argnums=(0, 1)))(jnp.asarray(wv), [jnp.asarray(x) for x in xs])
    np.testing.assert_allclose(gw, jw, rtol=1e-10)
    for a, b in zip(rl.from_list_value(gl), jxs, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-10)
    check_fd(mod, [wv, rl.list_value(mod, xs)])


def jax_net(W, b, t):
    if isinstance(t, tuple):
        return jnp.tanh(W @ jnp.concatenate([jax_net(W, b, t[0]), jax_net(W, b, t[1])]) + b)
    return t


def leaves_of(value):
    if value.constructor.name_hint == "Leaf":
        return [value.fields[0]]
    return leaves_of(value.fields[0]) + leaves_of(value.fields[1])


def test_recursion_over_trees():
    mod, p = tree_module(4)
    W, b = rng.normal(size=(4, 8)) * 0.5, rng.normal(size=4)
    tp = random_tree(rng, 5, 4)
    tv = to_value(p, tp)
    gW, gb, gt = rl_grads(mod, [W, b, tv])

    def jf(W, b, t):
        h = jax_net(W, b, t)
        return jnp.sum(h * h)
    jW, jb, jt = jax.jit(jax.grad(jf, argnums=(0, 1, 2)))(jnp.asarray(W), jnp.asarray(b), tp)
    np.testing.assert_allclose(gW, jW, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(gb, jb, rtol=1e-10, atol=1e-12)
    for a, e in zip(leaves_of(gt), jax.tree_util.tree_leaves(jt), strict=True):
        np.testing.assert_allclose(a, e, rtol=1e-10, atol=1e-12)
    check_fd(mod, [W, b, tv])


def test_data_dependent_if_inside_recursion():
    """@walk(x, n) = if n == 0 { x } else if sum(x) > 0 { walk(sin(x) * 1.1, n - 1) }
    else { walk(x * x - 0.5, n - 1) }: the branch taken depends on the value."""
    mod = rl.Module()
    walk = rl.GlobalVar("walk")
    x, n = rl.var("x", type=V3), rl.var("n", dtype="int32")
    one = rl.const(1)
    mod[walk] = rl.Function([x, n], rl.If(
        rl.equal(n, rl.const(0)), x,
        rl.If(rl.sum(x) > c(0.0), walk(rl.sin(x) * c(1.1), n - one),
              walk(x * x - c(0.5), n - one))), V3)
    x2 = rl.var("x", type=V3)
    mod["main"] = rl.Function([x2], rl.sum(walk(x2, rl.const(6)) * x2))

    def path(x, n):
        """The branches the recursion takes at x (decided on concrete values)."""
        taken = []
        for _ in range(n):
            taken.append(np.sum(x) > 0)
            x = np.sin(x) * 1.1 if taken[-1] else x * x - 0.5
        return taken

    def jwalk(x, taken):       # the same computation along that path, for jax.grad
        for positive in taken:
            x = jnp.sin(x) * 1.1 if positive else x * x - 0.5
        return x

    for seed in range(3):
        xv = np.random.default_rng(seed).normal(size=3)
        taken = path(xv, 6)
        (gx,) = rl_grads(mod, [xv])
        (jx,) = jax_grads(lambda x: jnp.sum(jwalk(x, taken) * x), [xv])
        np.testing.assert_allclose(gx, jx, rtol=1e-10, atol=1e-12)
        check_fd(mod, [xv])


def test_refs_updated_in_recursive_loop():
    """@loop(r, x, n): r := !r * sin(x) + x, n times (recursion, not a Python loop)."""
    mod = rl.Module()
    loop = rl.GlobalVar("loop")
    r, x, n = rl.var("r", type=rl.RefType(V3)), rl.var("x", type=V3), rl.var("n", dtype="int32")
    mod[loop] = rl.Function([r, x, n], rl.If(
        n > rl.const(0),
        rl.Let(rl.Var("u"), rl.RefWrite(r, rl.RefRead(r) * rl.sin(x) + x),
               loop(r, x, n - rl.const(1))),
        rl.Tuple([])), rl.TupleType([]))
    x2, y2, cell = rl.var("x", type=V3), rl.var("y", type=V3), rl.Var("cell")
    mod["main"] = rl.Function([x2, y2], rl.Let(cell, rl.RefCreate(y2), rl.Let(
        rl.Var("u"), loop(cell, x2, rl.const(4)), rl.sum(rl.RefRead(cell) * rl.RefRead(cell)))))

    def jf(x, y):
        for _ in range(4):
            y = y * jnp.sin(x) + x
        return jnp.sum(y * y)
    args = [rng.normal(size=3), rng.normal(size=3)]
    assert_values_close(rl_grads(mod, args), jax_grads(jf, args))
    check_fd(mod, args)


def test_hessian_against_jax():
    x = rl.var("x", type=V3)
    f = rl.Function([x], rl.sum(rl.sin(x) * rl.exp(x * c(0.3))) * rl.sum(x * x))

    def jf(x):
        return jnp.sum(jnp.sin(x) * jnp.exp(x * 0.3)) * jnp.sum(x * x)
    xv = rng.normal(size=3)
    expected = jax.jit(jax.hessian(jf))(jnp.asarray(xv))
    np.testing.assert_allclose(rl.evaluate(rl.hessian(f), xv), expected, rtol=1e-10, atol=1e-12)
