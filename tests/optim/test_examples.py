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


def test_tree_network_example(capsys):
    import tree_network
    total_W = tree_network.main(["--trees", "3", "--hidden", "3"])
    assert total_W.shape == (3, 6) and np.isfinite(total_W).all() and np.abs(total_W).sum() > 0
    assert capsys.readouterr().out.count("loss") == 3
