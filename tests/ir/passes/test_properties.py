"""The passes preserve meaning on random well-typed programs (tests/strategies.py): the same
values on the interpreter, and the output type-checks, prints, parses and differentiates."""
import numpy as np
from hypothesis import given, settings

import relayish as rl
from strategies import programs

PIPELINES = {
    "dead_code": [rl.passes.dead_code],
    "to_anf": [rl.passes.to_anf],
    "anf-dce-back": [rl.passes.to_anf, rl.passes.dead_code, rl.passes.from_anf],
}


def assert_same_value(got, want, path="result", atol=0.0):
    """Equal runtime values (exactly: the passes neither reorder nor rewrite arithmetic; a
    gradient of a rewritten program is another program, equal up to rounding: atol)."""
    stack = [(got, want, path)]
    while stack:
        got, want, path = stack.pop()
        if isinstance(want, tuple):
            assert isinstance(got, tuple) and len(got) == len(want), path
            stack.extend((g, w, f"{path}.{i}") for i, (g, w) in enumerate(zip(got, want)))
        elif isinstance(want, rl.ConstructorValue):
            assert got.constructor.name_hint == want.constructor.name_hint, path
            stack.extend((g, w, f"{path}.{want.constructor.name_hint}[{i}]")
                         for i, (g, w) in enumerate(zip(got.fields, want.fields)))
        elif isinstance(want, rl.RefValue):
            stack.append((got.value, want.value, "!" + path))
        elif isinstance(want, rl.Closure):
            assert isinstance(got, rl.Closure), path     # closures are compared by their uses
        else:
            if atol:
                np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-12,
                                           atol=atol, err_msg=path)
            else:
                np.testing.assert_array_equal(np.asarray(got), np.asarray(want), err_msg=path)
            assert np.asarray(got).dtype == np.asarray(want).dtype, path


def _outcome(program, args):
    try:
        return rl.evaluate(program, *args), None
    except rl.EvaluationError as error:
        return None, type(error)


def _check(mod, args, passes):
    out = rl.optimize(mod, passes=passes, check=True)     # check: type-checks after each pass
    (want, failed), (got, fails) = _outcome(mod, args), _outcome(out, args)
    assert fails is failed
    if failed is None:
        assert_same_value(got, want)
    rl.assert_structural_equal(rl.parse(rl.astext(out)), out)
    return out


@given(programs(max_depth=4))
def test_passes_keep_the_values_of_random_programs(prog):
    for passes in PIPELINES.values():
        _check(prog.mod, prog.args, passes)


@settings(max_examples=10)
@given(programs(differentiable=True))
def test_optimized_programs_differentiate_to_the_same_gradient(prog):
    want = rl.evaluate(rl.gradient(prog.mod, optimize=False), *prog.args)
    for passes in PIPELINES.values():
        out = _check(prog.mod, prog.args, passes)
        assert_same_value(rl.evaluate(rl.gradient(out, optimize=False), *prog.args), want)
