"""Inlining: `rl.passes.inline`, and `inline_module(mod)` under it.

A call is replaced by the callee's body when the callee is known where it is called and
inlining it cannot loop or blow up:

    a global @g       not recursive (a strongly connected component of the CallGraph of one
                      global that does not refer to itself), not polymorphic (no type
                      parameters), and small (at most SMALL nodes once inlined itself), or
                      referred to exactly once in the whole module (that one reference being
                      this call) with an inlined body at most COPY_GROWTH times its own
    a let-bound       `let %f = fn (...) {...}` called as `%f(...)` later in the let's scope:
    closure           not recursive (%f is not free in its own body), not polymorphic, and
                      small, or never used but as that one call
    a literal         `(fn (...) {...})(...)`, not polymorphic, called there only or small
    closure

Size: the output is linear in the input. Each call node of the input is expanded at most once
(a call node shared at two places of the DAG stays a call: expanding it at each place would let
shared calls nested in shared calls multiply, and one expansion at two places would bind its
Vars twice). What an expansion adds is bounded: a copy of a small body (SMALL nodes), or a body
used at one call only, which is moved there, not copied: the closure's `let` is dropped when
every use of its Var was inlined, so the body exists once. Keeping that `let` beside the
inlined copy doubled the program at each level of closures nested in closures (AD output of
k nested closures: 2^k; issue 13). One Function node bound by several lets, each Var called
once (eager/runner.py records each call of one gradient program so), is copied at each call
while the copies of such large bodies stay under COPY_GROWTH times the function's size. A
global is part of the module's meaning and stays, so a global inlined at its one call is a
copy: COPY_GROWTH bounds it by the global's own size (a chain of globals each calling the next
once would otherwise copy quadratically). Hence
`nodes(out) <= GROWTH_BOUND * nodes(in)` (tests/ir/passes/test_inline.py checks it on random
programs).

A copied body gets fresh Vars for every binder (its parameters, lets, closure parameters and
pattern variables: the IR compares Vars by identity, so a body inlined twice must not bind one
Var twice) and its parameters substituted. A moved body keeps its Vars and is visited once, at
its call (a closure's `let` is passed over, not visited), with its parameters substituted as it
is walked: `f(a1, ..., an)` becomes `let %p1 = a1; ...; let %pn = an; body` with f's own
parameters. Either way each argument is evaluated once, in order, before the body, exactly as
the call evaluated them (an argument that is a variable or a constant is substituted instead of
bound: evaluating it has no effect). Nothing else moves, so effects keep their order; dropping
a Function literal's `let` drops no effect (building a closure has none). Types are kept: each
fresh Var carries the annotation of the one it copies, a bound parameter keeps its own, and the
body's type is the call's.

Globals are processed callees first (CallGraph.components()), so a body copied in is already
inlined itself, and every global stays in the module. Calls through references, tuples or
parameters are not known here: partial evaluation finds those.

Let-chains are walked with loops (ExprMutator); other nesting recurses under `run_deep`.
"""
from __future__ import annotations

from relayish.ir.analysis import CallGraph, FreeVars, use_counts, walk
from relayish.ir.expr import Call, Constant, Function, GlobalVar, Let, PatternVar, Var
from relayish.ir.passes.base import TYPED, Pass
from relayish.ir.passes.uses import reference_counts
from relayish.ir.types import substitute
from relayish.ir.visitor import ExprMutator, no_gc, run_deep

__all__ = ["Inline", "inline_module", "instantiate", "SMALL", "COPY_GROWTH", "GROWTH_BOUND"]

SMALL = 24          # a callee body of at most this many nodes is copied in at every call
# a global called once is copied if, inlined, it is at most this times its own size; the large
# closures copied into a function add at most this times the function's size
COPY_GROWTH = 2
# nodes(out) <= GROWTH_BOUND * nodes(in): the input itself; COPY_GROWTH times each global copied
# at its one call; COPY_GROWTH times each function for its large closures' copies; per call
# node, a small body and a let and a Var per argument (each argument is a node of the input).
GROWTH_BOUND = 1 + 2 * COPY_GROWTH + SMALL + 2


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


def instantiate(func, type_args: dict) -> Function:
    """A monomorphic copy of the polymorphic Function `func`: every binder a fresh Var whose
    annotation has `type_args` (TypeVar -> Type) substituted, as have the result type; no type
    parameters. partial_eval specialises a call of a polymorphic global through it, so what it
    evaluates carries the call's own types. The copy is not type-checked here."""
    subst = {id(v): Var(v.name_hint, None if v.type_annotation is None
                        else substitute(v.type_annotation, type_args))
             for v in list(func.params) + _binders(func.body)}
    ret = None if func.ret_type is None else substitute(func.ret_type, type_args)
    return Function([subst[id(p)] for p in func.params], _Copy(subst).visit(func.body), ret, [])


def _copy(func, args):
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
    def __init__(self, func, globals_):
        super().__init__()
        self.globals = globals_           # name -> the (already inlined) Function to copy in
        self.counts = use_counts(func)    # uses of each Var in the function inlined into
        self.refs = reference_counts(func)    # edges into each node: shared calls stay calls
        self.calls = _calls_by_callee(func)
        self.free = FreeVars()
        self.copied: dict = {}            # id(let-bound Var) -> (its inlined Function, cost)
        self.moved: dict = {}             # id(let-bound Var) -> its Function, to move
        self.expanded: dict = {}          # id(let-bound Var) -> the calls of it inlined
        self.subst: dict = {}             # id(parameter of a moved body) -> its atom argument
        # what copies of large bodies (a closure shared by several lets, each called once) may
        # add to this function, in nodes: the size guard that keeps the output linear
        self.budget = COPY_GROWTH * len(self.refs)

    def visit_Var(self, e):
        return self.subst.get(id(e), e)

    def visit_Let(self, e):
        chain = []
        while isinstance(e, Let):         # a loop down the chain, then rebuild from the end
            if self.movable(e):
                self.moved[id(e.var)] = e.value
                value = None              # visited where it is called
            else:
                value = self.visit(e.value)
                if isinstance(value, Function):
                    self.register_copy(e.var, value)
            chain.append((e, value))
            e = e.body
        body = self.visit(e)
        for let, value in reversed(chain):
            key = id(let.var)
            if self.expanded.get(key, 0) == self.counts.get(let.var, 0) > 0:
                continue                  # every use inlined: the closure is gone
            if value is None:             # a movable closure whose call was not reached
                value = self.visit(let.value)
            if not (value is let.value and body is let.body):
                let = Let(let.var, value, body)
            body = let
        return body

    def movable(self, let):
        """`let %f = fn ..` whose Var is used once, by a call that will be inlined: the body
        goes there, and the let goes."""
        func, var = let.value, let.var
        if not isinstance(func, Function) or func.type_params:
            return False
        calls = self.calls.get(id(var), ())
        return self.counts.get(var, 0) == len(calls) == 1 and self.refs.get(id(func)) == 1 \
            and self.refs.get(id(calls[0])) == 1 and not any(v is var for v in self.free.of(func))

    def register_copy(self, var, func):
        """A let-bound closure copied at its calls: a small one at every call, for free; a large
        one used by one call (its Function node shared with other lets: eager's recorded calls of
        one gradient program) against the budget."""
        calls = self.calls.get(id(var), ())
        if func.type_params or not calls or any(v is var for v in self.free.of(func)):
            return
        size = _size(func)
        if size <= SMALL:
            self.copied[id(var)] = (func, 0)
        elif self.counts.get(var, 0) == len(calls) == 1:
            self.copied[id(var)] = (func, size)

    def visit(self, expr):
        # an inlinable call is not memoized: its node has one parent (expandable), so it is
        # reached once, and the body it moves must be placed once
        if type(expr) is Call and self.expandable(expr):
            return self.visit_Call(expr)
        return super().visit(expr)

    def expandable(self, call):
        if self.refs.get(id(call), 0) > 1:
            return False
        op = call.op
        if isinstance(op, Var):
            return id(op) in self.moved or self.copied.get(id(op), (None, 1 + self.budget))[1] \
                <= self.budget
        if isinstance(op, GlobalVar):
            return op.name_hint in self.globals
        if not isinstance(op, Function) or op.type_params:
            return False
        return self.refs.get(id(op)) == 1 or _size(op) <= SMALL

    def visit_Call(self, e):
        if not self.expandable(e):
            return super().visit_Call(e)
        op = e.op
        args = [self.visit(a) for a in e.args]
        if isinstance(op, GlobalVar):
            return _copy(self.globals[op.name_hint], args)
        if isinstance(op, Var):
            self.expanded[id(op)] = self.expanded.get(id(op), 0) + 1
            if id(op) in self.copied:
                func, cost = self.copied[id(op)]
                self.budget -= cost
                return _copy(func, args)
            op = self.moved[id(op)]
        elif self.refs.get(id(op)) != 1:      # a small literal shared by several calls
            return _copy(self.visit(op), args)
        return self.move(op, args)

    def move(self, func, args):
        """`func(args)` as func's body in place, visited now with its parameters bound to the
        arguments (an atom substituted, any other argument bound by a let of the parameter):
        the body is used here only, so it keeps its Vars and is walked once."""
        bindings = []
        for param, arg in zip(func.params, args):
            if isinstance(arg, (Var, GlobalVar, Constant)):
                self.subst[id(param)] = arg
            else:
                bindings.append((param, arg))
        body = self.visit(func.body)
        for param, arg in reversed(bindings):
            body = Let(param, arg, body)
        return body


def _calls_by_callee(expr) -> dict:
    """id(Var) -> the call nodes calling it."""
    calls: dict = {}
    for node in walk(expr):
        if isinstance(node, Call) and isinstance(node.op, Var):
            calls.setdefault(id(node.op), []).append(node)
    return calls


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
            if recursive or new.type_params:
                continue
            size = _size(new)
            if size <= SMALL or (references.get(name, 0) == 1
                                 and size <= COPY_GROWTH * max(_size(func), 1)):
                done[name] = new
    return out


def _inline_function(func, globals_):
    def run():
        return _Inliner(func, globals_).visit(func)
    with no_gc():
        return run_deep(run)


class Inline(Pass):
    """`rl.passes.inline`: calls of small or once-called known functions replaced by their
    bodies (the module text).

        >>> f = rl.parse_expr("fn (%x: float32) { let %sq = fn (%a: float32) { %a * %a }; "
        ...                   "%sq(%x) + %sq(2f) }")
        >>> print(rl.passes.inline(f))
        fn (%x: float32) {
          %x * %x + 2f * 2f
        }
    """

    name = "inline"
    requires = frozenset([TYPED])

    def run(self, mod):
        return inline_module(mod)
