"""Relay's pass tests, as Relay documents its passes (issue 28).

Each test is written from what TVM's tests/python/relay/test_pass_partial_eval.py,
test_pass_to_a_normal_form.py, test_pass_eliminate_common_subexpr.py,
test_pass_dead_code_elimination.py and test_pass_fold_constant.py assert, in relayish's text.
Where relayish's output differs in form but not in meaning, the test says why.
"""
import numpy as np
import pytest
from hypothesis import given, settings

import relayish as rl
from relayish.ir.analysis import walk
from relayish.ir.expr import Call, GlobalVar, Let, TupleGetItem
from strategies import programs

from .test_properties import _check

PE = [rl.passes.partial_eval, rl.passes.dead_code]     # Relay's dcpe: PartialEvaluate, DCE


def prelude_module(text=""):
    mod = rl.Module()
    rl.Prelude(mod)
    return rl.parse(rl.astext(mod) + text)


def main_of(mod, passes=PE):
    """@main after `passes` and from_anf (Relay compares nested calls, not let-chains)."""
    out = rl.optimize(mod, passes=list(passes) + [rl.passes.from_anf], check=True)
    return out, out["main"]


def nat(n, mod):
    return rl.parse_expr("S(" * n + "Z" + ")" * n, mod=mod)


def calls_of_globals(func):
    return [n.op.name_hint for n in walk(func) if isinstance(n, Call)
            and isinstance(n.op, GlobalVar)]


# ---- partial evaluation: globals specialised to static arguments -----------------------------

def test_a_closed_call_of_a_global_on_nats_is_the_constant_nat():
    # test_double: @nat_double(3) is 6; test_abs_diff: @diff(7, 3) is 4
    mod = prelude_module("""
    def @diff(%x: Nat, %y: Nat) -> Nat {
      match (%x) {
        Z => %y,
        S(%xp) => match (%y) { Z => %x, S(%yp) => @diff(%yp, %xp) },
      }
    }
    def @main() { (@nat_double(S(S(S(Z)))), @diff(S(S(S(S(S(S(S(Z))))))), S(S(S(Z))))) }
    """)
    out, main = main_of(mod)
    rl.assert_structural_equal(main.body, rl.Tuple([nat(6, out), nat(4, out)]))
    assert calls_of_globals(main) == []


def test_a_global_on_a_partly_static_list_is_evaluated_in_place():
    # test_head_cons: @hd(Cons(%x, Nil)) is %x (a polymorphic global, at the call's type)
    mod = prelude_module("def @main(%x: float32) { @hd(Cons(%x, Nil)) }")
    out, main = main_of(mod)
    assert main.body is main.params[0]
    assert float(rl.evaluate(out, np.float32(2.5))) == 2.5


def test_map_of_a_global_over_a_constant_list_is_the_list():
    # test_map: @map(@f, [1, 2, 3]) with @f the identity is the list [1, 2, 3]
    mod = prelude_module("""
    def @f[t](%a: t) -> t { %a }
    def @main() { @map(@f, Cons(1, Cons(2, Cons(3, Nil)))) }
    """)
    out, main = main_of(mod)
    rl.assert_structural_equal(main.body, rl.parse_expr("Cons(1, Cons(2, Cons(3, Nil)))", mod=out))
    # and with an op passed as a value, which folds
    mod = prelude_module("def @main() { @map(negative, Cons(1f, Cons(2f, Nil))) }")
    out, main = main_of(mod)
    rl.assert_structural_equal(main.body, rl.parse_expr("Cons(-1f, Cons(-2f, Nil))", mod=out))


def test_nat_identities_evaluate_through_globals():
    # test_nat_id, test_match_nat_id, test_global_match_nat_id
    mod = prelude_module("""
    def @nat_id(%x: Nat) -> Nat { %x }
    def @match_id(%x: Nat) -> Nat { match (%x) { Z => Z, S(%y) => S(%y) } }
    def @main() { (@nat_id(S(S(S(Z)))), @match_id(S(S(S(Z)))),
                   match (S(S(S(Z)))) { Z => Z, S(%y) => S(%y) }) }
    """)
    out, main = main_of(mod)
    three = nat(3, out)
    rl.assert_structural_equal(main.body, rl.Tuple([three, three, three]))


def test_a_loop_that_never_ends_stays_a_call():
    # test_loop and test_swap_loop: the fuel runs out, the call is left as it was
    mod = prelude_module("""
    def @loop[t](%x: t) -> t { @loop(%x) }
    def @swap(%x: Nat, %y: Nat) -> Nat { @swap(%y, %x) }
    def @main() { (@loop(1), @swap(S(Z), S(S(Z)))) }
    """)
    out, main = main_of(mod)
    assert sorted(calls_of_globals(main)) == ["loop", "swap"]
    loop, swap = main.body.fields
    assert loop.args[0].data == 1
    rl.assert_structural_equal(swap, rl.parse_expr("@swap(S(Z), S(S(Z)))", mod=out))


def test_static_recursion_of_a_closure_folds_to_the_end():
    # the triangle number: a let-bound recursive closure on constants
    f = rl.parse_expr("""fn () {
      let %f = fn (%n: int32) -> int32 { if (%n == 0) { 0 } else { %n + %f(%n - 1) } };
      %f(10) }""")
    rl.assert_structural_equal(rl.optimize(f, passes=PE, check=True),
                               rl.parse_expr("fn () { 55 }"))


def test_a_specialised_global_keeps_its_effects_in_order():
    mod = prelude_module("""
    def @bump(%r: ref(float32), %by: float32) -> float32 { %r := !%r + %by; !%r }
    def @main(%r: ref(float32)) { let %a = @bump(%r, 1f); let %b = @bump(%r, 2f); (%a, %b) }
    """)
    out, main = main_of(mod)
    assert calls_of_globals(main) == []           # specialised: the reference is known here
    for program in (mod, out):
        r = rl.RefValue(np.float32(10.0))
        a, b = rl.evaluate(program, r)
        assert (float(a), float(b), float(r.value)) == (11.0, 13.0, 13.0)


def test_a_call_with_dynamic_control_stays_a_call():
    # @length of a list whose end is not known: the match on it is dynamic
    mod = prelude_module("def @main(%l: List[float32]) { @length(Cons(1f, %l)) }")
    out, main = main_of(mod)
    assert calls_of_globals(main) == ["length"]
    p = rl.Prelude(rl.Module())
    value = rl.ConstructorValue(p.Cons, [np.float32(2.0), rl.ConstructorValue(p.Nil, [])])
    assert int(rl.evaluate(out, value)) == int(rl.evaluate(mod, value)) == 2


def test_relays_ref_and_const_inline_cases():
    # test_const_inline: (fn (%d) { %d + %d })(4f) is 8f; test_ref: a local reference squared
    rl.assert_structural_equal(
        rl.optimize(rl.parse_expr("fn () { (fn (%d: float32) { %d + %d })(4f) }"), passes=PE),
        rl.parse_expr("fn () { 8f }"))
    square = rl.parse_expr("""fn (%d: float32) {
      let %r = ref(%d); let %x = %r := !%r * !%r; !%r }""")
    rl.assert_structural_equal(rl.optimize(square, passes=PE, check=True),
                               rl.parse_expr("fn (%d: float32) { %d * %d }"))


# ---- A-normal form: every subexpression bound (test_pass_to_a_normal_form.py) ------------------

def test_to_anf_binds_constants_and_the_result_in_evaluation_order():
    # test_order: 1 + 2 * 3 is let %a = 1; let %b = 2; let %c = 3; let %d = %b * %c;
    # let %e = %a + %d; %e
    g = rl.optimize(rl.parse_expr("fn () { 1 + 2 * 3 }"), passes=[rl.passes.to_anf], check=True)
    rl.assert_structural_equal(g, rl.parse_expr("""fn () {
      let %a = 1; let %b = 2; let %c = 3; let %d = %b * %c; let %e = %a + %d; %e }"""))
    assert int(rl.evaluate(g)) == 7


def test_to_anf_binds_each_branch_and_function_result():
    # test_if / test_recursion: every scope (a branch, a function body) ends in a variable
    g = rl.passes.to_anf(rl.parse_expr("""fn (%c: bool, %x: float32) {
      let %f = fn (%y: float32) { %y * 2f }; if (%c) { %f(%x) } else { 1f } }"""))
    rl.assert_structural_equal(g, rl.parse_expr("""fn (%c: bool, %x: float32) {
      let %f = fn (%y: float32) { let %k = 2f; let %m = %y * %k; %m };
      let %i = if (%c) { let %r = %f(%x); %r } else { let %o = 1f; %o };
      %i }"""))
    for c in (True, False):
        assert float(rl.evaluate(g, c, np.float32(3.0))) == (6.0 if c else 1.0)


def test_to_anf_binds_a_shared_pure_node_once():
    # test_explicit_bound: a node used twice (graph form) is one binding
    x = rl.var("x", shape=(), dtype="float32")
    shared = rl.exp(x)
    g = rl.passes.to_anf(rl.Function([x], shared + shared))
    bindings = [n.value for n in walk(g) if isinstance(n, Let)]
    assert sum(isinstance(v, Call) and getattr(v.op, "name", "") == "exp" for v in bindings) == 1


# ---- common subexpressions: the node itself is shared (test_pass_eliminate_common_subexpr.py) --

def test_cse_shares_the_node_itself():
    # test_simple: relu(x) + 1 computed twice is one node used twice, without a let
    f = rl.parse_expr("""fn (%x: Tensor[(1, 16), float32]) {
      add(add(nn.relu(%x), 1f), add(nn.relu(%x), 1f)) }""")
    g = rl.passes.cse(f)
    assert not any(isinstance(n, Let) for n in walk(g))
    total = g.body
    assert total.args[0] is total.args[1]                     # the same node
    rl.assert_structural_equal(total.args[0], rl.parse_expr(
        "add(nn.relu(%x), 1f)", free_vars=[f.params[0]]))
    x = np.linspace(-1, 1, 16, dtype="float32").reshape(1, 16)
    np.testing.assert_array_equal(rl.evaluate(g, x), rl.evaluate(f, x))
    # a value the program bound itself keeps its let, and the repeat reads it
    h = rl.passes.cse(rl.parse_expr("fn (%x: float32) { let %y = exp(%x); %y * exp(%x) }"))
    rl.assert_structural_equal(h, rl.parse_expr(
        "fn (%x: float32) { let %y = exp(%x); %y * %y }"))


def test_the_default_pipelines_cse_binds_what_it_merges():
    # the interpreter evaluates a shared node at each use: the pipeline's cse keeps a let
    f = rl.parse_expr("fn (%x: float32) { exp(%x) * exp(%x) }")
    rl.assert_structural_equal(rl.passes.CSE(bind=True)(f), rl.parse_expr(
        "fn (%x: float32) { let %e = exp(%x); %e * %e }"))
    from relayish.ir.passes.manager import DEFAULT_PASSES
    assert [p.bind for p in DEFAULT_PASSES if isinstance(p, rl.passes.CSE)] == [True]


# ---- dead code (test_pass_dead_code_elimination.py) -------------------------------------------

def test_a_let_bound_function_used_only_by_itself_is_dead():
    # test_recursion_dead: a recursive closure nobody calls goes
    f = rl.parse_expr("""fn (%x: int32) {
      let %f = fn (%n: int32, %acc: int32) -> int32 {
        if (%n == 0) { %acc } else { %f(%n - 1, %acc * %n) } };
      %x }""")
    rl.assert_structural_equal(rl.passes.dead_code(f), rl.parse_expr("fn (%x: int32) { %x }"))
    # called from outside, it stays (test_recursion)
    used = rl.parse_expr("""fn (%x: int32) {
      let %f = fn (%n: int32, %acc: int32) -> int32 {
        if (%n == 0) { %acc } else { %f(%n - 1, %acc * %n) } };
      %f(%x, 1) }""")
    out = rl.passes.dead_code(used)
    rl.assert_structural_equal(out, used)
    assert int(rl.evaluate(out, np.int32(5))) == 120


def test_dead_code_keeps_what_relay_keeps():
    # test_let / test_tuple_get_item / test_op_let: unused pure lets go, used ones stay;
    # an unused write stays (relayish: a write is an effect; Relay's #6803)
    f = rl.parse_expr("""fn (%x: float32, %r: ref(float32)) {
      let %a = (%x, %x); let %b = %a.0 + 1f; let %unused = exp(%x); let %w = %r := %b; %b }""")
    rl.assert_structural_equal(rl.passes.dead_code(f), rl.parse_expr("""fn (%x: float32,
      %r: ref(float32)) { let %a = (%x, %x); let %b = %a.0 + 1f; let %w = %r := %b; %b }"""))


# ---- constant folding (test_pass_fold_constant.py) --------------------------------------------

def fold(text, **kw):
    return rl.optimize(rl.parse_expr(text, **kw), passes=[rl.passes.fold_constant], check=True)


def test_fold_const():
    # ((c + c) * 2) folds, x + that stays, + c stays
    c = "const([1, 2, 3], float32)"
    g = fold(f"fn (%x: Tensor[(3), float32]) {{ %x + ({c} + {c}) * 2f + {c} }}")
    rl.assert_structural_equal(g, rl.parse_expr(
        f"fn (%x: Tensor[(3), float32]) {{ %x + const([4, 8, 12], float32) + {c} }}"))


def test_fold_let():
    # let %t1 = c; let %t2 = %t1 + %t1; let %t3 = %t2 + %x; %t3 -> let %t3 = 2f + %x; %t3
    g = fold("fn (%x: Tensor[(1), float32]) { let %t1 = 1f; let %t2 = %t1 + %t1; "
             "let %t3 = %t2 + %x; %t3 }")
    rl.assert_structural_equal(g, rl.parse_expr(
        "fn (%x: Tensor[(1), float32]) { let %t3 = 2f + %x; %t3 }"))


def test_fold_tuple():
    # (x, c).1 + c folds to 2c, (x, c).0 is x
    g = fold("fn (%x: Tensor[(1), float32]) { %y = (%x, 1f); %y.1 + 1f + %y.0 }")
    rl.assert_structural_equal(g, rl.parse_expr("fn (%x: Tensor[(1), float32]) { 2f + %x }"))
    # a field with an effect is not dropped
    kept = fold("fn (%r: ref(float32)) { (%r := 1f, 2f).1 }")
    assert isinstance(kept.body, TupleGetItem)


def test_fold_concat():
    g = fold("fn () { concatenate((const([[1, 2, 3]], float32), const([[1, 2, 3]], float32)), "
             "axis=0) }")
    rl.assert_structural_equal(g, rl.parse_expr("fn () { const([[1, 2, 3], [1, 2, 3]], float32) }"))


def test_fold_full_leaves_a_fill_alone():
    # a 720-element constant from a 1-element fill would be worse than the call
    text = "fn () { full(1f, shape=[8, 9, 10]) }"
    rl.assert_structural_equal(fold(text), rl.parse_expr(text))
    text = 'fn () { zeros(shape=[2], dtype="float32") }'
    rl.assert_structural_equal(fold(text), rl.parse_expr(text))


def test_fold_keeps_values_faults_and_non_constants():
    # IEEE values as the interpreter computes them; an op that fails now stays and fails later
    g = fold("fn () { (1f / 0f, 0f / 0f) }")
    values = rl.evaluate(g)
    assert values[0] == np.inf and np.isnan(values[1])
    assert all(isinstance(f, rl.Constant) for f in g.body.fields)
    g = fold("fn () { take(const([1, 2], float32), 5) }")
    assert isinstance(g.body, Call)
    with pytest.raises(rl.EvaluationError):
        rl.evaluate(g)
    # a call of a function is not evaluated (that is partial_eval's work)
    text = "fn () { let %f = fn (%a: float32) { %a * 2f }; %f(3f) }"
    rl.assert_structural_equal(fold(text), rl.parse_expr(text))


# ---- every program: the Relay-form passes keep values and print back -------------------------

@settings(max_examples=6)       # test_properties runs the passes at length; these are the forms
@given(programs(max_depth=4))
def test_the_relay_form_passes_keep_the_values_of_random_programs(prog):
    for passes in ([rl.passes.to_anf], [rl.passes.cse], [rl.passes.fold_constant],
                   [rl.passes.to_anf, rl.passes.dead_code, rl.passes.from_anf]):
        _check(prog.mod, prog.args, passes)
