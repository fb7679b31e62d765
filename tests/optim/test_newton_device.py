"""Newton on the jax backend with the iterate kept on the device (newton_xla.DeviceNewton):
newton.py's step function under lax.while_loop (XlaLoop) when nothing watches the iterations,
else jitted and driven step by step from Python (StepwiseLoop); both against the host loop."""
import numpy as np
import pytest

import relayish as rl
from relayish.optim.newton import run_newton
from relayish.optim.newton_xla import StepwiseLoop, XlaLoop
from relayish.optim.objective import flat_objective
from relayish.optim.outcome import Monitor
from relayish.optim.problem import RelayishProblem

from optim_problems import F64, logistic, quadratic, rosenbrock, rosenbrock_start


def _problem(f, x0, args=()):
    obj, spec, x = flat_objective(f, x0, args)
    problem = RelayishProblem(obj, x.size, "newton", "jax")
    assert problem.device_newton is not None
    return problem, x


def _count_compiled_calls(dev):
    """Wrap the stepwise loop's jitted functions themselves: counts what really runs."""
    counts = {"take": 0, "search": 0}
    loop = dev.stepwise_loop
    take, search = loop.take, loop.search

    def counted_take(*a):
        counts["take"] += 1
        return take(*a)

    def counted_search(*a):
        counts["search"] += 1
        return search(*a)
    loop.take, loop.search = counted_take, counted_search
    return counts


def _watched():
    """A monitor with a callback: the iterations are reported live, so the loop is stepwise."""
    return Monitor(callback=lambda entry: None)


def _logistic_problem():
    f, X, y, _ = logistic()
    return _problem(f, np.zeros(X.shape[1]), (X, y))


# The logistic example from w = 0 takes only full steps; Rosenbrock from (-1.2, 1) backtracks,
# so the line search's own calls are counted too.
@pytest.mark.parametrize("make, backtracks", [
    (_logistic_problem, False),
    (lambda: _problem(rosenbrock(2), rosenbrock_start(2)), True)], ids=["logistic", "rosenbrock"])
def test_accepted_full_steps_cost_one_compiled_call_each(make, backtracks):
    problem, x0 = make()
    counts = _count_compiled_calls(problem.device_newton)
    monitor = _watched()
    out = run_newton(problem, x0, 1e-10, 50, monitor)
    assert out.converged
    steps = [h["step"] for h in monitor.history[1:]]
    full = sum(s == 1.0 for s in steps)
    assert full >= 3                                     # Newton's local phase: full steps
    backtracked = len(steps) - full
    assert (backtracked > 0) == backtracks
    # one evaluation at x0, one per iteration, and one more (at the point the line search
    # chose, after the line search's own call) only for an iteration that backtracked
    assert counts == {"take": 1 + out.n_iter + backtracked, "search": backtracked}
    assert problem.ngev == problem.nhev == out.n_iter + 1 + backtracked


def test_minimize_counts_one_evaluation_per_accepted_step():
    f, A, b = quadratic(6)
    res = rl.optim.minimize(f, np.zeros(6), method="newton", backend="jax")
    assert res.converged and res.n_iter == 1
    np.testing.assert_allclose(res.x, np.linalg.solve(A, b), rtol=1e-10)
    assert res.nfev == res.ngev == res.nhev == 2
    res.x[0] = 1.0                                        # a writable numpy array, not a view


def assert_steps_close(steps, expected, **tolerance):
    """History steps: None (iteration 0 has no step) must match exactly, numbers approximately
    (pytest.approx rejects None as an expected value since pytest 9)."""
    assert [s is None for s in steps] == [e is None for e in expected], (steps, expected)
    numbers = [(s, e) for s, e in zip(steps, expected) if e is not None]
    assert [s for s, _ in numbers] == pytest.approx([e for _, e in numbers], **tolerance)

@pytest.mark.parametrize("n", [2, pytest.param(4, marks=pytest.mark.slow)])
def test_device_loop_takes_the_same_iterates_as_the_host_loop(n):
    """Rosenbrock from (-1.2, 1, ...) backtracks and meets indefinite Hessians: the device loop
    must take exactly the steps of the interpreter's host loop."""
    f = rosenbrock(n)
    dev = rl.optim.minimize(f, rosenbrock_start(n), method="newton", backend="jax")
    host = rl.optim.minimize(f, rosenbrock_start(n), method="newton", backend="interpreter")
    assert dev.converged and host.converged
    assert dev.n_iter == host.n_iter
    assert_steps_close([h["step"] for h in dev.history], [h["step"] for h in host.history],
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
    directions = []
    import relayish.optim.newton as newton_module
    real = newton_module.with_modified_cholesky
    newton_module.with_modified_cholesky = lambda s: directions.append(int(s["k"])) or real(s)
    try:
        out = run_newton(problem, x0, 1e-10, 50, _watched())
    finally:
        newton_module.with_modified_cholesky = real
    assert out.converged
    np.testing.assert_allclose(np.abs(out.x), np.full(3, np.sqrt(0.5)), rtol=1e-8)
    assert directions and directions[0] == 0    # x0's Hessian went to the host's Cholesky


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


# ---- the usual iterations in XLA, the rare ones on the host (device_loop.py) ----------------

def _count_loop_calls(dev):
    counts = {"loop": 0}
    jitted = dev.xla_loop.jitted

    def counted(*a, **kw):
        counts["loop"] += 1
        return jitted(*a, **kw)
    dev.xla_loop.jitted = counted
    return counts


def _float32_rosenbrock(n=4):
    x = rl.var("x", shape=(n,), dtype="float32")
    a = rl.op.strided_slice(x, [0], [n - 1])
    b = rl.op.strided_slice(x, [1], [n])
    one, hundred = rl.const(1.0, "float32"), rl.const(100.0, "float32")
    return rl.Function([x], rl.sum(hundred * (b - a * a) * (b - a * a) + (one - a) * (one - a)))


def test_unwatched_newton_is_one_call_line_searches_included():
    # Rosenbrock from (-1.2, 1) (examples/rosenbrock.rly's start): Newton's second step is too
    # long, and seven more backtrack in the valley; the Hessian stays positive definite
    problem, x0 = _problem(rosenbrock(2), rosenbrock_start(2))
    steps_counts = _count_compiled_calls(problem.device_newton)
    loop_counts = _count_loop_calls(problem.device_newton)
    monitor = Monitor()
    out = run_newton(problem, x0, 1e-10, 50, monitor)
    assert out.converged and steps_counts == {"take": 0, "search": 0}
    steps = [h["step"] for h in monitor.history]
    assert steps[0] is None and len(steps) == out.n_iter + 1
    assert [h["iter"] for h in monitor.history] == list(range(out.n_iter + 1))
    backtracked = sum(s != 1.0 for s in steps[1:])
    assert backtracked >= 1
    # one call: the line search runs in XLA, and the Hessian's plain Cholesky succeeds at every
    # iterate, so the modified Cholesky never sends the loop back to the host
    assert loop_counts == {"loop": 1}
    # the same evaluations as the stepwise loop: x0, one per iteration, one per backtracking;
    # the objective alone only while backtracking
    assert problem.ngev == problem.nhev == out.n_iter + 1 + backtracked
    assert problem.nfev > problem.ngev


def test_rosenbrock_full_steps_stay_in_xla():
    problem, x0 = _problem(rosenbrock(32), rosenbrock_start(32))
    loop_counts = _count_loop_calls(problem.device_newton)
    monitor = Monitor()
    out = run_newton(problem, x0, 1e-8, 100, monitor)
    assert out.converged and all(h["step"] == 1.0 for h in monitor.history[1:])
    assert loop_counts == {"loop": 1} and out.n_iter >= 4


@pytest.mark.parametrize("make", ["rosenbrock4"] + [pytest.param(m, marks=pytest.mark.slow)
                                                    for m in ("logistic", "float32")])
def test_xla_loop_takes_the_stepwise_loops_iterates(make, monkeypatch):
    used = []
    for name, driver in (("loop", XlaLoop), ("stepwise", StepwiseLoop)):
        method = driver.advance
        monkeypatch.setattr(driver, "advance", lambda self, *a, _m=method, _n=name, **kw:
                            used.append(_n) or _m(self, *a, **kw))
    if make == "logistic":
        f, X, y, _ = logistic()
        f, x0, args, tol = f, np.zeros(X.shape[1]), (X, y), 1e-10
    elif make == "rosenbrock4":
        # tol 1e-8: much below, f ~ 1e-20 and whether a step still decreases it depends on
        # how XLA rounds the objective (fused in the loop or compiled alone)
        f, x0, args, tol = rosenbrock(4), rosenbrock_start(4), (), 1e-8
    else:          # float32: ends when the line search finds no decrease
        f, x0, args, tol = (_float32_rosenbrock(), rosenbrock_start(4).astype(np.float32), (),
                            1e-12)
    whole = rl.optim.minimize(f, x0, backend="jax", args=args, tol=tol)
    # minimize without verbose or callback runs the XLA loop, never the stepwise calls
    assert "loop" in used and "stepwise" not in used
    used.clear()
    stepwise = rl.optim.minimize(f, x0, backend="jax", args=args, tol=tol,
                                 callback=lambda entry: None)
    assert "stepwise" in used and "loop" not in used
    if make == "float32":
        # at the objective's precision the last steps hang on rounding: compare the outcome only
        assert not whole.converged and "no decrease" in whole.message
        assert not stepwise.converged and "no decrease" in stepwise.message
        return
    assert whole.message == stepwise.message and whole.n_iter == stepwise.n_iter
    for a, b in zip(whole.history, stepwise.history):
        assert a.keys() == b.keys() and a["iter"] == b["iter"]
        assert [a["fun"], a["grad_norm"]] == pytest.approx([b["fun"], b["grad_norm"]],
                                                           rel=1e-9, abs=1e-12)
        assert_steps_close([a["step"]], [b["step"]], rel=1e-9, abs=1e-12)
    np.testing.assert_allclose(whole.x, stepwise.x, rtol=1e-9)
    assert (whole.nfev, whole.ngev, whole.nhev) == (stepwise.nfev, stepwise.ngev, stepwise.nhev)


def test_xla_loop_stops_like_the_host_loop():
    f = rosenbrock(4)
    res = rl.optim.minimize(f, rosenbrock_start(4), backend="jax", max_iter=3)
    assert (res.n_iter, res.converged, len(res.history)) == (3, False, 4)
    assert "max_iter=3" in res.message
    res = rl.optim.minimize(f, rosenbrock_start(4), backend="jax", max_iter=0)
    assert (res.n_iter, len(res.history), res.history[0]["step"]) == (0, 1, None)
    x = rl.var("x", shape=(2,), dtype=F64)
    # d2/dx2 x^1.5 is infinite at 0 while f and g are finite: stops on the Hessian
    pow_ = rl.Function([x], rl.sum(x ** 1.5 - x))
    for backend in ("jax", "interpreter"):
        res = rl.optim.minimize(pow_, np.zeros(2), backend=backend)
        assert "Hessian is not finite" in res.message and res.n_iter == 0
        assert len(res.history) == 1
    res = rl.optim.minimize(rl.Function([x], rl.sum(rl.log(x))), np.array([-1.0, 1.0]),
                            backend="jax")
    assert "objective is not finite" in res.message and res.history == []


@pytest.mark.slow      # compiles the loop for two more history sizes and the stepwise loop
def test_xla_loop_histories_past_the_smallest_and_the_largest():
    f = rosenbrock(4)
    # more iterations than the smallest history holds (its size is a power of two >= 16)
    res = rl.optim.minimize(f, rosenbrock_start(4), backend="jax", max_iter=2000)
    assert res.converged and len(res.history) == res.n_iter + 1
    # beyond the largest history the stepwise loop runs (no billion-row arrays)
    problem, x0 = _problem(f, rosenbrock_start(4))
    counts = _count_compiled_calls(problem.device_newton)
    out = run_newton(problem, x0, 1e-10, 10 ** 9, Monitor())
    assert out.converged and counts["take"] >= out.n_iter + 1


def test_xla_loop_meets_an_indefinite_hessian():
    x = rl.var("x", shape=(3,), dtype=F64)
    f = rl.Function([x], rl.sum(x * x * x * x - x * x))
    res = rl.optim.minimize(f, np.full(3, 0.1), backend="jax")
    host = rl.optim.minimize(f, np.full(3, 0.1), backend="interpreter")
    assert res.converged and res.n_iter == host.n_iter
    np.testing.assert_allclose(res.x, host.x, rtol=1e-10)
    np.testing.assert_allclose(np.abs(res.x), np.full(3, np.sqrt(0.5)), rtol=1e-8)


def test_warm_up_compiles_everything_a_run_calls():
    """Iteration timings measure iterations: after warm_up, neither the stepwise loop (numpy
    state at the start, device arrays after: two cache entries of `take`) nor the XLA loop
    compiles again during a run, line searches included (Rosenbrock from (-1.2, 1) backtracks)."""
    problem, x0 = _problem(rosenbrock(2), rosenbrock_start(2))
    dev = problem.device_newton
    problem.warm_up(x0, watched=True)
    problem.warm_up(x0, watched=False, max_iter=50)
    compiled = [fn._cache_size() for fn in (dev.stepwise_loop.take, dev.stepwise_loop.search,
                                            dev.xla_loop.jitted)]
    monitor = _watched()
    out = run_newton(problem, x0, 1e-10, 50, monitor)
    assert out.converged and any(h["step"] not in (None, 1.0) for h in monitor.history)
    assert run_newton(problem, x0, 1e-10, 50, Monitor()).n_iter == out.n_iter
    assert [fn._cache_size() for fn in (dev.stepwise_loop.take, dev.stepwise_loop.search,
                                        dev.xla_loop.jitted)] == compiled
