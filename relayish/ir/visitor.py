"""The one dispatch idiom of relayish: `visit_<NodeClass>` methods, memoized by identity.

Programs are DAGs (AD output shares subexpressions), so every functor memoizes its result per
node. Let-chains are walked with loops, never by recursion: AD output and generated programs
have let-chains 10^5 long. Other nesting (a 10^4-deep `x*2*2*...` built in a Python loop) is
survived by running entry points under `deep`, which gives Python a large stack; `no_gc`
pauses the garbage collector while a pass builds a big program.
"""
from __future__ import annotations

import contextlib
import functools
import gc
import sys
import threading

from relayish.errors import RelayishError
from relayish.ir.expr import Expr, Let, Pattern
from relayish.ir.fields import children, map_children


class ExprFunctor:
    """Dispatch `visit(e)` to `self.visit_<type(e).__name__>(e)`, memoized by node identity."""

    # node class -> the visit_<Node> function of this functor class (None: visit_default),
    # one table per class: a name lookup per node was a tenth of a pass's time
    _methods: dict = {}

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls._methods = {}

    def __init__(self):
        self.memo: dict[int, object] = {}
        self._keep: list = []   # keeps visited nodes alive so their ids stay unique

    def visit(self, expr):
        key = id(expr)
        memo = self.memo
        if key in memo:
            return memo[key]
        result = self.dispatch(expr)
        memo[key] = result
        self._keep.append(expr)
        return result

    def dispatch(self, node):
        try:
            method = self._methods[type(node)]
        except KeyError:
            method = self._methods[type(node)] = getattr(
                type(self), "visit_" + type(node).__name__, None)
        if method is None:
            return self.visit_default(node)
        return method(self, node)

    def visit_default(self, node):
        raise RelayishError(f"{type(self).__name__} cannot handle {type(node).__name__} nodes")


class ExprVisitor(ExprFunctor):
    """Walks every subexpression once; override visit_<Node> and call super() to keep walking.

    Any node without a visit_<Node> method of its own is walked by `generic_visit`, through the
    fields its class declares (expr.py): child expressions and bound Vars by `visit`, patterns by
    `visit_pattern`, clauses by `visit_clause`. A new node class needs no edit here.
    """

    def visit_default(self, node):
        return self.generic_visit(node)

    def generic_visit(self, node):
        for child in children(node):
            if isinstance(child, Expr):
                self.visit(child)
            elif isinstance(child, Pattern):
                self.visit_pattern(child)
            else:
                self.visit_clause(child)

    # leaves: no children to walk (the generic walk would find none, more slowly)
    def visit_Var(self, e): pass
    def visit_GlobalVar(self, e): pass
    def visit_Constant(self, e): pass
    def visit_Op(self, e): pass
    def visit_Constructor(self, e): pass

    # the names subclasses extend with super().visit_<Node>(e): each is the generic walk
    def visit_Tuple(self, e): self.generic_visit(e)
    def visit_TupleGetItem(self, e): self.generic_visit(e)
    def visit_Function(self, e): self.generic_visit(e)
    def visit_Call(self, e): self.generic_visit(e)
    def visit_If(self, e): self.generic_visit(e)
    def visit_Match(self, e): self.generic_visit(e)
    def visit_RefCreate(self, e): self.generic_visit(e)
    def visit_RefRead(self, e): self.generic_visit(e)
    def visit_RefWrite(self, e): self.generic_visit(e)

    def visit_Let(self, e):
        while isinstance(e, Let):           # a loop, never recursion, down the chain
            self.memo[id(e)] = None
            self._keep.append(e)
            self.visit(e.var)
            self.visit(e.value)
            e = e.body
        self.visit(e)

    def visit_pattern(self, p):
        """Patterns are not memoized (they are never shared); the bound Vars go to `visit`."""
        self.generic_visit(p)

    def visit_clause(self, c):
        self.generic_visit(c)


class ExprMutator(ExprFunctor):
    """Rebuilds an expression bottom-up; a node whose children did not change is reused.

    Any node without a visit_<Node> method of its own is rebuilt by `generic_visit`
    (`map_children` over the fields its class declares): child expressions and bound Vars
    through `visit`, patterns through `visit_pattern`, clauses through `visit_clause`.
    """

    def visit_default(self, node):
        return self.generic_visit(node)

    def generic_visit(self, node):
        return map_children(node, self._visit_child)

    def _visit_child(self, child):
        if isinstance(child, Expr):
            return self.visit(child)
        if isinstance(child, Pattern):
            return self.visit_pattern(child)
        return self.visit_clause(child)

    # leaves: nothing to rebuild
    def visit_Var(self, e): return e
    def visit_GlobalVar(self, e): return e
    def visit_Constant(self, e): return e
    def visit_Op(self, e): return e
    def visit_Constructor(self, e): return e

    # the names subclasses extend with super().visit_<Node>(e): each is the generic rebuild
    def visit_Tuple(self, e): return self.generic_visit(e)
    def visit_TupleGetItem(self, e): return self.generic_visit(e)
    def visit_Function(self, e): return self.generic_visit(e)
    def visit_Call(self, e): return self.generic_visit(e)
    def visit_If(self, e): return self.generic_visit(e)
    def visit_Match(self, e): return self.generic_visit(e)
    def visit_RefCreate(self, e): return self.generic_visit(e)
    def visit_RefRead(self, e): return self.generic_visit(e)
    def visit_RefWrite(self, e): return self.generic_visit(e)

    def visit_Let(self, e):
        chain = []
        while isinstance(e, Let):           # a loop down the chain, then rebuild from the end
            chain.append((e, self.visit(e.var), self.visit(e.value)))
            e = e.body
        body = self.visit(e)
        for let, var, value in reversed(chain):
            if not (var is let.var and value is let.value and body is let.body):
                let = Let(var, value, body)
            body = let
        return body

    def visit_pattern(self, p):
        return self.generic_visit(p)

    def visit_clause(self, c):
        return self.generic_visit(c)


def let_chain(expr):
    """Split `let x1 = v1; ...; let xn = vn; body` into ([(x1, v1), ...], body) with a loop."""
    bindings = []
    while isinstance(expr, Let):
        bindings.append((expr.var, expr.value))
        expr = expr.body
    return bindings, expr


def build_let_chain(bindings, body):
    """The inverse of let_chain."""
    for var, value in reversed(bindings):
        body = Let(var, value, body)
    return body


# ---- deep programs -------------------------------------------------------------------------

_DEEP_STACK_BYTES = 512 * 1024 * 1024
_DEEP_RECURSION_LIMIT = 1_000_000
_deep_state = threading.local()
_deep_lock = threading.Lock()


def run_deep(fn, *args, **kwargs):
    """Call fn in a thread with a 512 MiB stack and a high recursion limit.

    Let-chains never need this (they are loops); it is the safety net for other deep nesting.
    Nested calls run directly in the thread already started.
    """
    if getattr(_deep_state, "active", False):
        return fn(*args, **kwargs)
    outcome = {}

    def target():
        _deep_state.active = True
        try:
            outcome["value"] = fn(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            outcome["error"] = exc

    with _deep_lock:
        old_limit = sys.getrecursionlimit()
        old_size = threading.stack_size()
        threading.stack_size(_DEEP_STACK_BYTES)
        sys.setrecursionlimit(max(old_limit, _DEEP_RECURSION_LIMIT))
        try:
            thread = threading.Thread(target=target, name="relayish-deep")
            thread.start()
            thread.join()
        finally:
            threading.stack_size(old_size)
            sys.setrecursionlimit(old_limit)
    if "error" in outcome:
        error = outcome["error"]
        if isinstance(error, RecursionError):
            raise RelayishError("the program is nested too deeply to process") from None
        raise error.with_traceback(error.__traceback__)
    return outcome.get("value")


@contextlib.contextmanager
def no_gc():
    """Pause Python's cyclic garbage collector for the block, then restore its previous state.

    Building, parsing, transforming or compiling a big program allocates millions of small
    objects that all stay alive: each of the collector's passes would rescan the growing heap
    (quadratic time in the program's size) and free nothing. Nested uses are fine: only the
    outermost one that found the collector enabled enables it again.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def deep(fn):
    """Decorator form of run_deep for public entry points."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return run_deep(fn, *args, **kwargs)
    return wrapper
