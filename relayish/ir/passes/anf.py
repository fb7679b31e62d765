"""A-normal form and back: the passes `to_anf` and `from_anf`, and the functions under them.

    to_anf_expr(expr, effects)     every compound operand bound by a `let`, lets flattened
    from_anf_expr(expr, effects)   single-use pure bindings and bound atoms put back in place

A-normal form (Flanagan et al. 1993; TVM's ToANormalForm):

    atom   ::= %var | @global | constant | op | constructor
    simple ::= atom | (atom, ...) | atom.i | atom(atom, ...) | ref(atom) | !atom | atom := atom
             | if (atom) { scope } else { scope } | match (atom) { pattern => scope, ... }
             | fn (params) { scope }
    scope  ::= let %v = simple; scope | simple

Every operand is an atom, every let's value is simple (no let inside a let's value: nested
lets are lifted out, `let %x = (let %y = a; b); c` becomes `let %y = a; let %x = b; c`), and each
If branch, match clause and function body is a scope of its own. Bindings are emitted in
evaluation order (the interpreter's: a call's callee, then its arguments left to right; an If's
condition before either branch), so effects keep their order.

Shared nodes. Programs are DAGs, and the interpreter evaluates a node shared at two places twice.
A shared node that is pure (Effects: no read, write, allocation, unknown call or failure) is
bound once, at its first occurrence, and later occurrences in the same scope (or one nested in
it) use that variable; any other shared node is bound afresh at each occurrence, so a shared
`!r` still reads twice and a shared `ref(0)` still makes two references. A shared let-chain
flattened a second time binds fresh copies of its Vars (one scope never binds a Var twice:
from_anf and the printer rely on that), and no pure node inside it reuses a variable of the
first copy, whose value may depend on the Vars bound anew.

from_anf is the inverse direction (TVM's ToGraphNormalForm, done conservatively): a let whose
value is an atom is substituted at every use (copy propagation), and a let used exactly once,
whose value is pure and whose one use is in the same function (not inside a closure, where it
would be computed once per call), is put in place of that use. A let whose Var is annotated
stays (the annotation may be what lets the type checker infer the value: `let %l: List[float32]
= Nil()`); to_anf's own Vars are not annotated. Everything else stays bound.
to_anf followed by from_anf gives back a program of the input's shape for pure code; effectful
bindings stay as lets.

Both walk let-chains with loops; other nesting (deep `x * 2 * 2 ...` operands) recurses under
`run_deep`'s large stack. Each node is converted once per scope it is used in.
"""
from __future__ import annotations

from relayish.ir.expr import (Call, Clause, Constant, Constructor, Function, GlobalVar, If, Let,
                              Match, RefCreate, RefRead, RefWrite, Tuple, TupleGetItem, Var)
from relayish.ir.op import Op
from relayish.ir.passes.base import ANF, TYPED, Pass, keep_type, map_globals, typed_let_chain
from relayish.ir.passes.effects import Effects
from relayish.ir.passes.uses import operands, reference_counts
from relayish.ir.visitor import ExprFunctor, ExprMutator, no_gc, run_deep

__all__ = ["ToANF", "FromANF", "to_anf_expr", "from_anf_expr", "is_atom"]

_ATOMS = (Var, GlobalVar, Constant, Op, Constructor)
_VAR_ATOMS = (Var, GlobalVar, Op, Constructor)      # Relay's atoms: a constant is bound too


def is_atom(expr) -> bool:
    """Whether `expr` is an ANF atom: a Var, GlobalVar, Constant, Op or Constructor."""
    return isinstance(expr, _ATOMS)


def _hint(expr) -> str:
    """A name hint for the variable binding `expr`: the op it calls, or what kind of node it is."""
    if isinstance(expr, Call):
        op = expr.op
        if isinstance(op, (Op, Constructor, GlobalVar)):
            return getattr(op, "name", None) or op.name_hint
        return "call"
    return {Tuple: "tup", TupleGetItem: "proj", Function: "fn", If: "if", Match: "match",
            RefCreate: "ref", RefRead: "read", RefWrite: "write",
            Constant: "c"}.get(type(expr), "t")


class _ToANF(ExprFunctor):
    """`scope(e)` is e in A-normal form; `visit(e)` emits e's bindings into the open scope and
    returns e as a simple expression; `atom(e)` binds that if it is not an atom."""

    def __init__(self, effects, atoms=_ATOMS, bind_result=False):
        super().__init__()
        self.effects = effects
        self.atoms = atoms                  # what stays an operand unbound
        self.bind_result = bind_result      # each scope ends in a variable (Relay's form)
        self.bindings: list = []            # the open scope's (var, simple) pairs
        self.bound: dict[int, Var] = {}     # id(pure node) -> its var, while its scope is open
        self.opened: list = [[]]            # per open scope: the ids it added to `bound`
        self.emitted: set[int] = set()      # the let-bound Vars flattened so far
        self.renamed: dict[int, Var] = {}   # id(Var) -> the fresh Var of its latest re-binding
        self.replaying = 0                  # > 0 while a let-chain is flattened a second time

    # no memo: a node is converted afresh where it occurs (see the module text for sharing);
    # what replaces a node has its type, so a typed input gives a typed output
    def visit(self, expr):
        return keep_type(self.dispatch(expr), expr)

    def scope(self, expr):
        saved = self.bindings
        self.bindings = []
        self.opened.append([])
        tail = self.visit(expr) if not self.bind_result else self.atom(expr)
        for key in self.opened.pop():
            del self.bound[key]
        out = _same_chain(expr, self.bindings, tail)
        if out is None:
            out = typed_let_chain(self.bindings, tail)
        self.bindings = saved
        return out

    def remember(self, expr, var):
        """Later occurrences of the pure node `expr` in this scope read `var`."""
        if self.replaying or isinstance(expr, self.atoms) or self.effects.mask(expr) != 0:
            return
        self.bound[id(expr)] = var
        self.opened[-1].append(id(expr))
        self._keep.append(expr)

    def atom(self, expr):
        if isinstance(expr, self.atoms):
            return self.visit(expr)
        var = None if self.replaying else self.bound.get(id(expr))
        if var is not None:
            return var
        simple = self.visit(expr)
        if isinstance(simple, self.atoms):  # a let-chain ending in an atom
            return simple
        var = keep_type(Var(_hint(simple), None), simple)
        self.bindings.append((var, simple))
        self.remember(expr, var)
        return var

    # ---- simple expressions ------------------------------------------------------------------
    def visit_Var(self, e): return self.renamed.get(id(e), e)
    def visit_GlobalVar(self, e): return e
    def visit_Constant(self, e): return e
    def visit_Op(self, e): return e
    def visit_Constructor(self, e): return e

    # a node whose operands come back unchanged is kept (input already in A-normal form, as
    # partial_eval's output is when cse runs after it, is rebuilt only where it changes)
    def visit_Tuple(self, e):
        fields = [self.atom(f) for f in e.fields]
        return e if _same(fields, e.fields) else Tuple(fields)

    def visit_TupleGetItem(self, e):
        value = self.atom(e.tuple_value)
        return e if value is e.tuple_value else TupleGetItem(value, e.index)

    def visit_Call(self, e):
        op = self.atom(e.op)                 # the callee first, as the interpreter runs it
        args = [self.atom(a) for a in e.args]
        return e if op is e.op and _same(args, e.args) else Call(op, args, e.attrs)

    def visit_Function(self, e):
        body = self.scope(e.body)
        return e if body is e.body else Function(e.params, body, e.ret_type, e.type_params)

    def visit_Let(self, e):
        # A let node shared at two places (not pure, or it would be bound once) is flattened at
        # each: its Vars get fresh copies the second time, so that one chain never binds a Var
        # twice, and no pure node inside it reuses a variable of the first copy (its value may
        # depend on the rebound Vars): `bound` is neither read nor written meanwhile.
        replay = id(e.var) in self.emitted
        self.replaying += replay
        while isinstance(e, Let):           # flattened into the open scope, in order
            old = e.var
            var = old
            if id(old) in self.emitted:
                var = keep_type(Var(old.name_hint, old.type_annotation), old)
            self.emitted.add(id(old))
            if isinstance(e.value, Function):
                self.renamed[id(old)] = var     # before the value: a let-bound fn may recurse
            value = e.value
            known = None if self.replaying else self.bound.get(id(value))
            simple = known if known is not None else self.visit(value)
            self.renamed[id(old)] = var
            self.bindings.append((var, simple))
            if known is None:
                self.remember(value, var)       # the same pure node elsewhere reads %var
            e = e.body
        tail = self.visit(e)
        self.replaying -= replay
        return tail

    def visit_If(self, e):
        cond = self.atom(e.cond)
        then, other = self.scope(e.true_branch), self.scope(e.false_branch)
        if cond is e.cond and then is e.true_branch and other is e.false_branch:
            return e
        return If(cond, then, other)

    def visit_Match(self, e):
        data = self.atom(e.data)
        rhs = [self.scope(c.rhs) for c in e.clauses]
        if data is e.data and _same(rhs, [c.rhs for c in e.clauses]):
            return e
        return Match(data, [Clause(c.lhs, r) for c, r in zip(e.clauses, rhs)], e.complete)

    def visit_RefCreate(self, e):
        value = self.atom(e.value)
        return e if value is e.value else RefCreate(value)

    def visit_RefRead(self, e):
        ref = self.atom(e.ref)
        return e if ref is e.ref else RefRead(ref)

    def visit_RefWrite(self, e):
        ref = self.atom(e.ref)
        value = self.atom(e.value)
        return e if ref is e.ref and value is e.value else RefWrite(ref, value)


def _same(new, old) -> bool:
    """Whether two lists hold the same nodes (by identity)."""
    return len(new) == len(old) and all(a is b for a, b in zip(new, old))


def _same_chain(expr, bindings, tail):
    """`expr` itself when it is the let-chain `bindings` then `tail` (the same Vars, values and
    tail node), else None."""
    node = expr
    for var, value in bindings:
        if not isinstance(node, Let) or node.var is not var or node.value is not value:
            return None
        node = node.body
    return expr if node is tail else None


def to_anf_expr(expr, effects=None, relay=False):
    """`expr` in A-normal form (the module text). `effects`: an Effects analysis covering `expr`
    (and the module it calls into), made here when not given. `relay=True`: Relay's
    ToANormalForm, where constants are bound too and every scope ends in a variable
    (`let %a = 1; let %b = %a + %x; %b`); the passes that work on A-normal form (partial_eval,
    cse, checkpointing) take the form without those lets, which costs a binding less per
    constant and scope."""
    if effects is None:
        effects = Effects(expr)
    convert = _ToANF(effects, _VAR_ATOMS, True) if relay else _ToANF(effects)
    # a global's Function is converted itself (its body is the scope), not bound
    top = convert.visit if relay and isinstance(expr, Function) else convert.scope
    with no_gc():       # millions of new nodes that all stay alive: nothing for gc to free
        return run_deep(top, expr)


# ---- back: put single-use pure bindings in place ---------------------------------------------

def _movable_uses(expr, share=frozenset()) -> set:
    """The ids of the let-bound Vars of `expr` used exactly once (or, for those in `share`, any
    number of times), in the function that binds them (not inside a closure) and not under a
    node that occurs at two places (a shared node is evaluated at each: a value put there would
    be computed twice)."""
    counts = reference_counts(expr)      # a Var's count is its uses
    use_depth: dict[int, int] = {}       # id(Var) -> closure depth of its uses (-1: several)
    bind_depth: dict[int, int] = {}      # id(let-bound Var) -> closure depth of its let
    shared_uses: set[int] = set()
    work, seen = [(expr, 0, False)], {id(expr)}
    while work:
        node, depth, shared = work.pop()
        inner = depth + 1 if isinstance(node, Function) else depth
        if isinstance(node, Let):
            bind_depth[id(node.var)] = depth
        for child in operands(node):
            if isinstance(child, Var):
                key = id(child)
                use_depth[key] = inner if use_depth.get(key, inner) == inner else -1
                if shared:
                    shared_uses.add(id(child))
            elif id(child) not in seen:
                seen.add(id(child))
                work.append((child, inner, shared or counts[id(child)] > 1))
    return {key for key, depth in bind_depth.items()
            if (counts.get(key) == 1 or key in share and key in counts)
            and use_depth[key] == depth and key not in shared_uses}


class _FromANF(ExprMutator):
    def __init__(self, effects, movable):
        super().__init__()
        self.effects = effects
        self.movable = movable
        self.replace: dict[int, object] = {}    # id(Var) -> what to put at its use

    def visit(self, expr):
        return keep_type(super().visit(expr), expr)

    def visit_Var(self, e):
        return self.replace.get(id(e), e)

    def visit_Let(self, e):
        chain = []
        while isinstance(e, Let):
            var, value = e.var, e.value
            # an annotated let tells the type checker what it may not infer from the value
            # alone (`let %l: List[float32] = Nil()`): it stays
            if var.type_annotation is None and (isinstance(value, _ATOMS) or (
                    id(var) in self.movable and not isinstance(value, Function)
                    and self.effects.mask(value) == 0)):
                # visited now: its own operands may be replaced in turn
                self.replace[id(var)] = self.visit(value)
            else:
                chain.append((var, self.visit(value)))
            e = e.body
        return typed_let_chain(chain, self.visit(e))


def from_anf_expr(expr, effects=None, share=frozenset()):
    """Put back in place the bindings of `expr` that A-normal form introduced and that are safe
    to move (the module text): atoms everywhere, pure single-use values at their one use.
    `share`: ids of let-bound Vars whose pure values go to every use instead, as one node shared
    by those uses (a DAG, Relay's graph form; cse's text)."""
    if effects is None:
        effects = Effects(expr)

    def run():
        return _FromANF(effects, _movable_uses(expr, share)).visit(expr)
    with no_gc():
        return run_deep(run)


# ---- the passes ----------------------------------------------------------------------------

class ToANF(Pass):
    """`rl.passes.to_anf`: every global in A-normal form as Relay's ToANormalForm makes it:
    every compound operand and constant bound by a `let`, and every scope's result
    (provides "anf").

        >>> print(rl.passes.to_anf(rl.parse_expr("fn (%x: float32) { exp(%x) * %x + 1f }")))
        fn (%x: float32) {
          let %exp = exp(%x);
          let %multiply = %exp * %x;
          let %c = 1f;
          let %add = %multiply + %c;
          %add
        }
    """

    name = "to_anf"
    preserves = frozenset([TYPED])      # a typed input gives a typed output (keep_type)
    provides = frozenset([ANF])

    def run(self, mod):
        effects = Effects(mod)
        out = mod.copy()
        for gv, func in mod.functions.items():
            out[gv] = to_anf_expr(func, effects, relay=True)
        return out


class FromANF(Pass):
    """`rl.passes.from_anf`: the inverse of to_anf where it is safe (anf.py's module text).

        >>> anf = rl.passes.to_anf(rl.parse_expr("fn (%x: float32) { exp(%x) * %x + 1f }"))
        >>> print(rl.passes.from_anf(anf))
        fn (%x: float32) { exp(%x) * %x + 1f }
    """

    name = "from_anf"
    preserves = frozenset([TYPED])

    def run(self, mod):
        effects = Effects(mod)
        return map_globals(mod, lambda func: from_anf_expr(func, effects), self.name)
