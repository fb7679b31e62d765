"""The effect analysis (relayish/ir/passes/effects.py): reads, writes, allocations, unknown calls
and failures, with latent effects followed through globals, closures and recursion."""
import pytest

import relayish as rl
from relayish.ir.passes.effects import Effects, effects_of
from relayish.ir.visitor import build_let_chain
from strategies import CHAIN_LENGTHS, f32


def _main_effects(text):
    mod = rl.parse(text)
    return Effects(mod)(mod["main"].body)


@pytest.mark.parametrize("body, expected", [
    ("%x * 2f", set()),
    ("let %r = ref(%x); %x", {"alloc"}),
    ("let %r = ref(%x); !%r", {"alloc", "read"}),
    ("let %r = ref(%x); let %u = %r := 1f; %x", {"alloc", "write"}),
    ("take(%x, 0)", {"fail"}),                  # take declares "fail" in its Op record
    ("let %f = fn (%y: float32) { %y * 2f }; %f(%x)", set()),          # a known closure
    ("let %f = fn (%y: float32) { take(%y, 0) }; %x", set()),          # built, never called
    ("let %f = fn (%y: float32) { take(%y, 0) }; %f(%x)", {"fail"}),
    ("(fn (%y: float32) { let %r = ref(%y); !%r })(%x)", {"alloc", "read"}),
])
def test_effects_of_expressions(body, expected):
    assert _main_effects(f"def @main(%x: float32) {{ {body} }}") == expected


def test_a_call_of_an_unknown_function_may_do_anything():
    # a parameter of function type, a closure taken out of a tuple, a closure read from a ref
    assert _main_effects("def @main(%k: fn (float32) -> float32) { %k(1f) }") == {"call"}
    assert _main_effects("""def @main(%p: (fn (float32) -> float32, float32)) {
        %p.0(%p.1) }""") == {"call"}
    assert _main_effects("""def @main(%x: float32) {
        let %r = ref(fn (%y: float32) { %y });
        (!%r)(%x) }""") == {"alloc", "read", "call"}


def test_globals_carry_their_effects_to_their_callers():
    mod = rl.parse("""
def @write(%r: ref(float32), %v: float32) { %r := %v }
def @pure(%x: float32) { %x + 1f }
def @calls_write(%r: ref(float32)) { @write(%r, @pure(2f)) }
def @main(%r: ref(float32)) { let %a = @pure(1f); let %b = @calls_write(%r); %a }
""")
    eff = Effects(mod)
    assert eff.of_call(mod.get_global_var("pure")) == set()
    assert eff.of_call(mod.get_global_var("write")) == {"write"}
    assert eff.of_call(mod.get_global_var("calls_write")) == {"write"}
    assert eff(mod["main"].body) == {"write"}


def test_recursion_reaches_a_fixpoint():
    mod = rl.parse("""
def @even(%n: int32, %r: ref(int32)) -> bool {
  if (%n == 0) { True } else { @odd(%n - 1, %r) }
}
def @odd(%n: int32, %r: ref(int32)) -> bool {
  if (%n == 0) { let %u = %r := %n; False } else { @even(%n - 1, %r) }
}
def @count(%n: int32) -> int32 { if (%n == 0) { 0 } else { @count(%n - 1) + 1 } }
def @main(%n: int32) -> int32 {
  let %loop = fn (%k: int32) -> int32 { if (%k == 0) { take(%k, 0) } else { %loop(%k - 1) } };
  %loop(%n)
}
""")
    eff = Effects(mod)
    assert eff.of_call(mod.get_global_var("even")) == {"write"}     # through @odd
    assert eff.of_call(mod.get_global_var("odd")) == {"write"}
    assert eff.of_call(mod.get_global_var("count")) == set()        # recursion alone is pure
    assert eff(mod["main"].body) == {"fail"}                        # a let-bound recursive fn


def test_matches_fail_only_when_not_exhaustive():
    mod = rl.Module()
    p = rl.Prelude(mod)
    xs = rl.var("xs", type=rl.TypeCall(p.List, [rl.TensorType((), "float32")]))
    h, t = rl.var("h"), rl.var("t", type=xs.type_annotation)
    cons = rl.Clause(rl.PatternConstructor(p.Cons, [rl.PatternVar(h), rl.PatternVar(t)]), h)
    nil = rl.Clause(rl.PatternConstructor(p.Nil, []), rl.const(0.0))
    complete = rl.Match(xs, [cons, nil])
    partial = rl.Match(xs, [cons], complete=False)
    covered = rl.Match(xs, [cons, rl.Clause(rl.PatternWildcard(), rl.const(0.0))], complete=False)
    assert effects_of(complete, mod) == set()
    assert effects_of(partial, mod) == {"fail"}
    assert effects_of(covered, mod) == set()       # a match? that happens to cover every case


def test_an_expression_built_after_the_analysis_is_analysed_on_demand():
    mod = rl.parse("def @main(%x: float32) { %x }")
    eff = Effects(mod)
    x = f32("x")
    r = rl.var("r", type=rl.RefType(rl.TensorType((), "float32")))
    fresh = rl.Function([x], rl.RefWrite(r, x))
    assert eff(fresh) == set()                     # making a closure runs nothing
    assert eff(rl.Call(fresh, [rl.const(1.0)])) == {"write"}
    assert eff.of_call(fresh) == {"write"}
    assert eff.droppable(rl.RefRead(r)) and not eff.droppable(rl.Call(fresh, [rl.const(1.0)]))


def test_misuse_is_a_relayish_error():
    with pytest.raises(rl.RelayishError, match="Effects analyses a Module or an expression"):
        Effects(42)
    with pytest.raises(rl.RelayishError, match="mod must be a Module"):
        Effects(rl.const(1.0), mod="main")


@pytest.mark.parametrize("n", CHAIN_LENGTHS)
def test_long_let_chains_are_walked_without_recursion(n):
    x = f32("x")
    r = rl.var("r", type=rl.RefType(rl.TensorType((), "float32")))
    bindings, prev = [(r, rl.RefCreate(x))], x
    for k in range(n):
        v = f32(f"v{k}")
        bindings.append((v, prev * rl.const(1.0)))
        prev = v
    bindings.append((rl.var("w", type=rl.TupleType([])), rl.RefWrite(r, prev)))
    func = rl.Function([x], build_let_chain(bindings, prev))
    eff = Effects(func)
    assert eff(func.body) == {"alloc", "write"}
    assert eff(bindings[-2][1]) == set()
