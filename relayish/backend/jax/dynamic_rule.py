"""Which recursions the jax backend compiles as loops over runtime data (issue 17): the rule.

    folds = find_folds(mod)                   # {Function: Fold}: structural recursions (shape A)
    dynamic = dynamic_params(mod, main, folds)   # {param index: (ADT type, child orders)}

**The rule.** A parameter of the compiled function whose type is a recursive ADT (a tree, a
list) is *dynamic* -- passed as a node table (dynamic_tables.py) and folded by ONE compiled loop
for every shape -- when every use of it in @main is as the recursive argument of a call of a
recognized fold. Every other ADT argument stays static structure, and recursion over it unrolls
at trace time as before (right for small, fixed structures; each new shape is a new trace).

**A fold** (a catamorphism) is a global `@f(inv..., %t, inv...)` whose body is
`match (%t) { C_j(p...) => body_j }` where
  * each constructor of the ADT has one clause, whose sub-patterns are variables or `_`;
  * inside body_j, @f appears only as calls `let %x = @f(...)` that pass the same parameters
    as invariants and a child pattern variable at position k, each child exactly once, before
    any effectful binding (references, calls of functions); pure bindings may be interleaved
    (their order does not matter). A child variable has no other use. When @f writes no
    reference and calls no function but itself (*write-free*: reverse AD's @ad_lift_L makes
    `ref(0)` per element, @ad_grad_L reads `!%x.1`), the calls may come anywhere in the
    chain: nothing a binding does is seen by a recursive call or changed by one;
  * every field is a tensor, a child, or a tuple of tensors and references to tensors (the
    lifted field of L_ad: `(x, ref(dx))`, made by a map below; a *parameter* of @main needs
    fields of tensors and children, as the host encodes it);
  * %t has no other use; @f is not mutually recursive (no callee of @f reaches @f);
  * its result type is made of tensors, tuples and references to tensor trees (what a row
    of the result table holds), or @f is a *map* (below).
Then evaluating @f on every node of the table in post-order, children in the order body_j calls
them, IS the original evaluation order, effects included (dynamic_loops.py). The order of the
calls is each constructor's `order`: the field indices of its children, first called first.

**A map** is a fold whose result is another recursive ADT B of the same shape: every clause
ends in a constructor of B whose fields of type B are exactly the results of the clause's
recursive calls (each used once, there), its other fields row values (tensors, tuples,
references to tensors). Reverse AD's lifting of a List of tensors (`@ad_lift_L: L -> L_ad`,
a reference per element) and its read-back (`@ad_grad_L: L_ad -> L`) are maps. A map's loop
produces a node table of B (`Fold.map`: B, {tag: B's tag}, B's child orders) with the same rows
and children; a map's result in @main (a let's variable, or the call itself as an argument)
is folded (or mapped) again, or returned (a result table, decoded on the host), and nothing
else.

**A left fold** (tail recursion with an accumulator, `@sum(acc, xs) = match xs { Nil => acc,
Cons(x, r) => @sum(f(acc, x), r) }`) is a global whose body is `match (%t)` on a parameter %t
of a recursive ADT, one clause per constructor with variable sub-patterns, whose every use of
itself is a call in tail position (through lets, ifs and matches) passing a child pattern
variable of its clause at position k (the node to go on with), %t and the children used
nowhere else. With the other parameters and the result tensors and tuples of tensors, its
loop walks the table from the root, one row per call (dynamic_left.py); with references or
closures among them (reverse AD's `@sum_ad`, `rows` set) dynamic_tail.py's loop with rows runs
it, the table carried as a cursor. It agrees with any child order.

**A tail loop** (shape B, `find_tail_loops`): a global whose every use of itself is a call in
tail position, with at least one other tail position (an exit) and a result of tensors (and
references to them); called with traced arguments it runs as a while loop (dynamic_tail.py),
with constants it unrolls. A left fold with `rows` is also one.

Everything here is an IR analysis: loops with explicit stacks, no jax.
"""
from __future__ import annotations

from relayish.ir.analysis import CallGraph, global_refs, param_index, use_counts, walk
from relayish.ir.fields import EXPR, EXPRS, iter_fields
from relayish.ir.expr import (Call, Constructor, GlobalVar, If, Let, Match,
                              PatternConstructor, PatternVar, PatternWildcard, RefCreate,
                              RefRead, RefWrite, Var)
from relayish.ir.expr import Tuple as TupleExpr
from relayish.ir.op import Op
from relayish.ir.types import (FuncType, GlobalTypeVar, RefType, TensorType, TupleType, TypeCall,
                               TypeVar, is_tensor_tree, map_type)


class Fold:
    """A recognized structural recursion: `func` folds its parameter `k` (of ADT type `adt`).

    clauses[tag] = (clause, field variables (Var or None), order: child field indices in
    call order); `field_types[tag]` the constructor's field types with the ADT's type
    arguments substituted.
    """

    def __init__(self, name, func, k, adt, data, clauses, field_types, ret, map_to=None):
        self.name, self.func, self.k, self.adt, self.data = name, func, k, adt, data
        self.clauses, self.field_types, self.ret = clauses, field_types, ret
        self.map = map_to            # a map: (B, {tag: B's tag}, B's {tag: child order})
        self.left = False            # a left fold (`_left_fold_of`): any child order will do
        self.rows = False            # a left fold run by dynamic_tail's loop with rows

    def orders(self):
        return {tag: c[2] for tag, c in self.clauses.items()}


def adt_fields(mod, t):
    """(TypeData, [[field type per constructor field], ...] by tag) of a recursive ADT type `t`
    (its type arguments substituted), or None when t is not an ADT with a field of its own
    type."""
    if isinstance(t, GlobalTypeVar):
        t = TypeCall(t, ())
    if not isinstance(t, TypeCall):
        return None
    try:
        data = mod.get_type_data(t.func)
    except Exception:      # noqa: BLE001 - not an ADT of this module: not dynamic
        return None
    subst = dict(zip(data.type_vars, t.args))

    def sub(x):
        if isinstance(x, TypeVar):
            return subst.get(x, x)
        if isinstance(x, GlobalTypeVar) and x == t.func:
            return t
        return map_type(x, sub)
    fields = [[sub(f) for f in ctor.inputs] for ctor in data.constructors]
    if not any(_same_type(f, t) for fs in fields for f in fs):
        return None
    return data, fields


def _no(why, reason):
    """None, the answer of a check that refuses; its reason appended to `why` (a list, or None
    when nobody asked: `explain` asks, the compiler does not)."""
    if why is not None:
        why.append(reason)
    return None


NOT_A_MATCH = "its body is not a match on one of its parameters"
MUTUAL = "it is mutually recursive (a function it calls calls it again)"


def _mutually_recursive(name, graph):
    return any(callee != name and name in graph.reachable(callee)
               for callee in graph.callees.get(name, ()))


def _bad_pattern(clause, fields):
    if fields is not None:
        return f"constructor {_clause_name(clause)} has more than one clause"
    return (f"clause {_clause_name(clause)}: its pattern is not a constructor with a variable "
            f"or _ for each field")


def _bad_fields(clause, kinds, t):
    bad = next(f for f in kinds if not (_same_type(f, t) or _row_type(f)))
    return (f"clause {_clause_name(clause)}: a field of type {bad} (a fold's fields are "
            f"tensors, tuples of them, references to them, or children)")


def _missing_clauses(data, clauses):
    missing = [c.name_hint for c in data.constructors if c.tag not in clauses]
    return f"no clause for {', '.join(missing)}"


def _clause_name(clause):
    lhs = clause.lhs
    return lhs.constructor.name_hint if isinstance(lhs, PatternConstructor) else "_"


def _same_type(a, b):
    if isinstance(a, GlobalTypeVar):
        a = TypeCall(a, ())
    if isinstance(b, GlobalTypeVar):
        b = TypeCall(b, ())
    return a == b


def _row_type(t):
    """Can a value of type t be a row of a result table (tensors, tuples, refs to tensor
    trees)?"""
    stack = [(t, False)]
    while stack:
        x, in_ref = stack.pop()
        if isinstance(x, TensorType):
            continue
        if isinstance(x, TupleType):
            stack.extend((f, in_ref) for f in x.fields)
        elif isinstance(x, RefType) and not in_ref:
            stack.append((x.value, True))
        else:
            return False
    return True


def _loop_type(t):
    """Can a tail loop carry or return a value of type t: tensors, tuples and references to
    such values (reverse over reverse: the second AD of `@loop_ad` takes `(x, %rx)` pairs
    and adjoint references holding such pairs, `ref((x, ref(x)))`)?"""
    stack = [t]
    while stack:
        x = stack.pop()
        if isinstance(x, TupleType):
            stack.extend(x.fields)
        elif isinstance(x, RefType):
            stack.append(x.value)
        elif not isinstance(x, TensorType):
            return False
    return True


def _write_free(name, func):
    """No reference write and no call of a function other than @name itself anywhere in the
    function: its bindings and its recursive calls may run in any order."""
    for node in walk(func.body):
        if isinstance(node, RefWrite):
            return False
        if isinstance(node, Call) and not isinstance(node.op, (Op, Constructor)) and not (
                isinstance(node.op, GlobalVar) and node.op.name_hint == name):
            return False
    return True


def _pure(expr):
    """No reference operation and no call of a function anywhere in `expr` (ops and
    constructors are pure): moving it past the recursive calls changes nothing."""
    for node in walk(expr):
        if isinstance(node, (RefCreate, RefRead, RefWrite)):
            return False
        if isinstance(node, Call) and not isinstance(node.op, (Op, Constructor)):
            return False
    return True


def _fold_of(mod, name, func, graph, why=None):
    right, left = ([], []) if why is not None else (None, None)
    fold = _right_fold_of(mod, name, func, graph, right)
    if fold is None:
        fold = _left_fold_of(mod, name, func, graph, left)
    if fold is None and why is not None:
        why.append(f"not a fold ({right[0]}) nor a left fold ({left[0]})"
                   if right[0] != left[0] else f"not a fold: {right[0]}")
    return fold


def _left_fold_of(mod, name, func, graph, why=None):
    """A Fold with `left` set when @name is a left fold (module docstring), else None; its
    clauses' orders are the child fields in field order (what the table is encoded with when
    no right fold says otherwise)."""
    body = func.body
    k = param_index(func, body.data) if isinstance(body, Match) else None
    if k is None:
        return _no(why, NOT_A_MATCH)
    t = getattr(func.params[k], "_checked_type", None) or func.params[k].type_annotation
    found = adt_fields(mod, t)
    checked = getattr(func, "_checked_type", None)
    ret = func.ret_type or (checked.ret_type if isinstance(checked, FuncType) else None)
    if found is None:
        return _no(why, f"the matched %{body.data.name_hint} is not a recursive data type")
    if ret is None or not _row_type(ret):
        return _no(why, f"its result type {ret} is not made of tensors, tuples and references "
                        f"to tensors")
    # other parameters holding references or closures (reverse AD's @walk_ad): a tail loop
    # that leaves rows (dynamic_tail.py) runs it, carrying the node as a cursor
    rows = not is_tensor_tree(ret)
    for m, p in enumerate(func.params):
        pt = getattr(p, "_checked_type", None) or p.type_annotation
        if pt is None:
            return _no(why, f"the type of %{p.name_hint} is not known")
        rows = rows or (m != k and not is_tensor_tree(pt))
    if _mutually_recursive(name, graph):
        return _no(why, MUTUAL)
    data, field_types = found
    t = fold_type(t)
    counts = use_counts(body)
    if counts.get(func.params[k], 0) != 1:
        return _no(why, f"%{body.data.name_hint} is used besides the match")
    clauses, calls = {}, 0
    for clause in body.clauses:
        fields = _clause_fields(clause.lhs, field_types)
        if fields is None or fields[0] in clauses:
            return _no(why, _bad_pattern(clause, fields))
        tag, subs, kinds = fields
        if not all(_same_type(f, t) or _row_type(f) for f in kinds):
            return _no(why, _bad_fields(clause, kinds, t))
        children = {v for m, v in enumerate(subs) if v is not None and _same_type(kinds[m], t)}
        found_calls = _left_tail_calls(name, func, k, clause.rhs, children)
        if found_calls is None or any(counts.get(v, 0) != found_calls.get(v, 0)
                                      for v in children):
            return _no(why, f"clause {_clause_name(clause)}: a child is used other than as "
                            f"the node a tail call of @{name} goes on with")
        calls += sum(found_calls.values())
        order = [m for m, f in enumerate(kinds) if _same_type(f, t)]
        clauses[tag] = (clause, subs, order)
    if len(clauses) != len(data.constructors):
        return _no(why, _missing_clauses(data, clauses))
    if not calls or _global_uses(body, name) != calls:
        return _no(why, f"@{name} is used other than by tail calls passing a child")
    fold = Fold(name, func, k, t, data, clauses, field_types, ret)
    fold.left, fold.rows = True, rows
    return fold


def _left_tail_calls(name, func, k, rhs, children):
    """{child variable: the tail calls of @name passing it at position k} in a clause, or
    None when a tail call passes anything else there (a loop over the tail positions)."""
    out = {}
    for e in _tail_positions(rhs):
        if _is_call_of(e, name):
            if len(e.args) != len(func.params) or e.args[k] not in children:
                return None
            out[e.args[k]] = out.get(e.args[k], 0) + 1
    return out


def _right_fold_of(mod, name, func, graph, why=None):
    body = func.body
    k = param_index(func, body.data) if isinstance(body, Match) else None
    if k is None:
        return _no(why, NOT_A_MATCH)
    t = getattr(func.params[k], "_checked_type", None) or func.params[k].type_annotation
    found = adt_fields(mod, t)
    checked = getattr(func, "_checked_type", None)
    ret = func.ret_type or (checked.ret_type if isinstance(checked, FuncType) else None)
    if found is None:
        return _no(why, f"the matched %{body.data.name_hint} is not a recursive data type")
    if ret is None:
        return _no(why, "its result type is not known")
    data, field_types = found
    if isinstance(t, GlobalTypeVar):
        t = TypeCall(t, ())
    target = None if _row_type(ret) else adt_fields(mod, ret)
    if target is None and not _row_type(ret):
        return _no(why, f"its result type {ret} is neither made of tensors, tuples and "
                        f"references to tensors nor a recursive data type (a map)")
    counts = use_counts(body)
    free = _write_free(name, func)
    if counts.get(func.params[k], 0) != 1:
        return _no(why, f"%{body.data.name_hint} is used besides the match")
    if _mutually_recursive(name, graph):
        return _no(why, MUTUAL)
    clauses, tags, b_orders = {}, {}, {}
    for clause in body.clauses:
        fields = _clause_fields(clause.lhs, field_types)
        if fields is None or fields[0] in clauses:
            return _no(why, _bad_pattern(clause, fields))
        tag, subs, kinds = fields
        if not all(_same_type(f, t) or _row_type(f) for f in kinds):
            return _no(why, _bad_fields(clause, kinds, t))
        refused = [] if why is not None else None
        found = _leading_calls(name, func, k, clause.rhs, subs, kinds, t, counts, free, refused)
        if found is None:
            return _no(why, f"clause {_clause_name(clause)}: {refused[0]}" if refused else "")
        order, results = found
        if target is not None:
            built = _mapped(clause.rhs, target, ret, order, results, counts)
            if built is None or b_orders.get(built[0], built[1]) != built[1]:
                return _no(why, f"clause {_clause_name(clause)}: it does not end in a "
                                f"constructor of {ret} holding the recursive results as its "
                                f"children, in the order the other clauses use")
            tags[tag], b_orders[built[0]] = built
        clauses[tag] = (clause, subs, order)
    if len(clauses) != len(data.constructors):
        return _no(why, _missing_clauses(data, clauses))
    map_to = None if target is None else (fold_type(ret), tags, b_orders)
    return Fold(name, func, k, t, data, clauses, field_types, ret, map_to)


def _mapped(rhs, target, b, order, results, counts):
    """(B's tag, B's child order) of a map's clause: its let-chain ends in a constructor of B
    whose B fields are the recursive results, each once, other fields row values; else None."""
    node = rhs
    while isinstance(node, Let):
        node = node.body
    if not (isinstance(node, Call) and isinstance(node.op, Constructor)):
        return None
    ctor = node.op
    _, b_fields = target
    if ctor.tag >= len(b_fields) or len(node.args) != len(b_fields[ctor.tag]):
        return None
    child_of = {}                              # child field of A -> field of B holding its result
    for m, (ft, arg) in enumerate(zip(b_fields[ctor.tag], node.args)):
        if _same_type(ft, b):
            if not (isinstance(arg, Var) and arg in results and counts.get(arg, 0) == 1):
                return None
            child_of[results[arg]] = m
        elif not _row_type(ft):
            return None
    if len(child_of) != len(order) or set(child_of) != set(order):
        return None
    return ctor.tag, [child_of[a] for a in order]


def _leading_calls(name, func, k, rhs, subs, kinds, t, counts, free=False, why=None):
    """(the child field indices of the recursive calls of one clause body in call order,
    {the variable each call binds: its child field index}), or None when the clause breaks
    the rule (module docstring). `free`: the function is write-free, calls may come late."""
    children = {v: m for m, v in enumerate(subs) if v is not None and _same_type(kinds[m], t)}
    order, effects, results = [], False, {}
    node = rhs
    while isinstance(node, Let):              # the clause's let-chain, by a loop
        value = node.value
        if _is_recursive_call(value, name, func, k, children):
            if effects:
                return _no(why, f"@{name} is called on %{value.args[k].name_hint} after a "
                                f"binding with effects (a reference or a function call): the "
                                f"recursive calls must come first")
            order.append(children[value.args[k]])
            results[node.var] = order[-1]
        elif not free and not _pure(value):
            effects = True
        node = node.body
    # every child of the clause is called exactly once, and @f appears nowhere else
    if sorted(order) != sorted(set(order)) or set(order) != set(children.values()):
        return _no(why, f"each child must be the argument of exactly one "
                        f"`let %r = @{name}(...)`, passing its other parameters unchanged")
    if _global_uses(rhs, name) != len(order):
        return _no(why, f"@{name} is used other than by `let %r = @{name}(...)` calls on the "
                        f"children, passing its other parameters unchanged")
    if any(counts.get(v, 0) != 1 for v in children):
        return _no(why, "a child is used besides its recursive call")
    return order, results


def _global_uses(expr, name):
    """How many child positions in `expr` hold @name (a GlobalVar node may be shared, so
    counting the nodes would miss uses)."""
    count = 0
    for node in walk(expr):
        for _, kind, value in iter_fields(node):
            items = value if kind == EXPRS else (value,) if kind == EXPR else ()
            count += sum(1 for x in items if isinstance(x, GlobalVar) and x.name_hint == name)
    return count


def _is_recursive_call(value, name, func, k, children):
    if not (isinstance(value, Call) and isinstance(value.op, GlobalVar)
            and value.op.name_hint == name and len(value.args) == len(func.params)):
        return False
    for m, a in enumerate(value.args):
        if m == k:
            if not (isinstance(a, Var) and a in children):
                return False
        elif a is not func.params[m]:
            return False
    return True


def find_folds(mod, why=None):
    """{Function: Fold} of the module's globals that are structural recursions (docstring).
    `why`: a dict that gets {name: the reason} of each global that is not."""
    if mod is None:
        return {}
    graph = CallGraph(mod)
    out = {}
    for gv, func in mod.functions.items():
        name = gv.name_hint
        reasons = [] if why is not None else None
        fold = _fold_of(mod, name, func, graph, reasons)
        if fold is not None:
            out[func] = fold
        elif reasons:
            why[name] = reasons[0]
    return out


def dynamic_params(mod, main, folds, why=None):
    """{parameter index of main: (ADT type, {tag: child order})} of main's parameters that the
    rule makes dynamic: recursive-ADT parameters with fields of tensors and children, used only
    as the folded argument of fold calls that agree on the order of the children; a map's
    result (`let %d = @map(..., %t)`) must in turn be folded by calls agreeing with the map's
    order of B's children, or returned (module docstring). `why`: a dict that gets {index:
    the reason} of each recursive-ADT parameter that is not dynamic."""
    if not folds and why is None:
        return {}
    by_name = {f.name: f for f in folds.values()}
    counts = use_counts(main.body)
    calls, bound = [], {}                  # fold calls in main; {id(call): the Var a let binds}
    for node in walk(main.body):
        if isinstance(node, Call) and isinstance(node.op, GlobalVar):
            fold = by_name.get(node.op.name_hint)
            if fold is not None and len(node.args) == len(fold.func.params):
                calls.append((node, fold))
        elif isinstance(node, Let):
            bound[id(node.value)] = node.var
    returned = _returned(main.body)
    out = {}
    for index, p in enumerate(main.params):
        t = getattr(p, "_checked_type", None) or p.type_annotation
        found = adt_fields(mod, t)
        if found is None:
            continue
        reasons = [] if why is not None else None
        bad = [f for fs in found[1] for f in fs
               if not (isinstance(f, TensorType) or _same_type(f, t))]
        if bad:
            _no(reasons, f"a node table holds tensors and children, and {t} has a field of "
                         f"type {bad[0]}")
        else:
            orders = _consumed(p, fold_type(t), None, calls, bound, counts, returned, False,
                               why=reasons)
            if orders is not None:
                out[index] = (fold_type(t), orders)
                continue
            if _consumed(p, fold_type(t), None, calls, bound, counts, returned, False,
                         any_order=True) is not None:
                # left folds only: children in field order
                out[index] = (fold_type(t), {tag: [m for m, f in enumerate(fs)
                                                   if _same_type(f, fold_type(t))]
                                             for tag, fs in enumerate(found[1])})
                continue
        if why is not None:
            why[index] = reasons[0]
    return out


def _consumed(var, t, orders, calls, bound, counts, returned, may_return, any_order=False,
              why=None):
    """The child orders the folds of table variable `var` (of ADT type t) agree on (given
    `orders`: they must be those), or None when a use breaks the rule: every use is the folded
    argument of a fold or a map whose result (a let's variable or the call itself) is in turn
    consumed so, or (a map's result) returned. A worklist, not recursion."""
    found, work = None, [(var, t, orders, may_return)]
    while work:
        v, vt, want, can_return = work.pop()
        uses = 1 if can_return and v in returned else 0
        for node, fold in calls:
            if node.args[fold.k] is not v or not _same_type(fold.adt, vt):
                continue
            uses += 1
            if fold.left:                   # walks the rows by its children: any order
                continue
            mine = fold.orders()
            if want is not None and any(mine.get(tag) != o for tag, o in want.items()):
                return _no(why, f"@{fold.name} folds a map's result in another order of its "
                                f"children than the map made")
            if v is var:
                if found is not None and found != mine:
                    return _no(why, "two folds of it call the children in different orders")
                found = mine
            if fold.map is not None:        # its result: a let's variable, or the call itself
                work.append((bound.get(id(node), node), fold.map[0], fold.map[2], True))
        if uses == 0 or uses != (counts.get(v, 0) if isinstance(v, Var) else 1):
            return _no(why, "@main uses it other than as the argument a fold matches on"
                       if v is var else "a map's result is used other than by a fold")
    return found if found is not None or not any_order else {}


def _returned(body):
    """The variables and calls @main's result holds directly (its tail, through lets and
    tuples)."""
    out, stack = set(), [body]
    while stack:
        e = stack.pop()
        while isinstance(e, Let):
            e = e.body
        if isinstance(e, (Var, Call)):
            out.add(e)
        elif isinstance(e, TupleExpr):
            stack.extend(e.fields)
    return out


def fold_type(t):
    return TypeCall(t, ()) if isinstance(t, GlobalTypeVar) else t




# ---- shape B: tail recursion with varying arguments ----------------------------------------------

class TailLoop:
    """A recognized tail recursion: every use of @name in `func` is a call in tail position."""

    def __init__(self, name, func, ret):
        self.name, self.func, self.ret = name, func, ret


def _tail_calls(name, body):
    """(calls of @name, other results) among the tail positions of `body` (a loop over them:
    let bodies, if branches, match clauses)."""
    calls = sum(1 for e in _tail_positions(body) if _is_call_of(e, name))
    exits = sum(1 for e in _tail_positions(body) if not _is_call_of(e, name))
    return calls, exits


def _clause_fields(lhs, field_types):
    """(tag, the field variables -- None for a wildcard --, the fields' types) of a clause
    pattern `C(%a, _, ...)` over the ADT whose constructors' field types are `field_types`;
    None for any other pattern (nested, literal, another type's constructor)."""
    if not isinstance(lhs, PatternConstructor) or lhs.constructor.tag >= len(field_types):
        return None
    subs = []
    for p in lhs.patterns:
        if isinstance(p, PatternVar):
            subs.append(p.var)
        elif isinstance(p, PatternWildcard):
            subs.append(None)
        else:
            return None
    kinds = field_types[lhs.constructor.tag]
    return (lhs.constructor.tag, subs, kinds) if len(subs) == len(kinds) else None


def _tail_positions(body):
    """The expressions in tail position of `body`: through let bodies, if branches and match
    clauses (a loop, not a recursion: bodies may be deep)."""
    stack = [body]
    while stack:
        e = stack.pop()
        while isinstance(e, Let):
            e = e.body
        if isinstance(e, If):
            stack.extend((e.true_branch, e.false_branch))
        elif isinstance(e, Match):
            stack.extend(c.rhs for c in e.clauses)
        else:
            yield e


def _is_call_of(e, name):
    return isinstance(e, Call) and isinstance(e.op, GlobalVar) and e.op.name_hint == name


def find_tail_loops(mod):
    """{Function: TailLoop} of the module's globals whose recursion is all tail calls of
    themselves (`@loop(x) = if |x| > eps { @loop(step(x)) } else { x }`) and that have a
    tail position returning something else (an exit), with a result of tensors, tuples and
    references to tensors (reverse AD's `@loop_ad` returns `(x, %rx)`): compiled as a
    lax.while_loop when called with traced arguments (dynamic_tail.py); no mutual recursion."""
    if mod is None:
        return {}
    graph = CallGraph(mod)
    out = {}
    for gv, func in mod.functions.items():
        name = gv.name_hint
        uses = _global_uses(func.body, name)
        calls, exits = _tail_calls(name, func.body)
        # no exit (`f(x) = f(x + 1)`): it never ends; the trace's bounds report it (limits.py)
        if not uses or calls != uses or not exits:
            continue
        if _mutually_recursive(name, graph):
            continue
        checked = getattr(func, "_checked_type", None)
        ret = func.ret_type or (checked.ret_type if isinstance(checked, FuncType) else None)
        if ret is None or not _loop_type(ret):
            continue
        out[func] = TailLoop(name, func, ret)
    return out


# ---- the rule's answer, in words -----------------------------------------------------------------

def explain(mod, main) -> str:
    """What the jax backend makes of each recursion of the program, a line each: the
    recursive-ADT parameters of `main` (a node table folded by one loop, or unrolled per
    structure and why), then the globals that call themselves (a fold, a left fold, a while
    loop, or unrolled at trace time and why). What `JaxFunction.explain()` prints."""
    fold_why, param_why = {}, {}
    folds = find_folds(mod, fold_why)
    by_name = {f.name: f for f in folds.values()}
    tables = dynamic_params(mod, main, folds, param_why)
    receivers = {}                       # parameter -> the globals main passes it to
    for node in walk(main.body):
        if isinstance(node, Call) and isinstance(node.op, GlobalVar):
            for a in node.args:
                if isinstance(a, Var):
                    receivers.setdefault(a, []).append(node.op.name_hint)
    lines = []
    for index, p in enumerate(main.params):
        t = getattr(p, "_checked_type", None) or p.type_annotation
        names = list(dict.fromkeys(receivers.get(p, ())))
        if index in tables:
            folded = [f"@{n}" for n in names if n in by_name]
            lines.append(f"parameter %{p.name_hint}: {t}: a node table, one loop for every "
                         f"structure (folded by {', '.join(folded)})")
        elif index in param_why:
            unrolled = [f"@{n}" for n in names if n in fold_why]
            notes = f" (it is passed to {', '.join(unrolled)}: below)" if unrolled else ""
            lines.append(f"parameter %{p.name_hint}: {t}: unrolled, one trace per structure: "
                         f"{param_why[index]}{notes}")
    loops = {loop.name for loop in find_tail_loops(mod).values()}
    graph = CallGraph(mod)
    recursive = graph.recursive()
    # the globals the program calls: a prelude function it never calls is no part of it
    called = {n for ref in global_refs(main) if ref in mod for n in graph.reachable(ref)}
    for gv in mod.functions:
        name = gv.name_hint
        if name not in recursive or name not in called:
            continue
        fold = by_name.get(name)
        if fold is not None and not fold.left:
            what = f"a fold over {fold.adt}" + (f", mapping it to {fold.map[0]}"
                                                if fold.map is not None else "")
        elif fold is not None:
            what = f"a left fold over {fold.adt} (a loop from the root)"
        elif name in loops:
            what = "a while loop where it is called with traced arguments (a tail recursion)"
        else:
            what = f"unrolled at trace time: {fold_why.get(name, 'not a fold')}"
        lines.append(f"@{name}: {what}")
    return "\n".join(lines) if lines else "no recursion: the program is traced as it is"


__all__ = ["Fold", "adt_fields", "find_folds", "dynamic_params", "TailLoop", "find_tail_loops",
           "explain"]
