"""re.checkpoint(fn): the same gradients as without it (and as jax), the backward pass
recomputes each region instead of keeping its values (the program's calls, and the peak
memory of a long chain on the interpreter), a training loop compiles once, and mistakes."""
import tracemalloc

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import relayish as rl
from relayish import eager as re
from relayish.eager.runner import Checkpointed


pytestmark = pytest.mark.usefixtures("fresh_x64")   # tests/eager/conftest.py


W0 = np.random.default_rng(0).normal(size=(4, 4)) * 0.5
X0 = np.random.default_rng(1).normal(size=4)


def _chain(checkpointed, blocks=3):
    w = re.tensor(W0, requires_grad=True)
    x = re.tensor(X0, requires_grad=True)

    def block(h):                       # reads w from outside: a captured tensor
        return re.tanh(re.tanh(h @ w) @ w)
    f = re.checkpoint(block) if checkpointed else block
    h = x
    for _ in range(blocks):
        h = f(h)
    return (h * h).sum(), w, x


def test_same_gradients_as_without_and_as_jax():
    plain, w, x = _chain(False)
    want = [np.asarray(g) for g in re.grad(plain, wrt=[w, x])]
    loss, w, x = _chain(True)
    got = [np.asarray(g) for g in re.grad(loss, wrt=[w, x])]
    for g, p in zip(got, want):
        np.testing.assert_allclose(g, p, rtol=1e-12, atol=1e-15)

    def jax_loss(wv, xv):
        h = xv
        for _ in range(3):
            h = jnp.tanh(jnp.tanh(h @ wv) @ wv)
        return (h * h).sum()
    for g, j in zip(got, jax.grad(jax_loss, argnums=(0, 1))(W0, X0)):
        np.testing.assert_allclose(g, np.asarray(j), rtol=1e-10, atol=1e-14)
    assert float(loss) == pytest.approx(float(jax_loss(W0, X0)))


def test_the_backward_pass_calls_each_region_again():
    loss, w, x = _chain(True, blocks=4)
    grads = re.grad(loss, wrt=[w, x])
    # four forward calls of the one region Function; each vjp call runs it once more
    regions = {id(n.op): n.op for n in _pending_calls() if isinstance(n.op, Checkpointed)}
    assert len(regions) == 1
    assert sum(1 for n in _pending_calls() if isinstance(n.op, Checkpointed)) == 4
    vjps = [n for n in _pending_calls() if not isinstance(n.op, Checkpointed)
            and n.type.__class__.__name__ == "TupleType" and len(n.args) == 3]
    assert len(vjps) == 4             # (h, w, dc) -> (dh, dw), one per region
    assert all(g.node.pending for g in grads)


def _pending_calls():
    from relayish.eager.runner import pending_program
    return [n for n in pending_program().bindings if n.kind == "call"]


def _peak_bytes(checkpointed, n=20_000, blocks=6, ops=6):
    re.run()
    re.clear_cache()                   # the first sighting runs on the interpreter
    x = re.tensor(np.linspace(-0.1, 0.1, n), requires_grad=True)

    def block(h):
        for _ in range(ops):
            h = re.tanh(h * 1.01 + 0.01)
        return h
    f = re.checkpoint(block) if checkpointed else block
    h = x
    for _ in range(blocks):
        h = f(h)
    (gx,) = re.grad((h * h).sum(), wrt=[x])
    del h
    tracemalloc.start()
    try:
        value = np.asarray(gx)
        return tracemalloc.get_traced_memory()[1], value
    finally:
        tracemalloc.stop()


def test_a_long_chain_keeps_less_memory():
    plain, want = _peak_bytes(False)
    checkpointed, got = _peak_bytes(True)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert checkpointed < 0.4 * plain          # measured: 22 MB against 104 MB (8 x 8 ops)


def test_a_training_loop_with_a_checkpointed_layer_compiles_once():
    rng = np.random.default_rng(0)
    x = re.tensor(rng.normal(size=(16, 4)))
    y = re.tensor(rng.normal(size=(16, 1)))
    w1 = re.tensor(rng.normal(size=(4, 8)) * 0.3, requires_grad=True)
    w2 = re.tensor(rng.normal(size=(8, 1)) * 0.3, requires_grad=True)
    layer = re.checkpoint(lambda a: re.tanh(a @ w1))
    re.clear_cache()
    losses = []
    for _ in range(30):
        loss = ((layer(x) @ w2 - y) ** 2.0).mean()
        loss.backward()
        with re.no_grad():
            w1 -= 0.1 * w1.grad
            w2 -= 0.1 * w2.grad
        w1.grad = None
        w2.grad = None
        losses.append(float(loss))
    assert losses[-1] < 0.6 * losses[0]
    s = re.stats()
    assert s["misses"] == 1 and s["compiles"] == 1


def test_checkpoint_mistakes_are_relayish_errors():
    x = re.tensor(np.ones(3), requires_grad=True)
    with pytest.raises(rl.RelayishError, match="takes a function"):
        re.checkpoint(3)
    with pytest.raises(rl.RelayishError, match="inspected a value"):
        re.checkpoint(lambda a: a * 2.0 if float(a.sum()) > 0 else a)(x)
    with pytest.raises(rl.RelayishError, match="must return one recorded tensor"):
        re.checkpoint(lambda a: (a, a))(x)
    y = re.checkpoint(lambda a: re.sin(a))(x).sum()
    with pytest.raises(rl.GradientError, match="use one or the other"):
        re.grad(y, wrt=[x], checkpoint=2)
    # the recorder is usable afterwards: the failed recordings left nothing behind
    (g,) = re.grad(y, wrt=[x])
    np.testing.assert_allclose(np.asarray(g), np.cos(np.ones(3)))
