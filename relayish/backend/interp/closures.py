"""Function values that are not compiled code, and the interpreter's hooks into the runtime's
argument checking (relayish/backend/runtime/args.py).

    CheckedCallable(fn, ftype, what, checker)   a Python callable passed for a parameter of
                                                function type: each call checks its result
    ConstructorClosure(ctor)                    a constructor used as a value (`map(Some, xs)`)
    value_checker()                             the ValueChecker of one compiled function:
                                                interpreter closures pass for function types
                                                (arity checked), Python callables are wrapped

Interpreter closures themselves (run.InterpreterClosure) are compiled code; the machine calls
everything here from Python (run.call_foreign).
"""
from __future__ import annotations

import inspect

from relayish.errors import EvaluationError
from relayish.backend.values import Closure, ConstructorValue
from relayish.backend.runtime.args import ValueChecker
from relayish.backend.runtime.describe import short
from relayish.backend.interp.run import InterpreterClosure

__all__ = ["CheckedCallable", "ConstructorClosure", "value_checker"]


class CheckedCallable(Closure):
    """A Python callable passed where the program expects a function of type `ftype`.

    Its results are checked (and Python scalars/lists converted) against the declared return
    type on every call, so a string or a wrong-shaped array never flows on as a program value.
    `what` names it in messages ("parameter %f of @main").
    """

    __slots__ = ("fn", "ftype", "what", "checker")
    names_call_site = True      # run.call_foreign adds the calling expression to its errors

    def __init__(self, fn, ftype, what, checker):
        self.fn, self.ftype, self.what, self.checker = fn, ftype, what, checker

    def __call__(self, *args):
        n = len(self.ftype.arg_types)
        if len(args) != n:
            raise EvaluationError(f"the Python function passed for {self.what} takes {n} "
                                  f"argument(s), got {len(args)}")
        result = self.fn(*args)
        return self.checker.to_value(
            result, self.ftype.ret_type,
            f"the result of the Python function passed for {self.what}",
            subject=f"the Python function passed for {self.what} returned a bad result")

    def __repr__(self):
        return f"<Closure {self.what}: {short(self.fn)}>"


def _accepts(fn, n):
    """False when `fn`'s signature says it cannot take n positional arguments (True if unknown)."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):         # builtins, ufuncs: no signature to read
        return True
    try:
        signature.bind(*range(n))
    except TypeError:
        return False
    return True


def _function_conforms(v, t):
    """An interpreter closure of the right arity passes for a function type unchanged."""
    return isinstance(v, InterpreterClosure) and v.code.nparams == len(t.arg_types)


def _convert_function(checker, v, t, where, fail):
    """A function argument (runtime.args' hook): interpreter closures are checked for arity,
    constructors used as values are typed already, Python callables are wrapped so that their
    results are checked (CheckedCallable)."""
    n = len(t.arg_types)
    if isinstance(v, InterpreterClosure):
        if v.code.nparams != n:
            fail(f"a function of {v.code.nparams} parameter(s)")
        return v
    if isinstance(v, CheckedCallable):
        if v.ftype == t:
            return v
    elif isinstance(v, Closure):
        return v
    if not _accepts(v, n):
        fail(f"a Python function that cannot take {n} argument(s)")
    return CheckedCallable(v, t, where, checker)


def value_checker():
    return ValueChecker(function_conforms=_function_conforms, convert_function=_convert_function)


class ConstructorClosure(Closure):
    """A constructor used as a first-class function (`map(Some, xs)`)."""

    def __init__(self, ctor):
        self.ctor = ctor

    def __call__(self, *args):
        if len(args) != len(self.ctor.inputs):
            raise EvaluationError(f"constructor {self.ctor.name_hint} takes {len(self.ctor.inputs)} "
                                  f"field(s), got {len(args)}")
        return ConstructorValue(self.ctor, list(args))

    def __repr__(self):
        return f"<Closure {self.ctor.name_hint}>"
