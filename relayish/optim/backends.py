"""Which backend evaluates a problem: the backend choices and backend="auto"'s ski-rental rule.

A named backend (any in relayish/backend/registry.py) gives a RelayishProblem (problem.py) of
that backend. "auto" is a policy over the registered backends, not a backend: an AutoProblem
starts on a backend that runs at once (no setup cost: the interpreter) and moves to the
compiling backend with the lowest modelled setup cost (the record's `setup_cost`: jax) once its
evaluations have cost that much (notes/optim.md, "backend='auto'").
"""
from __future__ import annotations

import time

from relayish.backend import registry
from relayish.errors import CompileError, RelayishError
from relayish.ir.module import Module
from relayish.ir.visitor import ExprVisitor, run_deep
from relayish.optim import hessian as programs
from relayish.optim.problem import RelayishProblem

AUTO = "auto"


def backend_choices():
    """What minimize's backend= accepts: "auto" and every registered backend."""
    return (AUTO,) + registry.names()


def check_backend(backend, device):
    """A RelayishError unless minimize can run `backend` (a choice above) on `device`."""
    if backend != AUTO:
        if backend not in registry.names():    # the message lists "auto" too
            raise RelayishError(f"unknown backend {backend!r}; choose one of "
                                f"{', '.join(backend_choices())}")
        registry.check_device(registry.get(backend), device)
    elif not any(registry.get(name).device_name(device) for name in registry.names()):
        raise RelayishError(f"unknown device {device!r}; choose one of "
                            f"{', '.join(registry.all_devices())}")


def auto_backends(device):
    """backend="auto"'s candidates on `device`: (the Backend records that run at once, those
    that compile), each in registration order."""
    usable = [registry.get(name) for name in registry.names()
              if registry.get(name).device_name(device) is not None]
    return ([b for b in usable if not b.compiles], [b for b in usable if b.compiles])


class _CallCounter(ExprVisitor):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def visit_Call(self, e):
        self.calls += 1
        super().visit_Call(e)


def op_calls(prog):
    """The number of calls in a Function or Module (every function of it): the size measure of
    the compile-cost model."""
    counter = _CallCounter()
    for fn in ([prog[name] for name in prog.functions] if isinstance(prog, Module) else [prog]):
        run_deep(counter.visit, fn)
    return counter.calls


def compile_cost(method, gradient_calls, backend):
    """Modelled CPU seconds for the compiling Backend record `backend` to get this problem
    ready (its `setup_cost`: the fitted model plus one-time costs not paid yet)."""
    return backend.setup_cost(method, gradient_calls)


class AutoProblem:
    """backend="auto": run on a backend that runs at once (the interpreter), move to a
    compiling one (jax) once the evaluations have cost what compiling is expected to cost (the
    ski-rental rule).

    How many iterations a run takes is not known before it runs, and an interpreted
    evaluation's cost is best known by doing one. So the problem starts interpreted (no jax
    import, no compilation) and adds up the CPU time of its interpreted evaluations, across
    calls of minimize that reuse it from the cache (multi-start); when that exceeds the
    modelled setup cost of the compiling backend (compile_cost: program size and method; the
    cheapest where several are registered), it builds that backend's problem and every later
    evaluation is compiled — mid-run, under the running method (the methods only see fun /
    value_and_grad / value_grad_hess / hvp, so their state carries over), and from the start
    of later calls (then Newton runs its XLA loop). This never costs more than about twice the
    better of the two choices made in hindsight (plus one evaluation and the model's error). A
    CompileError while compiling (a program the backend refuses) keeps the problem where it
    is; a failure inside relayish (hessian.InternalCompileError) surfaces. A device that no
    backend running at once supports (device="gpu") is compiled at once; with no compiling
    backend for the device, the problem stays where it started.
    """

    def __init__(self, obj, n, method, backend=AUTO, device="cpu", hessian="auto"):
        self.obj, self.n, self.method = obj, n, method
        self.device, self.hessian = device, hessian
        self.nfev = self.ngev = self.nhev = 0
        at_once, compiling = auto_backends(device)
        if not at_once and not compiling:
            check_backend(AUTO, device)      # raises: no registered backend runs there
        self.gradient = programs.gradient_program(obj)
        calls = op_calls(self.gradient)
        costs = [(compile_cost(method, calls, b), i) for i, b in enumerate(compiling)]
        cost, best = min(costs) if costs else (float("inf"), None)
        self.target = None if best is None else compiling[best].name
        self.budget = cost
        self.interpreted = (None if not at_once else RelayishProblem(
            obj, n, method, at_once[0].name, device, hessian, gradient=self.gradient))
        self.spent = 0.0            # CPU seconds of interpreted evaluations so far
        self.compiled = None        # the compiling backend's RelayishProblem, once built
        self.compile_error = None   # why the compiling backend refused the problem, if it did
        if self.interpreted is None:
            self._switch(None)

    @property
    def backend(self):
        return (self.compiled or self.interpreted).backend

    def reset_counts(self):
        self.nfev = self.ngev = self.nhev = 0
        for problem in (self.interpreted, self.compiled):
            if problem is not None:
                problem.reset_counts()

    def _switch(self, x):
        """Build the compiling backend's problem; at x, compile (and run once) what the rest of
        the run calls, so that a program the backend refuses is found here and keeps the
        problem where it is."""
        try:
            compiled = RelayishProblem(self.obj, self.n, self.method, self.target, self.device,
                                       self.hessian, gradient=self.gradient)
            if x is not None:
                # the running method calls it step by step (Newton: the host loop over the
                # device's (f, g, H, p) evaluation and the objective)
                compiled.warm_up(x, loop="host")
        except programs.InternalCompileError:
            raise
        except CompileError as e:
            if self.interpreted is None:
                raise
            self.compile_error = e
            return
        self.compiled = compiled

    def _evaluate(self, name, *args):
        if self.compiled is not None:
            return getattr(self.compiled, name)(*args)
        start = time.process_time()
        out = getattr(self.interpreted, name)(*args)
        self.spent += time.process_time() - start
        if self.spent > self.budget and self.compile_error is None \
                and self.target is not None:
            self._switch(args[0])
        return out

    def fun(self, x):
        self.nfev += 1
        return self._evaluate("fun", x)

    def value_and_grad(self, x):
        self.nfev += 1
        self.ngev += 1
        return self._evaluate("value_and_grad", x)

    def value_grad_hess(self, x):
        self.nfev += 1
        self.ngev += 1
        self.nhev += 1
        return self._evaluate("value_grad_hess", x)

    def hvp(self, x, v):
        self.nhev += 1
        return self._evaluate("hvp", x, v)
