"""Analyses of a whole program, computed once and looked up: free variables.

    free = FreeVars()          # a table, filled as functions are asked for
    free(func) -> [Var]        # what a closure of the Function `func` captures
    free.of(expr) -> [Var]     # the free variables of any expression
    free_vars(expr) -> [Var]   # FreeVars().of(expr)

Free variables are scope-aware, in order of first use (the order a preorder walk meets them):
a Var is free in an expression when it is used there outside the scope of every binder of it
inside the expression. Binders and their scopes: a Function's parameters (its body), `let %v =
value; body` (value and body: a let binding a function may recurse), a match clause's pattern
variables (that clause's right-hand side).

Scheme. One walk over the program with an explicit work stack (no Python recursion, however
deep the let-chains or the nesting), keeping the stack of Functions being walked ("frames",
frame 0 being the expression asked about) and, per Var, the frame levels of its binders in
scope. A use of %v in frame d, whose innermost binder in scope is in frame b, makes %v free in
frames d, d-1, ..., b+1; the loop stops at the first frame that already has %v (then every frame
below it up to b+1 has it too). So the walk costs one step per node plus one per (function,
free variable) pair, the size of the answer: linear in the program, where a free-variable walk
per Function is quadratic in the nesting depth of closures (2 s for 1,000 nested fn literals).
A Function met again (programs are DAGs) is not walked again: its table entry is used. Any
other subtree met again in the same function is skipped too: exact for well-scoped programs
(those the type checker accepts), where a shared subtree's variables have the same binders
wherever it occurs; a Var itself is looked up at every use.
"""
from __future__ import annotations

from relayish.errors import RelayishError
from relayish.ir.expr import (Call, Constant, Constructor, Function, GlobalVar, If, Let, Match,
                              PatternConstructor, PatternTuple, PatternVar, PatternWildcard,
                              RefCreate, RefRead, RefWrite, Tuple, TupleGetItem, Var)
from relayish.ir.op import Op

__all__ = ["FreeVars", "free_vars"]

# work items
_VISIT, _BIND, _UNBIND, _EXIT = range(4)


class _Frame:
    __slots__ = ("func", "free", "seen")

    def __init__(self, func):
        self.func = func
        self.free: dict[int, Var] = {}      # id(var) -> var, in order of first use
        self.seen: set[int] = set()         # nodes already walked in this frame


class FreeVars:
    """The free variables of every Function of the programs it is asked about, walked once.

        >>> free = FreeVars()
        >>> free(fn_literal)        # walks fn_literal and fills in every Function inside it
        [<Var %x>]

    Keeps the Functions it has seen alive (entries are keyed by identity).
    """

    def __init__(self):
        self._table: dict[int, list] = {}
        self._keep: list = []

    def __call__(self, func) -> list:
        hit = self._table.get(id(func))
        if hit is None:
            if not isinstance(func, Function):
                raise RelayishError(f"FreeVars() looks up Functions, got {type(func).__name__}; "
                                    "use .of(expr) for any expression")
            self.of(func)
            hit = self._table[id(func)]
        return hit

    def of(self, expr) -> list:
        """The free variables of `expr` (and, on the way, of every Function inside it)."""
        hit = self._table.get(id(expr))
        if hit is not None:
            return hit
        frames = [_Frame(expr)]
        scope: dict[int, list] = {}           # id(var) -> frame levels of its binders in scope
        work = [(_VISIT, expr)]
        table = self._table

        def use(var, level):
            levels = scope.get(id(var))
            outer = levels[-1] if levels else -1
            key = id(var)
            for k in range(level, outer, -1):
                free = frames[k].free
                if key in free:
                    break
                free[key] = var

        while work:
            kind, item = work.pop()
            if kind == _BIND:
                level = len(frames) - 1
                for var in item:
                    scope.setdefault(id(var), []).append(level)
                continue
            if kind == _UNBIND:
                for var in item:
                    scope[id(var)].pop()
                continue
            if kind == _EXIT:
                frame = frames.pop()
                table[id(item)] = list(frame.free.values())
                self._keep.append(item)
                continue
            e = item
            cls = e.__class__
            if cls is Var:                      # never memoized: its binder may differ
                use(e, len(frames) - 1)
                continue
            frame = frames[-1]
            if id(e) in frame.seen:
                continue
            frame.seen.add(id(e))
            if cls in _LEAVES:
                pass
            elif cls is Function:
                hit = table.get(id(e))
                if hit is not None:
                    level = len(frames) - 1
                    for var in hit:
                        use(var, level)
                    continue
                work.append((_EXIT, e))
                work.append((_UNBIND, e.params))
                work.append((_VISIT, e.body))
                frames.append(_Frame(e))
                level = len(frames) - 1
                for p in e.params:
                    scope.setdefault(id(p), []).append(level)
            elif cls is Let:
                chain = []
                while isinstance(e, Let):           # a loop down the chain, never recursion
                    frame.seen.add(id(e))
                    chain.append(e)
                    e = e.body
                work.append((_UNBIND, [let.var for let in chain]))
                work.append((_VISIT, e))
                for let in reversed(chain):         # run as: bind v1, value1, bind v2, ...
                    work.append((_VISIT, let.value))
                    work.append((_BIND, (let.var,)))
            elif cls is Match:
                for clause in reversed(e.clauses):
                    binders = _pattern_vars(clause.lhs)
                    work.append((_UNBIND, binders))
                    work.append((_VISIT, clause.rhs))
                    work.append((_BIND, binders))
                work.append((_VISIT, e.data))
            else:
                children = _CHILDREN.get(cls)
                if children is None:
                    raise RelayishError(f"free variables: unknown node {type(e).__name__}")
                work.extend(reversed(children(e)))
        root = frames[0]
        result = list(root.free.values())
        if isinstance(expr, Function):
            return table[id(expr)]
        return result


def free_vars(expr) -> list:
    """The free variables of `expr`, in order of first use (scope-aware; see the module text)."""
    return FreeVars().of(expr)


def _pattern_vars(pattern) -> list:
    out, todo = [], [pattern]
    while todo:
        p = todo.pop()
        if isinstance(p, PatternVar):
            out.append(p.var)
        elif isinstance(p, (PatternConstructor, PatternTuple)):
            todo.extend(reversed(p.patterns))
        elif not isinstance(p, PatternWildcard):
            raise RelayishError(f"free variables: unknown pattern {type(p).__name__}")
    return out


_LEAVES = frozenset({GlobalVar, Constant, Op, Constructor})


def _visits(*nodes):
    return [(_VISIT, n) for n in nodes]


# children in walk order (Function, Let and Match bind and are handled in the loop)
_CHILDREN = {
    Tuple: lambda e: _visits(*e.fields),
    TupleGetItem: lambda e: _visits(e.tuple_value),
    Call: lambda e: _visits(e.op, *e.args),
    If: lambda e: _visits(e.cond, e.true_branch, e.false_branch),
    RefCreate: lambda e: _visits(e.value),
    RefRead: lambda e: _visits(e.ref),
    RefWrite: lambda e: _visits(e.ref, e.value),
}
