"""The algorithms of relayish/optim/methods.py on numpy callables (no relayish program)."""
import numpy as np
import pytest
from scipy.optimize import rosen, rosen_der, rosen_hess

import relayish as rl
from relayish.errors import RelayishError
from relayish.optim.methods import backtrack, modified_cholesky_direction, steihaug_cg

METHODS = ["newton", "newton-cg", "trust-ncg", "bfgs", "gd"]
MAX_ITER = {"newton": 100, "newton-cg": 200, "trust-ncg": 200, "bfgs": 300, "gd": 5000}


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("n", [2, 4, 10])
def test_rosenbrock_converges(method, n):
    x0 = np.array([-1.2] + [1.0] * (n - 1))
    res = rl.optim.minimize_callables(rosen, rosen_der, x0, method=method, hess=rosen_hess,
                                      max_iter=MAX_ITER[method], tol=1e-6)
    assert res.converged, res.message
    assert res.grad_norm <= 1e-6
    assert np.linalg.eigvalsh(rosen_hess(res.x)).min() > 0      # a local minimum
    if n == 2:
        np.testing.assert_allclose(res.x, [1.0, 1.0], atol=1e-5)
    assert len(res.history) == res.n_iter + 1
    assert res.history[-1]["fun"] == pytest.approx(res.fun)


def test_newton_solves_a_quadratic_in_one_step():
    rng = np.random.default_rng(0)
    M = rng.standard_normal((6, 6))
    A, b = M @ M.T + np.eye(6), rng.standard_normal(6)
    res = rl.optim.minimize_callables(lambda x: 0.5 * x @ A @ x - b @ x, lambda x: A @ x - b,
                                      np.zeros(6), method="newton", hess=lambda x: A)
    assert res.converged and res.n_iter == 1
    np.testing.assert_allclose(res.x, np.linalg.solve(A, b), rtol=1e-10)


def test_modified_cholesky_makes_indefinite_hessians_descend():
    H = np.diag([2.0, -3.0, 1.0])
    g = np.array([1.0, 1.0, -1.0])
    p, tau = modified_cholesky_direction(H, g)
    assert tau > 3.0
    assert g @ p < 0
    np.testing.assert_allclose((H + tau * np.eye(3)) @ p, -g, rtol=1e-10)
    p, tau = modified_cholesky_direction(np.diag([1.0, 4.0]), np.array([1.0, 1.0]))
    assert tau == 0.0
    np.testing.assert_allclose(p, [-1.0, -0.25])


def test_newton_escapes_a_saddle_region():
    # f = x^4/4 - x^2/2 + y^2: the Hessian at x=0.1 is indefinite
    fun = lambda v: v[0] ** 4 / 4 - v[0] ** 2 / 2 + v[1] ** 2  # noqa: E731
    grad = lambda v: np.array([v[0] ** 3 - v[0], 2 * v[1]])  # noqa: E731
    hess = lambda v: np.diag([3 * v[0] ** 2 - 1, 2.0])  # noqa: E731
    res = rl.optim.minimize_callables(fun, grad, [0.1, 1.0], method="newton", hess=hess)
    assert res.converged
    np.testing.assert_allclose(np.abs(res.x), [1.0, 0.0], atol=1e-8)


def test_armijo_backtracking():
    fun = lambda x: float(x @ x)  # noqa: E731
    x = np.array([1.0, 1.0])
    g = 2 * x
    t, ft = backtrack(fun, x, fun(x), g, -g * 10)     # the full step overshoots
    assert t < 1 and ft <= fun(x) + 1e-4 * t * (g @ (-g * 10))
    assert backtrack(fun, x, fun(x), g, g) is None     # an ascent direction never satisfies Armijo


def test_line_search_treats_nan_as_too_far():
    fun = lambda x: float(x[0] ** 2) if x[0] > -0.5 else float("nan")  # noqa: E731
    x = np.array([1.0])
    t, ft = backtrack(fun, x, 1.0, np.array([2.0]), np.array([-4.0]))
    assert np.isfinite(ft) and ft < 1.0


def test_steihaug_stays_in_the_region_and_follows_negative_curvature():
    H = np.diag([1.0, -1.0])
    g = np.array([1.0, 0.5])
    p, pred, boundary = steihaug_cg(lambda v: H @ v, g, np.linalg.norm(g), 0.5, 10)
    assert boundary and np.linalg.norm(p) == pytest.approx(0.5)
    assert pred == pytest.approx(-(g @ p + 0.5 * p @ H @ p))
    assert pred > 0


def test_max_iter_stops_with_a_reason():
    res = rl.optim.minimize_callables(rosen, rosen_der, [-1.2, 1.0], method="gd", max_iter=3)
    assert not res.converged and res.n_iter == 3 and "max_iter" in res.message


def test_nan_at_the_start_is_a_reason_not_a_crash():
    with np.errstate(invalid="ignore"):
        res = rl.optim.minimize_callables(lambda x: np.log(x[0]), lambda x: 1 / x, [-1.0],
                                          method="bfgs")
    assert not res.converged and "not finite" in res.message


def test_options_are_checked():
    with pytest.raises(RelayishError, match="unknown method"):
        rl.optim.minimize_callables(rosen, rosen_der, [0.0, 0.0], method="lbfgs")
    with pytest.raises(RelayishError, match="tol"):
        rl.optim.minimize_callables(rosen, rosen_der, [0.0, 0.0], tol=-1.0)
    with pytest.raises(RelayishError, match="max_iter"):
        rl.optim.minimize_callables(rosen, rosen_der, [0.0, 0.0], max_iter=2.5)
    with pytest.raises(RelayishError, match="hess="):
        rl.optim.minimize_callables(rosen, rosen_der, [0.0, 0.0], method="newton")


def test_iteration_counts_are_comparable_to_scipy():
    from scipy.optimize import minimize as sp_minimize
    from scipy.optimize import rosen_hess_prod
    x0 = np.array([-1.2, 1.0, 1.0, 1.0])
    for ours, theirs in (("newton-cg", "Newton-CG"), ("trust-ncg", "trust-ncg")):
        res = rl.optim.minimize_callables(rosen, rosen_der, x0, method=ours, hess=rosen_hess,
                                          tol=1e-6, max_iter=500)
        ref = sp_minimize(rosen, x0, jac=rosen_der, hessp=rosen_hess_prod, method=theirs,
                          options={"gtol": 1e-6} if theirs == "trust-ncg" else {"xtol": 1e-10})
        assert res.converged
        assert res.n_iter <= 2 * ref.nit + 5
