"""Inlining (relayish/ir/passes/inline.py): small and once-called known functions, globals and
let-bound closures; fresh binders; arguments evaluated once, in order; no recursion inlined."""
import time

import numpy as np
import pytest
from hypothesis import given

import relayish as rl
from relayish.ir.analysis import walk
from relayish.ir.expr import Call, GlobalVar, Let
from relayish.ir.passes.inline import SMALL
from relayish.ir.visitor import build_let_chain
from strategies import CHAIN_LENGTHS, f32, programs

from .test_properties import _check, assert_same_value


def _inline(x):
    return rl.optimize(x, passes=[rl.passes.inline], check=True)


def _calls_of(func, cls):
    return [n for n in walk(func) if isinstance(n, Call) and isinstance(n.op, cls)]


def test_a_small_closure_is_inlined_at_every_call_with_fresh_binders():
    f = rl.parse_expr("""fn (%x: float32) {
        let %f = fn (%a: float32) { let %b = %a * %a; %b + 1f }; %f(%x) + %f(exp(%x)) }""")
    g = _inline(f)
    assert not _calls_of(g, rl.Var)
    bound = [n.var for n in walk(g) if isinstance(n, Let)]
    assert len({id(v) for v in bound}) == len(bound)
    rl.assert_structural_equal(rl.parse_expr(rl.astext(g)), g)
    assert rl.evaluate(g, 0.5) == rl.evaluate(f, 0.5)


def test_arguments_are_evaluated_once_and_in_order():
    """The body uses %a twice and writes %r before reading it: the argument `!%r` and the
    counter bump must run once, before the body, as in the call."""
    f = rl.parse_expr("""fn (%r: ref(float32), %n: ref(float32)) {
        let %f = fn (%a: float32, %b: float32) { %r := 5f; %a + %a + %b + !%r };
        %f(!%r, { %n := !%n + 1f; !%n }) }""")
    g = _inline(f)
    assert not _calls_of(g, rl.Var)
    for program in (f, g):
        r, n = rl.RefValue(np.float32(1.0)), rl.RefValue(np.float32(10.0))
        assert rl.evaluate(program, r, n) == np.float32(1 + 1 + 11 + 5)
        assert n.value == np.float32(11.0) and r.value == np.float32(5.0)


def test_globals_not_recursive_are_inlined_recursive_ones_stay():
    mod = rl.Module()
    p = rl.Prelude(mod)
    x = f32("x")
    sq, big = rl.GlobalVar("sq"), rl.GlobalVar("big")
    a = f32("a")
    mod[sq] = rl.Function([a], a * a)
    b = f32("b")
    body = b
    for _ in range(SMALL):
        body = rl.tanh(body) + b
    mod[big] = rl.Function([b], body)
    xs = rl.var("xs", type=rl.TypeCall(p.List, [rl.TensorType((), "float32")]))
    mod["main"] = rl.Function([x, xs], rl.Tuple([sq(x) + sq(big(x)), p.length(xs)]))
    out = _inline(mod)
    names = {c.op.name_hint for c in _calls_of(out["main"], GlobalVar)}
    assert names == {"length"}          # @big is large but called once; @length recursive
    assert set(g.name_hint for g in out.global_vars) == set(g.name_hint for g in mod.global_vars)
    args = (np.float32(0.5), rl.list_value(mod, [np.float32(1.0), np.float32(2.0)]))
    assert_same_value(rl.evaluate(out, *args), rl.evaluate(mod, *args))


def test_a_large_global_called_twice_stays_called():
    mod = rl.Module()
    big, b, x = rl.GlobalVar("big"), f32("b"), f32("x")
    body = b
    for _ in range(SMALL):
        body = rl.tanh(body) + b
    mod[big] = rl.Function([b], body)
    mod["main"] = rl.Function([x], big(x) * big(x + 1.0))
    out = _inline(mod)
    assert len(_calls_of(out["main"], GlobalVar)) == 2
    assert rl.evaluate(out, 0.5) == rl.evaluate(mod, 0.5)


def test_a_large_function_called_twice_stays_called():
    b = f32("b")
    body = b
    for _ in range(SMALL):
        body = rl.tanh(body) + b
    f = rl.var("f", type=rl.FuncType([rl.TensorType((), "float32")], rl.TensorType((), "float32")))
    x = f32("x")
    g = rl.Function([x], rl.Let(f, rl.Function([b], body), rl.Call(f, [x]) + rl.Call(f, [x])))
    assert len(_calls_of(_inline(g), rl.Var)) == 2


def test_an_escaping_or_recursive_closure_is_not_inlined_unless_small():
    f = rl.parse_expr("""fn (%x: int32) {
        let %f = fn (%n: int32) -> int32 { if (%n > 0) { %f(%n - 1) + 1 } else { 0 } };
        %f(%x) }""")
    g = _inline(f)
    assert len(_calls_of(g, rl.Var)) == 2
    assert rl.evaluate(g, 5) == np.int32(5)


@pytest.mark.parametrize("n", CHAIN_LENGTHS)
def test_long_let_chains(n):
    x = f32("x")
    a = f32("a")
    sq = rl.var("sq", type=rl.FuncType([rl.TensorType((), "float32")], rl.TensorType((), "float32")))
    bindings, body = [(sq, rl.Function([a], a * a))], x
    for k in range(n):
        v = f32(f"v{k}")
        bindings.append((v, rl.Call(sq, [rl.tanh(body)]) + body))
        body = v
    f = rl.Function([x], build_let_chain(bindings, body))
    start = time.process_time()
    g = rl.passes.inline(f)
    took = time.process_time() - start
    assert not _calls_of(g, rl.Var)
    assert_same_value(rl.evaluate(g, 0.25), rl.evaluate(f, 0.25))
    assert took < 2.0 * n / 10_000 + 1.0


@given(programs(max_depth=4))
def test_inlining_keeps_the_values_of_random_programs(prog):
    _check(prog.mod, prog.args, [rl.passes.inline])
    _check(prog.mod, prog.args, [rl.passes.inline, rl.passes.partial_eval, rl.passes.dead_code])
