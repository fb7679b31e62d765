"""A-normal form and back (relayish/ir/passes/anf.py): to_anf binds every compound operand and
flattens lets, in evaluation order; from_anf puts back what is safe to move."""
import numpy as np
import pytest

import relayish as rl
from relayish.ir.expr import Function, If, Let, Match
from relayish.ir.passes.anf import from_anf_expr, is_atom, to_anf_expr
from relayish.ir.passes.uses import operands
from relayish.ir.visitor import build_let_chain, let_chain
from strategies import CHAIN_LENGTHS, f32


def assert_anf(expr):
    """Every let value is simple, every operand an atom; branches and bodies are scopes."""
    scopes = [expr]
    while scopes:
        bindings, tail = let_chain(scopes.pop())
        for simple in [value for _, value in bindings] + [tail]:
            assert not isinstance(simple, Let), f"a let inside a let's value: {simple}"
            if isinstance(simple, Function):
                scopes.append(simple.body)
            elif isinstance(simple, If):
                assert is_atom(simple.cond)
                scopes += [simple.true_branch, simple.false_branch]
            elif isinstance(simple, Match):
                assert is_atom(simple.data)
                scopes += [c.rhs for c in simple.clauses]
            else:
                for operand in operands(simple):
                    assert is_atom(operand), f"{operand} is not an atom in {simple}"


def test_operands_become_atoms_in_evaluation_order():
    f = rl.parse_expr("fn (%x: float32) { exp(%x) * %x + 1f }")
    g = rl.passes.to_anf(f)
    assert_anf(g.body)
    rl.assert_structural_equal(g, rl.parse_expr("""fn (%x: float32) {
        let %e = exp(%x); let %m = %e * %x; let %c = 1f; let %a = %m + %c; %a }"""))
    # the form the passes working on A-normal form take leaves constants and results alone
    rl.assert_structural_equal(to_anf_expr(f), rl.parse_expr("""fn (%x: float32) {
        let %e = exp(%x); let %m = %e * %x; %m + 1f }"""))


def test_nested_lets_are_lifted_and_scopes_kept():
    f = rl.parse_expr("""fn (%x: float32, %c: bool) {
        let %y = (let %z = exp(%x); %z * %z);
        let %f = fn (%u: float32) { sin(%u) * 2f };
        if (%c) { %f(%y + 1f) } else { (%y, cos(%x)).1 } }""")
    g = rl.optimize(f, passes=[rl.passes.to_anf], check=True)
    assert_anf(g.body)
    assert [v.name_hint for v, _ in let_chain(g.body)[0]][:3] == ["z", "y", "f"]
    for c in (True, False):
        np.testing.assert_equal(rl.evaluate(g, np.float32(0.3), c),
                                rl.evaluate(f, np.float32(0.3), c))


def test_effects_keep_their_order():
    f = rl.parse_expr("""fn (%x: float32) {
        let %r = ref(%x);
        (!%r, %r := !%r + 1f, !%r, (%r := 5f, !%r).1) }""")
    g = rl.passes.to_anf(f)
    assert_anf(g.body)
    got, want = rl.evaluate(g, np.float32(1.0)), rl.evaluate(f, np.float32(1.0))
    assert (got[0], got[2], got[3]) == (want[0], want[2], want[3]) == (1.0, 2.0, 5.0)


def test_a_shared_pure_node_is_bound_once_and_a_shared_effect_twice():
    x = f32("x")
    r = rl.var("r", type=rl.RefType(rl.TensorType((), "float32")))
    pure = rl.exp(x)
    bump = rl.RefWrite(r, rl.RefRead(r) + rl.const(1.0))
    body = rl.Let(r, rl.RefCreate(x), rl.Tuple([pure, pure, bump, bump, rl.RefRead(r)]))
    f = rl.Function([x], body)
    g = rl.passes.to_anf(f)
    names = [value for _, value in let_chain(g.body)[0]]
    assert sum(isinstance(v, rl.Call) and getattr(v.op, "name", "") == "exp" for v in names) == 1
    assert sum(isinstance(v, rl.RefWrite) for v in names) == 2
    assert rl.evaluate(g, np.float32(0.0))[4] == rl.evaluate(f, np.float32(0.0))[4] == 2.0


def test_a_shared_effectful_let_is_flattened_twice_with_fresh_vars():
    x, t = f32("x"), f32("t")
    r = rl.var("r", type=rl.RefType(rl.TensorType((), "float32")))
    bump = rl.Let(t, rl.RefRead(r), rl.Let(rl.var("u", type=rl.TupleType([])),
                                         rl.RefWrite(r, t + rl.const(1.0)), t * rl.const(2.0)))
    f = rl.Function([x], rl.Let(r, rl.RefCreate(x), rl.Tuple([bump, bump, rl.RefRead(r)])))
    g = rl.optimize(f, passes=[rl.passes.to_anf], check=True)
    binders = [v for v, _ in let_chain(g.body)[0]]
    assert len({id(v) for v in binders}) == len(binders)      # no Var bound twice
    back = rl.passes.from_anf(g)
    for program in (g, back):        # the second copy reads and writes its own %t: 2, 4, then 3
        assert [float(v) for v in rl.evaluate(program, np.float32(1.0))] == [2.0, 4.0, 3.0]
    rl.assert_structural_equal(rl.parse(rl.astext(rl.Module.from_expr(g)))["main"], g)


def test_a_shared_pure_node_in_two_branches_is_bound_in_each():
    x, c = f32("x"), rl.var("c", type=rl.TensorType((), "bool"))
    shared = rl.exp(x) * x
    f = rl.Function([x, c], rl.If(c, shared + rl.const(1.0), shared - rl.const(1.0)))
    g = rl.optimize(f, passes=[rl.passes.to_anf], check=True)      # check: every var in scope
    assert_anf(g.body)
    for cond in (True, False):
        assert rl.evaluate(g, np.float32(0.5), cond) == rl.evaluate(f, np.float32(0.5), cond)


def test_to_anf_provides_the_anf_property():
    class NeedsANF(rl.Pass):
        name = "needs-anf"
        requires = {"anf"}

        def run(self, mod):
            for func in mod.functions.values():
                assert_anf(func.body)
            return mod

    f = rl.parse_expr("fn (%x: float32) { tanh(%x * %x) }")
    with pytest.raises(rl.RelayishError, match="requires 'anf'"):
        rl.optimize(f, passes=[NeedsANF()])
    rl.optimize(f, passes=[rl.passes.to_anf, NeedsANF()])
    rl.optimize(f, passes=[rl.passes.to_anf, rl.passes.dead_code, NeedsANF()])   # kept
    with pytest.raises(rl.RelayishError, match="requires 'anf'"):
        rl.optimize(f, passes=[rl.passes.to_anf, rl.passes.from_anf, NeedsANF()])


def test_from_anf_undoes_to_anf_for_pure_code():
    f = rl.parse_expr("fn (%x: float32) { (exp(%x) * %x + 1f, sin(%x)) }")
    back = rl.optimize(f, passes=[rl.passes.to_anf, rl.passes.from_anf], check=True)
    rl.assert_structural_equal(back, f)


def test_from_anf_moves_only_what_is_safe_to_move():
    f = rl.parse_expr("""fn (%x: float32, %r: ref(float32)) {
        let %a = exp(%x);                         // used twice: stays
        let %b = %a * 2f;                         // used once, pure: moves
        let %c = !%r;                             // reads: stays
        let %d = sin(%x);                         // used once, but inside a closure: stays
        let %e = %x;                              // an atom: substituted everywhere
        let %f = fn (%y: float32) { %y * %d };
        (%a + %b, %c, %f(%e), %e) }""")
    g = rl.passes.from_anf(f)
    rl.assert_structural_equal(g, rl.parse_expr("""fn (%x: float32, %r: ref(float32)) {
        let %a = exp(%x);
        let %c = !%r;
        let %d = sin(%x);
        let %f = fn (%y: float32) { %y * %d };
        (%a + %a * 2f, %c, %f(%x), %x) }"""))


@pytest.mark.parametrize("n", CHAIN_LENGTHS)
def test_long_chains_and_deep_operands(n):
    x = f32("x")
    bindings, prev = [], x
    for k in range(n):
        v = f32(f"v{k}")
        bindings.append((v, rl.tanh(prev) * rl.const(0.5) + prev))
        prev = v
    func = rl.Function([x], build_let_chain(bindings, prev))
    anf = to_anf_expr(func)
    assert len(let_chain(anf.body)[0]) == 3 * n           # tanh, multiply, add per step
    back = from_anf_expr(anf)
    assert len(let_chain(back.body)[0]) == n              # annotated lets stay
    deep, depth = x, max(n // 10, 1_200)                 # past the recursion limit either way
    for _ in range(depth):                                # operands nested 1,200 / 10^4 deep
        deep = deep * rl.const(1.0)
    anf = to_anf_expr(rl.Function([x], deep))
    assert len(let_chain(anf.body)[0]) == depth - 1


@pytest.mark.parametrize("n", CHAIN_LENGTHS)
def test_lets_nested_as_values(n):
    """let %v = (let %w = (...); %w + 1); %v + 1, n deep: to_anf lifts them into one chain."""
    x = rl.var("x", shape=(), dtype="float64")
    e = x
    for k in range(n):
        v = rl.var(f"v{k}", dtype="float64")
        e = rl.Let(v, e, v + rl.const(1.0, "float64"))
    func = rl.Function([x], e)
    anf = to_anf_expr(func)
    bindings, tail = let_chain(anf.body)
    assert len(bindings) == n and not isinstance(tail, Let)       # %v_k = %v_(k-1) + 1
    assert from_anf_expr(anf) is not None and rl.passes.Effects(func)(func.body) == set()
