"""relayish.ir.analysis: free variables of a whole program in one walk; the call graph, use counts.

Checked against a reference written the plain way (a recursive definition over small programs),
on hand-written cases (fn, let, recursive let, match clauses with pattern binders, nested
closures, shared subtrees) and on derandomized random programs; then on programs far deeper than
Python's recursion limit, walked without run_deep's large stack.
"""
import random

import numpy as np
import pytest

import relayish as rl
from relayish.errors import RelayishError
from relayish.ir.analysis import FreeVars, free_vars
from strategies import CHAIN_LENGTHS
from relayish.ir.expr import (Call, Function, If, Let, Match, PatternConstructor, PatternTuple,
                              PatternVar, PatternWildcard, RefCreate, RefRead, RefWrite, Tuple,
                              TupleGetItem, Var)

F64 = rl.TensorType((), "float64")


# ---- the reference: free(e) by recursion on the definition ------------------------------------

def reference(e):
    """(set of free Vars by id, ...) of a small expression, the textbook way."""
    if isinstance(e, Var):
        return {id(e): e}
    if isinstance(e, Function):
        out = reference(e.body)
        for p in e.params:
            out.pop(id(p), None)
        return out
    if isinstance(e, Let):                       # the bound var scopes over value and body
        out = {**reference(e.value), **reference(e.body)}
        out.pop(id(e.var), None)
        return out
    if isinstance(e, Match):
        out = reference(e.data)
        for c in e.clauses:
            rhs = reference(c.rhs)
            for v in _binders(c.lhs):
                rhs.pop(id(v), None)
            out.update(rhs)
        return out
    out = {}
    for child in _children(e):
        out.update(reference(child))
    return out


def _binders(p):
    if isinstance(p, PatternVar):
        return [p.var]
    if isinstance(p, (PatternConstructor, PatternTuple)):
        return [v for sub in p.patterns for v in _binders(sub)]
    return []


def _children(e):
    if isinstance(e, Tuple):
        return list(e.fields)
    if isinstance(e, TupleGetItem):
        return [e.tuple_value]
    if isinstance(e, Call):
        return [e.op, *e.args]
    if isinstance(e, If):
        return [e.cond, e.true_branch, e.false_branch]
    if isinstance(e, RefCreate):
        return [e.value]
    if isinstance(e, RefRead):
        return [e.ref]
    if isinstance(e, RefWrite):
        return [e.ref, e.value]
    return []


def functions(e):
    out, todo, seen = [], [e], set()
    while todo:
        n = todo.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        if isinstance(n, Function):
            out.append(n)
            todo.append(n.body)
        elif isinstance(n, Let):
            todo += [n.value, n.body]
        elif isinstance(n, Match):
            todo += [n.data] + [c.rhs for c in n.clauses]
        else:
            todo += _children(n)
    return out


def agrees(e):
    """free_vars(e) and FreeVars() of every Function inside e match the reference."""
    table = FreeVars()
    got = free_vars(e)
    assert [id(v) for v in got] == list(dict.fromkeys(id(v) for v in got)), "duplicates"
    assert {id(v) for v in got} == set(reference(e))
    for f in functions(e):
        assert {id(v) for v in table(f)} == set(reference(f))


def names(vs):
    return [v.name_hint for v in vs]


# ---- hand-written cases ----------------------------------------------------------------------

def test_function_parameters_are_bound_and_order_is_first_use():
    x, y, z = rl.var("x"), rl.var("y"), rl.var("z")
    f = Function([y], z * y + x * z)
    assert names(free_vars(f)) == ["z", "x"]
    assert names(FreeVars()(f)) == ["z", "x"]
    assert names(free_vars(Tuple([f, y]))) == ["z", "x", "y"]
    agrees(Tuple([f, y]))


def test_let_binds_in_its_body_and_a_use_before_it_is_free():
    x, v = rl.var("x"), rl.var("v")
    e = Tuple([v, Let(v, x + x, v * x)])       # the first %v is outside the let's scope
    assert names(free_vars(e)) == ["v", "x"]
    assert names(free_vars(Let(v, x, v))) == ["x"]
    agrees(e)


def test_recursive_let_binds_the_function_in_its_own_value():
    n, acc, f = rl.var("n"), rl.var("acc"), rl.var("f")
    loop = Function([n], If(n > acc, Call(f, [n - acc]), n))
    e = Let(f, loop, Call(f, [acc]))
    assert names(FreeVars()(loop)) == ["acc", "f"]      # the literal alone captures %f
    assert names(free_vars(e)) == ["acc"]
    agrees(e)


def test_match_clauses_bind_their_pattern_variables_only_in_their_own_rhs():
    mod = rl.Module()
    p = rl.Prelude(mod)
    d, h, t, w, k = (rl.var(s) for s in "dhtwk")
    e = Match(d, [
        rl.Clause(PatternConstructor(p.Cons, [PatternVar(h), PatternVar(t)]), Tuple([h, t, w])),
        rl.Clause(PatternTuple([PatternVar(k), PatternWildcard()]), Tuple([k, h])),  # %h free here
        rl.Clause(PatternWildcard(), w),
    ])
    assert names(free_vars(e)) == ["d", "w", "h"]
    agrees(e)


def test_nested_closures_each_capture_what_they_use_from_outside():
    # fn (%a) { fn (%b) { fn (%c) { %a + %c + %g } } }
    a, b, c, g = (rl.var(s) for s in "abcg")
    inner = Function([c], a + c + g)
    middle = Function([b], inner)
    outer = Function([a], middle)
    table = FreeVars()
    assert names(table(outer)) == ["g"]
    assert names(table(middle)) == ["a", "g"]    # passed through though %b's body never names it
    assert names(table(inner)) == ["a", "g"]
    agrees(outer)


def test_shared_subtrees_and_functions_met_twice():
    x, y, q = rl.var("x"), rl.var("y"), rl.var("q")
    shared = x * y
    f = Function([q], shared + q)
    # the same Function under two binders of %y, and the same subtree in two functions
    e = Tuple([Function([y], Call(f, [shared])), Function([x], Tuple([f, shared]))])
    agrees(e)
    assert names(free_vars(e)) == ["x", "y"]


def test_same_var_bound_by_two_functions():
    x, y = rl.var("x"), rl.var("y")
    e = Tuple([Function([x], x + y), Function([x], x), x])
    assert names(free_vars(e)) == ["y", "x"]
    agrees(e)


def test_refs_tuples_projections():
    x, r = rl.var("x"), rl.var("r")
    e = Let(r, RefCreate(x), Tuple([RefWrite(r, RefRead(r) + TupleGetItem(Tuple([x]), 0))]))
    assert names(free_vars(e)) == ["x"]
    agrees(e)


def test_a_table_lookup_of_a_non_function_is_an_error():
    with pytest.raises(RelayishError, match="Function"):
        FreeVars()(rl.var("x") + rl.var("y"))


# ---- random programs against the reference -----------------------------------------------------

def random_expr(rng, pool, depth):
    """A random (not necessarily well-typed) expression over Vars from `pool`."""
    if depth == 0 or rng.random() < 0.15:
        return rng.choice(pool) if rng.random() < 0.8 else rl.const(1.0)
    kind = rng.choice(["call", "fn", "let", "if", "tuple", "match", "ref"])
    sub = lambda extra=(): random_expr(rng, pool + list(extra), depth - 1)   # noqa: E731
    fresh = lambda: Var(f"v{rng.randrange(10**6)}")                          # noqa: E731
    if kind == "fn":
        params = [fresh() for _ in range(rng.randrange(3))]
        # sometimes rebind a Var of the pool (the same Var object under two binders)
        if pool and rng.random() < 0.3:
            params.append(rng.choice(pool))
        return Function(params, sub(params))
    if kind == "let":
        v = fresh() if rng.random() < 0.8 or not pool else rng.choice(pool)
        return Let(v, sub([v]), sub([v]))
    if kind == "match":
        a, b = fresh(), fresh()
        return Match(sub(), [rl.Clause(PatternTuple([PatternVar(a), PatternWildcard()]), sub([a])),
                             rl.Clause(PatternVar(b), sub([b]))])
    if kind == "if":
        return If(sub(), sub(), sub())
    if kind == "tuple":
        t = Tuple([sub() for _ in range(rng.randrange(1, 3))])
        return TupleGetItem(t, 0) if rng.random() < 0.3 else t
    if kind == "ref":
        return RefWrite(RefCreate(sub()), RefRead(RefCreate(sub())))
    return sub() + sub()


@pytest.mark.parametrize("seed", range(200))
def test_random_programs_agree_with_the_reference(seed):
    rng = random.Random(seed)
    outside = [Var(f"free{i}") for i in range(3)]
    e = random_expr(rng, outside, 6)
    if rng.random() < 0.5:                    # share a subtree into a second context
        x = Var("x")
        e = Tuple([e, Function([x, *outside[:1]], Tuple([e, x]))])
    agrees(e)


# ---- deep programs: no Python recursion ----------------------------------------------------------

@pytest.mark.parametrize("n", CHAIN_LENGTHS)
def test_a_long_let_chain_is_walked_without_recursion(n):
    x = rl.var("x", type=F64)
    body, vs = None, [Var(f"v{i}") for i in range(n)]
    body = Tuple([vs[-1], x])
    for i in range(len(vs) - 1, -1, -1):      # let %vi = %v(i-1) + 1 ... built inside out
        body = Let(vs[i], (vs[i - 1] if i else x) + rl.const(1.0, "float64"), body)
    f = Function([x], Function([], body))
    table = FreeVars()
    assert table(f) == []
    assert names(table(f.body)) == ["x"]


def test_3000_nested_closures_capture_one_variable_each():
    x = rl.var("x", type=F64)
    ys = [x] + [rl.var(f"y{k}", type=F64) for k in range(1, 3001)]
    e, fns = ys[-1], []
    for k in range(3000, 0, -1):
        fn = Function([ys[k]], e)
        fns.append(fn)
        e = Call(fn, [ys[k - 1] + rl.const(1.0, "float64")])
    table = FreeVars()
    assert table(Function([x], e)) == []
    for fn in fns:
        assert table(fn) == []                 # each fn uses only its own parameter...
    # ...and a 3000-deep closure chain that captures from the outermost level:
    a = rl.var("a")
    e = a
    inner = []
    for k in range(3000):
        e = Function([Var(f"p{k}")], e)
        inner.append(e)
    assert all(names(table(fn)) == ["a"] for fn in inner)


def test_20000_deep_nesting():
    x = rl.var("x", type=F64)
    e = x
    for _ in range(20_000):
        e = If(x > rl.const(0.0, "float64"), e * rl.const(2.0, "float64"), x)
    assert names(free_vars(e)) == ["x"]


def test_evaluate_of_3000_nested_closures():
    x = rl.var("x", type=F64)
    ys = [x] + [rl.var(f"y{k}", type=F64) for k in range(1, 3001)]
    e = ys[-1]
    for k in range(3000, 0, -1):
        e = Call(Function([ys[k]], e), [ys[k - 1] + rl.const(1.0, "float64")])
    out = rl.evaluate(Function([x], e, F64), np.float64(0.5))
    assert float(out) == 3000.5


# ---- call graph and use counts ------------------------------------------------------------------

def _call_graph_module():
    mod = rl.parse("""
        def @leaf(%x: float32) -> float32 { %x }
        def @even(%n: int32) -> bool { if (%n == 0) { True } else { @odd(%n - 1) } }
        def @odd(%n: int32) -> bool { if (%n == 0) { False } else { @even(%n - 1) } }
        def @main(%x: float32) -> float32 { let %f = @leaf; if (@even(3)) { %f(%x) } else { @leaf(%x) } }
        def @alone() -> float32 { 1f }
    """)
    return mod


def test_call_graph_edges_reachability_callers_and_components():
    from relayish.ir.analysis import CallGraph, global_refs
    mod = _call_graph_module()
    graph = CallGraph(mod)
    assert graph.callees["main"] == ["leaf", "even"]         # a reference counts as a call
    assert graph.callees["even"] == ["odd"] and graph.callees["alone"] == []
    assert graph.reachable("main") == ["main", "leaf", "even", "odd"]
    assert graph.callers_of({"odd"}) == {"odd", "even", "main"}
    components = graph.components()
    assert sorted(map(sorted, components)) == [["alone"], ["even", "odd"], ["leaf"], ["main"]]
    position = {name: k for k, comp in enumerate(components) for name in comp}
    assert position["leaf"] < position["main"] and position["even"] < position["main"]
    assert global_refs(mod["main"]) == ["leaf", "even"]


def test_use_counts_count_references_not_binders():
    from relayish.ir.analysis import use_counts
    x, y, z = (rl.var(n) for n in "xyz")
    shared = x * y                               # one node, used twice: one use of x and of y
    body = rl.Let(z, shared + shared, rl.Tuple([z, z, x]))
    counts = use_counts(rl.Function([x, y], body))
    assert counts == {x: 2, y: 1, z: 2}


@pytest.mark.parametrize("n", CHAIN_LENGTHS)
def test_call_graph_and_use_counts_of_long_chains(n):
    from relayish.ir.analysis import CallGraph, use_counts
    from relayish.ir.visitor import build_let_chain
    x = rl.var("x")
    prev, bindings = x, []
    for k in range(n):
        v = rl.var(f"v{k}")
        bindings.append((v, prev + rl.GlobalVar("g")(prev)))
        prev = v
    body = build_let_chain(bindings, prev)
    mod = rl.Module()
    mod["g"] = rl.Function([rl.var("a")], rl.const(1.0))
    mod["main"] = rl.Function([x], body)
    assert CallGraph(mod).callees["main"] == ["g"]
    counts = use_counts(mod["main"])
    assert counts[x] == 2 and counts[prev] == 1 and len(counts) == n + 1
