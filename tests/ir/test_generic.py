"""The generic IR (issue 11): each node class declares its fields once, and `children`,
`map_children`, ExprVisitor and ExprMutator walk any node through those declarations."""
import gc

import attrs
import numpy as np
import pytest
from attrs import define
from hypothesis import given, settings

import relayish as rl
from relayish.ir import expr as expr_module
from relayish.ir.expr import Clause, Expr, Node, Pattern, PatternWildcard, Var
from relayish.ir.fields import (CLAUSES, DATA, EXPR, EXPRS, PATTERN, PATTERNS, TYPE, TYPES, VAR,
                                VARS, children, fields_of, iter_fields, map_children, node_field)
from relayish.ir.op import Op
from relayish.ir.visitor import ExprMutator, ExprVisitor, build_let_chain, no_gc

from strategies import deep, f32, programs

_ONE, _MANY = (EXPR, VAR, PATTERN), (EXPRS, VARS, PATTERNS, CLAUSES)
NODE_CLASSES = [c for c in vars(expr_module).values()
                if isinstance(c, type) and issubclass(c, Node) and attrs.has(c)]


def test_every_field_of_every_node_class_declares_its_kind():
    assert len(NODE_CLASSES) >= 19
    for cls in NODE_CLASSES:
        for a in attrs.fields(cls):
            if a.init:
                assert "kind" in a.metadata, f"{cls.__name__}.{a.name} declares no kind"
    assert fields_of(rl.Let) == (("var", VAR), ("value", EXPR), ("body", EXPR))
    assert all(kind == DATA for _, kind in fields_of(Op))      # an op is a leaf


def _nodes(root):
    """Every node reachable from root (expressions, patterns, clauses), once; a loop."""
    seen, out, stack = set(), [], [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        out.append(node)
        stack.extend(children(node))
    return out


def _replacement(child):
    """A new node that may stand where `child` stands (the fields' checks accept it)."""
    if isinstance(child, Var):
        return rl.var("fresh", type=child.type_annotation)
    if isinstance(child, Expr):
        return rl.var("fresh")
    if isinstance(child, Pattern):
        return PatternWildcard()
    assert isinstance(child, Clause)
    return Clause(PatternWildcard(), rl.var("fresh"))


def _check_node(node):
    declared = [(name, kind, value) for name, kind, value in iter_fields(node)]
    flat = []
    for _, kind, value in declared:
        if kind in _ONE:
            flat.append(value)
        elif kind in _MANY:
            flat.extend(value)
    kids = children(node)
    assert len(kids) == len(flat) and all(a is b for a, b in zip(kids, flat))
    assert map_children(node, lambda c: c) is node
    for k, old in enumerate(kids):
        if isinstance(old, Op):         # a call's attrs belong to its op: no stand-in fits
            continue
        new = _replacement(old)
        count = [-1]

        def swap(c, k=k, new=new):
            count[0] += 1
            return new if count[0] == k else c
        rebuilt = map_children(node, swap)
        assert type(rebuilt) is type(node) and rebuilt is not node
        assert children(rebuilt) == kids[:k] + [new] + kids[k + 1:]
        for (name, kind, before), (_, _, after) in zip(declared, iter_fields(rebuilt)):
            if kind in _ONE or kind in _MANY:
                continue
            if kind in (TYPE, TYPES):
                assert after is before or list(after) == list(before), name
            elif isinstance(before, np.ndarray):
                assert after is before
            elif isinstance(before, Node):      # a Constructor: `==` on it builds an op
                assert after is before, f"{type(node).__name__}.{name} changed"
            else:
                assert after == before, f"{type(node).__name__}.{name} changed"


@settings(max_examples=25, deadline=None)
@given(programs())
def test_children_and_map_children_agree_with_the_declarations(program):
    for func in program.mod.functions.values():
        for node in _nodes(func):
            _check_node(node)


def test_map_children_maps_types_with_type_fn():
    x = rl.var("x", shape=(2,))
    f = rl.Function([x], x, ret_type=rl.TensorType((2,)))
    wider = lambda t: rl.TensorType((3,), t.dtype)        # noqa: E731
    g = map_children(f, lambda c: c, type_fn=wider)
    assert g is not f and g.ret_type == rl.TensorType((3,)) and g.params[0] is x
    assert map_children(f, lambda c: c) is f


@define(eq=False, repr=False)
class Twice(Expr):
    """A node this test invents: the visitors must walk it without an edit."""
    value: Expr = node_field(EXPR)
    extras: list = node_field(EXPRS, factory=list)
    label: str = node_field(DATA, default="twice")


def test_a_new_node_class_is_walked_and_rebuilt_without_edits():
    x, y = f32("x"), f32("y")
    node = Twice(x + y, [y, rl.Tuple([x])], "mine")

    class Uses(ExprVisitor):
        def __init__(self):
            super().__init__()
            self.vars = []

        def visit_Var(self, e):
            self.vars.append(e.name_hint)

    uses = Uses()
    uses.visit(rl.Function([x, y], node))
    assert uses.vars == ["x", "y"]          # params first; then each Var once (memoized)

    z = f32("z")

    class Rename(ExprMutator):
        def visit_Var(self, e):
            return z if e is y else e

    out = Rename().visit(node)
    assert type(out) is Twice and out.label == "mine"
    assert out.value.args[1] is z and out.extras[0] is z and out.extras[1] is node.extras[1]
    assert Rename().visit(Twice(x)) is not None
    same = Twice(x, [rl.Tuple([x])])
    assert Rename().visit(same) is same


def test_no_gc_restores_the_previous_state():
    assert gc.isenabled()
    with no_gc():
        assert not gc.isenabled()
        with no_gc():
            assert not gc.isenabled()
        assert not gc.isenabled()           # the inner block found it paused: keeps it so
    assert gc.isenabled()
    with pytest.raises(KeyError):
        with no_gc():
            raise KeyError("x")
    assert gc.isenabled()
    gc.disable()
    try:
        with no_gc():
            pass
        assert not gc.isenabled()           # it was off before: still off
    finally:
        gc.enable()


@pytest.mark.parametrize("n", deep(20_000, 100_000))
def test_generic_walks_of_long_let_chains_do_not_recurse(n):
    x = f32("x")
    bindings, prev = [], x
    for k in range(n):
        v = f32(f"v{k}")
        bindings.append((v, Twice(prev) if k % 2 else rl.Tuple([prev])[0]))
        prev = v
    body = build_let_chain(bindings, prev)

    class Count(ExprVisitor):
        def __init__(self):
            super().__init__()
            self.twice = 0

        def visit_Twice(self, e):
            self.twice += 1
            super().generic_visit(e)

    count = Count()
    count.visit(body)
    assert count.twice == n // 2
    y = f32("y")

    class Replace(ExprMutator):
        def visit_Var(self, e):
            return y if e is x else e

    out = Replace().visit(body)
    assert out is not body and out.value.tuple_value.fields[0] is y
    assert len(_nodes(out)) > n


def test_structural_equality_compares_a_new_node_class_by_its_declarations():
    x, y = f32("x"), f32("y")
    assert rl.structural_equal(rl.Function([x], Twice(x + 1.0, [x], "a")),
                               rl.Function([y], Twice(y + 1.0, [y], "a")))
    with pytest.raises(rl.RelayishError, match="different label"):
        rl.assert_structural_equal(Twice(x, [], "a"), Twice(x, [], "b"))
    with pytest.raises(rl.RelayishError, match=r"different numbers of extras"):
        rl.assert_structural_equal(Twice(x, [x]), Twice(x, []))
    with pytest.raises(rl.RelayishError, match=r"\.extras\[0\]"):
        rl.assert_structural_equal(Twice(x, [x]), Twice(x, [y]))
