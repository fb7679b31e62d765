"""rl.optim.minimize: the front end (option checks, the result type, progress printing) over
methods.py and the problem modules (objective.py, cache.py)."""
from __future__ import annotations

import math
import sys

import attrs
import numpy as np

from relayish.backend import registry
from relayish.errors import CompileError, RelayishError
from relayish.optim.backends import AUTO, check_backend
from relayish.optim.cache import relayish_problem
from relayish.optim.hessian import HESSIANS
from relayish.optim.methods import METHODS, CallableProblem, solve
from relayish.optim.objective import flat_objective
from relayish.optim.outcome import Monitor


@attrs.define(repr=False)
class OptimizeResult:
    """What minimize found.

    x: the minimizer, in the structure of x0; fun: f(x); grad_norm: |grad f(x)| (Euclidean);
    n_iter: iterations taken; converged: grad_norm <= tol; message: why it stopped;
    history: one dict per iteration {"iter", "fun", "grad_norm", "step"} ("step": the line
    search step that led there, None at the start and for trust-ncg, whose entries carry the
    trust "radius" instead); nfev/ngev/nhev: objective, gradient and
    Hessian (or Hessian-vector product) evaluations.
    """
    x: object
    fun: float
    grad_norm: float
    n_iter: int
    converged: bool
    message: str
    history: list
    method: str
    backend: str
    nfev: int = 0
    ngev: int = 0
    nhev: int = 0

    @property
    def success(self):
        return self.converged

    def __repr__(self):
        return (f"OptimizeResult(method={self.method!r}, converged={self.converged}, "
                f"n_iter={self.n_iter}, fun={self.fun:.10g}, grad_norm={self.grad_norm:.3g}, "
                f"message={self.message!r}, x={self.x!r})")


def _check_options(method, tol, max_iter, backend, device, callback=None):
    if callback is not None and not callable(callback):
        raise RelayishError(f"callback must be a function of one history entry (a dict), got "
                            f"{type(callback).__name__} {callback!r}")
    if method not in METHODS:
        raise RelayishError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
    # the registry's checks and words, as rl.compile's (unknown names list the registered ones)
    check_backend(backend, device)
    if isinstance(tol, bool) or not isinstance(tol, (int, float, np.floating, np.integer)) \
            or not tol >= 0 or math.isinf(tol):
        raise RelayishError(f"tol must be a non-negative number, got {tol!r}")
    if isinstance(max_iter, bool) or not isinstance(max_iter, (int, np.integer)) or max_iter < 0:
        raise RelayishError(f"max_iter must be a non-negative int, got {max_iter!r}")


def progress_printer(stream=None):
    """A callback printing one line per iteration (what verbose=True uses)."""
    def show(entry):
        step = entry["step"]
        step_text = "" if step is None else f"  step {step:.3g}"
        if "radius" in entry:
            step_text += f"  radius {entry['radius']:.3g}"
        print(f"iter {entry['iter']:4d}  f {entry['fun']: .12g}  |grad| {entry['grad_norm']:.3e}"
              f"{step_text}", file=stream or sys.stdout, flush=True)
    return show


def minimize(f, x0, method="newton", tol=1e-8, max_iter=100, backend="auto", verbose=False,
             device="cpu", args=(), callback=None, hessian="auto"):
    """Minimize a relayish objective.

        x = rl.var("x", shape=(2,), dtype="float64")
        a, b = rl.take(x, 0), rl.take(x, 1)
        f = rl.Function([x], (1.0 - a) ** 2.0 + 100.0 * (b - a * a) ** 2.0)
        res = rl.optim.minimize(f, np.array([-1.2, 1.0]), method="newton")
        res.x, res.fun, res.converged, res.n_iter

    f: a Function or a Module (its @main) returning a float scalar; its first parameter is the
    variable (a tensor, or a tuple/ADT of tensors such as a prelude List; x0 has that
    structure, and a Python list is accepted for a List), the others are fixed `args`.
    method: "newton" (exact Hessian, modified Cholesky, Armijo line search), "newton-cg"
    (truncated CG on Hessian-vector products), "trust-ncg" (Steihaug CG trust region), "bfgs",
    "gd" (Barzilai-Borwein steps). backend: "auto" or a registered backend
    (relayish/backend/registry.py). "jax" compiles the objective, its gradient and its
    Hessian (or Hessian-vector product) once; "interpreter" evaluates them with rl.evaluate;
    "auto" (the default) starts on the interpreter and compiles with jax once the interpreted
    evaluations have cost what compiling is modelled to cost (backends.AutoProblem), so small
    problems never wait for XLA. res.backend says which ran: "interpreter", "jax", or
    "interpreter+jax" (compiled during the run).
    Stops when |grad| <= tol (converged=True) or with converged=False and a `message`.
    verbose=True prints one line per iteration; callback(entry) receives each history entry.
    hessian (newton): "forward" builds the Hessian from n forward-over-reverse Hessian-vector
    products, "reverse" uses rl.hessian (reverse over reverse); "auto" (the default) takes
    forward on the jax backend's cpu device path, where it is vmapped, and reverse elsewhere.
    """
    _check_options(method, tol, max_iter, backend, device, callback)
    if hessian not in HESSIANS:
        raise RelayishError(f"unknown hessian {hessian!r}; choose one of {', '.join(HESSIANS)}")
    obj, spec, x_flat = flat_objective(f, x0, args)
    try:
        problem = relayish_problem(obj, x_flat.size, method, backend, device, hessian)
        if backend == AUTO and problem.compiled is not None:
            problem = problem.compiled      # compiled by an earlier call: jax from the start
        if registry.get(problem.backend).compiles:
            problem.warm_up(x_flat, watched=verbose or callback is not None, max_iter=max_iter)
    except CompileError as e:
        # the backend's advice names rl.evaluate; here the switch is minimize's own option
        raise CompileError(f"{e}\n(rl.optim.minimize: pass backend=\"interpreter\" to run this "
                           "objective without jax)") from e
    return _run(problem, x_flat, spec.value, method, tol, max_iter, verbose, callback,
                problem.backend)


def minimize_callables(fun, grad, x0, method="newton", tol=1e-8, max_iter=100, hess=None,
                       hvp=None, verbose=False, callback=None):
    """The same methods over plain numpy callables on a float64 vector (for comparisons)."""
    _check_options(method, tol, max_iter, "auto", "cpu", callback)
    if method == "newton" and hess is None:
        raise RelayishError("method 'newton' needs hess=")
    if method in ("newton-cg", "trust-ncg") and hess is None and hvp is None:
        raise RelayishError(f"method {method!r} needs hvp= or hess=")
    x = np.asarray(x0, dtype=np.float64).reshape(-1)
    return _run(CallableProblem(fun, grad, hess, hvp), x, lambda v: v, method, tol, max_iter,
                verbose, callback, "numpy")


def _run(problem, x_flat, unflatten, method, tol, max_iter, verbose, callback, backend):
    callbacks = [c for c in (progress_printer() if verbose else None, callback) if c is not None]
    # no callback at all when nothing watches: Newton on jax then keeps its iterations in XLA
    monitor = Monitor((lambda e: [c(e) for c in callbacks]) if callbacks else None)
    # overflow on the way to a stop (an objective unbounded below) is reported by the outcome,
    # not as numpy warnings from the methods' arithmetic
    with np.errstate(over="ignore", invalid="ignore"):
        outcome = solve(method, problem, x_flat, float(tol), int(max_iter), monitor)
    if getattr(problem, "backend", backend) != backend:
        backend = f"{backend}+{problem.backend}"    # backend="auto" compiled during this run
    if verbose:
        print(f"{method}: {outcome.message} after {outcome.n_iter} iterations, "
              f"f = {outcome.fun:.12g}", flush=True)
    return OptimizeResult(
        x=unflatten(outcome.x), fun=float(outcome.fun),
        grad_norm=_norm(outcome.grad), n_iter=int(outcome.n_iter),
        converged=bool(outcome.converged), message=outcome.message, history=monitor.history,
        method=method, backend=backend, nfev=getattr(problem, "nfev", 0),
        ngev=getattr(problem, "ngev", 0), nhev=getattr(problem, "nhev", 0))


def _norm(v):
    with np.errstate(over="ignore"):      # a diverging run's gradient may overflow the norm
        return float(np.linalg.norm(v))
