"""Newton on the jax backend with the iterate kept on the device (problem.DeviceNewton)."""
import numpy as np
import pytest

import relayish as rl
from relayish.optim.methods import Monitor, run_newton
from relayish.optim.problem import RelayishProblem, flat_objective

from optim_problems import F64, logistic, quadratic, rosenbrock, rosenbrock_start


def _problem(f, x0, args=()):
    obj, spec, x = flat_objective(f, x0, args)
    problem = RelayishProblem(obj, x.size, "newton", "jax")
    assert problem.device_newton is not None
    return problem, x


def _count_compiled_calls(dev):
    """Wrap the jitted functions themselves: counts what really runs, not dev.calls."""
    counts = {"at": 0, "trial": 0}
    at, trial = dev._at, dev._trial

    def counted_at(*a):
        counts["at"] += 1
        return at(*a)

    def counted_trial(*a):
        counts["trial"] += 1
        return trial(*a)
    dev._at, dev._trial = counted_at, counted_trial
    return counts


def test_accepted_full_steps_cost_one_compiled_call_each():
    f, X, y, _ = logistic()
    problem, x0 = _problem(f, np.zeros(X.shape[1]), (X, y))
    counts = _count_compiled_calls(problem.device_newton)
    monitor = Monitor()
    out = run_newton(problem, x0, 1e-10, 50, monitor)
    assert out.converged
    steps = [h["step"] for h in monitor.history[1:]]
    full = sum(s == 1.0 for s in steps)
    assert full >= 3                                     # Newton's local phase: full steps
    backtracked = len(steps) - full
    # one evaluation at x0, one trial call per iteration, and one more (at the point the line
    # search chose) only for an iteration that backtracked
    assert counts == {"at": 1 + backtracked, "trial": out.n_iter}
    assert problem.ngev == problem.nhev == out.n_iter + 1 + backtracked


def test_minimize_counts_one_evaluation_per_accepted_step():
    f, A, b = quadratic(6)
    res = rl.optim.minimize(f, np.zeros(6), method="newton", backend="jax")
    assert res.converged and res.n_iter == 1
    np.testing.assert_allclose(res.x, np.linalg.solve(A, b), rtol=1e-10)
    assert res.nfev == res.ngev == res.nhev == 2
    res.x[0] = 1.0                                        # a writable numpy array, not a view


@pytest.mark.parametrize("n", [2, 4])
def test_device_loop_takes_the_same_iterates_as_the_host_loop(n):
    """Rosenbrock from (-1.2, 1, ...) backtracks and meets indefinite Hessians: the device loop
    must take exactly the steps of the interpreter's host loop."""
    f = rosenbrock(n)
    dev = rl.optim.minimize(f, rosenbrock_start(n), method="newton", backend="jax")
    host = rl.optim.minimize(f, rosenbrock_start(n), method="newton", backend="interpreter")
    assert dev.converged and host.converged
    assert dev.n_iter == host.n_iter
    assert [h["step"] for h in dev.history] == pytest.approx([h["step"] for h in host.history],
                                                              rel=1e-6)
    np.testing.assert_allclose([h["fun"] for h in dev.history],
                               [h["fun"] for h in host.history], rtol=1e-8, atol=1e-14)
    np.testing.assert_allclose(dev.x, host.x, atol=1e-8)
    assert any(h["step"] not in (None, 1.0) for h in dev.history)   # the backtracking ran


def test_indefinite_hessian_uses_the_modified_cholesky():
    # f(x) = sum(x^4 - x^2): at x = 0.1 the Hessian 12x^2 - 2 is negative definite
    x = rl.var("x", shape=(3,), dtype=F64)
    f = rl.Function([x], rl.sum(x * x * x * x - x * x))
    problem, x0 = _problem(f, np.full(3, 0.1))
    counts = _count_compiled_calls(problem.device_newton)
    out = run_newton(problem, x0, 1e-10, 50, Monitor())
    assert out.converged
    np.testing.assert_allclose(np.abs(out.x), np.full(3, np.sqrt(0.5)), rtol=1e-8)
    assert counts["at"] >= 2       # H fetched for the modified Cholesky (trial does not return it)


def test_nan_at_the_start_and_after_a_step():
    x = rl.var("x", shape=(2,), dtype=F64)
    f = rl.Function([x], rl.sum(rl.log(x)))
    res = rl.optim.minimize(f, np.array([-1.0, 1.0]), method="newton", backend="jax")
    assert not res.converged and "not finite" in res.message and res.n_iter == 0
    # sqrt(x) + 0.5 x^2 ... trial points outside the domain only shrink the step
    g = rl.Function([x], rl.sum(x * x - rl.log(x)))
    res = rl.optim.minimize(g, np.array([3.0, 0.05]), method="newton", backend="jax")
    assert res.converged
    np.testing.assert_allclose(res.x, np.full(2, np.sqrt(0.5)), rtol=1e-8)


def test_value_grad_hess_on_the_device_path_matches_numpy():
    from scipy.optimize import rosen, rosen_der, rosen_hess
    problem, x = _problem(rosenbrock(5), rosenbrock_start(5))
    f0, g, H, p = problem.value_grad_hess(x)
    assert f0 == pytest.approx(rosen(x))
    np.testing.assert_allclose(g, rosen_der(x), rtol=1e-12)
    np.testing.assert_allclose(H, rosen_hess(x), rtol=1e-12)
    if p is not None and np.isfinite(p).all():
        np.testing.assert_allclose(p, -np.linalg.solve(rosen_hess(x), rosen_der(x)), rtol=1e-8)
