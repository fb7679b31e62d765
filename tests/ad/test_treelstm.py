"""The TreeLSTM of examples/treelstm.py (small dimensions, float64): its relayish gradient
w.r.t. all parameters matches jax.grad of the same model, on trees of two shapes, through ONE
gradient program; so the model of benchmarks/treelstm.py cannot rot."""
import numpy as np
import pytest

import relayish as rl
from examples.treelstm import (PARAMS, init_params, reference_loss, to_value, treelstm_module)

jax = pytest.importorskip("jax")
jnp = jax.numpy

DIMS = dict(vocab=7, embed=4, hidden=3, classes=2, dtype="float64")
TREES = [((3, (5, 0)), 6), ((((1, 1), 2), (4, (6, 3))), 0)]


@pytest.fixture(scope="module")
def model():
    mod = treelstm_module(**DIMS)
    params = init_params(np.random.default_rng(3), **DIMS)
    return mod, params, rl.value_and_grad(mod, argnums=tuple(range(len(PARAMS))))


@pytest.mark.parametrize("k", range(len(TREES)))
def test_gradient_matches_jax(model, k):
    mod, params, vg = model
    tree, label = TREES[k][0], TREES[k][1] % DIMS["classes"]
    value, grads = rl.evaluate(vg, *params, to_value(mod, tree), np.int32(label))
    with jax.enable_x64(True):
        want_v, want_g = jax.value_and_grad(lambda ps: reference_loss(jnp, ps, tree, label))(
            tuple(jnp.asarray(p) for p in params))
        want_v, want_g = float(want_v), [np.asarray(g) for g in want_g]
    np.testing.assert_allclose(value, want_v, rtol=1e-10)
    for name, got, want in zip(PARAMS, grads, want_g):
        assert got.shape == want.shape, name
        np.testing.assert_allclose(got, want, rtol=1e-8, atol=1e-12, err_msg=name)


def _global_text(mod, name):
    return rl.astext(mod[name])


def test_frozen_embedding_gets_no_gradient_through_the_recursion(model):
    """argnums leaving out E (a frozen embedding): E is a constant through the calls of the
    recursive @cell too, so the lifted cell never runs take_backward (a dense |V| x D array per
    leaf), and the other gradients are unchanged."""
    mod, params, vg = model
    frozen = rl.grad(mod, argnums=tuple(range(1, len(PARAMS))))
    names = [g.name_hint for g in frozen.functions]
    lifted = [n for n in names if n.startswith("cell_ad")]
    assert lifted == ["cell_ad_const0"], names
    assert "take_backward" not in _global_text(frozen, "cell_ad_const0")
    assert "take_backward" in _global_text(rl.grad(mod, argnums=(0, 1, 2, 3, 4)), "cell_ad")
    tree, label = to_value(mod, TREES[1][0]), np.int32(1)
    got = rl.evaluate(frozen, *params, tree, label)
    _, want = rl.evaluate(vg, *params, tree, label)
    for name, a, b in zip(PARAMS[1:], got, want[1:]):
        np.testing.assert_allclose(a, b, rtol=1e-12, err_msg=name)


def test_constant_arguments_of_globals_are_specialised_per_call_site():
    """The same global called with a constant and with an active first argument gets two lifted
    copies; the gradient still matches finite differences."""
    mod = rl.parse("""
    def @f(%x: Tensor[(3), float64], %w: float64) -> float64 {
      sum(take(%x, 1, axis=0) * %w * %x)
    }
    def @main(%x: Tensor[(3), float64], %w: float64) -> float64 {
      @f(%x, %w) + @f(%x * 2f64, %w * %w) + @f(exp(%w) * ones(shape=[3], dtype="float64"), %w)
    }""")
    gw = rl.grad(mod, argnums=1)
    names = sorted(g.name_hint for g in gw.functions if g.name_hint.startswith("f_"))
    assert names == ["f_ad", "f_ad_const0"]
    assert "take_backward" not in _global_text(gw, "f_ad_const0")
    x, w, eps = np.array([0.3, -1.2, 0.7]), 0.9, 1e-6
    fd = (rl.evaluate(mod, x, w + eps) - rl.evaluate(mod, x, w - eps)) / (2 * eps)
    np.testing.assert_allclose(rl.evaluate(gw, x, w), fd, rtol=1e-7)
    gx = rl.evaluate(rl.grad(mod, argnums=0), x, w)
    fdx = [(rl.evaluate(mod, x + eps * e, w) - rl.evaluate(mod, x - eps * e, w)) / (2 * eps)
           for e in np.eye(3)]
    np.testing.assert_allclose(gx, fdx, rtol=1e-7)
