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
