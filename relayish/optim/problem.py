"""A relayish problem: the callables the methods use, from interpreted or compiled programs.

RelayishProblem derives its programs (hessian.py) from the flat objective (objective.py) once
and runs them on one registered backend (relayish/backend/registry.py, through rl.compile):
`fun`, `value_and_grad`, `value_grad_hess` (Newton; with its direction p on the device path of
a jax-traceable backend), `hvp`, counting evaluations in nfev / ngev / nhev.
"""
from __future__ import annotations

import math

import numpy as np

from relayish.backend import registry
from relayish.backend.api import compile as rl_compile
from relayish.optim import hessian as programs
from relayish.optim.newton import history_capacity, runs_in_xla


class RelayishProblem:
    """The callables of methods.py, from relayish programs run on the backend named `backend`."""

    def __init__(self, obj, n, method, backend="jax", device="cpu", hessian="auto",
                 gradient=None):
        self.n = n
        self.backend, self.device = backend, device
        record = registry.get(backend)
        registry.check_device(record, device)
        self.to_numpy = record.to_numpy     # results (device arrays) -> numpy, for the methods
        self.nfev = self.ngev = self.nhev = 0
        self._warm = set()          # what warm_up compiled: (loop, history capacity)
        # the gradient program (rl.gradient of obj), derived here unless given (AutoProblem)
        self.gradient = gradient = programs.gradient_program(obj) if gradient is None else gradient
        self._fun = self._run(obj)
        self._vg = self._run(gradient)
        self._vgh = self._hess = self._hvp = None
        # newton on a jax-traceable backend (cpu, forward Hessian): f, g, H and the direction
        # in one vmapped call, with the iterate kept on the device (newton.run_newton uses it
        # when present)
        self.device_newton = None
        if method == "newton":
            if record.jax_traceable and hessian in ("auto", "forward") \
                    and record.device_name(device) == "cpu":
                self.device_newton = programs.batched_newton(
                    self._run(programs.jvp_of_gradient(gradient)), self._fun, n)
            mode = "reverse" if hessian == "auto" else hessian
            fused = (None if self.device_newton is not None
                     else programs.fused_value_grad_hess(obj, gradient, mode))
            if fused is not None:
                self._vgh = self._run(fused)
            elif self.device_newton is None:
                self._hess = self._run(programs.hessian_program(obj, mode))
        elif method in ("newton-cg", "trust-ncg"):
            self._hvp = self._run(programs.hvp_program(obj))

    @property
    def batched(self):
        """Newton on jax uses the vmapped (f, g, H, p) evaluation kept on the device."""
        return self.device_newton is not None

    def reset_counts(self):
        self.nfev = self.ngev = self.nhev = 0

    def count(self, calls=1):
        """Count `calls` fused (f, g, H) evaluations done through device_newton."""
        self.nfev += calls
        self.ngev += calls
        self.nhev += calls

    def warm_up(self, x, watched=True, max_iter=0, loop=None):
        """Run every compiled program once at x, so that tracing and XLA compilation happen
        before the first iteration (and iteration timings measure iterations). `watched`: the
        iterations will be reported live (so Newton's device loop runs step by step);
        `max_iter`: the whole-loop program is compiled for that history size. `loop`
        overrides which Newton loop will run: "xla", "stepwise", or "host" (the host loop over
        value_grad_hess and fun: backend="auto" after it switched to jax mid-run). A problem
        reused from the cache is warm already for what it ran before."""
        if loop is None:
            loop = "xla" if runs_in_xla(watched, max_iter) else "stepwise"
        what = (loop, history_capacity(max_iter) if loop == "xla" else None)
        if what in self._warm:
            return
        self._warm.add(what)
        compiled = ((self._fun, (x,)), (self._vg, (x,)), (self._vgh, (x,)),
                    (self._hess, (x,)), (self._hvp, (x, x)))
        if self.device_newton is not None:
            self.device_newton.warm_up(x, loop, max_iter=max_iter)
            # the device loops call no other program (the line search is in them); the host
            # loop's line search calls the objective (the others compile if something calls
            # them)
            compiled = ((self._fun, (x,)),) if loop == "host" else ()
        for fn, args in compiled:
            if fn is not None:
                self._call(fn, *args)

    def _run(self, prog):
        return rl_compile(prog, backend=self.backend, device=self.device)

    @staticmethod
    def _call(fn, *args):
        with np.errstate(all="ignore"):
            return fn(*args)

    def fun(self, x):
        self.nfev += 1
        return self._scalar(self._call(self._fun, x))

    def value_and_grad(self, x):
        self.nfev += 1
        self.ngev += 1
        out = self._call(self._vg, x)
        return self._scalar(out[0]), self._vector(out[1][0])

    def value_grad_hess(self, x):
        self.nfev += 1
        self.ngev += 1
        self.nhev += 1
        p = None
        if self.device_newton is not None:
            f, g, H, p = self.device_newton.value_grad_hess(x)
        elif self._vgh is not None:
            f, g, H = self._call(self._vgh, x)
        else:
            f, g = self.value_and_grad(x)
            self.nfev -= 1
            self.ngev -= 1
            H = self._call(self._hess, x)
        if p is not None:
            p = self._vector(p)
        H = np.asarray(self.to_numpy(H), dtype=np.float64).reshape(self.n, self.n)
        return self._scalar(f), self._vector(g), H, p

    def hvp(self, x, v):
        self.nhev += 1
        return self._vector(self._call(self._hvp, x, v))

    def _scalar(self, v):
        v = float(np.asarray(self.to_numpy(v)))
        return v if not math.isnan(v) else math.nan

    def _vector(self, v):
        return np.asarray(self.to_numpy(v), dtype=np.float64).reshape(self.n)
