"""rl.optim.minimize on relayish objectives, on both backends."""
import warnings

import numpy as np
import pytest

import relayish as rl
from relayish.errors import RelayishError

from optim_problems import (F64, is_local_min, logistic, quadratic, refuse_recursion_early,
                            rosenbrock, rosenbrock_module, rosenbrock_start)
from strategies import deep

METHODS = ["newton", "newton-cg", "trust-ncg", "bfgs", "gd"]
BACKENDS = ["interpreter", "jax"]
# each jax case compiles its own program (about a second of CPU): the default run keeps one
# (test_rosenbrock_2d's) and -m slow runs the rest
BACKEND_CASES = ["interpreter", pytest.param("jax", marks=pytest.mark.slow)]
MAX_ITER = {"newton": 100, "newton-cg": 200, "trust-ncg": 200, "bfgs": 300, "gd": 3000}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("method", METHODS)
def test_rosenbrock_2d(method, backend):
    res = rl.optim.minimize(rosenbrock(2), rosenbrock_start(2), method=method, backend=backend,
                            max_iter=MAX_ITER[method])
    assert res.converged, res.message
    assert res.grad_norm <= 1e-8
    np.testing.assert_allclose(res.x, [1.0, 1.0], atol=1e-7)
    assert res.fun < 1e-14
    assert res.method == method and res.backend == backend


@pytest.mark.parametrize("backend", BACKEND_CASES)
@pytest.mark.parametrize("method", METHODS)
def test_rosenbrock_4d(method, backend):
    from scipy.optimize import rosen_der, rosen_hess
    res = rl.optim.minimize(rosenbrock(4), rosenbrock_start(4), method=method, backend=backend,
                            max_iter=MAX_ITER[method], tol=1e-7)
    assert res.converged, res.message
    # from (-1.2, 1, 1, 1) the 4-D Rosenbrock function has a local minimum near
    # (-0.776, 0.613, 0.382, 0.146) besides the global one at (1, 1, 1, 1)
    assert is_local_min(rosen_hess(res.x), rosen_der(res.x))
    assert res.fun == pytest.approx(0.0, abs=1e-12) or res.fun == pytest.approx(3.7014, rel=1e-4)


@pytest.mark.parametrize("backend", BACKEND_CASES)
def test_newton_solves_a_strictly_convex_quadratic_in_one_step(backend):
    f, A, b = quadratic()
    res = rl.optim.minimize(f, np.zeros(5), method="newton", backend=backend)
    assert res.converged and res.n_iter == 1
    np.testing.assert_allclose(res.x, np.linalg.solve(A, b), rtol=1e-10)


@pytest.mark.parametrize("method", METHODS[1:])
def test_other_methods_solve_the_quadratic(method):
    f, A, b = quadratic()
    res = rl.optim.minimize(f, np.zeros(5), method=method, backend="interpreter", max_iter=500)
    assert res.converged
    np.testing.assert_allclose(res.x, np.linalg.solve(A, b), rtol=1e-7)


@pytest.mark.parametrize("backend", BACKEND_CASES)
def test_newton_on_regularized_logistic_regression(backend):
    f, X, y, (fun, grad, hess) = logistic()
    res = rl.optim.minimize(f, np.zeros(X.shape[1]), method="newton", args=(X, y),
                            backend=backend)
    assert res.converged and res.n_iter <= 15
    assert np.linalg.norm(grad(res.x)) < 1e-8
    assert res.fun == pytest.approx(fun(res.x), rel=1e-12)


@pytest.mark.parametrize("method", METHODS[1:])
def test_other_methods_on_logistic_regression(method):
    f, X, y, (fun, grad, hess) = logistic()
    res = rl.optim.minimize(f, np.zeros(X.shape[1]), method=method, args=(X, y),
                            backend="interpreter", max_iter=500)
    assert res.converged
    assert np.linalg.norm(grad(res.x)) < 1e-8


def test_module_objective_from_text():
    res = rl.optim.minimize(rosenbrock_module(), [-1.2, 1.0], backend="interpreter")
    assert res.converged
    np.testing.assert_allclose(res.x, [1.0, 1.0], atol=1e-8)


def test_history_verbose_and_callback(capsys):
    seen = []
    res = rl.optim.minimize(rosenbrock(2), rosenbrock_start(2), backend="interpreter",
                            verbose=True, callback=seen.append)
    out = capsys.readouterr().out
    assert out.count("iter ") == res.n_iter + 1
    assert "converged" in out
    assert seen == res.history
    assert [h["iter"] for h in res.history] == list(range(res.n_iter + 1))
    funs = [h["fun"] for h in res.history]
    assert all(b <= a for a, b in zip(funs, funs[1:]))       # Armijo: monotone decrease
    assert res.nfev >= res.n_iter and res.nhev >= res.n_iter


# ---- structured variables ------------------------------------------------------------------

def test_tuple_variable():
    t = rl.TupleType([rl.TensorType((2,), F64), rl.TensorType((), F64)])
    p = rl.var("p", type=t)
    a, s = rl.TupleGetItem(p, 0), rl.TupleGetItem(p, 1)
    target = rl.const(np.array([1.0, -2.0]))
    three = rl.const(3.0, F64)
    f = rl.Function([p], rl.sum((a - target) * (a - target)) + (s - three) * (s - three))
    for method in ("newton", "trust-ncg"):
        res = rl.optim.minimize(f, (np.zeros(2), 0.0), method=method, backend="interpreter")
        assert res.converged
        assert isinstance(res.x, tuple)
        np.testing.assert_allclose(res.x[0], [1.0, -2.0], atol=1e-9)
        assert res.x[1].shape == () and float(res.x[1]) == pytest.approx(3.0)


def test_list_variable_with_integer_leaves_fixed():
    mod = rl.Module()
    p = rl.Prelude(mod)
    item = rl.TupleType([rl.TensorType((2,), F64), rl.TensorType((), "int32")])
    l = rl.var("l", type=rl.TypeCall(p.List, [item]))
    acc, h = rl.var("acc", dtype=F64), rl.var("h", type=item)
    w, k = rl.TupleGetItem(h, 0), rl.cast(rl.TupleGetItem(h, 1), F64)
    step = rl.Function([acc, h], acc + rl.sum((w - k) * (w - k)))
    mod["main"] = rl.Function([l], p.foldl(step, rl.const(0.0, F64), l))
    x0 = [(np.zeros(2), np.asarray(1, "int32")), (np.ones(2) * 5, np.asarray(-2, "int32"))]
    for backend in BACKENDS:
        res = rl.optim.minimize(mod, x0, backend=backend)
        assert res.converged and isinstance(res.x, list) and len(res.x) == 2
        np.testing.assert_allclose(res.x[0][0], [1.0, 1.0], atol=1e-9)
        np.testing.assert_allclose(res.x[1][0], [-2.0, -2.0], atol=1e-9)
        assert int(res.x[1][1]) == -2


def test_float32_objective():
    x = rl.var("x", shape=(2,), dtype="float32")
    f = rl.Function([x], rl.sum((x - 2.0) * (x - 2.0)))
    res = rl.optim.minimize(f, [0.0, 0.0], backend="interpreter", tol=1e-4)
    assert res.converged and res.x.dtype == np.float32
    np.testing.assert_allclose(res.x, [2.0, 2.0], atol=1e-4)


# ---- bad input -----------------------------------------------------------------------------

def test_non_scalar_objective_is_an_error():
    x = rl.var("x", shape=(2,), dtype=F64)
    with pytest.raises(RelayishError, match="float scalar"):
        rl.optim.minimize(rl.Function([x], x * x), np.zeros(2))


def test_wrong_shape_x0_is_an_error():
    with pytest.raises(RelayishError, match=r"shape \(3,\)"):
        rl.optim.minimize(rosenbrock(2), np.zeros(3))
    with pytest.raises(RelayishError, match="tensor"):
        rl.optim.minimize(rosenbrock(2), "hello")


def test_objective_jax_cannot_compile_names_the_interpreter_option(monkeypatch):
    # the recursion depth depends on the variable's value, and the recursive call is not a
    # tail call: no XLA program for it (a tail recursion is one while loop, its gradient too:
    # tests/backend/test_jax_dynamic_tail.py)
    refuse_recursion_early(monkeypatch)
    mod = rl.parse("""
    def @shrink(%x: Tensor[(2), float64], %n: Tensor[(), float64]) -> Tensor[(), float64] {
      if (%n > 0f64) { @shrink(%x * 0.9f64, %n - 1f64) * 0.99f64 } else { sum(%x * %x) }
    }
    def @main(%x: Tensor[(2), float64]) -> Tensor[(), float64] {
      @shrink(%x, sum(%x))
    }
    """)
    with pytest.raises(rl.CompileError, match=r"(?s)@shrink.*backend=\"interpreter\""):
        rl.optim.minimize(mod, np.array([1.0, 2.0]), method="bfgs", backend="jax")
    res = rl.optim.minimize(mod, np.array([1.0, 2.0]), method="bfgs", backend="interpreter")
    assert res.converged


def test_nan_objective_gives_a_reason():
    x = rl.var("x", shape=(2,), dtype=F64)
    f = rl.Function([x], rl.sum(rl.log(x)))
    for backend in BACKENDS:
        res = rl.optim.minimize(f, [-1.0, 2.0], backend=backend)
        assert not res.converged and "not finite" in res.message


def test_nan_met_during_the_search_is_avoided():
    x = rl.var("x", shape=(1,), dtype=F64)
    # log(x) - x / 10 ... minimum of -log(x) + x at x = 1; a full Newton step from 0.1 overshoots
    f = rl.Function([x], rl.sum(x - rl.log(x)))
    res = rl.optim.minimize(f, [3.0], backend="interpreter")
    assert res.converged
    np.testing.assert_allclose(res.x, [1.0], atol=1e-9)


def test_bad_arguments():
    with pytest.raises(RelayishError, match="unknown method"):
        rl.optim.minimize(rosenbrock(2), np.zeros(2), method="cg")
    with pytest.raises(RelayishError, match="unknown backend"):
        rl.optim.minimize(rosenbrock(2), np.zeros(2), backend="torch")
    with pytest.raises(RelayishError, match="Function or Module"):
        rl.optim.minimize(lambda x: x, np.zeros(2))
    with pytest.raises(RelayishError, match="args="):
        rl.optim.minimize(logistic()[0], np.zeros(8))
    y = rl.var("y", dtype=F64)
    with pytest.raises(RelayishError, match="no parameter"):
        rl.optim.minimize(rl.Function([], rl.const(1.0, F64)), np.zeros(2))
    del y
    for method in ("newton", "bfgs"):
        with pytest.raises(RelayishError, match="callback must be a function"):
            rl.optim.minimize(rosenbrock(2), np.zeros(2), method=method, callback=3)
    with pytest.raises(RelayishError, match="callback must be a function"):
        rl.optim.minimize_callables(lambda x: 0.0, lambda x: x, np.zeros(2), method="gd",
                                    callback="print")


@pytest.mark.parametrize("backend", BACKEND_CASES)
@pytest.mark.parametrize("hessian", ["forward", "reverse"])
def test_hessian_options(backend, hessian):
    f, A, b = quadratic(4)
    res = rl.optim.minimize(f, np.zeros(4), hessian=hessian, backend=backend)
    assert res.converged and res.n_iter == 1
    np.testing.assert_allclose(res.x, np.linalg.solve(A, b), rtol=1e-10)
    with pytest.raises(RelayishError, match="unknown hessian"):
        rl.optim.minimize(f, np.zeros(4), hessian="exact")


def test_auto_hessian_is_reverse_on_the_interpreter_and_vmapped_forward_on_jax(monkeypatch):
    from relayish.optim import cache, hessian
    monkeypatch.setattr(cache, "PROBLEMS", cache.ProblemCache())
    modes = []
    real = hessian.hessian_program
    monkeypatch.setattr(hessian, "hessian_program",
                        lambda obj, mode="forward": modes.append(mode) or real(obj, mode))
    f, A, b = quadratic(4)
    interpreted = rl.optim.minimize(f, np.zeros(4), backend="interpreter")
    assert modes == ["reverse"]
    compiled = rl.optim.minimize(f, np.zeros(4), backend="jax")
    assert modes == ["reverse"]          # the jax cpu path vmaps jvp(gradient): no Hessian program
    np.testing.assert_allclose(interpreted.x, compiled.x, rtol=1e-10)


@pytest.mark.parametrize("backend", BACKEND_CASES)
def test_newton_with_an_indefinite_hessian(backend):
    # f = a^4/4 - a^2/2 + b^2: at a = 0.1 the Hessian is indefinite; the modified Cholesky
    # still gives a descent direction and Newton ends at a minimum (|a| = 1, b = 0)
    x = rl.var("x", shape=(2,), dtype=F64)
    a, b = rl.take(x, 0), rl.take(x, 1)
    f = rl.Function([x], a * a * a * a / 4.0 - a * a / 2.0 + b * b)
    res = rl.optim.minimize(f, [0.1, 1.0], backend=backend)
    assert res.converged
    np.testing.assert_allclose(np.abs(res.x), [1.0, 0.0], atol=1e-8)


def test_list_value_variable_and_max_iter_zero():
    mod = rl.Module()
    p = rl.Prelude(mod)
    l = rl.var("l", type=rl.TypeCall(p.List, [rl.TensorType((2,), F64)]))
    acc, h = rl.var("acc", dtype=F64), rl.var("h", shape=(2,), dtype=F64)
    two = rl.const(2.0, F64)
    step = rl.Function([acc, h], acc * two + rl.sum((h - two) * (h - two)))
    mod["main"] = rl.Function([l], p.foldl(step, rl.const(0.0, F64), l))
    x0 = rl.list_value(mod, [np.zeros(2), np.ones(2), np.full(2, 3.0)])
    res = rl.optim.minimize(mod, x0, method="trust-ncg", backend="interpreter")
    assert res.converged and isinstance(res.x, rl.ConstructorValue)
    for item in rl.from_list_value(res.x):
        np.testing.assert_allclose(item, [2.0, 2.0], atol=1e-8)
    res0 = rl.optim.minimize(mod, x0, max_iter=0, backend="interpreter")
    assert res0.n_iter == 0 and not res0.converged and "max_iter" in res0.message
    assert len(res0.history) == 1


def test_jax_newton_uses_the_batched_evaluation():
    """On the jax backend Newton evaluates f, g, H (vmapped forward-over-reverse) and the
    direction in one call; the fallback (an unrolled Hessian program) is much slower, so a
    change in the backend that disables the batched path should be noticed."""
    from relayish.optim.objective import flat_objective
    from relayish.optim.problem import RelayishProblem
    for f, x0 in ((rosenbrock(4), rosenbrock_start(4)), (rosenbrock_module(), [-1.2, 1.0])):
        obj, spec, x = flat_objective(f, x0)
        problem = RelayishProblem(obj, x.size, "newton", "jax")
        assert problem.batched
        f0, g, H, p = problem.value_grad_hess(x)
        from scipy.optimize import rosen, rosen_der, rosen_hess
        assert f0 == pytest.approx(rosen(x))
        np.testing.assert_allclose(g, rosen_der(x), rtol=1e-12)
        np.testing.assert_allclose(np.asarray(H), rosen_hess(x), rtol=1e-12)
        np.testing.assert_allclose(p, -np.linalg.solve(rosen_hess(x), rosen_der(x)), rtol=1e-10)


def test_repeated_minimize_reuses_the_compiled_problem(monkeypatch):
    """Multi-start: the same objective (rebuilt, so only structurally equal) and options reuse
    the derived and compiled programs; other args, options or a new gradient rule rebuild."""
    from relayish.ir.op import get_op, register_gradient
    from relayish.optim import backends, cache
    monkeypatch.setattr(cache, "PROBLEMS", cache.ProblemCache())
    built = []
    real = cache.RelayishProblem

    class Counting(real):
        def __init__(self, *a, **kw):
            built.append(a[2])
            super().__init__(*a, **kw)
    # both builders: cache.relayish_problem (jax, interpreter) and AutoProblem (auto)
    monkeypatch.setattr(cache, "RelayishProblem", Counting)
    monkeypatch.setattr(backends, "RelayishProblem", Counting)
    f, X, y, (fun, grad, hess) = logistic()
    first = rl.optim.minimize(f, np.zeros(X.shape[1]), args=(X, y))
    again = rl.optim.minimize(logistic()[0], np.full(X.shape[1], 0.5), args=(X, y))
    assert built == ["newton"] and first.converged and again.converged
    np.testing.assert_allclose(again.x, first.x, atol=1e-8)
    same = rl.optim.minimize(f, np.zeros(X.shape[1]), args=(X, y))
    # evaluation counts are per call, not cumulative
    assert (same.nfev, same.ngev, same.nhev) == (first.nfev, first.ngev, first.nhev)
    assert built == ["newton"]
    rl.optim.minimize(f, np.zeros(X.shape[1]), args=(X * 2.0, y))          # other data
    rl.optim.minimize(f, np.zeros(X.shape[1]), args=(X, y), method="bfgs")  # other method
    assert built == ["newton", "newton", "bfgs"]
    register_gradient("exp")(get_op("exp").grad)     # re-registering invalidates the cache
    rl.optim.minimize(f, np.zeros(X.shape[1]), args=(X, y))
    assert built == ["newton", "newton", "bfgs", "newton"]


def test_cache_tells_modules_apart_by_their_helpers():
    text = """
    def @h(%x: Tensor[(2), float64]) -> Tensor[(2), float64] { BODY }
    def @main(%x: Tensor[(2), float64]) -> Tensor[(), float64] { sum(@h(%x)) }
    """
    square = rl.parse(text.replace("BODY", "%x * %x"))
    quartic = rl.parse(text.replace("BODY", "%x * %x * %x * %x"))
    a = rl.optim.minimize(square, np.array([1.0, 2.0]))
    b = rl.optim.minimize(quartic, np.array([1.0, 2.0]))
    assert a.n_iter == 1 and b.n_iter > 5        # Newton is exact on the quadratic only
    again = rl.optim.minimize(rl.parse(text.replace("BODY", "%x * %x")), np.array([1.0, 2.0]))
    assert again.n_iter == 1


# 400 levels by default (the recursive walk failed at 300; each level costs about 2 ms here)
@pytest.mark.parametrize("n", deep(400, 5000))
def test_deeply_nested_objective_module(n):
    """A Module objective over a scalar is wrapped in a function of a flat vector, renaming its
    @main: that walk recursed down nested calls (RecursionError at 300 levels); it runs under the
    deep-run guard like evaluate and grad."""
    x = rl.var("x", shape=(), dtype=F64)
    one = rl.const(np.float64(1.0))
    e = x
    for _ in range(n):
        e = e + one                      # (((x + 1) + 1) ...): calls nested n deep
    mod = rl.Module()
    mod["main"] = rl.Function([x], e * e)
    res = rl.optim.minimize(mod, 1.0, backend="interpreter")
    assert res.converged and res.n_iter == 1
    assert float(res.x) == pytest.approx(-n)
    again = rl.optim.minimize(mod, 2.0, backend="interpreter")     # the cached problem
    assert again.converged and float(again.x) == pytest.approx(-n)
    auto = rl.optim.minimize(mod, 2.0)            # auto's program-size count walks it too
    assert auto.converged and auto.backend == "interpreter"


UNBOUNDED = {"-x^2": lambda x: -rl.sum(x * x), "-x^4": lambda x: -rl.sum(x ** 4.0),
             "-exp(x)": lambda x: -rl.sum(rl.exp(x))}


@pytest.mark.parametrize("backend", BACKEND_CASES)
@pytest.mark.parametrize("objective, method", [("-x^2", "newton"), ("-x^4", "newton"),
                                               ("-x^2", "newton-cg"), ("-exp(x)", "gd")])
def test_objective_unbounded_below_diverges(objective, method, backend):
    """These go to -inf: the run must say it diverges, not that the objective's precision is
    reached (-x^4 with newton used to stop at f = -6.9e307, |g| = inf with that message)."""
    x = rl.var("x", shape=(2,), dtype=F64)
    f = rl.Function([x], UNBOUNDED[objective](x))
    with warnings.catch_warnings():
        warnings.simplefilter("error")             # no overflow warnings leak either
        res = rl.optim.minimize(f, [0.5, 0.25], method=method, backend=backend, max_iter=2000)
    assert not res.converged
    assert "diverges" in res.message and "precision" not in res.message, res.message
    assert res.fun < -1e300


def test_overflowing_gradient_on_the_way_down_diverges():
    # bfgs on -sum(exp(x)) stops at f = -1.4e154 with an overflowing gradient norm
    x = rl.var("x", shape=(2,), dtype=F64)
    res = rl.optim.minimize(rl.Function([x], -rl.sum(rl.exp(x))), [0.5, 0.25], method="bfgs",
                            backend="interpreter", max_iter=2000)
    assert not res.converged and "diverges" in res.message and "gradient overflowed" in res.message


def test_a_max_iter_stop_is_not_called_divergence():
    x = rl.var("x", shape=(2,), dtype=F64)
    res = rl.optim.minimize(rl.Function([x], -rl.sum(x * x)), [0.5, 0.25], method="bfgs",
                            backend="interpreter", max_iter=5)
    assert res.message == "stopped: max_iter=5 iterations reached"


def test_batched_hessian_falls_back_only_on_a_missing_batching_rule(monkeypatch):
    """The vmapped (f, g, H) evaluation gives way to the relayish Hessian program when jax has
    no batching rule (NotImplementedError); any other failure surfaces as a CompileError
    instead of being hidden by the fallback (it was `except Exception: return None`)."""
    from relayish.optim import cache
    from relayish.optim.newton_xla import DeviceNewton
    from relayish.optim.objective import flat_objective
    from relayish.optim.problem import RelayishProblem
    obj, spec, x = flat_objective(rosenbrock(2), rosenbrock_start(2))

    def failing(error):
        def check(self):
            raise error
        return check
    monkeypatch.setattr(DeviceNewton, "check",
                        failing(NotImplementedError("Batching rule for 'x' not implemented")))
    fallback = RelayishProblem(obj, x.size, "newton", "jax")
    assert not fallback.batched
    assert fallback.value_grad_hess(x)[0] == pytest.approx(24.2)
    monkeypatch.setattr(DeviceNewton, "check", failing(ValueError("boom")))
    with pytest.raises(rl.CompileError, match=r"(?s)ValueError: boom.*hessian=\"reverse\""):
        RelayishProblem(obj, x.size, "newton", "jax")
    monkeypatch.setattr(cache, "PROBLEMS", cache.ProblemCache())
    with pytest.raises(rl.CompileError, match=r"(?s)boom.*backend=\"interpreter\""):
        rl.optim.minimize(rosenbrock(2), rosenbrock_start(2), backend="jax")
    # a NotImplementedError that is no missing batching rule is a failure too
    monkeypatch.setattr(DeviceNewton, "check", failing(NotImplementedError("something else")))
    with pytest.raises(rl.CompileError, match=r"(?s)NotImplementedError: something else"):
        RelayishProblem(obj, x.size, "newton", "jax")


def test_batched_hessian_falls_back_only_on_jax_functions_refusal(monkeypatch):
    """jax_function() traces the program: a CompileError of that trace surfaces (it was hidden
    by `except CompileError: return None`, meant for the refusal of non-tensor programs)."""
    from relayish.backend.jax.function import JaxFunction, NotTensorFunction
    from relayish.optim.objective import flat_objective
    from relayish.optim.problem import RelayishProblem
    obj, spec, x = flat_objective(rosenbrock(2), rosenbrock_start(2))
    real = JaxFunction.jax_function

    def raising(error):
        def jax_function(self):
            raise error
        return jax_function
    monkeypatch.setattr(JaxFunction, "jax_function", raising(NotTensorFunction("refused")))
    fallback = RelayishProblem(obj, x.size, "newton", "jax")
    assert not fallback.batched
    monkeypatch.setattr(JaxFunction, "jax_function", real)
    assert fallback.value_grad_hess(x)[0] == pytest.approx(24.2)
    monkeypatch.setattr(JaxFunction, "jax_function",
                        raising(rl.CompileError("operator 'x' failed in the trace")))
    with pytest.raises(rl.CompileError, match="operator 'x' failed in the trace"):
        RelayishProblem(obj, x.size, "newton", "jax")
