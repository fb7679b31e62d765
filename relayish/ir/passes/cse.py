"""Common-subexpression elimination: `rl.passes.cse`, and `eliminate_common(expr, effects)`.

    let %a = exp(%x);            let %a = exp(%x);
    let %b = exp(%x);     ->     %a * %a
    %a * %b

Scheme (value numbering over A-normal form, scoped by dominance). The program is put in
A-normal form (anf.py), so every computation is a `let %v = simple` whose operands are atoms.
The scopes are walked in evaluation order with a table from each mergeable simple value to the
Var that first bound it. A later binding of the same value (same kind of node, same operator
and attributes, the same atoms after earlier merges: constants by dtype, shape and bytes) is
dropped and its Var reads the first one; merges are transitive (`f(%b)` after `%b` became `%a`
is `f(%a)`). A table entry lives as long as its let's scope: the rest of the chain and every
scope nested in it (If branches, match clauses, closure bodies), then it is popped. Scope is
dominance here: a binding in scope has been evaluated on every path that reaches the use,
closures included (a closure's body runs after the closure is built, so after every binding
before it). That is how the backward half of AD output reuses what the primal half computed:
a backpropagator closure recomputing `exp(%x)` reads the primal's `%exp`. Two sibling scopes (two
branches, two closures) computing the same value are not merged: nothing dominates both, and
hoisting the value out would compute it where neither needed it (code motion is not CSE).

What may merge (never any node with an effect but "fail"):
- calls of ops whose record declares no effect, or only "fail";
- calls of known functions (globals, let-bound closures, function literals; effects.py) whose
  latent effects are none or only "fail", and whose type has no type parameters;
- constructor calls whose ADT's type parameters all occur in the constructor's inputs (`Nil()`
  has none there: two `Nil()` of different element types must stay two);
- tuples and projections.
Never merged: `ref(v)` (it allocates: two evaluations are two references), `!r` (its value
depends on the writes between the two reads), `r := v`, calls of unknown functions, calls of
functions that may read, write, allocate or call unknown functions, closures, `if` and `match`.

Why "fail" may merge: the first occurrence dominates the second and computes the same
deterministic function of the same values, so if evaluation reaches the second, the first
succeeded, and the second would have succeeded with the same result. Nothing moves earlier, so
a failure still happens where it happened, and no failing computation is added or removed on
any path that reaches it. (Hoisting a failing op out of a branch would not be safe; CSE never
hoists.)

Types. Merged values have equal types: an op's result type is a function of its argument types
and attributes, a tuple's and projection's of their operands'. The exceptions are values whose
type the context chooses (`Nil()`, a call of a polymorphic function that returns a type
variable its arguments do not fix); they are excluded above.

The pass runs to_anf, this elimination and from_anf (anf.py), so a value used once goes back in
place and a merged one stays bound. Linear: one walk, a dict lookup per binding; let-chains are
loops, other nesting recurses under `run_deep`.
"""
from __future__ import annotations

import numpy as np

from relayish.ir.analysis import walk
from relayish.ir.expr import (Call, Constant, Constructor, Function, GlobalVar, Let, Tuple,
                              TupleGetItem, Var)
from relayish.ir.op import Op
from relayish.ir.passes.anf import from_anf_expr, is_atom, to_anf_expr
from relayish.ir.passes.base import TYPED, Pass, keep_type, typed_let_chain
from relayish.ir.passes.effects import FAIL, Effects
from relayish.ir.types import free_type_vars
from relayish.ir.visitor import ExprMutator, no_gc, run_deep

__all__ = ["CSE", "eliminate_common"]

_MERGEABLE = frozenset([FAIL])      # the only effect a merged value may have


def _freeze(value):
    """A hashable stand-in for an attribute value (tuples, lists, dicts, arrays)."""
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    if isinstance(value, np.ndarray):
        return ("array", value.dtype.str, value.shape, value.tobytes())
    try:
        hash(value)
    except TypeError:
        return ("repr", repr(value))
    return value


def _ctor_typed_by_inputs(ctor) -> bool:
    """Whether the inputs of `ctor` fix its ADT's type arguments (Cons: yes; Nil: no)."""
    data = ctor.type_data
    if data is None or not data.type_vars:
        return True
    seen = set()
    for t in ctor.inputs:
        seen.update(free_type_vars(t))
    return all(tv in seen for tv in data.type_vars)


class _CSE(ExprMutator):
    def __init__(self, effects, mod):
        super().__init__()
        self.effects = effects
        self.mod = mod
        self.subst: dict[int, Var] = {}     # id(dropped Var) -> the Var bound first
        self.table: dict = {}               # key of a simple value -> the Var that binds it
        self.frames: list = [[]]            # per open scope: the keys it added
        self.functions: dict[int, Function] = {}    # id(let-bound Var) -> its Function
        self.merged = 0

    # no memo: each node of an A-normal form is in one scope, and a memoized rebuild would
    # carry one scope's merges into another; what replaces a node has its type
    def visit(self, expr):
        return keep_type(self.dispatch(expr), expr)

    def scope(self, expr):
        self.frames.append([])
        out = self.visit(expr)
        for key in self.frames.pop():
            del self.table[key]
        return out

    # ---- keys ----------------------------------------------------------------------------
    def atom_key(self, e):
        if isinstance(e, Constant):
            data = e.data
            return ("const", data.dtype.str, data.shape, data.tobytes())
        return ("node", id(e))      # Var, GlobalVar, Op, Constructor: identity

    def callee_ok(self, op) -> bool:
        """Whether calls of `op` may merge: no effect but "fail", and a result type the
        arguments fix (the module text)."""
        if isinstance(op, Op):
            return op.effects <= _MERGEABLE        # the record says what the op may do
        if isinstance(op, Constructor):
            return _ctor_typed_by_inputs(op)
        func = self.functions.get(id(op)) if isinstance(op, Var) else \
            self.mod.functions.get(op) if isinstance(op, GlobalVar) and self.mod is not None \
            else None
        if func is None or func.type_params:
            return False
        return self.effects.of_call(op) <= _MERGEABLE

    def key(self, value):
        """The table key of a simple value, or None when it must not merge."""
        if isinstance(value, Call):
            if not is_atom(value.op) or not all(is_atom(a) for a in value.args) \
                    or not self.callee_ok(value.op):
                return None
            return ("call", self.atom_key(value.op), tuple(self.atom_key(a) for a in value.args),
                    _freeze(value.attrs))
        if isinstance(value, Tuple):
            if not all(is_atom(f) for f in value.fields):
                return None
            return ("tuple",) + tuple(self.atom_key(f) for f in value.fields)
        if isinstance(value, TupleGetItem) and is_atom(value.tuple_value):
            return ("proj", self.atom_key(value.tuple_value), value.index)
        return None

    # ---- the walk --------------------------------------------------------------------------
    def visit_Var(self, e):
        return self.subst.get(id(e), e)

    def visit_Function(self, e):
        return Function(e.params, self.scope(e.body), e.ret_type, e.type_params)

    def visit_If(self, e):
        return type(e)(self.visit(e.cond), self.scope(e.true_branch),
                       self.scope(e.false_branch))

    def visit_clause(self, c):
        return type(c)(c.lhs, self.scope(c.rhs))

    def visit_Let(self, e):
        kept = []
        node = e
        while isinstance(node, Let):        # known before the values: a let-bound fn may recurse
            if isinstance(node.value, Function):
                self.functions[id(node.var)] = node.value
            node = node.body
        while isinstance(e, Let):
            value = self.visit(e.value)
            key = self.key(value)
            first = self.table.get(key) if key is not None else None
            if first is not None:
                self.subst[id(e.var)] = first
                self.merged += 1
            else:
                if key is not None:
                    self.table[key] = e.var
                    self.frames[-1].append(key)
                kept.append((e.var, value))
            e = e.body
        return typed_let_chain(kept, self.visit(e))


def eliminate_common(expr, effects=None, mod=None):
    """`expr`, in A-normal form, with its repeated mergeable bindings removed (the module
    text); the result is in A-normal form. `effects`: an Effects analysis covering `expr`."""
    if effects is None:
        effects = Effects(expr, mod)
    cse = _CSE(effects, mod)
    with no_gc():
        return run_deep(cse.scope, expr)


class CSE(Pass):
    """`rl.passes.cse`: common-subexpression elimination of pure values (cse.py's text).
    As Relay's EliminateCommonSubexpr, a merged value that the program did not bind itself is
    one node shared by its uses (printed `%0 = exp(%x);`); `CSE(bind=True)`, which the default
    pipeline runs, binds it by a `let` instead, so that the interpreter, which evaluates a
    shared node at each use, computes it once.

        >>> f = rl.parse_expr("fn (%x: float32) { exp(%x) * exp(%x) }")
        >>> print(rl.passes.cse(f))
        fn (%x: float32) {
          %0 = exp(%x);
          %0 * %0
        }
        >>> print(rl.passes.CSE(bind=True)(f))
        fn (%x: float32) {
          let %exp = exp(%x);
          %exp * %exp
        }
    """

    name = "cse"
    requires = frozenset([TYPED])   # a match the checker passed is exhaustive; ADT types known
    preserves = frozenset([TYPED])  # every node it builds has the type of the one it replaces

    def __init__(self, bind=False):
        super().__init__()
        self.bind = bind

    def run(self, mod):
        out = mod.copy()
        effects = Effects(mod)
        for gv, func in mod.functions.items():
            anf = to_anf_expr(func, effects)
            # the analysis of the A-normal form also answers for the merged program: its new
            # nodes are asked about on demand, and its let-bound functions keep their Vars.
            # An input already in A-normal form (partial_eval's output) comes back as itself,
            # and the module's analysis answers for it
            anf_effects = effects if anf is func else Effects(anf, mod)
            merged = eliminate_common(anf, anf_effects, mod)
            share = frozenset() if self.bind else _introduced_lets(merged, func)
            out[gv] = from_anf_expr(merged, anf_effects, share)
        return out


def _introduced_lets(anf, func) -> frozenset:
    """The ids of the let-bound Vars of `anf` that `func` does not bind: A-normal form's own."""
    def lets(expr):
        return {id(node.var) for node in walk(expr) if isinstance(node, Let)}
    return frozenset(lets(anf) - lets(func))
