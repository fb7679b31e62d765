"""Passes that declare `preserves = {"typed"}` leave on every node of their output the type the
checker infers for it (ir/passes/base.py, "Keeping types"): the pipeline type-checks only where
a pass does not keep types, so a wrong or missing type here would reach the next pass."""
import numpy as np
import pytest
from hypothesis import given, settings

import relayish as rl
from relayish.ir.analysis import walk
from relayish.ir.expr import Expr
from relayish.ir.op import Op
from relayish.ir.structural import types_equal
from strategies import programs

F = "float64"

KEEPING = ["dead_code", "to_anf", "from_anf", "cse", "simplify", "partial_eval", "fold_constant"]


def _assert_types_kept(mod, name):
    """Run pass `name` on `mod` (type-checked first), then compare the types its output carries
    with a fresh check's."""
    p = getattr(rl.passes, name)
    assert "typed" in p.preserves
    rl.infer_type(mod)
    out = rl.optimize(mod, passes=[p])           # no check after it: the pass keeps types
    kept = {}
    for func in out.functions.values():
        for node in walk(func):
            if isinstance(node, Expr) and not isinstance(node, Op):
                t = getattr(node, "_checked_type", None)
                assert t is not None, f"{name} left {rl.astext(node)[:200]} without a type"
                kept[id(node)] = (node, t)
    rl.infer_type(out)
    for node, t in kept.values():
        assert types_equal(t, node.checked_type), (
            f"{name} left {rl.astext(node)[:200]} typed {t}, the checker says {node.checked_type}")


@pytest.mark.parametrize("name", KEEPING)
def test_the_passes_keep_the_types_of_ad_output(name):
    y = rl.var("y", shape=(), dtype=F)
    g = rl.grad(rl.grad(rl.Function([y], rl.power(y, rl.const(5.0, F))), optimize=False),
                optimize=False)
    _assert_types_kept(rl.Module.from_expr(g), name)
    x = rl.var("x", shape=(3,), dtype=F)
    h = rl.hessian(rl.Function([x], rl.sum(rl.tanh(x) * rl.tanh(x))), optimize=False)
    _assert_types_kept(rl.Module.from_expr(h), name)


@pytest.mark.parametrize("name", KEEPING)
def test_the_passes_keep_the_types_of_a_narrowed_closure_and_a_match(name):
    mod = rl.parse("""
        type List[a] { Cons(a, List[a]), Nil }
        def @main(%x: float64, %l: List[float64]) -> float64 {
          let %f = fn (%a: float64, %b: float64) { %a * 2f64 };
          let %u = exp(%x);
          let %n = match (%l) { Cons(%h, %t) => %h + %x, Nil() => %x };
          %f(%x, exp(%x)) + %f(%n, %x) + exp(%x)
        }""")
    _assert_types_kept(mod, name)
    np.testing.assert_allclose(rl.evaluate(rl.optimize(mod, passes=[getattr(rl.passes, name)]),
                                           np.float64(1.0), rl.list_value(mod, [np.float64(2.0)])), 8.0 + np.e)


@given(programs(max_depth=4))                 # the profile's 15 examples; 30 under -m slow
def test_the_passes_keep_the_types_of_random_programs(prog):
    for name in KEEPING:
        _assert_types_kept(prog.mod, name)


@pytest.mark.slow
@settings(max_examples=30)
@given(programs(max_depth=4))
def test_the_passes_keep_the_types_of_more_random_programs(prog):
    for name in KEEPING:
        _assert_types_kept(prog.mod, name)
