"""merge_matmul: matmuls that share their right operand become one matmul (issue 16).

    W1 @ x, W2 @ x, ..., Wk @ x   ->   let %w = concatenate((W1, ..., Wk), axis=0);
                                       let %product = matmul(%w, x);
                                       strided_slice(%product, begin=[0], end=[n1]), ...,
                                       strided_slice(%product, begin=[n1 + .. + n(k-1)], ...)

The gates of an LSTM cell written one matmul per gate (`matmul(%Wi, %x)`, `matmul(%Wo, %x)`,
...) become one matmul against the stacked weights, so the program (and the gradient program
AD derives from it: one outer product and one transposed product instead of k of each) makes
fewer, larger numpy calls.

Step 1, per scope. A scope is a let-chain and its body (a function body, an If branch or a
match clause is one when it is a let-chain). Its candidates are the matmul calls in the parts
of its lets' values and body that run unconditionally in order (call arguments, tuple fields,
projections, ref operands; not inside a nested function, If, match or let, which are scopes of
their own), of the form `matmul(W, x)` with W and x atoms (Vars, constants) of checked types
W: Tensor[(n, d), t] and x: Tensor[(d), t] or Tensor[(d, m), t]. Two or more with the same x
(the same Var or constant node) form a group, if every W and x is bound before the group's
first member (a parameter, an outer scope's variable, or an earlier let of this chain). The two
new lets go before the let holding the first member, and each member becomes a slice of the
product (a slice, not split and projections: the slice is a tensor, so reverse AD gives it one
gradient step, where a split's tuple would be lifted into a tuple of gradient references).
matmul of well-typed operands is pure and cannot fail, so evaluating it earlier changes no
effect.

Step 2, across functions (what makes step 1 pay when the weights are parameters). A stacked
weight `concatenate((%p1, .., %pk), axis=0)` of parameters of a global @g would be rebuilt at
every call of @g: for the TreeLSTM, once per tree node, a copy as large as the matmul itself.
When every use of each %pj in @g is that concatenation or the same position of a direct
recursive call `@g(.., %pj, ..)` (the weight is passed through the recursion unchanged), and @g
is used only as the callee of direct calls, @g takes the stacked weight as one parameter in
place of %p1..%pk (at %p1's position), its recursive calls pass it on, and every other call
site passes `concatenate((a1, .., ak), axis=0)` of its arguments, which must be atoms (so
moving their evaluation changes nothing). @main keeps its signature. The stacking then happens
once per call of @main, and AD's gradient of it (a split of the stacked gradient) once too.

Type: Module -> Module, requires "typed" (the shapes decide), preserves nothing (new nodes
carry no types; the manager re-checks when the next pass needs it). Let-chains are walked with
loops; other nesting recurses under `run_deep`.
"""
from __future__ import annotations

from relayish.ir.expr import (Call, Constant, Expr, Function, GlobalVar, If, Let, RefCreate,
                              RefRead, RefWrite, Tuple, TupleGetItem, Var)
from relayish.ir.analysis import param_index
from relayish.ir.fields import children, map_children
from relayish.ir.op import Op, get_op, make_call
from relayish.ir.passes.base import TYPED, Pass
from relayish.ir.types import TensorType
from relayish.ir.visitor import ExprMutator, ExprVisitor, build_let_chain, run_deep

__all__ = ["MergeMatmul", "merge_matmul"]

# nodes whose children run unconditionally, in order, when the node does; the others (Let,
# Function, If, Match) open scopes of their own, merged where they are
_STRAIGHT = (Call, Tuple, TupleGetItem, RefCreate, RefRead, RefWrite)


class MergeMatmul(Pass):
    """`rl.passes.merge_matmul`: matmuls sharing their right operand become one (module text).

        >>> f = rl.parse_expr('''fn (%a: Tensor[(2, 3), float32], %b: Tensor[(4, 3), float32],
        ...     %x: Tensor[(3), float32]) { (matmul(%a, %x), matmul(%b, %x)) }''')
        >>> print(rl.passes.merge_matmul(f))   # one matmul against concatenate((%a, %b)), sliced
    """

    name = "merge_matmul"
    requires = frozenset([TYPED])

    def run(self, mod):
        out = mod.copy()
        for gv, func in mod.functions.items():
            new = run_deep(_Merger().visit, func)
            if new is not func:
                out[gv] = new
        return run_deep(_hoist_stacked_parameters, out)


merge_matmul = MergeMatmul()


# ---- step 1: merge within a scope ------------------------------------------------------------

class _Merger(ExprMutator):
    """Merges in every scope, innermost first (a let's value is visited before its chain)."""

    def visit_Let(self, e):
        top, bindings, same = e, [], True
        while isinstance(e, Let):
            value = self.visit(e.value)
            same = same and value is e.value
            bindings.append((e.var, value))
            e = e.body
        body = self.visit(e)
        new_bindings, new_body = _merge_scope(bindings, body)
        if same and new_bindings is bindings and new_body is e:
            return top
        return build_let_chain(new_bindings, new_body)

    def scope(self, expr):
        """A body that is a scope of its own (function body, If branch, clause body)."""
        if isinstance(expr, Let):
            return self.visit(expr)
        bindings, body = _merge_scope([], self.visit(expr))
        return build_let_chain(bindings, body)

    def visit_Function(self, e):
        body = self.scope(e.body)
        return e if body is e.body else Function(e.params, body, e.ret_type, e.type_params)

    def visit_If(self, e):
        cond, then, other = self.visit(e.cond), self.scope(e.true_branch), \
            self.scope(e.false_branch)
        if cond is e.cond and then is e.true_branch and other is e.false_branch:
            return e
        return If(cond, then, other)

    def visit_clause(self, c):
        return map_children(c, lambda child: self.scope(child) if isinstance(child, Expr)
                            else self.visit_pattern(child))


def _tensor_type(expr):
    t = getattr(expr, "_checked_type", None)
    return t if isinstance(t, TensorType) else None


def _is_atom(expr):
    return isinstance(expr, (Var, Constant))


def _straight_calls(expr, found):
    """Append the matmul calls of expr's unconditional part to `found` (a loop, no recursion)."""
    matmul = get_op("matmul")
    work = [expr]
    while work:
        e = work.pop()
        if not isinstance(e, _STRAIGHT):
            continue
        if isinstance(e, Call) and e.op is matmul:
            found.append(e)
        work.extend(reversed([c for c in _expr_children(e)]))


def _expr_children(e):
    if isinstance(e, Call):
        return ([] if isinstance(e.op, Op) else [e.op]) + list(e.args)
    if isinstance(e, Tuple):
        return list(e.fields)
    if isinstance(e, TupleGetItem):
        return [e.tuple_value]
    if isinstance(e, RefCreate):
        return [e.value]
    if isinstance(e, RefRead):
        return [e.ref]
    return [e.ref, e.value]                 # RefWrite


class _Binders(ExprVisitor):
    """The Vars bound anywhere inside an expression (lets, parameters, patterns)."""

    def __init__(self):
        super().__init__()
        self.bound = set()

    def visit_Let(self, e):
        while isinstance(e, Let):
            self.bound.add(id(e.var))
            self.visit(e.value)
            e = e.body
        self.visit(e)

    def visit_Function(self, e):
        self.bound.update(id(p) for p in e.params)
        self.visit(e.body)

    def visit_pattern(self, p):
        var = getattr(p, "var", None)
        if isinstance(var, Var):
            self.bound.add(id(var))
        super().visit_pattern(p)


def _merge_scope(bindings, body):
    """(bindings, body) with the groups of step 1 merged; the same objects when none is."""
    exprs = [value for _, value in bindings] + [body]
    groups, seen = {}, set()
    for position, expr in enumerate(exprs):
        calls = []
        _straight_calls(expr, calls)
        for call in calls:
            if id(call) in seen:
                continue
            seen.add(id(call))
            key = _candidate_key(call)
            if key is not None:
                groups.setdefault(key, []).append((position, call))
    groups = [members for members in groups.values() if len(members) > 1]
    if not groups:
        return bindings, body
    inner = _Binders()
    for expr in exprs:
        inner.visit(expr)
    where = {id(var): i for i, (var, _) in enumerate(bindings)}

    def available(atom, first):
        if isinstance(atom, Constant):
            return True
        return id(atom) not in inner.bound and where.get(id(atom), -1) < first

    inserts, replace = {}, {}
    for members in groups:
        first = min(position for position, _ in members)
        calls = [call for _, call in members]
        x = calls[0].args[1]
        if not all(available(c.args[0], first) for c in calls) or not available(x, first):
            continue
        rows = [_tensor_type(c.args[0]).shape[0] for c in calls]
        x_shape = _tensor_type(x).shape
        stacked, product = Var("w_stacked", None), Var("product", None)
        inserts.setdefault(first, []).extend([
            (stacked, make_call("concatenate", [Tuple([c.args[0] for c in calls])], {"axis": 0})),
            (product, make_call("matmul", [stacked, x]))])
        start = 0
        for call, n in zip(calls, rows):
            # a slice per member, not split + projections: a tensor result, so reverse AD gives
            # each slice one gradient step instead of a tuple of references to take apart
            replace[id(call)] = make_call("strided_slice", [product], {
                "begin": [start] + [0] * (len(x_shape) - 1),
                "end": [start + n] + list(x_shape[1:])})
            start += n
    if not replace:
        return bindings, body
    out = []
    for position, expr in enumerate(exprs):
        out.extend(inserts.get(position, ()))
        new = _replace_straight(expr, replace)
        if position < len(bindings):
            out.append((bindings[position][0], new))
        else:
            body = new
    return out, body


def _candidate_key(call):
    """The key grouping `matmul(W, x)` with the others it may merge with, or None."""
    w, x = call.args
    if not (_is_atom(w) and _is_atom(x)):
        return None
    wt, xt = _tensor_type(w), _tensor_type(x)
    if wt is None or xt is None or len(wt.shape) != 2 or len(xt.shape) not in (1, 2):
        return None
    if not all(isinstance(n, int) for n in wt.shape + xt.shape) or wt.shape[1] != xt.shape[0]:
        return None
    return (id(x), wt.dtype)


def _replace_straight(expr, replace):
    """expr with the nodes in `replace` (by id) swapped, looking only where step 1 looked."""
    if id(expr) in replace:
        return replace[id(expr)]
    if not isinstance(expr, _STRAIGHT):
        return expr
    return map_children(expr, lambda child: _replace_straight(child, replace)
                        if not isinstance(child, Op) else child)


# ---- step 2: a stacked weight of parameters, stacked once by the caller ----------------------

def _hoist_stacked_parameters(mod):
    """Step 2 (module text), one stacked parameter group at a time until none is left."""
    refused = set()
    while True:
        callee_only = _callee_only(mod)
        for gv, func in list(mod.functions.items()):
            if gv.name_hint == "main" or func.type_params or not callee_only.get(gv, False):
                continue
            for params, stacks in _hoistable_groups(gv, func):
                key = (gv, tuple(id(p) for p in params))
                if key not in refused:
                    hoisted = _hoist(mod, gv, func, params, stacks)
                    if hoisted is not None:
                        mod = hoisted
                        break
                    refused.add(key)
            else:
                continue
            break
        else:
            return mod


def _nodes(expr):
    """Each distinct node under expr once (patterns and clauses included); a loop."""
    seen, work = set(), [expr]
    while work:
        e = work.pop()
        if id(e) not in seen:
            seen.add(id(e))
            yield e
            work.extend(children(e))


def _callee_only(mod):
    """For each GlobalVar of mod: True when it is only ever the callee of a direct call."""
    ok = {}
    for func in mod.functions.values():
        for node in _nodes(func):
            if isinstance(node, Call) and isinstance(node.op, GlobalVar):
                ok.setdefault(node.op, True)
                kids = node.args
            else:
                kids = children(node)
            for kid in kids:
                if isinstance(kid, GlobalVar):
                    ok[kid] = False
    return ok


def _is_param_stack(call, index):
    if not (isinstance(call, Call) and isinstance(call.op, Op) and call.op.name == "concatenate"
            and call.attrs.get("axis") == 0 and isinstance(call.args[0], Tuple)):
        return False
    fields = call.args[0].fields
    return (len(fields) > 1 and all(isinstance(f, Var) and id(f) in index for f in fields)
            and len({id(f) for f in fields}) == len(fields))


def _hoistable_groups(gv, func):
    """[(the parameters, the concatenation nodes of them)] for each group step 2 may hoist:
    every use of each of its parameters is one of these identical stacks, or the same position
    of a recursive call."""
    index = {id(p): i for i, p in enumerate(func.params)}
    nodes = list(_nodes(func.body))
    stacks = [n for n in nodes if _is_param_stack(n, index)]
    stack_tuples = {id(s.args[0]) for s in stacks}
    other = {id(func.body)} if id(func.body) in index else set()
    for node in nodes:
        if id(node) in stack_tuples:
            continue
        if isinstance(node, Call) and node.op is gv:
            other.update(id(a) for i, a in enumerate(node.args)
                         if id(a) in index and index[id(a)] != i)
            continue
        other.update(id(kid) for kid in children(node) if id(kid) in index)
    groups, done = [], set()
    for stack in stacks:
        ids = tuple(id(f) for f in stack.args[0].fields)
        if ids in done or any(i in other for i in ids):
            continue
        done.add(ids)
        same = [s for s in stacks if tuple(id(f) for f in s.args[0].fields) == ids]
        overlapping = [s for s in stacks if set(ids) & {id(f) for f in s.args[0].fields}]
        if len(overlapping) == len(same):
            groups.append((list(stack.args[0].fields), same))
    return groups


def _hoist(mod, gv, func, params, stacks):
    """`mod` with @gv taking the stack of `params` as one parameter (step 2), or None when a
    caller passes something other than atoms for them (moving their evaluation into the
    concatenation could reorder effects)."""
    positions = [param_index(func, p) for p in params]
    callers = _call_sites(mod, gv)
    if any(not all(_is_atom(c.args[i]) for i in positions) for c in callers):
        return None
    types = [p.type_annotation or _tensor_type(p) for p in params]
    new_type = None
    if all(isinstance(t, TensorType) for t in types):
        new_type = TensorType((sum(t.shape[0] for t in types),) + tuple(types[0].shape[1:]),
                              types[0].dtype)
    stacked = Var("_".join(p.name_hint for p in params), new_type)
    new_params = [stacked if i == positions[0] else p for i, p in enumerate(func.params)
                  if i not in positions[1:]]
    stack_ids = {id(s) for s in stacks}

    class Rewrite(ExprMutator):
        def __init__(self, inside):
            super().__init__()
            self.inside = inside

        def visit_Call(self, e):
            if self.inside and id(e) in stack_ids:
                return stacked
            e = super().visit_Call(e)
            if e.op is not gv:
                return e
            picked = [e.args[i] for i in positions]
            first = stacked if self.inside else make_call(
                "concatenate", [Tuple(picked)], {"axis": 0})
            return Call(gv, [first if i == positions[0] else a for i, a in enumerate(e.args)
                             if i not in positions[1:]], e.attrs)

    out = mod.copy()
    out[gv] = Function(new_params, run_deep(Rewrite(True).visit, func.body), func.ret_type,
                       func.type_params)
    for other, f in mod.functions.items():
        if other is not gv:
            new = run_deep(Rewrite(False).visit, f)
            if new is not f:
                out[other] = new
    return out


def _call_sites(mod, gv):
    return [node for other, f in mod.functions.items() if other is not gv
            for node in _nodes(f) if isinstance(node, Call) and node.op is gv]
