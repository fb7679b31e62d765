"""Inlining (relayish/ir/passes/inline.py): small and once-called known functions, globals and
let-bound closures; fresh binders; arguments evaluated once, in order; no recursion inlined;
output size linear in input size (closures nested in closures once doubled it per level)."""
import sys
import time

import numpy as np
import pytest
from hypothesis import given, settings

import relayish as rl
from relayish.ir.analysis import walk
from relayish.ir.expr import Call, GlobalVar, Let
from relayish.ir.passes.inline import GROWTH_BOUND, SMALL
from relayish.ir.visitor import build_let_chain
from strategies import CHAIN_LENGTHS, f32, programs

from .test_properties import _check, assert_same_value


def _inline(x):
    return rl.optimize(x, passes=[rl.passes.inline], check=True)


def _calls_of(func, cls):
    return [n for n in walk(func) if isinstance(n, Call) and isinstance(n.op, cls)]


def _nodes(program) -> int:
    roots = list(program.functions.values()) if isinstance(program, rl.Module) else [program]
    return len({id(n) for root in roots for n in walk(root)})


def test_a_small_closure_is_inlined_at_every_call_with_fresh_binders():
    f = rl.parse_expr("""fn (%x: float32) {
        let %f = fn (%a: float32) { let %b = %a * %a; %b + 1f }; %f(%x) + %f(exp(%x)) }""")
    g = _inline(f)
    assert not _calls_of(g, rl.Var)
    assert not any(isinstance(n, rl.Function) for n in walk(g.body))    # every use inlined
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
    # a guard against quadratic passes (10^5 bindings would take hours), not a timing: about
    # 2 s per 10^4 bindings on a quiet machine, so the bound leaves room for a loaded one
    assert took < 5.0 * n / 10_000 + 1.0


@given(programs(max_depth=4))
def test_inlining_keeps_the_values_of_random_programs(prog):
    _check(prog.mod, prog.args, [rl.passes.inline])
    _check(prog.mod, prog.args, [rl.passes.inline, rl.passes.partial_eval, rl.passes.dead_code])


def _nested_fn(k):
    sys.path.insert(0, "tests/ad")
    from test_nesting_cost import nested_fn
    return nested_fn(k)


@pytest.mark.parametrize("k", [1, 2, 6, 12])
def test_closures_nested_in_closures_stay_linear(k):
    """AD output of k closures each calling the next once: the closure's `let` was kept beside
    its inlined body, so each level doubled the program (12 levels: 177 -> 98,301 lets). A body
    used once is moved: the output is no larger than the input."""
    g = rl.gradient(_nested_fn(k), optimize=False)
    out = _inline(g)
    assert _nodes(out) <= _nodes(g)
    functions = [sum(isinstance(n, rl.Function) for n in walk(p.body)) for p in (g, out)]
    assert functions[1] == functions[0] - k         # the k closures; backpropagators stay
    rl.assert_structural_equal(rl.parse_expr(rl.astext(out)), out)
    assert_same_value(rl.evaluate(out, 0.5), rl.evaluate(g, 0.5))


def test_three_hundred_nested_closures_through_the_default_pipeline_and_inline():
    """tests/ad's nested_fn(300) never finished with the old inline in the pipeline."""
    prog = _nested_fn(300)
    g = rl.gradient(prog, optimize=False)
    start = time.process_time()
    out = rl.optimize(g, passes=[rl.passes.inline])
    assert time.process_time() - start < 10.0
    assert _nodes(out) <= _nodes(g)
    np.testing.assert_allclose(rl.evaluate(out, 0.5)[1][0], 1.0001 ** 300, rtol=1e-12)


def test_a_literal_closure_called_in_place_is_inlined():
    f = _nested_fn(3)
    g = _inline(f)
    assert not _calls_of(g, rl.Function)
    assert rl.evaluate(g, 0.5) == rl.evaluate(f, 0.5)


def test_a_chain_of_globals_each_called_once_is_copied_at_most_twice():
    """Globals stay in the module, so one inlined at its one call is a copy: copying each
    global's inlined body into the next would make a chain of n globals O(n^2) nodes."""
    mod = rl.Module()
    n, width = 40, SMALL
    prev = None
    for k in range(n):
        b = f32("b")
        body = b
        for _ in range(width):
            body = rl.tanh(body) + b
        if prev is not None:
            body = rl.Call(prev, [body])
        gv = rl.GlobalVar(f"g{k}")
        mod[gv] = rl.Function([b], body)
        prev = gv
    x = f32("x")
    mod["main"] = rl.Function([x], rl.Call(prev, [x]))
    out = _inline(mod)
    assert _nodes(out) <= 4 * _nodes(mod)
    assert_same_value(rl.evaluate(out, 0.1), rl.evaluate(mod, 0.1))


def test_a_call_shared_at_two_places_stays_a_call():
    """One Call node used twice (a DAG): expanding it at each place binds fresh copies; shared
    expansions of shared calls nested in each other would multiply, so it stays a call."""
    x, a = f32("x"), f32("a")
    sq = rl.var("sq", type=rl.FuncType([rl.TensorType((), "float32")], rl.TensorType((), "float32")))
    call = rl.Call(sq, [x])
    f = rl.Function([x], rl.Let(sq, rl.Function([a], a * a), call + call))
    g = _inline(f)
    assert len(_calls_of(g, rl.Var)) == 1
    assert rl.evaluate(g, 3.0) == rl.evaluate(f, 3.0)


@given(programs(max_depth=4))
def test_inlined_random_programs_grow_at_most_linearly(prog):
    out = _check(prog.mod, prog.args, [rl.passes.inline])
    assert _nodes(out) <= GROWTH_BOUND * _nodes(prog.mod)


@settings(max_examples=10)
@given(programs(differentiable=True))
def test_inlined_random_programs_differentiate_to_the_same_gradient(prog):
    want = rl.evaluate(rl.gradient(prog.mod, optimize=False), *prog.args)
    out = _check(prog.mod, prog.args, [rl.passes.inline])
    assert _nodes(out) <= GROWTH_BOUND * _nodes(prog.mod)
    got = rl.evaluate(rl.gradient(out, optimize=False), *prog.args)
    assert_same_value(got, want, atol=1e-12)


def _shared_large_closure(lets):
    """One large Function node bound by `lets` lets, each Var called once (as eager/runner.py
    records the calls of one gradient program)."""
    b = f32("b")
    body = b
    for _ in range(SMALL):
        body = rl.tanh(body) + b
    func = rl.Function([b], body)
    x = f32("x")
    fty = rl.FuncType([rl.TensorType((), "float32")], rl.TensorType((), "float32"))
    bindings, h = [], x
    for k in range(lets):
        fv, v = rl.var(f"fn{k}", type=fty), f32(f"h{k}")
        bindings += [(fv, func), (v, rl.Call(fv, [h]))]
        h = v
    return rl.Function([x], build_let_chain(bindings, h))


def test_a_large_closure_bound_by_two_lets_is_copied_at_each_call():
    f = _shared_large_closure(2)
    g = _inline(f)
    assert not _calls_of(g, rl.Var)
    assert not any(isinstance(n, rl.Function) for n in walk(g.body))
    assert_same_value(rl.evaluate(g, 0.3), rl.evaluate(f, 0.3))


def test_copies_of_a_shared_large_closure_stop_at_the_budget():
    f = _shared_large_closure(12)
    g = _inline(f)
    assert 0 < len(_calls_of(g, rl.Var)) < 12
    assert _nodes(g) <= GROWTH_BOUND * _nodes(f)
    assert_same_value(rl.evaluate(g, 0.3), rl.evaluate(f, 0.3))
