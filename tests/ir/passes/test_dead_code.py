"""Dead-code elimination (relayish/ir/passes/dead_code.py): unused droppable bindings go,
transitively; writes, failures and unknown calls stay, used or not."""
import numpy as np
import pytest

import relayish as rl
from relayish.ir.passes.dead_code import eliminate
from relayish.ir.visitor import build_let_chain, let_chain
from strategies import CHAIN_LENGTHS, f32


def _dce(text):
    """(input, output) Functions of dead_code on the text of one function."""
    f = rl.parse_expr(text)
    return f, rl.optimize(f, passes=[rl.passes.dead_code], check=True)


def _bound(func):
    return [v.name_hint for v, _ in let_chain(func.body)[0]]


def test_unused_pure_bindings_go_transitively():
    f, g = _dce("""fn (%x: float32) {
        let %a = exp(%x); let %b = %a * 2f; let %c = (%b, %a); let %d = %c.0; %x + 1f }""")
    assert _bound(g) == []
    rl.assert_structural_equal(g, rl.parse_expr("fn (%x: float32) { %x + 1f }"))


def test_reading_and_allocating_are_droppable():
    f, g = _dce("""fn (%x: float32) {
        let %r = ref(%x); let %v = !%r; let %s = ref(%v); %x }""")
    assert _bound(g) == []


def test_an_unused_reference_write_stays():
    """TVM issue #6803: Relay's DCE dropped `let %_ = %r := 1` and the program returned 0."""
    f, g = _dce("""fn () {
        let %r = ref(0f); let %unused = %r := 1f; !%r }""")
    assert _bound(g) == ["r", "unused"]
    assert rl.evaluate(g) == rl.evaluate(f) == np.float32(1.0)


def test_a_match_that_can_fail_stays():
    mod = rl.Module()
    p = rl.Prelude(mod)
    lst = rl.var("l", type=rl.TypeCall(p.List, [rl.TensorType((), "float32")]))
    h = f32("h")
    head = rl.Match(lst, [rl.Clause(rl.PatternConstructor(
        p.Cons, [rl.PatternVar(h), rl.PatternWildcard()]), h)], complete=False)
    total = rl.Match(lst, [rl.Clause(rl.PatternWildcard(), rl.const(0.0))])
    unused_head, unused_total = f32("head"), f32("total")
    mod["main"] = rl.Function([lst], rl.Let(unused_head, head, rl.Let(unused_total, total,
                                                                       rl.const(2.0))))
    out = rl.optimize(mod, passes=[rl.passes.dead_code], check=True)
    assert _bound(out["main"]) == ["head"]
    empty = rl.list_value(mod, [])
    for program in (mod, out):
        with pytest.raises(rl.EvaluationError):
            rl.evaluate(program, empty)
    assert rl.evaluate(out, rl.list_value(mod, [np.float32(1.0)])) == np.float32(2.0)


def test_an_op_that_can_fail_stays():
    f, g = _dce("""fn (%x: Tensor[(3), float32], %i: int32) {
        let %a = take(%x, %i); let %b = sum(%x); %x }""")
    assert _bound(g) == ["a"]
    for program in (f, g):
        with pytest.raises(rl.EvaluationError):
            rl.evaluate(program, np.ones(3, "float32"), np.int32(7))


def test_calls_of_unknown_or_effectful_functions_stay():
    mod = rl.parse("""
def @store(%r: ref(float32), %v: float32) { %r := %v }
def @square(%v: float32) { %v * %v }
def @main(%k: fn (float32) -> float32, %r: ref(float32), %x: float32) {
  let %a = %k(%x);            // an unknown closure: it may write, fail, loop
  let %b = @store(%r, %x);    // a global that writes
  let %c = @square(%x);       // a pure global: goes
  let %f = fn (%y: float32) { %r := %y };
  let %d = %f(%x);            // a known closure that writes
  let %g = fn (%y: float32) { %y + 1f };
  let %e = %g(%x);            // a known pure closure: goes, and %g with it
  %x
}
""")
    out = rl.optimize(mod, passes=[rl.passes.dead_code], check=True)
    assert _bound(out["main"]) == ["a", "b", "f", "d"]
    rl.assert_structural_equal(out["store"], mod["store"])
    assert out["square"] is mod["square"]         # unchanged globals are shared, and kept


def test_a_node_shared_with_live_code_keeps_what_it_uses():
    x = f32("x")
    a, b, c = f32("a"), f32("b"), f32("c")
    shared = a + rl.const(1.0)                     # one node, used by %b (dead) and %c (live)
    f = rl.Function([x], build_let_chain([(a, x * rl.const(2.0)), (b, shared), (c, shared)], c))
    g = rl.passes.dead_code(f)
    assert _bound(g) == ["a", "c"]
    assert rl.evaluate(g, np.float32(1.0)) == np.float32(3.0)


def test_dead_code_inside_branches_closures_and_nested_lets():
    f, g = _dce("""fn (%x: float32, %c: bool) {
        let %a = exp(%x);
        let %f = fn (%y: float32) { let %dead = %a * %y; %y };
        let %z = if (%c) { let %dead2 = %a + 1f; %f(%x) } else { %x };
        let %nested = (let %inner = sin(%x); %inner * 2f);
        %z
    }""")
    # %a was used only by bindings that went; the nested let went with %nested
    rl.assert_structural_equal(g, rl.parse_expr("""fn (%x: float32, %c: bool) {
        let %f = fn (%y: float32) { %y };
        let %z = if (%c) { %f(%x) } else { %x };
        %z
    }"""))
    for c in (True, False):
        np.testing.assert_equal(rl.evaluate(g, np.float32(0.5), c), rl.evaluate(f, np.float32(0.5), c))


def test_unused_parameters_of_a_let_bound_closure_go_with_their_arguments():
    f, g = _dce("""fn (%x: float32, %y: float32) {
        let %f: fn (float32, float32, ()) -> float32 =
            fn (%a: float32, %b: float32, %c: ()) { %a * 2f };
        let %e = exp(%y);                       // used only as %f's unused argument: goes
        let %r = ref(%x);
        (%f(%x, %e, %r := %x), %f(%y, sin(%y), ()), !%r) }""")
    # %b goes (both its arguments are pure); %c stays: one of its arguments writes
    rl.assert_structural_equal(g, rl.parse_expr("""fn (%x: float32, %y: float32) {
        let %f: fn (float32, ()) -> float32 = fn (%a: float32, %c: ()) { %a * 2f };
        let %r = ref(%x);
        (%f(%x, %r := %x), %f(%y, ()), !%r) }"""))
    for program in (f, g):
        assert [float(v) for v in rl.evaluate(program, 1.0, 2.0)] == [2.0, 4.0, 1.0]


def test_a_closure_that_escapes_keeps_its_parameters():
    f, g = _dce("""fn (%x: float32) {
        let %f = fn (%a: float32, %b: float32) { %a * 2f };
        let %k = %f;                            // %f is passed on: its callers are unknown
        (%k(%x, exp(%x)), %f(%x, 1f)) }""")
    rl.assert_structural_equal(g, f)


def test_the_input_is_not_changed_and_a_clean_function_is_returned_as_is():
    f = rl.parse_expr("fn (%x: float32) { let %a = exp(%x); %a }")
    text = rl.astext(f)
    assert eliminate(f) is f
    _, g = _dce("fn (%x: float32) { let %a = exp(%x); let %b = %a; %a }")
    assert rl.astext(f) == text and _bound(g) == ["a"]


def test_dead_code_of_ad_output_keeps_its_values():
    x = rl.var("x", shape=(3,), dtype="float64")
    w = rl.var("w", shape=(3, 3), dtype="float64")
    mlp = rl.Function([x, w], rl.sum(rl.tanh(rl.matmul(w, rl.tanh(rl.matmul(w, x))))))
    grad = rl.gradient(mlp, optimize=False)
    lean = rl.optimize(grad, passes=[rl.passes.dead_code], check=True)
    assert len(let_chain(lean.body)[0]) <= len(let_chain(grad.body)[0])
    args = (np.linspace(-1, 1, 3), np.linspace(-1, 1, 9).reshape(3, 3))
    want, got = rl.evaluate(grad, *args), rl.evaluate(lean, *args)
    np.testing.assert_allclose(got[0], want[0])
    for g_, w_ in zip(got[1], want[1]):
        np.testing.assert_allclose(g_, w_)


@pytest.mark.parametrize("order", [1, 2, 3])
def test_dead_code_of_higher_order_derivatives_keeps_their_values(order):
    y = rl.var("y", shape=(), dtype="float64")
    g = rl.Function([y], y ** rl.const(5.0, "float64"))
    for _ in range(order):
        g = rl.grad(g, optimize=False)
    lean = rl.optimize(g, passes=[rl.passes.dead_code], check=True)
    assert rl.astext(lean).count("let ") < rl.astext(g).count("let ")
    assert rl.evaluate(lean, 0.7) == rl.evaluate(g, 0.7)
    assert rl.evaluate(rl.grad(lean, optimize=False), 0.7) == \
        rl.evaluate(rl.grad(g, optimize=False), 0.7)


@pytest.mark.parametrize("n", CHAIN_LENGTHS)
def test_long_dead_chains_go_in_one_pass(n):
    x = f32("x")
    r = rl.var("r", type=rl.RefType(rl.TensorType((), "float32")))
    bindings, prev = [(r, rl.RefCreate(x))], x
    for k in range(n):                        # a chain that only the next binding uses
        v = f32(f"v{k}")
        bindings.append((v, prev * rl.const(1.0)))
        prev = v
    bindings.append((rl.var("w", type=rl.TupleType([])), rl.RefWrite(r, x)))
    func = rl.Function([x], build_let_chain(bindings, rl.RefRead(r)))
    out = eliminate(func)
    assert _bound(out) == ["r", "w"]


def test_misuse_is_a_relayish_error():
    with pytest.raises(rl.RelayishError, match="takes a Function or a Module"):
        rl.passes.dead_code(rl.const(1.0))
    with pytest.raises(rl.RelayishError, match="takes a Function or a Module"):
        rl.passes.to_anf("fn (%x: float32) { %x }")
    ill_typed = rl.parse_expr("fn (%x: float32) { let %a = %x + 1f64; %x }")
    with pytest.raises(rl.TypeCheckError):       # dead_code requires a typed program
        rl.passes.dead_code(ill_typed)
