"""Analyses of a whole program, computed once and looked up: free variables, the call graph of
a Module's globals, use counts of Vars.

    free = FreeVars()          # a table, filled as functions are asked for
    free(func) -> [Var]        # what a closure of the Function `func` captures
    free.of(expr) -> [Var]     # the free variables of any expression
    free_vars(expr) -> [Var]   # FreeVars().of(expr)
    graph = CallGraph(mod)     # graph.callees[name], .reachable(name), .callers_of(names),
                               # .components() (strongly connected, callees first)
    global_refs(expr) -> [str] # the globals an expression refers to, in order of first use
    use_counts(expr) -> {Var: int}   # how many nodes refer to each Var (binders not counted)

Every walk here is a loop over `fields.children` (no Python recursion, however deep the
program), and visits each node of a DAG once.

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
from relayish.ir.expr import Function, GlobalVar, Let, Match, PatternVar, Var
from relayish.ir.fields import EXPR, EXPRS, children, iter_fields

__all__ = ["FreeVars", "free_vars", "CallGraph", "global_refs", "param_index", "use_counts", "walk"]

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
            if cls is Function:
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
            else:       # binds nothing: its children, through its declared fields
                work.extend((_VISIT, child) for child in reversed(children(e)))
        root = frames[0]
        result = list(root.free.values())
        if isinstance(expr, Function):
            return table[id(expr)]
        return result


def free_vars(expr) -> list:
    """The free variables of `expr`, in order of first use (scope-aware; see the module text)."""
    return FreeVars().of(expr)


def _pattern_vars(pattern) -> list:
    """The Vars a pattern binds, left to right."""
    return [p.var for p in walk(pattern) if isinstance(p, PatternVar)]


# ---- whole-program walks -------------------------------------------------------------------

def param_index(func, var):
    """The position of `var` among `func`'s parameters, or None: by identity (`==` on
    expressions builds an op call, so `list.index` and `in` do not apply)."""
    for k, p in enumerate(func.params):
        if p is var:
            return k
    return None


def walk(expr):
    """Every node inside `expr` (itself included: expressions, patterns, clauses), each once, in
    preorder (the order a recursive visitor meets them); a loop with an explicit stack."""
    seen, stack = set(), [expr]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        yield node
        stack.extend(reversed(children(node)))


def global_refs(expr) -> list:
    """The names of the global functions `expr` refers to, in order of first reference."""
    return list(dict.fromkeys(n.name_hint for n in walk(expr) if isinstance(n, GlobalVar)))


def use_counts(expr) -> dict:
    """{Var: how many nodes of `expr` refer to it as a child expression}; a Var's binder (a
    let, a parameter, a pattern) is no use of it. Each node of a DAG counts once, so a shared
    subexpression using %x adds one use of %x however many parents share it."""
    counts: dict = {}
    for node in walk(expr):
        for _, kind, value in iter_fields(node):
            if kind == EXPR:
                if type(value) is Var:
                    counts[value] = counts.get(value, 0) + 1
            elif kind == EXPRS:
                for item in value:
                    if type(item) is Var:
                        counts[item] = counts.get(item, 0) + 1
    return counts


class CallGraph:
    """Which global functions of a Module refer to which, by name. A reference counts as a call:
    a global passed as a value may be called by whatever receives it.

        graph = CallGraph(mod)
        graph.callees["f"]            # the globals @f refers to, in order of first reference
        graph.reachable("main")       # main and every global it reaches, in preorder
        graph.callers_of({"f"})       # {"f"} and every global that reaches @f
        graph.components()            # strongly connected sets, callees before callers
        graph.recursive()             # the globals in a cycle of calls
    """

    def __init__(self, mod):
        self.callees: dict[str, list] = {
            gv.name_hint: [n for n in global_refs(func) if n in mod]
            for gv, func in mod.functions.items()}

    def reachable(self, start) -> list:
        order, seen, todo = [], set(), [start]
        while todo:
            name = todo.pop()
            if name in seen:
                continue
            seen.add(name)
            order.append(name)
            todo.extend(reversed(self.callees.get(name, ())))
        return order

    def callers_of(self, names) -> set:
        found = set(names)
        callers: dict[str, list] = {}
        for caller, callees in self.callees.items():
            for callee in callees:
                callers.setdefault(callee, []).append(caller)
        todo = list(found)
        while todo:
            for caller in callers.get(todo.pop(), ()):
                if caller not in found:
                    found.add(caller)
                    todo.append(caller)
        return found

    def components(self) -> list:
        """Strongly connected sets of globals (each a list), callees before callers."""
        return strongly_connected_components(self.callees)

    def recursive(self) -> set:
        """The globals that can call themselves again: in a cycle of two or more, or calling
        themselves directly."""
        return {n for part in self.components() for n in part
                if len(part) > 1 or n in self.callees[n]}


def strongly_connected_components(edges) -> list:
    """The strongly connected sets of a graph {node: successors} (each a list), successors'
    sets before their predecessors' (Tarjan's algorithm with an explicit stack: any depth)."""
    index, low, on_stack, stack, out = {}, {}, set(), [], []
    counter = 0
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(edges[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            advanced = False
            for child in successors:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(edges.get(child, ()))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                out.append(component)
    return out
