"""The examples run and converge (the rosenbrock.rly main job is tested in tests/test_cli.py)."""
import numpy as np

import optim_problems  # noqa: F401  puts examples/ on sys.path
import layers
import logistic_regression


def test_layers_example_closures_and_adt(capsys):
    res = layers.main(["--backend", "interpreter", "--method", "trust-ncg"])
    assert res.converged
    assert isinstance(res.x, list) and len(res.x) == 2
    W, b = res.x[0]
    assert W.shape == (3, 3) and b.shape == (3, 1)
    assert "converged=True" in capsys.readouterr().out


def test_layers_example_newton_agrees_with_trust_ncg():
    import relayish as rl
    X, Y, start = layers.make_data()
    mod = layers.make_objective(X, Y)
    a = rl.optim.minimize(mod, start, method="newton", backend="interpreter", tol=1e-6)
    b = rl.optim.minimize(mod, start, method="trust-ncg", backend="interpreter", tol=1e-6,
                          max_iter=200)
    assert a.converged and b.converged
    assert a.fun == np.float64(b.fun) or abs(a.fun - b.fun) < 1e-9


def test_logistic_regression_example(capsys):
    res = logistic_regression.main(["--backend", "interpreter"])
    assert res.converged and res.n_iter <= 15
    assert "training accuracy" in capsys.readouterr().out


def test_logistic_regression_gradient_at_zero_matches_jax():
    """The starting point w = 0 is where a softplus written with relu and abs had the wrong
    derivative (theirs is 0 at 0): rl.softplus's gradient there is jax's (issue 29)."""
    import jax
    import jax.numpy as jnp
    import relayish as rl
    X, y = logistic_regression.make_data(40, 6)
    f = logistic_regression.make_objective(40, 6)
    w0 = np.zeros(6)

    def loss(w):
        z = X @ w
        return jnp.mean(jax.nn.softplus(z) - y * z) + 1e-2 / 2 * jnp.sum(w * w)
    with jax.enable_x64(True):
        want = np.asarray(jax.jit(jax.grad(loss))(w0))
    got = rl.evaluate(rl.grad(f), w0, X, y)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(got, logistic_regression.numpy_objective(X, y)[1](w0), rtol=1e-12)
    assert np.linalg.norm(got) > 0.01


def test_tree_network_example(capsys):
    import tree_network
    total_W = tree_network.main(["--trees", "3", "--hidden", "3"])
    assert total_W.shape == (3, 6) and np.isfinite(total_W).all() and np.abs(total_W).sum() > 0
    assert capsys.readouterr().out.count("loss") == 3
