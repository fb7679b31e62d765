"""The let-chains reverse mode emits into: scopes, backprop segments and deferred pairs.

ReverseAD (reverse.py) builds its output through this base class. Each open `Scope` is a
let-chain being built (a function body, a branch, a backpropagator closure) with the bp in
effect there:

    emit(value, hint)          bind value to a fresh variable in the current scope
    project(a, i)              `a.i`, bound once for the open scopes (a memo shared by all of
                               them; each scope removes its own keys when it closes, so a lookup
                               costs the same at any nesting depth)
    in_scope(fn, bp)           run fn in a new scope; the let-chain of what it emitted
    flush()                    push the backward steps of the op calls emitted since the last
                               flush onto bp as ONE closure (a segment; steps in reverse order)
    deferred(z, t, node, ..)   the lifted value `(z, ref)` of a float op result, not built yet
                               (a `Deferred`): `force` builds the pair in the scope that
                               computed z when some use needs it (materialize)

A deferred value counts the uses it still has in the original program (count_uses, before the
transform): a flush gives every value of the segment that is still to be used a real reference,
because its gradient will be read by a closure pushed earlier.
"""
from __future__ import annotations

from relayish.ir.expr import Call, Function, RefCreate, RefRead, RefWrite, Tuple, TupleGetItem, Var
from relayish.ir.visitor import ExprVisitor, build_let_chain, run_deep
from relayish.ad.lifted import zeros_of
from relayish.ad.origins import mark

__all__ = ["Scope", "Deferred", "ScopedEmitter"]


class Scope:
    """A let-chain being built: its bindings, the keys it added to the memo (ScopedEmitter.memo),
    the bp in effect, and the backward steps of its op calls not yet pushed onto bp (see
    ScopedEmitter.flush)."""
    __slots__ = ("bindings", "memo_keys", "bp", "pending", "segment", "produced")

    def __init__(self, bp):
        self.bindings = []
        self.memo_keys = []
        self.bp = bp
        self.pending = []
        self.segment = 0        # bumped by each flush
        self.produced = []      # the deferred pairs of the pending segment


class Deferred:
    """The lifted value `(z, ref)` of a float op result (or constant), not built yet.

    Most op results are used only by later op calls of the same straight-line segment: their
    gradient then flows through a local variable of the segment's backpropagator, and the pair
    and its reference are never built. Any other use (a tuple field, a call argument, a result,
    a use from an inner scope, a use after the segment's flush) builds the pair (`force`)."""
    __slots__ = ("z", "t", "home", "segment", "remaining", "pair", "ref", "contribs", "inactive",
                 "hint")

    def __init__(self, z, t, home, remaining, inactive, hint):
        self.z, self.t, self.home, self.segment = z, t, home, home.segment
        self.remaining = remaining    # uses still to come in the original program
        self.pair = self.ref = None
        self.contribs = []            # cotangents from consumers in the same segment
        self.inactive = inactive      # a constant: no gradient wanted
        self.hint = hint


class ScopedEmitter:
    """Scopes, segments and deferred pairs (module docstring) for a transform subclassing it."""

    def __init__(self):
        self.scopes: list = []
        self.memo: dict = {}           # what the open scopes have bound (module docstring)
        # ids of lifted values known to carry constants (the dict keeps them alive, so that
        # their ids stay unique)
        self.inactive: dict = {}
        self.uses: dict = {}           # id(original node) -> number of references to it
        self._keep = []

    def mark_inactive(self, v):
        self.inactive[id(v)] = v

    def is_inactive(self, a):
        if isinstance(a, Deferred):
            return a.inactive
        return id(a) in self.inactive

    @property
    def scope(self) -> Scope:
        return self.scopes[-1]

    origin = None       # origins.origin_of of the primal expression being transformed

    def emit(self, value, hint="t", t=None) -> Var:
        v = Var(hint)
        if t is not None:
            v._checked_type = t
        if self.origin is not None:
            mark(value, self.origin)        # its source position, for a debugger (origins.py)
        self.scope.bindings.append((v, value))
        return v

    def project(self, a, i, hint="f", t=None):
        """`a.i`, bound once per scope (projections of lifted values repeat a lot)."""
        key = ("proj", id(a), i)
        hit = self.memo.get(key)
        if hit is not None:
            return hit
        v = self.emit(TupleGetItem(a, i), hint, t)
        self.remember(key, v)
        self._keep.append(a)
        return v

    def remember(self, key, value):
        """Memoize in the current scope: visible there and in the scopes it opens."""
        self.memo[key] = value
        self.scope.memo_keys.append(key)

    def in_scope(self, fn, bp=None):
        """Run fn() in a fresh scope; return the let-chain of what it emitted around its result."""
        self.scopes.append(Scope(self.scope.bp if bp is None and self.scopes else bp))
        try:
            result = fn()
            self.flush()
            bindings = self.scope.bindings
            if bindings and bindings[-1][0] is result and result.type_annotation is None:
                result = bindings.pop()[1]      # `let v = e; v` is just `e`
            return build_let_chain(bindings, result)
        finally:
            memo = self.memo
            for key in self.scopes.pop().memo_keys:
                memo.pop(key, None)

    def flush(self):
        """Push the pending backward steps of this scope onto bp as one closure.

        Consecutive op calls share one backpropagator closure (their steps run in reverse order
        inside it): fewer closures, reads and writes of bp. Anything that may extend bp itself
        (a call of a function, a branch, the end of a scope) flushes first, so the chain of
        closures still runs every step after the steps of the values' later uses."""
        scope = self.scope
        for v in scope.produced:        # values used after this point keep a real reference
            if v.remaining > 0 and v.pair is None:
                self.materialize(v)
        scope.produced = []
        scope.segment += 1
        steps = scope.pending
        if not steps:
            return
        scope.pending = []
        bp = scope.bp
        old = Var("prev")
        emitted = []

        def backward():
            origin = self.origin            # each step notes its own primal expression
            for step in reversed(steps):
                step()
            self.origin = origin
            emitted.append(bool(self.scope.bindings))
            return Call(old, [])
        body = self.in_scope(backward)
        if emitted[0]:                  # steps whose results nobody used emit nothing
            self.scope.bindings.append((old, RefRead(bp)))
            self.emit(RefWrite(bp, Function([], body)), "u")

    def force(self, v):
        if not isinstance(v, Deferred):
            return v
        if v.pair is None:
            self.materialize(v)
        return v.pair

    def materialize(self, v):
        """Build `(z, ref(zeros))` for a deferred value, in the scope that computed it."""
        home = v.home
        r = Var("r")
        d = Var(v.hint if v.hint else "d")
        home.bindings.append((r, RefCreate(zeros_of(v.t))))
        home.bindings.append((d, Tuple([v.z, r])))
        v.pair, v.ref = d, r
        if v.inactive:
            self.mark_inactive(d)

    def deferred(self, z, t, node, inactive, hint=None):
        v = Deferred(z, t, self.scope, self.uses.get(id(node), 1), inactive, hint)
        if not inactive:
            self.scope.produced.append(v)
        self._keep.append(v)
        return v

    def count_uses(self, func):
        counter = _UseCounter(self.uses)
        run_deep(counter.visit, func)


class _UseCounter(ExprVisitor):
    """How often each node is referenced (a Var: its binder counts once too)."""

    def __init__(self, counts):
        super().__init__()
        self.counts = counts

    def visit(self, expr):
        self.counts[id(expr)] = self.counts.get(id(expr), 0) + 1
        return super().visit(expr)
