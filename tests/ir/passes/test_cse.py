"""rl.passes.cse: repeated pure values merge where the first dominates; effects never merge."""
import time

import numpy as np
import pytest
from hypothesis import given, settings

import relayish as rl
from relayish.ir.expr import Let
from relayish.ir.passes.uses import operands
from relayish.ir.visitor import build_let_chain
from strategies import programs
from tests.ir.passes.test_properties import _check, assert_same_value


BIND = rl.passes.CSE(bind=True)       # the default pipeline's: merged values let-bound


def cse(text):
    return BIND(rl.parse_expr(text))


def lets(program):
    """The distinct Let nodes of a program, in every scope."""
    seen, count, work = set(), 0, [program]
    while work:
        node = work.pop()
        if id(node) not in seen:
            seen.add(id(node))
            count += isinstance(node, Let)
            work.extend(operands(node))
    return count


def same_program(got, text):
    rl.assert_structural_equal(got, rl.parse_expr(text))


def test_a_repeated_pure_value_is_computed_once():
    same_program(cse("fn (%x: float32) { let %a = exp(%x); let %b = exp(%x); %a * %b }"),
                 "fn (%x: float32) { let %a = exp(%x); %a * %a }")


def test_merges_are_transitive_and_see_attributes_and_constants():
    got = cse("fn (%x: Tensor[(2, 3), float32]) { let %a = sum(%x, axis=0) * 2f; "
              "let %b = sum(%x, axis=0) * 2f; let %c = sum(%x, axis=1); (%a, %b, %c) }")
    same_program(got, "fn (%x: Tensor[(2, 3), float32]) { let %a = sum(%x, axis=0) * 2f; "
                      "(%a, %a, sum(%x, axis=1)) }")


def test_tuples_and_projections_merge():
    same_program(cse("fn (%x: float32, %y: float32) { let %t = (%x, %y); let %u = (%x, %y); "
                     "(%t.0, %u.0) }"),
                 "fn (%x: float32, %y: float32) { let %p = (%x, %y).0; (%p, %p) }")


def test_a_closure_reuses_what_was_computed_before_it():
    # the backward half of AD output recomputing a primal value reads the primal's binding
    same_program(cse("fn (%x: float32) { let %e = exp(%x); let %bp = fn (%g: float32) "
                     "{ %g * exp(%x) }; (%e, %bp(1f)) }"),
                 "fn (%x: float32) { let %e = exp(%x); let %bp = fn (%g: float32) "
                 "{ %g * %e }; (%e, %bp(1f)) }")


def test_no_merge_where_the_first_does_not_dominate():
    for text, count in [
        # the closure is built before the outer value: its body is not after it in scope order
        ("fn (%x: float32) { let %f = fn (%z: float32) { exp(%x) + %z }; %f(exp(%x)) }", 2),
        # two branches: neither dominates the other, nor what follows the if
        ("fn (%x: float32, %c: bool) { let %a = if (%c) { exp(%x) } else { exp(%x) * 2f }; "
         "(%a, exp(%x)) }", 3),
    ]:
        f = rl.parse_expr(text)
        assert lets(BIND(f)) >= lets(rl.passes.from_anf(rl.passes.to_anf(f)))
        got = BIND(f)
        assert rl.astext(got).count("exp(%x)") == count


def test_effects_never_merge():
    # two refs are two refs; a read depends on the writes between; unknown calls may do anything
    text = ("fn (%x: float32, %h: fn (float32) -> float32) { let %r = ref(%x); let %s = ref(%x); "
            "let %a = !%r; let %w = %r := %a + 1f; let %b = !%r; let %c = %h(%x); let %d = %h(%x); "
            "(%s, %a, %b, %c, %d, %r) }")
    f = rl.parse_expr(text)
    got = BIND(f)
    out = rl.astext(got)
    assert out.count("ref(%x)") == 2 and out.count("!%r") == 2 and out.count("%h(%x)") == 2
    def h(v):
        return np.asarray(v * 2, dtype="float32")
    want = rl.evaluate(f, np.float32(1.0), h)
    assert_same_value(rl.evaluate(got, np.float32(1.0), h), want)


def test_a_function_that_writes_is_not_merged_but_a_pure_one_is():
    mod = rl.parse("""
        def @pure(%x: float32) -> float32 { exp(%x) }
        def @bump(%r: ref(float32)) -> float32 { let %u = %r := !%r + 1f; !%r }
        def @main(%x: float32) {
          let %r = ref(%x);
          (@pure(%x), @pure(%x), @bump(%r), @bump(%r))
        }""")
    out = rl.astext(BIND(mod)["main"])
    assert out.count("@pure(%x)") == 1 and out.count("@bump(%r)") == 2
    assert_same_value(rl.evaluate(BIND(mod), np.float32(0.5)),
                      rl.evaluate(mod, np.float32(0.5)))


def test_a_failing_op_merges_only_under_its_first_occurrence():
    # take may fail: the second take runs only if the first succeeded, with the same result
    f = rl.parse_expr("fn (%x: Tensor[(3), float32], %i: int32) { let %a = take(%x, %i); "
                      "let %b = take(%x, %i); %a + %b }")
    got = BIND(f)
    assert rl.astext(got).count("take(") == 1
    x = np.arange(3, dtype="float32")
    assert_same_value(rl.evaluate(got, x, np.int32(2)), rl.evaluate(f, x, np.int32(2)))
    with pytest.raises(rl.EvaluationError):
        rl.evaluate(got, x, np.int32(7))
    # in a branch it stays in the branch: nothing is hoisted in front of the condition
    f = rl.parse_expr("fn (%x: Tensor[(3), float32], %i: int32, %c: bool) { if (%c) "
                      "{ take(%x, %i) } else { 0f } }")
    got = BIND(f)
    assert_same_value(rl.evaluate(got, x, np.int32(7), np.bool_(False)), np.float32(0.0))


def test_constructors_whose_type_the_context_chooses_stay_apart():
    mod = rl.parse("""
        type List[a] { Cons(a, List[a]), Nil }
        def @main() {
          let %l: List[float32] = Nil();
          let %m: List[int32] = Nil();
          (Cons(1f, %l), Cons(1, %m))
        }""")
    out = rl.optimize(mod, passes=[BIND], check=True)
    assert rl.astext(out["main"]).count("Nil()") == 2


def test_a_module_and_a_function_give_back_their_kind():
    f = rl.parse_expr("fn (%x: float32) { exp(%x) + exp(%x) }")
    assert isinstance(BIND(f), rl.Function)
    assert isinstance(BIND(rl.Module.from_expr(f)), rl.Module)


def _chain(n):
    x = rl.var("x", shape=(), dtype="float64")
    bindings, prev = [], x
    for k in range(n):
        v = rl.var(f"v{k}", dtype="float64")
        bindings.append((v, rl.tanh(prev) * rl.const(0.5, "float64") + rl.tanh(prev)))
        prev = v
    return rl.Function([x], build_let_chain(bindings, prev))


@pytest.mark.parametrize("n", [1_000, pytest.param(100_000, marks=pytest.mark.slow)])
def test_long_chains(n):
    f = _chain(n)
    t = time.process_time()
    out = BIND(f)
    elapsed = time.process_time() - t
    assert rl.astext(out).count("tanh(") == n      # one tanh per step instead of two
    assert_same_value(rl.evaluate(out, np.float64(0.3)), rl.evaluate(f, np.float64(0.3)))
    assert elapsed < 60 * n / 10_000


@given(programs(max_depth=4))
def test_cse_keeps_the_values_of_random_programs(prog):
    _check(prog.mod, prog.args, [BIND])
    _check(prog.mod, prog.args, [BIND, rl.passes.simplify, rl.passes.dead_code])


@settings(max_examples=10)
@given(programs(differentiable=True))
def test_cse_output_differentiates_to_the_same_gradient(prog):
    want = rl.evaluate(rl.gradient(prog.mod, optimize=False), *prog.args)
    out = _check(prog.mod, prog.args, [BIND, rl.passes.simplify, rl.passes.dead_code])
    assert_same_value(rl.evaluate(rl.gradient(out, optimize=False), *prog.args), want)


def test_the_second_backward_pass_reuses_the_first():
    # a Hessian differentiates a program that holds a backward pass: its own backward pass
    # recomputes values the first computed, in scopes the first dominates
    x = rl.var("x", shape=(3,), dtype="float64")
    h = rl.hessian(rl.Function([x], rl.sum(rl.tanh(x) * rl.tanh(x))), optimize=False)
    before = rl.passes.dead_code(h)
    after = rl.optimize(h, passes=[BIND, rl.passes.dead_code], check=True)
    ops = [rl.astext(rl.passes.to_anf(p)).count("let %") for p in (before, after)]
    assert ops[1] <= ops[0] - 20
    arg = np.array([0.3, -1.2, 2.0])
    assert_same_value(rl.evaluate(after, arg), rl.evaluate(h, arg))
