"""The prelude: the standard ADTs and list/nat functions, added to a Module on request.

    mod = rl.Module()
    p = rl.Prelude(mod)
    l = p.Cons(rl.const(1.0), p.Nil())              # an expression of type List[float32]
    mod["main"] = rl.Function([], p.length(l))      # @length is a GlobalVar in mod

Types: List[a] = Cons(a, List[a]) | Nil, Option[a] = Some(a) | Nothing,
Tree[a] = Leaf(a) | Node(Tree[a], Tree[a]), Nat = Z | S(Nat).
Functions: @map, @foldl, @foldr, @length, @nat_iterate (see PRELUDE_TEXT for their types).

Prelude(mod) is idempotent: what the module already has (from an earlier Prelude, or a List the
user defined with the same constructors) is reused, never duplicated.
"""
from __future__ import annotations

from relayish.errors import RelayishError
from relayish.ir.expr import (Clause, Constructor, Function, GlobalVar, Match, PatternConstructor,
                              PatternVar, PatternWildcard, Var, const)
from relayish.ir.module import Module
from relayish.ir.op import make_call
from relayish.ir.types import FuncType, GlobalTypeVar, TensorType, TypeCall, TypeData, TypeVar
from relayish.ir.visitor import ExprMutator

TYPE_NAMES = ("List", "Option", "Tree", "Nat")
FUNCTION_NAMES = ("map", "foldl", "foldr", "length", "nat_iterate")


def _prelude_module() -> Module:
    """A fresh module holding exactly the prelude's types and functions."""
    mod = Module()
    a, b = TypeVar("a"), TypeVar("b")

    def adt(name, params, ctor_specs):
        gtv = GlobalTypeVar(name)
        me = TypeCall(gtv, params)
        ctors = [Constructor(cname, [me if f == "self" else f for f in fields], gtv)
                 for cname, fields in ctor_specs]
        mod.add_type(TypeData(gtv, params, ctors))
        return gtv, me, ctors

    List, list_a, (cons, nil) = adt("List", [a], [("Cons", [a, "self"]), ("Nil", [])])
    adt("Option", [a], [("Some", [a]), ("Nothing", [])])
    adt("Tree", [a], [("Leaf", [a]), ("Node", ["self", "self"])])
    Nat, nat, (z, s) = adt("Nat", [], [("Z", []), ("S", ["self"])])
    list_b = TypeCall(List, [b])

    def on_list(lst, cons_case, nil_case):
        h, t = Var("h"), Var("t")
        return Match(lst, [Clause(PatternConstructor(cons, [PatternVar(h), PatternVar(t)]),
                                  cons_case(h, t)),
                           Clause(PatternConstructor(nil, []), nil_case)])

    gmap, gfoldl, gfoldr, glength, giter = (GlobalVar(n) for n in FUNCTION_NAMES)

    f, l = Var("f", FuncType([a], b)), Var("l", list_a)
    mod[gmap] = Function([f, l], on_list(l, lambda h, t: cons(f(h), gmap(f, t)), nil()),
                         list_b, [a, b])

    f, acc, l = Var("f", FuncType([b, a], b)), Var("acc", b), Var("l", list_a)
    mod[gfoldl] = Function([f, acc, l], on_list(l, lambda h, t: gfoldl(f, f(acc, h), t), acc),
                           b, [a, b])

    f, acc, l = Var("f", FuncType([a, b], b)), Var("acc", b), Var("l", list_a)
    mod[gfoldr] = Function([f, acc, l], on_list(l, lambda h, t: f(h, gfoldr(f, acc, t)), acc),
                           b, [a, b])

    l = Var("l", list_a)
    t = Var("t")
    mod[glength] = Function(
        [l], Match(l, [Clause(PatternConstructor(cons, [PatternWildcard(), PatternVar(t)]),
                              make_call("add", [const(1), glength(t)])),
                       Clause(PatternConstructor(nil, []), const(0))]),
        TensorType((), "int32"), [a])

    f, n, m = Var("f", FuncType([a], a)), Var("n", nat), Var("m")
    x0, x1 = Var("x", a), Var("x", a)
    mod[giter] = Function(
        [f, n], Match(n, [Clause(PatternConstructor(z, []), Function([x0], x0)),
                          Clause(PatternConstructor(s, [PatternVar(m)]),
                                 Function([x1], f(giter(f, m)(x1))))]),
        FuncType([a], a), [a])
    return mod


class _RebindConstructors(ExprMutator):
    """Points constructor uses at the module's own constructors of the same name."""

    def __init__(self, ctors):
        super().__init__()
        self.ctors = ctors

    def visit_Constructor(self, e):
        return self.ctors.get(e, e)

    def visit_pattern(self, p):
        if isinstance(p, PatternConstructor):
            subs = [self.visit_pattern(sub) for sub in p.patterns]
            return PatternConstructor(self.ctors.get(p.constructor, p.constructor), subs)
        return super().visit_pattern(p)


class Prelude:
    """Adds the prelude to `mod` (a new Module when None) and names its parts.

    p.List p.Cons p.Nil, p.Option p.Some p.Nothing, p.Tree p.Leaf p.Node, p.Nat p.Z p.S:
    the module's GlobalTypeVars and Constructors. p.map p.foldl p.foldr p.length p.nat_iterate:
    its GlobalVars. p.make_nat(3) is the expression S(S(S(Z))).
    """

    def __init__(self, mod=None):
        if mod is None:
            mod = Module()
        if not isinstance(mod, Module):
            raise RelayishError(f"rl.Prelude takes a Module, got {type(mod).__name__}")
        self.mod = mod
        fresh = _prelude_module()
        rebind = {}
        for header, data in fresh.type_definitions.items():
            existing = mod._types.get(header.name)
            if existing is None:
                mod.add_type(data)
            else:
                rebind.update(_matching_constructors(mod.type_definitions[existing], data))
        mutator = _RebindConstructors(rebind)
        for gv, func in fresh.functions.items():
            if gv.name_hint not in mod:
                mod[gv] = mutator.visit(func) if rebind else func
        for name in TYPE_NAMES:
            data = mod.get_type_data(name)
            setattr(self, name, data.header)
            for ctor in data.constructors:
                setattr(self, ctor.name_hint, ctor)
        for name in FUNCTION_NAMES:
            setattr(self, name, mod.get_global_var(name))

    def make_nat(self, n: int):
        """The expression S(...S(Z)...) with n applications of S."""
        if not isinstance(n, int) or n < 0:
            raise RelayishError(f"make_nat takes a non-negative int, got {n!r}")
        e = self.Z()
        for _ in range(n):
            e = self.S(e)
        return e

    def make_list(self, items):
        """The expression Cons(items[0], Cons(..., Nil)) (items are Exprs)."""
        e = self.Nil()
        for item in reversed(list(items)):
            e = self.Cons(item, e)
        return e


def _matching_constructors(existing: TypeData, wanted: TypeData) -> dict:
    """{prelude constructor: module constructor} when the module's type has the same shape."""
    have = {c.name_hint: c for c in existing.constructors}
    name = wanted.header.name
    if set(have) != {c.name_hint for c in wanted.constructors} or any(
            len(have[c.name_hint].inputs) != len(c.inputs) for c in wanted.constructors):
        raise RelayishError(
            f"the module already defines a type {name} that is not the prelude's "
            f"({' | '.join(c.name_hint for c in wanted.constructors)}); rename one of them")
    return {c: have[c.name_hint] for c in wanted.constructors}
