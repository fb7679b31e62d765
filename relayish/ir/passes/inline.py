"""Inlining: `rl.passes.inline`, and `inline_module(mod)` under it.

A call is replaced by the callee's body when the callee is known where it is called and
inlining it cannot loop or blow up:

    a global @g       not recursive (a strongly connected component of the CallGraph of one
                      global that does not refer to itself), not polymorphic (no type
                      parameters), and small (at most SMALL nodes) or referred to exactly once
                      in the whole module (that one reference being this call)
    a let-bound       `let %f = fn (...) {...}` called as `%f(...)` later in the let's scope:
    closure           not recursive (%f is not free in its own body), not polymorphic, and
                      small, or never used but as that one call

`f(a1, ..., an)` becomes `let %p1 = a1; ...; let %pn = an; body` with fresh Vars for every binder
of the body (its parameters, lets, closure parameters and pattern variables: the IR compares
Vars by identity, so a body inlined twice must not bind one Var twice). The arguments are thus
evaluated once each, in order, before the body, exactly as the call evaluated them; an argument
that is a variable or a constant is substituted instead of bound (evaluating it has no effect).
Nothing else moves, so effects keep their order. Types are kept: each fresh Var carries the
annotation of the one it copies, and the body's type is the call's.

Globals are processed callees first (CallGraph.components()), so a body copied in is already
inlined itself, and every global stays in the module (a Module's globals are part of what it
means). A let-bound closure whose calls were all inlined is left for dead_code to remove. Calls
through references, tuples or parameters are not known here: partial evaluation finds those.

Let-chains are walked with loops (ExprMutator); other nesting recurses under `run_deep`.
"""
from __future__ import annotations

from relayish.ir.analysis import CallGraph, FreeVars, use_counts, walk
from relayish.ir.expr import Call, Constant, Function, GlobalVar, Let, PatternVar, Var
from relayish.ir.passes.base import TYPED, Pass
from relayish.ir.passes.uses import reference_counts
from relayish.ir.visitor import ExprMutator, no_gc, run_deep

__all__ = ["Inline", "inline_module", "SMALL"]

SMALL = 24      # a callee body of at most this many nodes is inlined at every call


def _size(func) -> int:
    return sum(1 for _ in walk(func.body))


class _Copy(ExprMutator):
    """A copy of an expression with fresh Vars for the binders in `binders` and the parameters
    substituted (`subst`: id(Var) -> Expr)."""

    def __init__(self, subst):
        super().__init__()
        self.subst = subst

    def visit_Var(self, e):
        return self.subst.get(id(e), e)


def _binders(expr) -> list:
    found = []
    for node in walk(expr):
        if isinstance(node, Let):
            found.append(node.var)
        elif isinstance(node, Function):
            found.extend(node.params)
        elif isinstance(node, PatternVar):
            found.append(node.var)
    return found


def _expand(func, args):
    """`func(args)` as lets binding its parameters and a fresh copy of its body."""
    subst, bindings = {}, []
    for param, arg in zip(func.params, args):
        if isinstance(arg, (Var, GlobalVar, Constant)):
            subst[id(param)] = arg
        else:
            fresh = Var(param.name_hint, param.type_annotation)
            subst[id(param)] = fresh
            bindings.append((fresh, arg))
    for var in _binders(func.body):
        if id(var) not in subst:
            subst[id(var)] = Var(var.name_hint, var.type_annotation)
    body = _Copy(subst).visit(func.body)
    for var, arg in reversed(bindings):
        body = Let(var, arg, body)
    return body


class _Inliner(ExprMutator):
    def __init__(self, globals_, counts, callee_counts, free):
        super().__init__()
        self.globals = globals_          # name -> the (already inlined) Function to copy in
        self.counts = counts             # use counts of Vars in the function being inlined into
        self.callee_counts = callee_counts
        self.free = free
        self.closures: dict = {}         # id(let-bound Var) -> its (inlined) Function

    def visit_Let(self, e):
        chain = []
        while isinstance(e, Let):        # a loop down the chain, then rebuild from the end
            value = self.visit(e.value)
            if isinstance(value, Function) and self.inlinable_closure(e.var, value):
                self.closures[id(e.var)] = value
            chain.append((e, value))
            e = e.body
        body = self.visit(e)
        for let, value in reversed(chain):
            if not (value is let.value and body is let.body):
                let = Let(let.var, value, body)
            body = let
        return body

    def inlinable_closure(self, var, func):
        if func.type_params or any(v is var for v in self.free.of(func)):
            return False
        uses = self.counts.get(var, 0)
        called = self.callee_counts.get(id(var), 0)
        return called > 0 and (_size(func) <= SMALL or (uses == called == 1))

    def target(self, call):
        """The Function to copy in for `call`, or None."""
        op = call.op
        if isinstance(op, Var):
            return self.closures.get(id(op))
        if isinstance(op, GlobalVar):
            return self.globals.get(op.name_hint)
        return None

    def visit(self, expr):
        # a call shared at two places is expanded at each (not memoized): one expansion at two
        # places would bind its Vars twice in one scope
        if type(expr) is Call and self.target(expr) is not None:
            return self.visit_Call(expr)
        return super().visit(expr)

    def visit_Call(self, e):
        target = self.target(e)
        if target is None:
            return super().visit_Call(e)
        args = [self.visit(a) for a in e.args]
        return _expand(target, args)


def _callee_counts(expr) -> dict:
    counts: dict = {}
    for node in walk(expr):
        if isinstance(node, Call) and isinstance(node.op, Var):
            counts[id(node.op)] = counts.get(id(node.op), 0) + 1
    return counts


def inline_module(mod):
    """`mod` with its inlinable calls inlined (the module text); a new Module."""
    graph = CallGraph(mod)
    references: dict = {}       # name -> the nodes referring to it (a GlobalVar node is shared)
    for func in mod.functions.values():
        counts = reference_counts(func)
        for node in walk(func):
            if isinstance(node, GlobalVar):
                references[node.name_hint] = references.get(node.name_hint, 0) + counts[id(node)]
    out = mod.copy()
    done: dict = {}              # name -> its inlined Function, for the globals one may copy in
    for component in graph.components():         # callees before callers
        for name in component:
            func = mod[name]
            new = _inline_function(func, done)
            if new is not func:
                out[name] = new
            recursive = len(component) > 1 or name in graph.callees.get(name, ())
            if not recursive and not new.type_params and \
                    (_size(new) <= SMALL or references.get(name, 0) == 1):
                done[name] = new
    return out


def _inline_function(func, globals_):
    def run():
        inliner = _Inliner(globals_, use_counts(func), _callee_counts(func), FreeVars())
        return inliner.visit(func)
    with no_gc():
        return run_deep(run)


class Inline(Pass):
    """`rl.passes.inline`: calls of small or once-called known functions replaced by their
    bodies (the module text).

        >>> f = rl.parse_expr("fn (%x: float32) { let %sq = fn (%a: float32) { %a * %a }; "
        ...                   "%sq(%x) + %sq(2f) }")
        >>> print(rl.passes.inline(f))
        fn (%x: float32) {
          let %sq = fn (%a: float32) { %a * %a };
          %x * %x + 2f * 2f
        }
    """

    name = "inline"
    requires = frozenset([TYPED])

    def run(self, mod):
        return inline_module(mod)
