"""Hypothesis-generated programs: the jax backend agrees with the interpreter, on values and on
gradients."""
import numpy as np
from hypothesis import HealthCheck, given, settings

import relayish as rl
from relayish.ir.types import walk_type
from strategies import differentiable_programs, programs
from test_jax import same_value


def _has_function(t):
    return any(isinstance(s, rl.FuncType) for s in walk_type(t))


def _fresh_args(args):
    """Copies of the arguments (the program may write RefValue arguments)."""
    def copy(v):
        if isinstance(v, tuple):
            return tuple(copy(x) for x in v)
        if isinstance(v, rl.RefValue):
            return rl.RefValue(copy(v.value))
        if isinstance(v, rl.ConstructorValue):
            return rl.ConstructorValue(v.constructor, [copy(x) for x in v.fields])
        return np.array(v, copy=True)
    return tuple(copy(a) for a in args)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(offset_comparisons=True))
def test_random_programs_agree(prog):
    mod, args = prog
    main = mod["main"]
    if any(_has_function(p.type_annotation) for p in main.params) or \
            _has_function(main.ret_type):
        # function arguments and results stay with the interpreter: a clear CompileError here
        try:
            rl.compile(mod)(*_fresh_args(args))
        except rl.CompileError:
            return
        return
    in_interp, in_jax = _fresh_args(args), _fresh_args(args)
    expected = rl.evaluate(mod, *in_interp)
    got = rl.compile(mod)(*in_jax)
    same_value(expected, got, rtol=2e-5, atol=1e-5)
    for a, b in zip(in_interp, in_jax):      # written references agree too
        same_value(a, b, path="argument", rtol=2e-5, atol=1e-5)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(differentiable_programs(offset_comparisons=True))   # no branch on a last-ulp tie
def test_random_gradients_agree(prog):
    mod, args = prog
    g = rl.gradient(mod)
    expected = rl.evaluate(g, *_fresh_args(args))
    got = rl.compile(g)(*_fresh_args(args))
    same_value(expected, got, rtol=1e-6, atol=1e-8)
