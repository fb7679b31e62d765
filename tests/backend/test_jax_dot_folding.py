"""The jax backend folds `matmul(transpose(a), b)` into one dot_general (backend/jax/dots.py):
the optimized HLO XLA runs has no separate transpose, and the product is unchanged."""
import re

import numpy as np
import pytest

import relayish as rl

jax = pytest.importorskip("jax")


def _compiled(func):
    return rl.compile(func, backend="jax").jax_function()


def _hlo(jf, *args):
    return jf.lower(*args).compile().as_text()


def _ops(hlo):
    """The opcodes of every instruction of every computation (fusions' bodies included):
    `%x = f32[8,32]{1,0} dot(%a, %b), ...` gives "dot"."""
    return [m.group(1) for m in re.finditer(r"= \S+ ([a-z][\w-]*)\(", hlo)]


CASES = {
    "x^T @ g": ((64, 8), (64, 32), lambda a, b: rl.matmul(rl.transpose(a), b),
                lambda a, b: a.T @ b),
    "g @ w^T": ((64, 32), (8, 32), lambda a, b: rl.matmul(a, rl.transpose(b, (1, 0))),
                lambda a, b: a @ b.T),
    "a^T @ b^T": ((16, 8), (4, 16), lambda a, b: rl.matmul(rl.transpose(a), rl.transpose(b)),
                  lambda a, b: a.T @ b.T),
    "batched": ((3, 16, 8), (3, 16, 5), lambda a, b: rl.matmul(rl.transpose(a, (0, 2, 1)), b),
                lambda a, b: np.swapaxes(a, 1, 2) @ b),
    "negative axes": ((3, 16, 8), (3, 16, 5),
                      lambda a, b: rl.matmul(rl.transpose(a, (0, -1, -2)), b),
                      lambda a, b: np.swapaxes(a, 1, 2) @ b),
}


@pytest.mark.parametrize("name", list(CASES))
def test_a_transposed_operand_is_read_by_the_dot(name):
    sa, sb, build, reference = CASES[name]
    a = rl.var("a", shape=sa, dtype="float32")
    b = rl.var("b", shape=sb, dtype="float32")
    jf = _compiled(rl.Function([a, b], build(a, b)))
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=sa).astype("float32"), rng.normal(size=sb).astype("float32")
    np.testing.assert_allclose(np.asarray(jf(x, y)), reference(x, y), rtol=1e-5, atol=1e-5)
    ops = _ops(_hlo(jf, x, y))
    assert "transpose" not in ops and "copy" not in ops, ops


def test_the_mlp_gradient_has_no_transpose():
    """The gradient of sum(tanh(x @ w) @ w2): matmul(transpose(h), g) with h = tanh(..) a fused
    intermediate, which XLA alone transposes and copies before the dot (checked below with
    the folding switched off)."""
    x = rl.var("x", shape=(32, 8), dtype="float32")
    w = rl.var("w", shape=(8, 16), dtype="float32")
    w2 = rl.var("w2", shape=(16, 1), dtype="float32")
    h = rl.tanh(rl.matmul(x, w))
    f = rl.Function([x, w, w2], rl.sum(rl.matmul(h, w2)))
    g = rl.grad(f, argnums=(0, 1, 2))
    rng = np.random.default_rng(1)
    xv, wv, w2v = (rng.normal(size=s).astype("float32") for s in ((32, 8), (8, 16), (16, 1)))
    jf = _compiled(g)
    dx, dw, dw2 = (np.asarray(v) for v in jf(xv, wv, w2v))
    hv = np.tanh(xv @ wv)
    t = (1 - hv ** 2) * w2v.T
    np.testing.assert_allclose(dx, t @ wv.T, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(dw, xv.T @ t, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(dw2, hv.sum(axis=0)[:, None], rtol=1e-4, atol=1e-5)
    ops = _ops(_hlo(jf, xv, wv, w2v))
    assert "transpose" not in ops and "copy" not in ops, ops


def test_without_the_folding_xla_transposes(monkeypatch):
    """What the test above guards against: the same program with the folding off."""
    from relayish.backend.jax import dots
    monkeypatch.setattr(dots.DotFolding, "matmul", lambda self, x, y: None)
    x = rl.var("x", shape=(32, 8), dtype="float32")
    w = rl.var("w", shape=(8, 16), dtype="float32")
    w2 = rl.var("w2", shape=(16, 1), dtype="float32")
    f = rl.Function([x, w, w2], rl.sum(rl.matmul(rl.tanh(rl.matmul(x, w)), w2)))
    jf = _compiled(rl.grad(f, argnums=(0, 1, 2)))
    args = [np.ones(s, "float32") for s in ((32, 8), (8, 16), (16, 1))]
    assert "transpose" in _ops(_hlo(jf, *args))


def test_other_transposes_are_left_to_matmul():
    """A transpose that moves a batch axis, a vector operand, broadcast batch axes, a
    transpose read elsewhere too: the same values as numpy."""
    rng = np.random.default_rng(2)
    a = rl.var("a", shape=(4, 3, 5), dtype="float32")
    b = rl.var("b", shape=(3, 5, 2), dtype="float32")
    v = rl.var("v", shape=(4,), dtype="float32")
    d = rl.var("d", shape=(1, 5, 3), dtype="float32")
    e = rl.var("e", shape=(4, 5, 2), dtype="float32")
    dt = rl.transpose(d, (0, 2, 1))
    body = rl.Tuple([rl.matmul(rl.transpose(a, (1, 0, 2)), b),     # (3, 4, 5) @ (3, 5, 2)
                     rl.matmul(v, rl.transpose(a, (1, 0, 2))),      # (4,) @ (3, 4, 5)
                     rl.matmul(dt, e),                              # (1, 3, 5) @ (4, 5, 2)
                     dt * 2.0])
    vals = [rng.normal(size=s).astype("float32")
            for s in ((4, 3, 5), (3, 5, 2), (4,), (1, 5, 3), (4, 5, 2))]
    av, bv, vv, dv, ev = vals
    r = [np.asarray(x) for x in _compiled(rl.Function([a, b, v, d, e], body))(*vals)]
    np.testing.assert_allclose(r[0], np.transpose(av, (1, 0, 2)) @ bv, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(r[1], vv @ np.transpose(av, (1, 0, 2)), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(r[2], np.swapaxes(dv, 1, 2) @ ev, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(r[3], np.swapaxes(dv, 1, 2) * 2.0, rtol=1e-6)
