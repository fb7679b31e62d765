"""Dead-code elimination: `rl.passes.dead_code`, and `eliminate(func, effects)` under it.

A `let %v = value; body` goes when %v is not used and `value` is droppable (effects.py: it at
most reads or allocates a reference). It stays when the value writes a reference, calls a
function the analysis does not know, or may fail (a partial match, an op declaring "fail", a
call of a function that may do any of these), used or not. Relay's DCE dropped an unused
`let %_ = %r := %v` (TVM issue #6803) because it looked only at uses; here the effects decide.

Removal is transitive in one pass: a binding used only by removed bindings goes too, whatever
the nesting (`let %a = f(%x); let %b = g(%a); %x` loses both). Unused parameters of let-bound
closures go with their arguments: in `let %f = fn (%a, %b) {..}` whose %f is only ever called
(never passed, stored or returned), a parameter the body does not use is removed, and with it
the argument at every call, when each of those arguments is droppable (so `%f(x, exp(y))`
becomes `%f(x)` and what only `exp(y)` used may go too). Globals stay: a Module's other globals
are part of what it means (rl.optimize keeps them), so none is removed even if @main never
calls it, and their parameters stay (a global's signature is its interface).

Scheme (linear): reference counts on the program as a DAG. One walk counts, for every node, the
edges into it from distinct nodes (a node shared at two places has two; a Var's count is its
uses; binders are not uses). Then each let-chain is rebuilt from its end backwards: the body
first, then each binding, whose fate is decided before its value is visited. A removed binding
releases its value: the value's count drops, and a node whose count reaches zero releases its
own children in turn (a loop with a stack), so the Vars it used lose those uses. A binding
earlier in the chain (or in an enclosing chain, decided later) then sees every use that the
removals took away. A node shared with code that stays keeps a count above zero, so nothing it
uses is released. A let-bound function used only by itself goes too, as in Relay's DCE (its
count never reaches zero around the cycle, so the first walk also counts each let-bound
Function's uses of its own Var, and a let whose every use is such goes).
"""
from __future__ import annotations

from relayish.ir.expr import Call, Function, Let, Var
from relayish.ir.passes.base import ANF, TYPED, Pass, keep_type, map_globals, typed_let_chain
from relayish.ir.passes.effects import Effects
from relayish.ir.passes.uses import operands, reference_counts
from relayish.ir.types import FuncType
from relayish.ir.visitor import ExprMutator, no_gc, run_deep

__all__ = ["DeadCode", "eliminate"]


class _DeadCode(ExprMutator):
    def __init__(self, effects, counts, calls, self_uses):
        super().__init__()
        self.effects = effects
        self.counts = counts
        self.calls = calls              # id(Var) -> the distinct Call nodes that call it
        self.self_uses = self_uses      # id(let-bound Var) -> its uses in its own Function
        self.narrowed: dict = {}        # id(let-bound Var) -> (its new Var, parameters kept)

    def visit(self, expr):
        # a rebuilt node has the type of the one it replaces: the output stays typed
        return keep_type(super().visit(expr), expr)

    def release(self, node):
        """`node` loses one use; what only it used loses its uses in turn."""
        counts = self.counts
        work = [node]
        while work:
            node = work.pop()
            key = id(node)
            counts[key] -= 1
            if counts[key] == 0 and not isinstance(node, Var):
                work.extend(operands(node))

    def narrow(self, let):
        """For `let %f = fn (...) {...}` whose %f is only ever called (it never escapes): the
        parameters its body never uses and whose arguments are droppable at every call go, and
        %f is renamed so that its calls are rebuilt without those arguments."""
        func, var = let.value, let.var
        calls = self.calls.get(id(var), ())
        if not calls or len(calls) != self.counts.get(id(var), 0):
            return
        keep = [k for k, p in enumerate(func.params) if self.counts.get(id(p), 0) > 0
                or not all(self.effects.droppable(call.args[k]) for call in calls)]
        if len(keep) == len(func.params):
            return
        new = Var(var.name_hint, _narrowed(var.type_annotation, keep))
        new._checked_type = _narrowed(getattr(var, "_checked_type", None), keep)
        self.narrowed[id(var)] = (new, keep)

    def visit_Call(self, e):
        narrowed = self.narrowed.get(id(e.op)) if isinstance(e.op, Var) else None
        if narrowed is None:
            return super().visit_Call(e)
        var, keep = narrowed
        for k, arg in enumerate(e.args):
            if k not in keep:
                self.release(arg)
        return Call(var, [self.visit(e.args[k]) for k in keep])

    def visit_Let(self, e):
        chain = [e]
        node = e.body
        # down the chain with a loop; a let shared with other code starts a chain of its own
        while isinstance(node, Let) and self.counts.get(id(node), 1) == 1:
            chain.append(node)
            node = node.body
        for let in chain:               # before any call of them is rebuilt
            if isinstance(let.value, Function):
                self.narrow(let)
        body = self.visit(node)
        kept = []
        for let in reversed(chain):
            narrowed = self.narrowed.get(id(let.var))
            uses = self.counts.get(id(let.var), 0)
            if (uses == 0 or uses == self.self_uses.get(id(let.var))) and \
                    self.effects.droppable(let.value):
                self.release(let.value)     # unused, or used only by itself (recursion)
            elif narrowed is not None:
                var, keep = narrowed
                func = let.value
                new = Function([func.params[k] for k in keep], self.visit(func.body),
                               func.ret_type, func.type_params)
                new._checked_type = var._checked_type
                kept.append((var, new))
            else:
                kept.append((let.var, self.visit(let.value)))
        kept.reverse()
        if all(var is let.var and value is let.value for (var, value), let in zip(kept, chain)) \
                and len(kept) == len(chain) and body is node:
            return e
        return typed_let_chain(kept, body)


def _narrowed(t, keep):
    """The function type `t` with only the parameters at positions `keep` (else `t`)."""
    if isinstance(t, FuncType):
        return FuncType([t.arg_types[k] for k in keep], t.ret_type, t.type_params)
    return t


def _calls_and_self_uses(expr, counts):
    """(id(Var) -> the distinct Call nodes of `expr` that call it; id(let-bound Var of a
    Function) -> its uses inside that Function). One loop over the uses (calls are reached
    through operands, so binders and patterns need no visit), carrying the let-bound Functions
    a node is inside. A node shared at two places (count above one) counts as inside none:
    released with the Function, it would still be used elsewhere."""
    calls: dict = {}
    self_uses: dict = {}
    seen, work = {id(expr)}, [(expr, ())]
    while work:
        node, inside = work.pop()
        if isinstance(node, Call) and isinstance(node.op, Var):
            calls.setdefault(id(node.op), []).append(node)
        if isinstance(node, Let) and isinstance(node.value, Function):
            value = node.value
            if id(value) not in seen and counts.get(id(value)) == 1:
                seen.add(id(value))
                work.append((value, inside + (id(node.var),)))
        for child in operands(node):
            key = id(child)
            if isinstance(child, Var):
                if key in inside:
                    self_uses[key] = self_uses.get(key, 0) + 1
            elif key not in seen:
                seen.add(key)
                work.append((child, inside if counts.get(key) == 1 else ()))
    return calls, self_uses


def eliminate(func, effects=None):
    """`func` (any expression) without its dead bindings (the module text); `effects` is an
    Effects analysis covering it (made here when not given)."""
    if effects is None:
        effects = Effects(func)

    def run():
        counts = reference_counts(func)
        return _DeadCode(effects, counts, *_calls_and_self_uses(func, counts)).visit(func)
    with no_gc():       # the new chain's nodes all stay alive: nothing for gc to free
        return run_deep(run)


class DeadCode(Pass):
    """`rl.passes.dead_code`: removes unused bindings whose values are droppable.

        >>> f = rl.parse_expr("fn (%x: float32, %r: ref(float32)) { "
        ...                   "let %a = exp(%x); let %w = %r := %x; %x }")
        >>> print(rl.passes.dead_code(f))
        fn (%x: float32, %r: ref(float32)) {
          let %w = %r := %x;
          %x
        }
    """

    name = "dead_code"
    requires = frozenset([TYPED])       # a `match` the checker passed is exhaustive: no failure
    # it only removes bindings and atoms passed as arguments, and keeps the types of what it
    # rebuilds
    preserves = frozenset([ANF, TYPED])

    def run(self, mod):
        effects = Effects(mod)
        return map_globals(mod, lambda func: eliminate(func, effects), self.name)
