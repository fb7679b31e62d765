"""Which backend evaluates a problem: backend="auto"'s ski-rental rule and its cost model.

"interpreter" and "jax" are RelayishProblems (problem.py) of that backend; "auto" is an
AutoProblem, which starts interpreted and compiles with jax once its interpreted evaluations
have cost what compiling is modelled to cost (notes/optim.md, "backend='auto'").
"""
from __future__ import annotations

import sys
import time

from relayish.errors import CompileError
from relayish.ir.module import Module
from relayish.ir.visitor import ExprVisitor, run_deep
from relayish.optim.problem import RelayishProblem

BACKENDS = ("auto", "jax", "interpreter")


# The modelled CPU seconds of the jax backend's setup (AD of its programs, tracing, XLA
# compilation, warm-up) on the 2-core development machine, from fits to measurements of
# RelayishProblem(..., "jax") + warm_up against the number of op calls in the gradient program
# (notes/optim.md, "backend='auto'"): (fixed seconds, seconds per gradient op call).
COMPILE_COST = {
    "newton": (0.85, 1.2e-3),        # the XLA loop around the vmapped (f, g, H, p) evaluation
    "newton-cg": (0.25, 0.75e-3),    # objective, gradient and HVP programs
    "trust-ncg": (0.25, 0.75e-3),
    "bfgs": (0.12, 0.35e-3),         # objective and gradient programs
    "gd": (0.12, 0.35e-3),
}
JAX_IMPORT_COST = 0.45      # `import jax` (once per process)
JAX_FIRST_COMPILE_COST = 0.5    # XLA:CPU's first compilation in a process (client, LLVM setup)


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


def compile_cost(method, gradient_calls):
    """Modelled CPU seconds for the jax backend to get this problem ready (COMPILE_COST), plus
    jax's one-time costs when this process has not paid them yet."""
    fixed, per_call = COMPILE_COST[method]
    cost = fixed + per_call * gradient_calls
    if "jax" not in sys.modules:
        cost += JAX_IMPORT_COST
    if not RelayishProblem.jax_started:
        cost += JAX_FIRST_COMPILE_COST
    return cost


class AutoProblem:
    """backend="auto": run on the interpreter, compile with jax once the interpreter's
    evaluations have cost what compiling is expected to cost (the ski-rental rule).

    How many iterations a run takes is not known before it runs, and an interpreted
    evaluation's cost is best known by doing one. So the problem starts interpreted (no jax
    import, no compilation) and adds up the CPU time of its interpreted evaluations, across
    calls of minimize that reuse it from the cache (multi-start); when that exceeds the
    modelled setup cost of the jax backend (compile_cost: program size and method), it builds
    the jax problem and every later evaluation is compiled — mid-run, under the running method
    (the methods only see fun / value_and_grad / value_grad_hess / hvp, so their state carries
    over), and from the start of later calls (then Newton runs its XLA loop). This never costs
    more than about twice the better of the two choices made in hindsight (plus one
    evaluation and the model's error). A CompileError while compiling (a program the jax
    backend refuses) keeps the problem on the interpreter. device="gpu" is compiled at once.
    """

    def __init__(self, obj, n, method, backend="auto", device="cpu", hessian="auto"):
        self.obj, self.n, self.method = obj, n, method
        self.device, self.hessian = device, hessian
        self.nfev = self.ngev = self.nhev = 0
        self.interpreted = RelayishProblem(obj, n, method, "interpreter", device, hessian)
        self.budget = compile_cost(method, op_calls(self.interpreted.gradient))
        self.spent = 0.0            # CPU seconds of interpreted evaluations so far
        self.compiled = None        # the jax RelayishProblem, once built
        self.compile_error = None   # why the jax backend refused the problem, if it did
        if device != "cpu":
            self._switch(None)

    @property
    def backend(self):
        return "jax" if self.compiled is not None else "interpreter"

    def reset_counts(self):
        self.nfev = self.ngev = self.nhev = 0
        for problem in (self.interpreted, self.compiled):
            if problem is not None:
                problem.reset_counts()

    def _switch(self, x):
        """Build the jax problem; at x, compile (and run once) what the rest of the run calls,
        so that a program the jax backend refuses is found here and keeps the interpreter."""
        try:
            compiled = RelayishProblem(self.obj, self.n, self.method, "jax", self.device,
                                       self.hessian, gradient=self.interpreted.gradient)
            if x is not None:
                # the running method calls it step by step (Newton: the host loop over the
                # device's (f, g, H, p) evaluation and the objective)
                compiled.warm_up(x, loop="host")
        except CompileError as e:
            if self.device != "cpu":
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
        if self.spent > self.budget and self.compile_error is None:
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
