"""The one dispatch idiom of relayish: `visit_<NodeClass>` methods, memoized by identity.

Programs are DAGs (AD output shares subexpressions), so every functor memoizes its result per
node. Let-chains are walked with loops, never by recursion: AD output and generated programs
have let-chains 10^5 long. Other nesting (a 10^4-deep `x*2*2*...` built in a Python loop) is
survived by running entry points under `deep`, which gives Python a large stack.
"""
from __future__ import annotations

import functools
import sys
import threading

from relayish.errors import RelayishError
from relayish.ir.expr import (Call, Clause, Constant, Constructor, Function, GlobalVar, If, Let,
                              Match, PatternConstructor, PatternTuple, PatternVar, PatternWildcard,
                              RefCreate, RefRead, RefWrite, Tuple, TupleGetItem, Var)


class ExprFunctor:
    """Dispatch `visit(e)` to `self.visit_<type(e).__name__>(e)`, memoized by node identity."""

    def __init__(self):
        self.memo: dict[int, object] = {}
        self._keep: list = []   # keeps visited nodes alive so their ids stay unique

    def visit(self, expr):
        key = id(expr)
        if key in self.memo:
            return self.memo[key]
        result = self.dispatch(expr)
        self.memo[key] = result
        self._keep.append(expr)
        return result

    def dispatch(self, node):
        method = getattr(self, "visit_" + type(node).__name__, None)
        if method is None:
            return self.visit_default(node)
        return method(node)

    def visit_default(self, node):
        raise RelayishError(f"{type(self).__name__} cannot handle {type(node).__name__} nodes")


class ExprVisitor(ExprFunctor):
    """Walks every subexpression once; override visit_<Node> and call super() to keep walking."""

    def visit_Var(self, e): pass
    def visit_GlobalVar(self, e): pass
    def visit_Constant(self, e): pass
    def visit_Op(self, e): pass
    def visit_Constructor(self, e): pass

    def visit_Tuple(self, e):
        for f in e.fields:
            self.visit(f)

    def visit_TupleGetItem(self, e):
        self.visit(e.tuple_value)

    def visit_Function(self, e):
        for p in e.params:
            self.visit(p)
        self.visit(e.body)

    def visit_Call(self, e):
        self.visit(e.op)
        for a in e.args:
            self.visit(a)

    def visit_Let(self, e):
        while isinstance(e, Let):           # a loop, never recursion, down the chain
            self.memo[id(e)] = None
            self._keep.append(e)
            self.visit(e.var)
            self.visit(e.value)
            e = e.body
        self.visit(e)

    def visit_If(self, e):
        self.visit(e.cond)
        self.visit(e.true_branch)
        self.visit(e.false_branch)

    def visit_Match(self, e):
        self.visit(e.data)
        for c in e.clauses:
            self.visit_pattern(c.lhs)
            self.visit(c.rhs)

    def visit_pattern(self, p):
        if isinstance(p, PatternVar):
            self.visit(p.var)
        elif isinstance(p, (PatternConstructor, PatternTuple)):
            for sub in p.patterns:
                self.visit_pattern(sub)

    def visit_RefCreate(self, e):
        self.visit(e.value)

    def visit_RefRead(self, e):
        self.visit(e.ref)

    def visit_RefWrite(self, e):
        self.visit(e.ref)
        self.visit(e.value)


class ExprMutator(ExprFunctor):
    """Rebuilds an expression bottom-up; a node whose children did not change is reused."""

    def visit_Var(self, e): return e
    def visit_GlobalVar(self, e): return e
    def visit_Constant(self, e): return e
    def visit_Op(self, e): return e
    def visit_Constructor(self, e): return e

    def visit_Tuple(self, e):
        fields = [self.visit(f) for f in e.fields]
        return e if _same(fields, e.fields) else Tuple(fields)

    def visit_TupleGetItem(self, e):
        t = self.visit(e.tuple_value)
        return e if t is e.tuple_value else TupleGetItem(t, e.index)

    def visit_Function(self, e):
        params = [self.visit(p) for p in e.params]
        body = self.visit(e.body)
        if _same(params, e.params) and body is e.body:
            return e
        return Function(params, body, e.ret_type, e.type_params)

    def visit_Call(self, e):
        op = self.visit(e.op)
        args = [self.visit(a) for a in e.args]
        if op is e.op and _same(args, e.args):
            return e
        return Call(op, args, e.attrs)

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

    def visit_If(self, e):
        c, t, f = self.visit(e.cond), self.visit(e.true_branch), self.visit(e.false_branch)
        if c is e.cond and t is e.true_branch and f is e.false_branch:
            return e
        return If(c, t, f)

    def visit_Match(self, e):
        data = self.visit(e.data)
        clauses = [Clause(self.visit_pattern(c.lhs), self.visit(c.rhs)) for c in e.clauses]
        if data is e.data and all(n.lhs is o.lhs and n.rhs is o.rhs for n, o in zip(clauses, e.clauses)):
            return e
        return Match(data, clauses, e.complete)

    def visit_pattern(self, p):
        if isinstance(p, PatternVar):
            v = self.visit(p.var)
            return p if v is p.var else PatternVar(v)
        if isinstance(p, PatternConstructor):
            subs = [self.visit_pattern(s) for s in p.patterns]
            return p if _same(subs, p.patterns) else PatternConstructor(p.constructor, subs)
        if isinstance(p, PatternTuple):
            subs = [self.visit_pattern(s) for s in p.patterns]
            return p if _same(subs, p.patterns) else PatternTuple(subs)
        return p

    def visit_RefCreate(self, e):
        v = self.visit(e.value)
        return e if v is e.value else RefCreate(v)

    def visit_RefRead(self, e):
        r = self.visit(e.ref)
        return e if r is e.ref else RefRead(r)

    def visit_RefWrite(self, e):
        r, v = self.visit(e.ref), self.visit(e.value)
        return e if r is e.ref and v is e.value else RefWrite(r, v)


def _same(new, old):
    return len(new) == len(old) and all(a is b for a, b in zip(new, old))


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


def free_vars(expr) -> list:
    """The Vars used in `expr` but not bound in it, in order of first use."""
    collector = _FreeVars()
    run_deep(collector.visit, expr)
    return [v for v in collector.used if id(v) not in collector.bound]


class _FreeVars(ExprVisitor):
    def __init__(self):
        super().__init__()
        self.used, self.bound = [], set()

    def visit_Var(self, e):
        self.used.append(e)

    def visit_Let(self, e):
        node = e
        while isinstance(node, Let):
            self.bound.add(id(node.var))
            node = node.body
        super().visit_Let(e)

    def visit_Function(self, e):
        self.bound.update(id(p) for p in e.params)
        super().visit_Function(e)

    def visit_pattern(self, p):
        if isinstance(p, PatternVar):
            self.bound.add(id(p.var))
        super().visit_pattern(p)


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


def deep(fn):
    """Decorator form of run_deep for public entry points."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return run_deep(fn, *args, **kwargs)
    return wrapper
