"""re.grad on recorded programs, checked against jax; gradients of gradients; re.no_grad;
static Functions embedded with re.call. (re.checkpoint: test_checkpoint.py.)"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import relayish as rl
from relayish import eager as re
from relayish.eager.graph import Node



pytestmark = pytest.mark.usefixtures("fresh_x64")   # tests/eager/conftest.py


def _mlp_data():
    rng = np.random.default_rng(1)
    return (rng.normal(size=(5, 3)), rng.normal(size=(5, 1)), rng.normal(size=(3, 4)),
            rng.normal(size=4), rng.normal(size=(4, 1)))


def _jax_loss(w1, b1, w2, x, y):
    h = jnp.tanh(x @ w1 + b1)
    return ((h @ w2 - y) ** 2).mean()


def test_gradients_of_a_recorded_mlp_match_jax():
    x, y, w1, b1, w2 = _mlp_data()
    re.clear_cache()
    for _ in range(3):      # the interpreter, then the optimized program compiled with jax
        tw1, tb1, tw2 = re.tensor(w1), re.tensor(b1), re.tensor(w2)
        h = re.tanh(re.tensor(x) @ tw1 + tb1)
        loss = ((h @ tw2 - re.tensor(y)) ** 2.0).mean()
        grads = re.grad(loss, wrt=[tw1, tb1, tw2])
        assert all(isinstance(g, re.Tensor) and g.node.pending for g in grads)   # recorded
        want = jax.grad(_jax_loss, argnums=(0, 1, 2))(w1, b1, w2, x, y)
        for g, w in zip(grads, want):
            np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-10, atol=1e-12)
        assert float(loss) == pytest.approx(float(_jax_loss(w1, b1, w2, x, y)))
    assert re.stats()["compiles"] == 1


def test_grad_after_inspecting_needs_requires_grad():
    w = re.tensor(np.array([1.0, 2.0]), requires_grad=True)
    c = re.tensor(np.array([3.0, 4.0]))
    loss = (re.sin(w) * c).sum()
    assert float(loss) == pytest.approx(float((np.sin([1.0, 2.0]) * [3.0, 4.0]).sum()))
    (gw,) = re.grad(loss, wrt=[w])             # the derivation was kept
    np.testing.assert_allclose(np.asarray(gw), np.cos([1.0, 2.0]) * [3.0, 4.0])
    loss2 = (w * re.exp(c)).sum()        # exp(c): no handle, no gradient, read by kept w * .
    float(loss2)
    (exp_node,) = [a for a in loss2.node.args[0].args if a.kind == "op"]
    assert exp_node.value is not None and exp_node.args is None    # computed, not its recipe
    (gw2,) = re.grad(loss2, wrt=[w])
    np.testing.assert_allclose(np.asarray(gw2), np.exp([3.0, 4.0]))
    v = re.tensor(np.array([1.0, 2.0]))
    done = (v * v).sum()
    float(done)
    with pytest.raises(rl.GradientError, match="requires_grad=True"):
        re.grad(done, wrt=[v])


def test_hessian_vector_product_of_a_recorded_loss_matches_jax():
    x0 = np.array([0.3, -0.7, 1.1])
    v0 = np.array([1.0, 0.5, -2.0])

    def f(x):
        return (jnp.tanh(x) * x * x).sum() + (x[0] * x[1])

    x, v = re.tensor(x0), re.tensor(v0)
    loss = (re.tanh(x) * x * x).sum() + x[0] * x[1]
    (g,) = re.grad(loss, wrt=[x])
    (hv,) = re.grad((g * v).sum(), wrt=[x])          # the gradient of a recorded gradient
    want = jax.jvp(jax.grad(f), (x0,), (v0,))[1]
    np.testing.assert_allclose(np.asarray(hv), np.asarray(want), rtol=1e-10)
    np.testing.assert_allclose(np.asarray(g), np.asarray(jax.grad(f)(x0)), rtol=1e-12)


def test_no_grad_keeps_nothing():
    w = re.tensor(np.ones(3), requires_grad=True)
    with_grad = w * 2.0
    with re.no_grad():
        without = re.exp(w) * 2.0
    assert with_grad.requires_grad and not without.requires_grad
    re.run()
    assert without.node.args is None                 # its derivation is gone
    assert with_grad.node.args is not None           # kept for re.grad
    alive = [o for o in __import__("gc").get_objects() if isinstance(o, Node)]
    assert not any(n.kind == "op" and n.op.name == "exp" for n in alive)


def test_grad_of_a_tensor_not_depending_on_wrt_is_zero():
    w = re.tensor(np.ones(2))
    c = re.tensor(np.array([1.0, 2.0]))
    (gw,) = re.grad((c * c).sum(), wrt=[w])
    np.testing.assert_array_equal(np.asarray(gw), np.zeros(2))


def test_an_embedded_static_function_gets_gradients():
    xv = rl.var("x", shape=(3,), dtype="float64")
    f = rl.Function([xv], rl.tanh(xv) * xv)                   # builder-made
    mod = rl.parse("def @main(%a: Tensor[(3), float64]) { exp(%a) * 2f64 }")
    x0 = np.array([0.1, 0.2, -0.3])
    x = re.tensor(x0)
    y = re.call(f, x * 3.0)
    z = re.call(mod, y)
    loss = z.sum()
    (gx,) = re.grad(loss, wrt=[x])

    def jf(x):
        u = x * 3.0
        return (jnp.exp(jnp.tanh(u) * u) * 2.0).sum()
    np.testing.assert_allclose(np.asarray(gx), np.asarray(jax.grad(jf)(x0)), rtol=1e-10)
    assert float(loss) == pytest.approx(float(jf(x0)))


def test_an_embedded_module_with_globals_gets_gradients():
    mod = rl.parse("""
        def @square(%a: Tensor[(3), float64]) { %a * %a }
        def @main(%a: Tensor[(3), float64]) { sum(@square(sin(%a))) }
    """)
    x0 = np.array([0.4, -0.2, 1.3])
    re.clear_cache()
    for _ in range(3):          # interpreted, then compiled as a Module
        x = re.tensor(x0)
        loss = re.call(mod, x * 2.0) + (x * x).sum()
        (gx,) = re.grad(loss, wrt=[x])
        want = jax.grad(lambda v: (jnp.sin(v * 2.0) ** 2).sum() + (v * v).sum())(x0)
        np.testing.assert_allclose(np.asarray(gx), np.asarray(want), rtol=1e-10)
    assert re.stats()["compiles"] == 1


def test_grad_with_checkpointing_matches_the_plain_gradient():
    x0 = np.linspace(-1.0, 1.0, 4)
    for spec in (2, "sqrt", "revolve"):
        x = re.tensor(x0)
        h = x
        for _ in range(6):
            h = re.tanh(h * 1.5 + 0.1)
        loss = (h * h).sum()
        (plain,) = re.grad(loss, wrt=[x])
        (ck,) = re.grad(loss, wrt=[x], checkpoint=spec)
        np.testing.assert_allclose(np.asarray(ck), np.asarray(plain), rtol=1e-12)


def test_re_call_checks_its_arguments():
    xv = rl.var("x", shape=(3,), dtype="float64")
    f = rl.Function([xv], rl.tanh(xv))
    with pytest.raises(rl.TypeCheckError, match=r"argument 0 has type(?s:.*)test_grad.py:\d+: re.call"):
        re.call(f, re.tensor(np.ones(4)))
    with pytest.raises(rl.RelayishError, match="Function or Module"):
        re.call(lambda a: a, re.tensor(np.ones(3)))


def test_grad_mistakes_are_relayish_errors():
    w = re.tensor(np.ones(3))
    with pytest.raises(rl.GradientError, match="list of tensors"):
        re.grad(w.sum(), wrt=w)
    with pytest.raises(rl.GradientError, match="float"):
        re.grad(re.tensor(np.arange(3)).sum(), wrt=[w])
