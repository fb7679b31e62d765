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
from relayish.ir.expr import PatternConstructor
from relayish.ir.module import Module
from relayish.ir.types import TypeData
from relayish.ir.visitor import ExprMutator

TYPE_NAMES = ("List", "Option", "Tree", "Nat")
FUNCTION_NAMES = ("map", "foldl", "foldr", "length", "nat_iterate")


PRELUDE_TEXT = """
#[version = "0.0.5"]
type List[a] { Cons(a, List[a]), Nil }
type Option[a] { Some(a), Nothing }
type Tree[a] { Leaf(a), Node(Tree[a], Tree[a]) }
type Nat { Z, S(Nat) }

// map(f, [x1, ..., xn]) = [f(x1), ..., f(xn)]
def @map[a, b](%f: fn (a) -> b, %l: List[a]) -> List[b] {
  match (%l) {
    Cons(%h, %t) => Cons(%f(%h), @map(%f, %t)),
    Nil => Nil(),
  }
}

// foldl(f, acc, [x1, ..., xn]) = f(...f(f(acc, x1), x2)..., xn)
def @foldl[a, b](%f: fn (b, a) -> b, %acc: b, %l: List[a]) -> b {
  match (%l) {
    Cons(%h, %t) => @foldl(%f, %f(%acc, %h), %t),
    Nil => %acc,
  }
}

// foldr(f, acc, [x1, ..., xn]) = f(x1, f(x2, ...f(xn, acc)...))
def @foldr[a, b](%f: fn (a, b) -> b, %acc: b, %l: List[a]) -> b {
  match (%l) {
    Cons(%h, %t) => %f(%h, @foldr(%f, %acc, %t)),
    Nil => %acc,
  }
}

def @length[a](%l: List[a]) -> int32 {
  match (%l) {
    Cons(_, %t) => 1 + @length(%t),
    Nil => 0,
  }
}

// nat_iterate(f, n) = fn (x) { f(f(...f(x))) }, with n applications of f
def @nat_iterate[a](%f: fn (a) -> a, %n: Nat) -> fn (a) -> a {
  match (%n) {
    Z => fn (%x: a) { %x },
    S(%m) => fn (%x: a) { %f(@nat_iterate(%f, %m)(%x)) },
  }
}
"""


def _prelude_module() -> Module:
    """A fresh module holding exactly the prelude's types and functions."""
    from relayish.ir.text.parser import parse
    return parse(PRELUDE_TEXT, filename="<prelude>")


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
            try:
                existing = mod.get_type_data(header.name)
            except RelayishError:
                mod.add_type(data)
            else:
                rebind.update(_matching_constructors(existing, data))
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
