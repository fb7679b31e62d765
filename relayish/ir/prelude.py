"""The prelude: the standard ADTs and list/nat functions, added to a Module on request.

    mod = rl.Module()
    p = rl.Prelude(mod)
    l = p.Cons(rl.const(1.0), p.Nil())              # an expression of type List[float32]
    mod["main"] = rl.Function([], p.length(l))      # @length is a GlobalVar in mod

Types: List[a] = Cons(a, List[a]) | Nil, Option[a] = Some(a) | Nothing,
Tree[a] = Leaf(a) | Node(Tree[a], Tree[a]) (binary), RoseTree[a] = Rose(a, List[RoseTree[a]])
(Relay's Tree), Nat = Z | S(Nat).
Functions: Relay's whole prelude (FUNCTION_NAMES; PRELUDE_TEXT gives their types and meaning).

Prelude(mod) is idempotent: what the module already has (from an earlier Prelude, or a List the
user defined with the same constructors) is reused, never duplicated.
"""
from __future__ import annotations

from relayish.errors import RelayishError
from relayish.ir.expr import PatternConstructor, TypeData
from relayish.ir.module import Module
from relayish.ir.visitor import ExprMutator

TYPE_NAMES = ("List", "Option", "Tree", "RoseTree", "Nat")
FUNCTION_NAMES = (
    "id", "compose", "flip",
    "hd", "tl", "nth", "update", "length", "map", "foldl", "foldr", "foldr1", "sum", "concat",
    "filter", "zip", "rev", "map_accuml", "map_accumr", "unfoldr", "unfoldl", "iterate",
    "tmap", "size",
    "nat_add", "nat_double", "nat_nth", "nat_update", "nat_iterate",
)


# Relay's prelude (TVM's std/prelude.rly and the Nat helpers of prelude.py), with the same
# names, type parameter order and meaning, except where relayish's contract fixes another name:
# Option's empty case is Nothing (Relay: None), and Relay's rose tree `Tree[A] = Rose(A,
# List[Tree[A]])` is RoseTree here, because Tree is relayish's binary Leaf/Node tree.
PRELUDE_TEXT = """
#[version = "0.0.5"]
type List[a] { Cons(a, List[a]), Nil }
type Option[a] { Some(a), Nothing }
type Tree[a] { Leaf(a), Node(Tree[a], Tree[a]) }
type RoseTree[a] { Rose(a, List[RoseTree[a]]) }
type Nat { Z, S(Nat) }

def @id[a](%x: a) -> a { %x }

// compose(f, g)(x) = f(g(x))
def @compose[a, b, c](%f: fn (b) -> c, %g: fn (a) -> b) -> fn (a) -> c {
  fn (%x: a) -> c { %f(%g(%x)) }
}

// flip(f)(y, x) = f(x, y)
def @flip[a, b, c](%f: fn (a, b) -> c) -> fn (b, a) -> c {
  fn (%y: b, %x: a) -> c { %f(%x, %y) }
}

// the first element; a runtime error on Nil
def @hd[a](%l: List[a]) -> a {
  match? (%l) {
    Cons(%h, _) => %h,
  }
}

// all but the first element; a runtime error on Nil
def @tl[a](%l: List[a]) -> List[a] {
  match? (%l) {
    Cons(_, %t) => %t,
  }
}

// the element at index n (from 0)
def @nth[a](%l: List[a], %n: int32) -> a {
  if (%n == 0) { @hd(%l) } else { @nth(@tl(%l), %n - 1) }
}

// the list with the element at index n replaced by v
def @update[a](%l: List[a], %n: int32, %v: a) -> List[a] {
  if (%n == 0) {
    Cons(%v, @tl(%l))
  } else {
    Cons(@hd(%l), @update(@tl(%l), %n - 1, %v))
  }
}

def @length[a](%l: List[a]) -> int32 {
  match (%l) {
    Cons(_, %t) => 1 + @length(%t),
    Nil => 0,
  }
}

// map(f, [x1, ..., xn]) = [f(x1), ..., f(xn)]
def @map[a, b](%f: fn (a) -> b, %l: List[a]) -> List[b] {
  match (%l) {
    Cons(%h, %t) => Cons(%f(%h), @map(%f, %t)),
    Nil => Nil(),
  }
}

// foldl(f, acc, [x1, ..., xn]) = f(...f(f(acc, x1), x2)..., xn)
def @foldl[a, b](%f: fn (a, b) -> a, %acc: a, %l: List[b]) -> a {
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

// foldr1(f, [x1, ..., xn]) = f(x1, f(x2, ...f(xn-1, xn)...)); a runtime error on Nil
def @foldr1[a](%f: fn (a, a) -> a, %l: List[a]) -> a {
  match? (%l) {
    Cons(%h, Nil) => %h,
    Cons(%h, %t) => %f(%h, @foldr1(%f, %t)),
  }
}

// the sum of a list of int32 scalars (as Relay's)
def @sum(%l: List[int32]) -> int32 {
  @foldl(fn (%x: int32, %y: int32) -> int32 { %x + %y }, 0, %l)
}

// concat(xs, ys): the elements of xs, then those of ys
def @concat[a](%xs: List[a], %ys: List[a]) -> List[a] {
  @foldr(Cons, %ys, %xs)
}

// the elements for which f holds, in order
def @filter[a](%f: fn (a) -> bool, %l: List[a]) -> List[a] {
  match (%l) {
    Cons(%h, %t) => if (%f(%h)) { Cons(%h, @filter(%f, %t)) } else { @filter(%f, %t) },
    Nil => Nil(),
  }
}

// pairs of elements at the same index, as long as the shorter list
def @zip[a, b](%xs: List[a], %ys: List[b]) -> List[(a, b)] {
  match (%xs, %ys) {
    (Cons(%x, %xt), Cons(%y, %yt)) => Cons((%x, %y), @zip(%xt, %yt)),
    _ => Nil(),
  }
}

def @rev[a](%l: List[a]) -> List[a] {
  @foldl(@flip(Cons), Nil(), %l)
}

// map_accuml(f, init, [x1, ..., xn]): f(acc, x) gives (new acc, output); left to right
def @map_accuml[a, b, c](%f: fn (a, b) -> (a, c), %init: a, %l: List[b]) -> (a, List[c]) {
  let %step = fn (%acc: (a, List[c]), %x: b) -> (a, List[c]) {
    let %out = %f(%acc.0, %x);
    (%out.0, Cons(%out.1, %acc.1))
  };
  @foldl(%step, (%init, Nil()), %l)
}

// map_accumr(f, init, [x1, ..., xn]): as map_accuml, from right to left
def @map_accumr[a, b, c](%f: fn (a, b) -> (a, c), %init: a, %l: List[b]) -> (a, List[c]) {
  let %step = fn (%x: b, %acc: (a, List[c])) -> (a, List[c]) {
    let %out = %f(%acc.0, %x);
    (%out.0, Cons(%out.1, %acc.1))
  };
  @foldr(%step, (%init, Nil()), %l)
}

// unfoldr(f, seed): f(seed) = Some((next seed, output)) or Nothing to stop; outputs right to left
def @unfoldr[a, b](%f: fn (a) -> Option[(a, b)], %seed: a) -> List[b] {
  match (%f(%seed)) {
    Some(%next) => Cons(%next.1, @unfoldr(%f, %next.0)),
    Nothing => Nil(),
  }
}

// unfoldl(f, seed): as unfoldr, outputs left to right
def @unfoldl[a, b](%f: fn (a) -> Option[(a, b)], %seed: a) -> List[b] {
  @rev(@unfoldr(%f, %seed))
}

// iterate(f, n) = the closure applying f n times (n an int32; nat_iterate takes a Nat)
def @iterate[a](%f: fn (a) -> a, %n: int32) -> fn (a) -> a {
  if (%n == 0) { @id } else { @compose(%f, @iterate(%f, %n - 1)) }
}

// tmap(f, t): the rose tree with f applied to every node's value
def @tmap[a, b](%f: fn (a) -> b, %t: RoseTree[a]) -> RoseTree[b] {
  match (%t) {
    Rose(%v, %kids) => Rose(%f(%v), @map(fn (%k: RoseTree[a]) -> RoseTree[b] { @tmap(%f, %k) }, %kids)),
  }
}

// the number of nodes of a rose tree
def @size[a](%t: RoseTree[a]) -> int32 {
  match (%t) {
    Rose(_, %kids) => 1 + @sum(@map(@size, %kids)),
  }
}

def @nat_add(%m: Nat, %n: Nat) -> Nat {
  match (%m) {
    Z => %n,
    S(%p) => S(@nat_add(%p, %n)),
  }
}

def @nat_double(%n: Nat) -> Nat { @nat_add(%n, %n) }

// the element at index n (a Nat)
def @nat_nth[a](%l: List[a], %n: Nat) -> a {
  match (%n) {
    Z => @hd(%l),
    S(%m) => @nat_nth(@tl(%l), %m),
  }
}

// the list with the element at index n (a Nat) replaced by v
def @nat_update[a](%l: List[a], %n: Nat, %v: a) -> List[a] {
  match (%n) {
    Z => Cons(%v, @tl(%l)),
    S(%m) => Cons(@hd(%l), @nat_update(@tl(%l), %m, %v)),
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

    p.List p.Cons p.Nil, p.Option p.Some p.Nothing, p.Tree p.Leaf p.Node, p.RoseTree p.Rose,
    p.Nat p.Z p.S: the module's GlobalTypeVars and Constructors. p.map, p.foldl, ... (every
    name of FUNCTION_NAMES): its GlobalVars. p.make_nat(3) is the expression S(S(S(Z))).
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

    def __repr__(self):
        return (f"Prelude({len(TYPE_NAMES)} types and {len(FUNCTION_NAMES)} functions in a module "
                f"of {len(self.mod.functions)} functions)")

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
