"""Forward mode on hypothesis-generated programs (tests/strategies.py): tensors, tuples, closures,
lets, ifs, refs, the prelude's ADTs and globals. The jvp agrees with finite differences and with
reverse mode (<J v, 1> = <v, grad f>), and its program prints, re-parses and type-checks."""
import numpy as np
from hypothesis import given, settings

import relayish as rl
from adcheck import axpy, direction, inner
from relayish.ad.api import jvp
from strategies import differentiable_programs


def _tensor_params(prog):
    return all(isinstance(t, rl.TensorType) for t in prog.param_types)


def _central_difference(mod, args, ds, eps):
    plus = rl.evaluate(mod, *[axpy(a, d, eps) for a, d in zip(args, ds)])
    minus = rl.evaluate(mod, *[axpy(a, d, -eps) for a, d in zip(args, ds)])
    return (np.asarray(plus) - np.asarray(minus)) / (2 * eps)


@settings(max_examples=30, deadline=None)
@given(differentiable_programs())
def test_jvp_matches_finite_differences_and_reverse_mode(prog):
    mod, args = prog
    if not _tensor_params(prog):
        return
    rng = np.random.default_rng(0)
    ds = [direction(a, rng) for a in args]
    value, tangent = rl.evaluate(jvp(mod), *args, *ds)
    np.testing.assert_allclose(value, rl.evaluate(mod, *args), rtol=1e-12, atol=1e-12)
    fine, coarse = (_central_difference(mod, args, ds, eps) for eps in (1e-6, 1e-5))
    # a generated `if` may compare two equal quantities (mean(broadcast_to(x, [3])) < x), whose
    # rounding flips the branch within a step: there the function has no derivative, and the
    # two step sizes disagree by orders of magnitude; reverse mode is still compared below
    if np.allclose(fine, coarse, rtol=1e-3, atol=1e-4):
        np.testing.assert_allclose(tangent, fine, rtol=1e-5, atol=1e-6)
    _, grads = rl.evaluate(rl.gradient(mod), *args)
    assert float(tangent) == np.float64(inner(grads, tuple(ds))) or \
        abs(float(tangent) - inner(grads, tuple(ds))) <= 1e-9 * (1 + abs(float(tangent)))


@settings(max_examples=15, deadline=None)
@given(differentiable_programs(max_depth=2))
def test_jvp_prints_parses_and_typechecks(prog):
    mod, args = prog
    if not _tensor_params(prog):
        return
    j = jvp(mod)
    again = rl.parse(rl.astext(j))
    rl.assert_structural_equal(again, j)
    rl.infer_type(again)
    ds = [direction(a, np.random.default_rng(1)) for a in args]
    a = rl.evaluate(j, *args, *ds)
    b = rl.evaluate(again, *args, *ds)
    np.testing.assert_allclose(np.asarray(a[1]), np.asarray(b[1]), rtol=1e-12)
