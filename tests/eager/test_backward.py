"""PyTorch-style `loss.backward()` with `.grad` on leaves, and in-place parameter updates
under re.no_grad(): gradients against jax, accumulation and reset, a training loop that
hits the cache and keeps a flat graph, gradients of gradients, and the user's mistakes."""
import gc

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import relayish as rl
from relayish import eager as re
from relayish.eager.graph import Node


pytestmark = pytest.mark.usefixtures("fresh_x64")   # tests/eager/conftest.py


def _data():
    rng = np.random.default_rng(3)
    return (rng.normal(size=(6, 3)), rng.normal(size=(6, 1)), rng.normal(size=(3, 4)),
            rng.normal(size=4), rng.normal(size=(4, 1)))


def _jax_loss(w1, b1, w2, x, y):
    return ((jnp.tanh(x @ w1 + b1) @ w2 - y) ** 2).mean()


def _loss(params, x, y):
    w1, b1, w2 = params
    return ((re.tanh(x @ w1 + b1) @ w2 - y) ** 2.0).mean()


def test_backward_fills_grad_of_the_leaves_as_jax():
    x, y, w1, b1, w2 = _data()
    params = [re.tensor(p, requires_grad=True) for p in (w1, b1, w2)]
    constant = re.tensor(x)                        # no requires_grad: no .grad
    _loss(params, constant, re.tensor(y)).backward()
    want = jax.grad(_jax_loss, argnums=(0, 1, 2))(w1, b1, w2, x, y)
    for p, w in zip(params, want):
        assert isinstance(p.grad, re.Tensor) and p.grad.shape == p.shape
        np.testing.assert_allclose(np.asarray(p.grad), np.asarray(w), rtol=1e-10, atol=1e-12)
    assert constant.grad is None
    assert all(p.is_leaf for p in params)


def test_backward_accumulates_until_grad_is_reset():
    w = re.tensor(np.array([0.5, -1.0, 2.0]), requires_grad=True)
    (w * w).sum().backward()
    (w * w * w).sum().backward()                  # added to what is there, as PyTorch does
    np.testing.assert_allclose(np.asarray(w.grad), 2 * w.numpy() + 3 * w.numpy() ** 2)
    w.grad = None
    re.sin(w).sum().backward()
    np.testing.assert_allclose(np.asarray(w.grad), np.cos(w.numpy()))


def test_gradient_weights_a_non_scalar_and_create_graph_differentiates_again():
    x0 = np.array([0.3, -0.7, 1.1])
    v = np.array([1.0, 2.0, -1.0])
    x = re.tensor(x0, requires_grad=True)
    re.tanh(x).backward(gradient=re.tensor(v))
    np.testing.assert_allclose(np.asarray(x.grad), (1 - np.tanh(x0) ** 2) * v)
    # a Hessian-vector product: backward with create_graph=True, then backward of <grad, v>
    x = re.tensor(x0, requires_grad=True)
    (re.tanh(x) * x * x).sum().backward(create_graph=True)
    g = x.grad
    x.grad = None
    (g * v).sum().backward()

    def f(z):
        return (jnp.tanh(z) * z * z).sum()
    want = jax.jvp(jax.grad(f), (x0,), (v,))[1]
    np.testing.assert_allclose(np.asarray(x.grad), np.asarray(want), rtol=1e-10)


def _nodes_alive():
    gc.collect()
    return sum(1 for o in gc.get_objects() if isinstance(o, Node))


def test_a_pytorch_style_training_loop_hits_the_cache_and_stays_flat():
    rng = np.random.default_rng(0)
    x = re.tensor(rng.normal(size=(8, 3)))
    y = re.tensor(rng.normal(size=(8, 1)))
    w = re.tensor(np.zeros((3, 1)), requires_grad=True)
    b = re.tensor(np.zeros(1), requires_grad=True)
    re.clear_cache()
    counts = []
    for step in range(1, 2001):
        loss = ((x @ w + b - y) ** 2.0).mean()
        loss.backward()
        with re.no_grad():
            w -= 0.1 * w.grad
            b -= 0.1 * b.grad
        w.grad = None
        b.grad = None
        float(loss)
        if step in (100, 2000):
            counts.append((re.stats()["pending"], _nodes_alive()))
    assert counts[0] == counts[1] and counts[1][0] == 0
    s = re.stats()
    assert s["misses"] == 1 and s["compiles"] == 1 and s["hit_rate"] > 0.999
    assert w.is_leaf and w.requires_grad and w.node.args is None
    want = np.linalg.lstsq(np.c_[np.asarray(x), np.ones(8)], np.asarray(y), rcond=None)[0]
    np.testing.assert_allclose(np.asarray(w).ravel(), want[:3].ravel(), atol=1e-6)


def test_in_place_operators_point_the_handle_at_the_result():
    a = re.tensor(np.array([1.0, 2.0]))
    alias = a
    a += 1.0
    a *= re.tensor(np.array([2.0, 3.0]))
    a /= 2.0
    a -= 0.5
    assert alias is a
    np.testing.assert_allclose(np.asarray(alias), [1.5, 4.0])


def test_backward_mistakes_are_relayish_errors():
    w = re.tensor(np.ones(3), requires_grad=True)
    with pytest.raises(rl.GradientError, match=r"shape \(3,\)(?s:.*)test_backward.py:\d+"):
        (w * 2.0).backward()
    with pytest.raises(rl.GradientError, match="depends on no tensor that requires"):
        re.tensor(np.ones(3)).sum().backward()
    with pytest.raises(rl.RelayishError, match=r"in-place __isub__ on a leaf(?s:.*)no_grad"):
        w -= 1.0
    with pytest.raises(rl.RelayishError, match="would change the tensor's type"):
        with re.no_grad():
            w += re.tensor(np.ones((2, 3)))
    with pytest.raises(rl.RelayishError, match=r"\.grad of type"):
        w.grad = re.tensor(np.ones(4))
    with pytest.raises(rl.RelayishError, match=r"\.grad takes a recorded tensor"):
        w.grad = np.ones(3)


def test_backward_of_a_repeated_step_walks_what_was_recorded_when_requires_grad_changes():
    # the same recorded structure: v requires gradients from the start, or is switched on
    # after the step read it (so `a` was recorded without them); the leaves backward finds
    # for a repeated step must be those of what was recorded
    def step(switch_late):
        v = re.tensor(np.array([1.0, 2.0]), requires_grad=not switch_late)
        w = re.tensor(np.array([3.0, 4.0]), requires_grad=True)
        a = v * 2.0
        if switch_late:
            v.requires_grad_()
        (a.sum() + (w * w).sum()).backward()
        return v, w
    for switch_late in (False, False, True, False, True):
        v, w = step(switch_late)
        np.testing.assert_allclose(np.asarray(w.grad), [6.0, 8.0])
        if switch_late:
            assert v.grad is None            # a was recorded before v required gradients
        else:
            np.testing.assert_allclose(np.asarray(v.grad), [2.0, 2.0])
