"""Composing programs (issue 29): argnums on every AD entry point, and an AD result with
globals (a Module) called from another program with rl.Call, its globals merged (renamed where
they clash), so nested AD is one line. References are jax's (jitted)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import relayish as rl
from relayish.ad.api import hessian_forward
from relayish.ir.link import link_program

RNG = np.random.default_rng(29)
X, Y, N = RNG.uniform(-1, 1, 3), RNG.uniform(-1, 1, 2), np.int32(3)


def _vars():
    return (rl.var("x", shape=(3,), dtype="float64"), rl.var("y", shape=(2,), dtype="float64"),
            rl.var("n", shape=(), dtype="int32"))


def _vector_fn():
    """fn(x, y, n) -> (5,): one float vector output of two float parameters and an int one."""
    x, y, n = _vars()
    body = rl.sin(x) * rl.sum(y * y) * rl.cast(n, "float64")
    return rl.Function([x, y, n], rl.concatenate([body, y * rl.sum(x * x)]))


def _vector_jax(x, y):
    return jnp.concatenate([jnp.sin(x) * jnp.sum(y * y) * 3.0, y * jnp.sum(x * x)])


def _scalar_fn():
    x, y, n = _vars()
    return rl.Function([x, y, n], rl.sum(rl.sum(rl.sin(x) * x) * y * y * rl.cast(n, "float64")))


def _scalar_jax(x, y):
    return jnp.sum(jnp.sum(jnp.sin(x) * x) * y * y * 3.0)


def _close(got, want):
    if isinstance(want, (tuple, list)):
        assert isinstance(got, tuple) and len(got) == len(want)
        for g, w in zip(got, want):
            _close(g, w)
        return
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-10, atol=1e-12)


def test_jacobian_argnums_int_and_tuple():
    f = _vector_fn()
    with jax.enable_x64(True):
        want = jax.jit(jax.jacfwd(_vector_jax, (0, 1)))(X, Y)
    _close(rl.evaluate(rl.jacobian(f, argnums=(0, 1)), X, Y, N), tuple(want))
    _close(rl.evaluate(rl.jacobian(f, argnums=1), X, Y, N), want[1])
    _close(rl.evaluate(rl.jacobian(f, argnums=(1, -3)), X, Y, N), (want[1], want[0]))
    _close(rl.compile(rl.jacobian(f, argnums=(0, 1)), backend="jax")(X, Y, N), tuple(want))
    with pytest.raises(rl.GradientError, match="float tensor parameters at argnums; %n"):
        rl.jacobian(f, argnums=2)
    with pytest.raises(rl.GradientError, match="out of range"):
        rl.jacobian(f, argnums=3)


def test_jvp_gradient_and_vjp_argnums():
    f, s = _vector_fn(), _scalar_fn()
    v, ct = RNG.uniform(-1, 1, 2), RNG.uniform(-1, 1, 5)
    with jax.enable_x64(True):
        jv = jax.jvp(lambda y: _vector_jax(X, y), (Y,), (v,))
        _, back = jax.vjp(_vector_jax, X, Y)
        want_ct = back(ct)
        gy, gx = jax.grad(_scalar_jax, 1)(X, Y), jax.grad(_scalar_jax, 0)(X, Y)
    _close(rl.evaluate(rl.jvp(f, argnums=1), X, Y, N, v), jv)
    value, grads = rl.evaluate(rl.gradient(s, argnums=1), X, Y, N)
    _close(grads, gy)
    _, grads = rl.evaluate(rl.gradient(s, argnums=(1, 0)), X, Y, N)
    _close(grads, (gy, gx))
    _, bp = rl.evaluate(rl.vjp(f, argnums=(1, 0)), X, Y, N)
    _close(bp(ct), (want_ct[1], want_ct[0]))
    _, bp = rl.evaluate(rl.vjp(f, argnums=0), X, Y, N)
    _close(bp(ct), want_ct[0])
    with pytest.raises(rl.GradientError, match="argnums= with checkpoint="):
        rl.gradient(s, argnums=0, checkpoint=2)


def test_hessian_hvp_and_derivative_argnums():
    s = _scalar_fn()
    v = RNG.uniform(-1, 1, 2)
    with jax.enable_x64(True):
        h1 = jax.jit(jax.hessian(_scalar_jax, 1))(X, Y)
        h0 = jax.jit(jax.hessian(_scalar_jax, 0))(X, Y)
    _close(rl.evaluate(rl.hessian(s, argnums=1), X, Y, N), h1)
    _close(rl.evaluate(rl.hessian(s, argnums=0), X, Y, N), h0)
    _close(rl.evaluate(hessian_forward(s, argnums=1), X, Y, N), h1)
    _close(rl.evaluate(rl.hvp(s, argnums=1), X, Y, N, v), np.asarray(h1) @ v)
    _close(rl.evaluate(rl.derivative(s, order=2, argnums=1), X, Y, N), h1)
    with pytest.raises(rl.GradientError, match="one parameter to differentiate"):
        rl.hessian(s, argnums=(0, 1))


RECURSIVE = """
def @pow(%x: Tensor[(3), float64], %n: int32) -> Tensor[(3), float64] {
  if (%n == 0) { ones_like(%x) } else { %x * @pow(%x, %n - 1) }
}
def @main(%x: Tensor[(3), float64]) -> float64 { sum(@pow(%x, 3) * sin(%x)) }
"""


def test_grad_of_a_function_calling_the_gradient_module_of_a_recursive_module():
    g = rl.grad(rl.parse(RECURSIVE))
    assert isinstance(g, rl.Module)
    x = rl.var("x", shape=(3,), dtype="float64")
    h = rl.Function([x], rl.sum(rl.Call(g, [x]) * x))       # nested AD: one line

    def jh(u):
        return jnp.sum(jax.grad(lambda w: jnp.sum(w ** 3 * jnp.sin(w)))(u) * u)
    with jax.enable_x64(True):
        want, dwant = float(jax.jit(jh)(X)), jax.jit(jax.grad(jh))(X)
    np.testing.assert_allclose(rl.evaluate(h, X), want, rtol=1e-12)
    dh = rl.grad(h)
    _close(rl.evaluate(dh, X), dwant)
    _close(rl.compile(dh, backend="jax")(X), dwant)
    # forward mode of it too, and the gradient module called twice is merged once
    two = rl.Function([x], rl.sum(rl.Call(g, [x]) * rl.Call(g, [x * 2.0])))
    names = [gv.name_hint for gv in link_program(two).functions]
    assert len(names) == len(set(names)) == 1 + len(g.functions)
    _, tangent = rl.evaluate(rl.jvp(h), X, np.ones(3))
    np.testing.assert_allclose(tangent, np.sum(np.asarray(dwant)), rtol=1e-10)


CALLEE_A = """
def @helper(%x: Tensor[(2), float64]) -> Tensor[(2), float64] { %x * %x }
def @main(%x: Tensor[(2), float64]) -> float64 { sum(@helper(%x)) }
"""
CALLEE_B = """
def @helper(%x: Tensor[(2), float64]) -> Tensor[(2), float64] { sin(%x) }
def @main(%x: Tensor[(2), float64]) -> float64 { sum(@helper(%x) * 3f64) }
"""
CALLER = """
def @helper(%x: Tensor[(2), float64]) -> Tensor[(2), float64] { exp(%x) }
"""


def test_clashing_global_names_are_renamed():
    a, b, caller = rl.parse(CALLEE_A), rl.parse(CALLEE_B), rl.parse(CALLER)
    x = rl.var("x", shape=(2,), dtype="float64")
    caller["main"] = rl.Function([x], rl.Call(a, [x]) + rl.Call(b, [x])
                                 + rl.take(rl.Call(rl.GlobalVar("helper"), [x]), 0))
    v = np.array([0.5, -1.2])
    np.testing.assert_allclose(rl.evaluate(caller, v),
                               np.sum(v * v) + 3 * np.sum(np.sin(v)) + np.exp(v[0]), rtol=1e-14)
    np.testing.assert_allclose(rl.evaluate(rl.grad(caller), v),
                               2 * v + 3 * np.cos(v) + [np.exp(v[0]), 0.0], rtol=1e-14)
    merged = link_program(caller)
    assert sorted(gv.name_hint for gv in merged.functions) == [
        "helper", "helper_1", "helper_2", "main", "main_1", "main_2"]
    rl.assert_structural_equal(rl.parse(rl.astext(merged)), merged)
    assert merged["helper"] is caller["helper"]          # the caller's own keep their names


def test_vmap_minimize_and_a_module_of_the_caller_link_too():
    x = rl.var("x", shape=(2,), dtype="float64")
    h = rl.Function([x], rl.Call(rl.parse(CALLEE_A), [x]) * rl.const(2.0, "float64"))
    np.testing.assert_allclose(rl.evaluate(rl.vmap(h), np.ones((3, 2))), [4.0, 4.0, 4.0])
    np.testing.assert_allclose(rl.evaluate(rl.Module.from_expr(h), np.ones(2)), 4.0)
    res = rl.optim.minimize(h, np.ones(2), backend="interpreter")
    assert res.converged and np.allclose(res.x, 0.0)


def test_a_called_module_outside_the_entry_points_is_a_clear_error():
    x = rl.var("x", shape=(2,), dtype="float64")
    f = rl.Function([x], rl.Call(rl.parse(CALLEE_A), [x]))
    with pytest.raises(rl.TypeCheckError, match="is a called Module"):
        rl.infer_type(f)
    with pytest.raises(rl.RelayishError, match="needs a @main"):
        rl.Call(rl.parse(CALLER), [x])
