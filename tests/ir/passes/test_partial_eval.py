"""Partial evaluation (relayish/ir/passes/partial_eval.py): static values flow through lets,
tuples, ADT values, closures and references; ops on constants fold; effects stay in order; and
on AD output the references and the backpropagator closures go."""
import time

import numpy as np
import pytest
from hypothesis import given, settings

import relayish as rl
from relayish.ir.analysis import FreeVars, walk
from relayish.ir.expr import Call, Function, Let, RefCreate, RefRead, RefWrite
from relayish.ir.passes import partial_eval
from relayish.ir.passes.partial_eval import UNROLL
from strategies import CHAIN_LENGTHS, f32, programs

from .test_properties import _check, assert_same_value

PIPELINE = [rl.passes.partial_eval, rl.passes.dead_code]


def _pe(text, passes=PIPELINE):
    f = rl.parse_expr(text)
    return f, rl.optimize(f, passes=passes, check=True)


def _count(func, cls):
    return sum(isinstance(n, cls) for n in walk(func))


def test_constants_fold_through_lets_tuples_and_references():
    f, g = _pe("""fn (%x: float32) {
        let %r = ref(2f); %r := !%r * 3f; let %t = (%x, !%r); %t.0 + %t.1 }""")
    rl.assert_structural_equal(g, rl.parse_expr("fn (%x: float32) { %x + 6f }"))
    assert rl.evaluate(g, 1.0) == rl.evaluate(f, 1.0) == np.float32(7.0)


def test_a_match_on_a_known_constructor_and_an_if_on_a_known_condition():
    mod = rl.Module()
    p = rl.Prelude(mod)
    h, x = f32("h"), f32("x")
    lst = p.Cons(x * 2.0, p.Cons(rl.const(1.0), p.Nil()))
    head = rl.Match(lst, [rl.Clause(rl.PatternConstructor(
        p.Cons, [rl.PatternVar(h), rl.PatternWildcard()]), h)], complete=False)
    mod["main"] = rl.Function([x], rl.If(rl.const(1.0) < rl.const(2.0), head, x))
    out = rl.optimize(mod, passes=PIPELINE, check=True)
    assert _count(out["main"], rl.Match) == _count(out["main"], rl.If) == 0
    assert rl.evaluate(out, 3.0) == rl.evaluate(mod, 3.0) == np.float32(6.0)


def test_a_known_closure_is_called_in_place_with_fresh_binders():
    f, g = _pe("""fn (%x: float32) {
        let %f = fn (%a: float32) { let %b = %a * %a; %b + 1f };
        %f(%x) + %f(2f) }""")
    assert _count(g, Function) == 1 and _count(g, Call) == 3      # x*x, +1, +5
    assert rl.evaluate(g, 3.0) == rl.evaluate(f, 3.0)
    bound = [n.var for n in walk(g) if isinstance(n, Let)]
    assert len({id(v) for v in bound}) == len(bound)


def test_an_escaping_reference_keeps_its_writes_and_reads():
    """The reference goes to an unknown function: its write before the call stays, and the
    read after it is not static (the callee may have written it)."""
    f, g = _pe("""fn (%k: fn (ref(float32)) -> ()) {
        let %r = ref(1f); %r := 2f; %k(%r); !%r }""")
    assert _count(g, RefWrite) == 1 and _count(g, RefRead) == 1 and _count(g, RefCreate) == 1
    k = rl.parse_expr("fn (%s: ref(float32)) { %s := !%s * 10f }")
    args = (rl.evaluate(rl.Function([], k)),)
    assert rl.evaluate(g, *args) == rl.evaluate(f, *args) == np.float32(20.0)


def test_an_unknown_call_leaves_a_reference_that_did_not_escape_known():
    f, g = _pe("""fn (%k: fn () -> float32) {
        let %r = ref(1f); %r := 2f; let %a = %k(); !%r + %a }""")
    assert _count(g, RefCreate) == _count(g, RefWrite) == _count(g, RefRead) == 0
    assert _count(g, Call) == 2         # %k() and the add of 2f
    args = (rl.evaluate(rl.parse_expr("fn () { fn () { 5f } }")),)
    assert rl.evaluate(g, *args) == rl.evaluate(f, *args) == np.float32(7.0)


def test_an_unknown_call_stays_even_when_unused():
    f, g = _pe("""fn (%k: fn () -> float32, %x: float32) { let %a = %k(); %x }""")
    assert _count(g, Call) == 1


def test_branches_on_a_dynamic_condition_keep_what_both_leave():
    f, g = _pe("""fn (%c: bool, %x: float32) {
        let %r = ref(1f); let %s = ref(1f);
        let %u = if (%c) { %r := %x; %s := 3f } else { %s := 3f };
        (!%r, !%s) }""")
    assert _count(g, RefRead) == 1 and _count(g, RefCreate) == 1    # %r read; !%s is 3f
    for c in (True, False):
        assert_same_value(rl.evaluate(g, c, 4.0), rl.evaluate(f, c, 4.0))


def test_inlining_keeps_the_order_of_effects():
    """The argument `(!%r)` is read before the body writes: bound once, in order."""
    f, g = _pe("""fn (%r: ref(float32)) {
        let %f = fn (%a: float32) { %r := 5f; %a + !%r };
        %f(!%r) }""")
    r = rl.RefValue(np.float32(1.0))
    assert rl.evaluate(g, r) == np.float32(6.0)
    assert rl.evaluate(f, rl.RefValue(np.float32(1.0))) == np.float32(6.0)


def test_an_op_that_fails_at_fold_time_stays_and_fails_at_run_time():
    f, g = _pe("""fn () { let %a = take(ones(shape=[2]), 5); 1f }""")
    assert [n.op.name for n in walk(g) if isinstance(n, Call)] == ["take"]   # ones(..) folded
    for program in (f, g):
        with pytest.raises(rl.EvaluationError):
            rl.evaluate(program)
    f, g = _pe("""fn () { take(ones(shape=[2]), 1) }""")
    assert _count(g, Call) == 0 and rl.evaluate(g) == np.float32(1.0)


def test_static_recursion_folds_to_its_end_under_the_fuel_bound(monkeypatch):
    # Relay's PartialEvaluate: a recursion on constants runs to its end (the triangle number)
    f, g = _pe("""fn () {
        let %f = fn (%n: int32) -> int32 { if (%n > 0) { %f(%n - 1) + %n } else { 0 } };
        %f(10) }""", passes=[rl.passes.partial_eval])
    rl.assert_structural_equal(g, rl.parse_expr("fn () { 55 }"))
    f, g = _pe("""fn () {
        let %f = fn (%n: int32) -> int32 { if (%n > 0) { %f(%n - 1) + 1 } else { 0 } };
        %f(1000) }""", passes=[rl.passes.partial_eval])
    rl.assert_structural_equal(g, rl.parse_expr("fn () { 1000 }"))
    # one that never ends stays a call once the fuel is spent, and the pass ends (a smaller
    # bound than ATTEMPT_FUEL keeps the test short)
    monkeypatch.setattr(partial_eval, "ATTEMPT_FUEL", 300)
    f, g = _pe("""fn () {
        let %f = fn (%n: int32) -> int32 { if (%n > 0) { %f(%n + 1) } else { 0 } };
        %f(1) }""", passes=[rl.passes.partial_eval])
    assert _count(g, Function) >= 1 and any(isinstance(n, Call) and not isinstance(n.op, rl.Op)
                                            for n in walk(g))


def test_recursion_on_a_dynamic_value_is_unrolled_a_bounded_number_of_times():
    f, g = _pe("""fn (%m: int32) {
        let %f = fn (%n: int32) -> int32 { if (%n > 0) { %f(%n - 1) + 1 } else { 0 } };
        %f(%m) }""", passes=[rl.passes.partial_eval])
    assert rl.evaluate(g, np.int32(30)) == rl.evaluate(f, np.int32(30)) == np.int32(30)
    assert _count(g, rl.If) == UNROLL + 1            # UNROLL levels and the residual closure's


def _y5_derivative(order):
    y = rl.var("y", dtype="float64")
    f = rl.Function([y], y ** 5.0)
    for _ in range(order):
        f = rl.derivative(f)
    return f


@pytest.mark.parametrize("order, at_most", [(1, 4), (2, 8), (3, 16)])
def test_ad_output_of_y5_loses_its_references_and_closures(order, at_most):
    f = _y5_derivative(order)
    g = rl.optimize(f, passes=[rl.passes.inline] + PIPELINE, check=True)
    assert _count(g, Let) <= at_most
    assert _count(g, RefCreate) == _count(g, Function) - 1 == 0
    for y in (0.5, 1.5, -2.0):
        np.testing.assert_allclose(rl.evaluate(g, y), rl.evaluate(f, y), rtol=1e-12)
    np.testing.assert_allclose(rl.evaluate(rl.grad(g, optimize=False), 1.5),
                               rl.evaluate(rl.grad(f, optimize=False), 1.5), rtol=1e-12)


def test_ad_output_of_an_mlp_loses_its_references_and_closures():
    rng = np.random.default_rng(0)
    x, w1, w2 = (rl.var("x", shape=(4,), dtype="float64"),
                 rl.var("w1", shape=(8, 4), dtype="float64"),
                 rl.var("w2", shape=(8,), dtype="float64"))
    f = rl.Function([x, w1, w2], rl.sum(rl.tanh(w1 @ x) * w2))
    g = rl.gradient(f, optimize=False)
    h = rl.optimize(g, passes=[rl.passes.inline] + PIPELINE, check=True)
    assert _count(h, RefCreate) == _count(h, Function) - 1 == 0
    assert _count(h, Let) <= _count(g, Let) // 2
    args = (rng.normal(size=4), rng.normal(size=(8, 4)), rng.normal(size=8))
    assert_same_value(rl.evaluate(h, *args), rl.evaluate(g, *args))


@pytest.mark.parametrize("n", CHAIN_LENGTHS)
def test_long_let_chains(n):
    x = f32("x")
    body = x
    r = rl.var("r", type=rl.RefType(rl.TensorType((), "float32")))
    bindings = [(r, rl.RefCreate(rl.const(0.0)))]
    for k in range(n):
        v = f32(f"v{k}")
        bindings.append((v, rl.tanh(body) * 0.5 + body))
        body = v
        if k % 100 == 0:
            bindings.append((rl.var(f"w{k}", type=rl.TupleType([])), rl.RefWrite(r, v)))
    from relayish.ir.visitor import build_let_chain
    f = rl.Function([x], build_let_chain(bindings, rl.Tuple([body, rl.RefRead(r)])))
    start = time.process_time()
    g = rl.passes.partial_eval(f)
    took = time.process_time() - start
    assert _count(g, RefCreate) == 0
    assert_same_value(rl.evaluate(g, 0.25), rl.evaluate(f, 0.25))
    # a guard against quadratic passes (10^5 bindings would take hours), not a timing: about
    # 2 s per 10^4 bindings on a quiet machine, so the bound leaves room for a loaded one
    assert took < 5.0 * n / 10_000 + 1.0


@given(programs(max_depth=4))
def test_partial_evaluation_keeps_the_values_of_random_programs(prog):
    _check(prog.mod, prog.args, [rl.passes.partial_eval])
    _check(prog.mod, prog.args, PIPELINE)


@settings(max_examples=10)
@given(programs(differentiable=True))
def test_partially_evaluated_programs_differentiate_to_the_same_gradient(prog):
    want = rl.evaluate(rl.gradient(prog.mod, optimize=False), *prog.args)
    out = _check(prog.mod, prog.args, [rl.passes.inline] + PIPELINE)
    got = rl.evaluate(rl.gradient(out, optimize=False), *prog.args)
    assert_same_value(got, want)


def test_a_reference_held_by_an_escaping_reference_escapes_with_it():
    """%k gets %outer, reads %inner out of it and writes 7 there: the read after the call must
    not be the 1f written before."""
    f, g = _pe("""fn (%k: fn (ref(ref(float32))) -> ()) {
        let %inner = ref(0f); let %outer = ref(%inner); %inner := 1f;
        %k(%outer); !%inner }""")
    k = rl.parse_expr("fn () { fn (%o: ref(ref(float32))) { !%o := 7f } }")
    args = (rl.evaluate(k),)
    assert rl.evaluate(g, *args) == rl.evaluate(f, *args) == np.float32(7.0)


def test_tree_recursion_stops_at_the_budget():
    """fib on a constant: each level doubles the calls; the unroll depth and the budget of
    inlined calls bound the work, and what is not inlined is called at run time."""
    f, g = _pe("""fn () {
        let %fib = fn (%n: int32) -> int32 {
          if (%n < 2) { %n } else { %fib(%n - 1) + %fib(%n - 2) } };
        %fib(20) }""", passes=[rl.passes.partial_eval])
    assert rl.evaluate(g) == rl.evaluate(f) == np.int32(6765)


def test_a_reference_escaping_from_a_residual_closure_takes_what_it_holds_along():
    """%c escapes (to %k), and its body hands %outer to %sink: %k2 may then write %inner
    through it, so the read after %k2() is not the 1f written before."""
    f, g = _pe("""fn (%k: fn (fn () -> ()) -> (), %k2: fn () -> (),
                      %sink: ref(ref(ref(float32)))) {
        let %inner = ref(0f); let %outer = ref(ref(5f)); %outer := %inner;
        let %c = fn () { %sink := %outer };
        %k(%c); %inner := 1f; %k2(); !%inner }""")
    k = rl.evaluate(rl.parse_expr("fn () { fn (%f: fn () -> ()) { %f() } }"))
    make_k2 = rl.parse_expr("""fn (%s: ref(ref(ref(float32)))) {
        fn () { let %o = !%s; let %i = !%o; %i := 9f } }""")
    for program in (f, g):
        sink = rl.RefValue(rl.RefValue(rl.RefValue(np.float32(0.0))))
        assert rl.evaluate(program, k, rl.evaluate(make_k2, sink), sink) == np.float32(9.0)


def test_a_value_written_in_a_one_clause_match_is_not_known_after_it():
    """A closure written to a reference inside a match's only clause captures that clause's
    Vars: after the match it is not a known value (inlining its body there used Vars out of
    their scope: found by tests/fuzz/test_differential.py on the gradient of a @foldr)."""
    f, g = _pe("""fn (%p: (float32, float32)) {
        let %r = ref(fn () { 0f });
        let %m = match (%p) {
          (%a, _) => { let %s = %a * 2f; %r := fn () { %s }; %s },
        };
        (!%r)() + %m }""")
    assert FreeVars()(g) == []
    p = (np.float32(3.0), np.float32(1.0))
    assert_same_value(rl.evaluate(g, p), rl.evaluate(f, p))
    assert_same_value(rl.compile(g, backend="jax")(p), np.float32(12.0))
