"""The default pipeline (rl.optimize without passes; ir/passes/manager.py): which passes, that it
keeps meaning on random programs, that AD entry points run it by default, and that a large
program gets dead_code only (the pipeline stays linear and cheap)."""
import numpy as np
import pytest
from hypothesis import given, settings

import relayish as rl
from relayish.ir.passes import manager
from relayish.ir.visitor import build_let_chain
from strategies import programs
from tests.ir.passes.test_properties import assert_same_value

F = "float64"


def _outcome(program, args):
    try:
        return rl.evaluate(program, *args), None
    except rl.EvaluationError as error:
        return None, type(error)


@given(programs(max_depth=4))                 # the profile's 15 examples; 25 under -m slow
def test_the_default_pipeline_keeps_the_values_of_random_programs(prog):
    _pipeline_keeps_the_value(prog)


@pytest.mark.slow
@settings(max_examples=25)
@given(programs(max_depth=4))
def test_the_default_pipeline_keeps_the_values_of_more_random_programs(prog):
    _pipeline_keeps_the_value(prog)


def _pipeline_keeps_the_value(prog):
    out = rl.optimize(prog.mod, check=True)               # type-checks after every pass
    (want, failed), (got, fails) = _outcome(prog.mod, prog.args), _outcome(out, prog.args)
    assert fails is failed                                # a failure stays a failure
    if failed is None:
        assert_same_value(got, want)
    rl.assert_structural_equal(rl.parse(rl.astext(out)), out)


@settings(max_examples=10)
@given(programs(differentiable=True))
def test_optimized_random_programs_and_their_gradients_differentiate_again(prog):
    raw = rl.gradient(prog.mod, optimize=False)
    want = rl.evaluate(raw, *prog.args)
    optimized = rl.gradient(prog.mod)
    assert_same_value(rl.evaluate(optimized, *prog.args), want, atol=1e-14)
    out = rl.optimize(prog.mod, check=True)
    assert_same_value(rl.evaluate(rl.gradient(out), *prog.args), want, atol=1e-14)
    again = rl.optimize(optimized, check=True)           # the optimized gradient, re-optimized
    rl.assert_structural_equal(rl.parse(rl.astext(again)), again)


def _power(order):
    y = rl.var("y", shape=(), dtype=F)
    return rl.Function([y], rl.power(y, rl.const(5.0, F))), order


def _lets(program):
    return manager.count_lets(program, 10 ** 9)


@pytest.mark.parametrize("order", [1, 2, 3])
def test_entry_points_optimize_by_default_and_optimize_false_gives_the_transform(order):
    f, _ = _power(order)
    raw = f
    for _ in range(order):
        raw = rl.grad(raw, optimize=False)
    prev = opt_input(f, order)
    opt, last_raw = rl.grad(prev), rl.grad(prev, optimize=False)
    assert _lets(opt) < _lets(raw) // 10                   # the references and closures went
    for y in [1.5, -2.0, 0.0, np.inf, -np.inf, np.nan]:
        # the pipeline keeps every value of the transform it is given, infinities included
        np.testing.assert_array_equal(rl.evaluate(opt, np.float64(y)),
                                      rl.evaluate(last_raw, np.float64(y)))
    for y in [1.5, -2.0, 0.0]:
        # all raw: the same values (at y = inf, the raw order-2 program multiplies the raw
        # gradient's zero adjoints by inf, nan; differentiating the optimized gradient gives
        # 20 y^3 = inf, as jax.grad(jax.grad(f)) does)
        np.testing.assert_allclose(rl.evaluate(opt, np.float64(y)),
                                   rl.evaluate(raw, np.float64(y)), rtol=1e-14)


def opt_input(f, order):
    """The optimized (order - 1)-th derivative: what rl.grad differentiates at `order`."""
    for _ in range(order - 1):
        f = rl.grad(f)
    return f


def test_each_entry_point_takes_optimize():
    x = rl.var("x", shape=(3,), dtype=F)
    f = rl.Function([x], rl.sum(rl.tanh(x) * x))
    v, t = np.array([0.3, -1.0, 2.0]), np.array([1.0, 0.5, -2.0])
    cases = [(rl.gradient, (v,)), (rl.grad, (v,)), (rl.value_and_grad, (v,)), (rl.jvp, (v, t)),
             (rl.hvp, (v, t)), (rl.hessian, (v,)), (rl.jacobian, (v,)),
             (lambda g, **k: rl.derivative(g, order=3, **k), (v,))]
    for transform, args in cases:
        raw, opt = transform(f, optimize=False), transform(f)
        np.testing.assert_allclose(_flat(rl.evaluate(opt, *args)),
                                   _flat(rl.evaluate(raw, *args)), rtol=1e-12)
        assert _lets(opt) <= _lets(raw)
    back = rl.evaluate(rl.vjp(f), v)[1]                    # a closure: call it
    raw_back = rl.evaluate(rl.vjp(f, optimize=False), v)[1]
    np.testing.assert_allclose(back(np.float64(1.0))[0], raw_back(np.float64(1.0))[0])
    with pytest.raises(rl.GradientError, match="optimize= must be True or False"):
        rl.grad(f, optimize="yes")


def _flat(value):
    if isinstance(value, tuple):
        return np.concatenate([_flat(v) for v in value]) if value else np.zeros(0)
    return np.ravel(np.asarray(value, dtype=np.float64))


def test_a_module_gradient_leaves_globals_main_does_not_reach_alone():
    mod = rl.Module()
    p = rl.Prelude(mod)
    y = rl.var("y", shape=(), dtype=F)
    mod["main"] = rl.Function([y], y * y * rl.const(3.0, F))
    out = rl.gradient(mod)
    assert out["foldl"] is mod["foldl"]                   # the prelude is shared, not rebuilt
    assert rl.evaluate(out, np.float64(2.0))[1][0] == 12.0
    assert p is not None


def _chain(n):
    x = rl.var("x", shape=(), dtype=F)
    bindings, prev = [], x
    for k in range(n):
        v = rl.var(f"v{k}", dtype=F)
        bindings.append((v, rl.tanh(prev) * rl.const(0.5, F) + prev))
        prev = v
    return rl.Function([x], build_let_chain(bindings, prev))


def test_a_large_program_gets_dead_code_only(monkeypatch):
    monkeypatch.setattr(manager, "FULL_PIPELINE_LIMIT", 500)
    raw = rl.gradient(_chain(200), optimize=False)        # about 1,200 lets
    assert manager.default_passes(raw) == manager.LARGE_PROGRAM_PASSES
    assert manager.default_passes(_chain(50)) == manager.DEFAULT_PASSES
    out = rl.optimize(raw, check=True)
    np.testing.assert_array_equal(rl.evaluate(out, np.float64(0.3))[1],
                                  rl.evaluate(raw, np.float64(0.3))[1])


def test_count_lets_stops_at_its_limit_and_counts_shared_nodes_once():
    f = _chain(100)
    assert manager.count_lets(f, 10 ** 9) == 100
    assert manager.count_lets(f, 10) == 10
    assert manager.count_lets(rl.Module.from_expr(f), 10 ** 9) == 100


def test_partial_eval_a_reference_captured_by_closures_written_in_both_arms_escapes():
    """The pipeline found this: each arm of an `if` stores a backpropagator closure (which
    writes the adjoint reference) in %bp; the merge forgot both, so when `(!%bp)()` ran, the
    adjoint had not escaped and its final read folded to the initial 0."""
    x, y, k = rl.var("x", dtype=F), rl.var("y", dtype=F), rl.Var("k")
    f = rl.Function([x], rl.Let(k, rl.Function([y], y * y * x),
                                rl.If(x > rl.const(0.0, F), k(x), k(rl.sin(x)))))
    raw = rl.grad(f, optimize=False)
    for v in [0.8, -0.8]:
        want = rl.evaluate(raw, v)
        assert rl.evaluate(rl.passes.partial_eval(raw), v) == want
        assert rl.evaluate(rl.grad(f), v) == want
