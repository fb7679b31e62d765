"""Effect analysis: what evaluating an expression may do besides computing its value.

    effects = Effects(mod)          # the analysis of a Module (or Effects(expr, mod))
    effects(expr) -> frozenset      # of READ, WRITE, ALLOC, CALL, FAIL
    effects.of_call(func) -> ...    # what calling a Function (or a global) may do
    effects.droppable(expr)         # whether an unused value of expr may be left out

The effects, each a str:

    "read"    reads a reference (`!r`): the value depends on the writes before it
    "write"   writes a reference (`r := v`)
    "alloc"   allocates a reference (`ref(v)`): two evaluations give two references
    "call"    calls a function the analysis does not know: a Var of function type (a parameter,
              a closure out of a tuple, an ADT value, a reference or a call), so it may do anything
    "fail"    may raise at run time on a well-typed input: a match that is not exhaustive, an op
              whose record declares "fail" (Op.effects, ops/: take out of range), a call of a
              function that may fail

A pure expression has none. An unused value may be dropped when it only reads or allocates
(`droppable`); a write, an unknown call or a failure must stay. Evaluating a Function literal
has no effect: its body's effects are latent and count where it is called.

Known callees. A call of an Op has the effects its record declares; of a Constructor none; of a
global, of a Function literal, or of a Var bound by a `let` to a Function literal, the latent
effects of that function: its body's effects, calls included. Latent effects are a least fixpoint
over the call graph, recursion (direct, mutual, through let-bound closures) included.

Divergence is not an effect: a call of a pure recursive function whose result is unused may be
dropped even if it would not terminate (the convention of GHC, OCaml and Relay), so a program
that looped forever may terminate after dead-code elimination; nothing that terminates changes.

Scheme (linear in the program). One walk over every function body (the module's globals and the
Function literals inside them), each with its own memo so that a subexpression shared by two
functions counts in both: it records the function's direct effects (refs, unknown calls, fail
ops, partial matches) and its known callees. The fixpoint is a worklist over the reversed call
graph: a function's effects are a set of five, so each can grow at most five times. Then the
effects of any expression are computed on demand, bottom-up and memoized, reading the callees'
latent effects. Let-chains are walked with loops; other nesting recurses (entry points run under
`run_deep`, which gives Python a large stack).
"""
from __future__ import annotations

from relayish.errors import RelayishError
from relayish.ir.expr import (Call, Constructor, Expr, Function, GlobalVar, Let, Match, Var,
                              describe)
from relayish.ir.module import Module
from relayish.ir.op import FAIL as OP_FAIL
from relayish.ir.op import Op
from relayish.ir.passes.uses import operands
from relayish.ir.typecheck import uncovered_cases
from relayish.ir.visitor import ExprFunctor, ExprVisitor, no_gc, run_deep

__all__ = ["Effects", "effects_of", "READ", "WRITE", "ALLOC", "CALL", "FAIL", "EFFECT_NAMES"]

READ, WRITE, ALLOC, CALL, FAIL = "read", "write", "alloc", "call", "fail"
EFFECT_NAMES = (READ, WRITE, ALLOC, CALL, FAIL)

# the analysis works on bit masks; the public answers are frozensets of the names above
_BIT = {name: 1 << k for k, name in enumerate(EFFECT_NAMES)}
_READ, _WRITE, _ALLOC, _CALL, _FAIL = (_BIT[n] for n in EFFECT_NAMES)
_DROPPABLE = _READ | _ALLOC          # an unused value with only these effects may be left out
_OP_EFFECT = {OP_FAIL: _FAIL}        # Op.effects names (ir/op.py) -> the bits here
_SETS = [frozenset(n for n in EFFECT_NAMES if mask & _BIT[n]) for mask in range(1 << 5)]


def _op_mask(op: Op) -> int:
    mask = 0
    for name in op.effects:
        bit = _OP_EFFECT.get(name)
        if bit is None:     # an effect named in op.py that this analysis does not model yet
            raise RelayishError(f"effect analysis: operator '{op.name}' declares the effect "
                                f"{name!r}, which the analysis does not know")
        mask |= bit
    return mask


def _match_mask(match: Match) -> int:
    # the type checker proves `match` (complete) exhaustive; a `match?` may still cover every case
    if match.complete or not uncovered_cases([c.lhs for c in match.clauses]):
        return 0
    return _FAIL


class _Summary:
    """One function body: its direct effects and the functions it calls by name."""
    __slots__ = ("func", "direct", "callees")

    def __init__(self, func):
        self.func = func
        self.direct = 0
        self.callees: list = []


class _Collect(ExprVisitor):
    """Walk A: each function body's direct effects and known callees (see the module text)."""

    def __init__(self, mod):
        super().__init__()
        self.mod = mod
        self.summaries: dict[int, _Summary] = {}
        self.known: dict[int, Function] = {}     # id(Var) -> the Function literal a let binds
        self.frame: _Summary | None = None

    def callee(self, op):
        """The Function a call of `op` runs, when the analysis knows it; else None."""
        if isinstance(op, Function):
            return op
        if isinstance(op, GlobalVar):
            return self.mod.functions.get(op) if self.mod is not None else None
        if isinstance(op, Var):
            return self.known.get(id(op))
        return None

    def visit_Function(self, e):
        if id(e) in self.summaries:         # walked already (from another function)
            return
        summary = _Summary(e)
        self.summaries[id(e)] = summary
        saved = self.memo, self.frame
        # a fresh memo per function: a node shared by two functions counts in each of them
        self.memo, self.frame = {}, summary
        self.visit(e.body)
        self.memo, self.frame = saved

    def visit_Let(self, e):
        node = e
        while isinstance(node, Let):        # known before the values: a let-bound fn may recurse
            if isinstance(node.value, Function):
                self.known[id(node.var)] = node.value
            node = node.body
        super().visit_Let(e)

    def visit_Call(self, e):
        op = e.op
        if isinstance(op, Op):
            self.frame.direct |= _op_mask(op)
        elif not isinstance(op, Constructor):
            func = self.callee(op)
            if func is None:
                self.frame.direct |= _CALL
            else:
                self.frame.callees.append(func)
                self.visit(func)            # a global or let-bound fn: walked in its own frame
        super().visit_Call(e)

    def visit_Match(self, e):
        self.frame.direct |= _match_mask(e)
        super().visit_Match(e)

    def visit_RefCreate(self, e):
        self.frame.direct |= _ALLOC
        super().visit_RefCreate(e)

    def visit_RefRead(self, e):
        self.frame.direct |= _READ
        super().visit_RefRead(e)

    def visit_RefWrite(self, e):
        self.frame.direct |= _WRITE
        super().visit_RefWrite(e)


def _fixpoint(summaries) -> dict:
    """Latent effects of every function: direct effects joined over the call graph (worklist)."""
    latent = {key: s.direct for key, s in summaries.items()}
    callers: dict[int, list] = {key: [] for key in summaries}
    for key, s in summaries.items():
        for callee in s.callees:
            callers[id(callee)].append(key)
    work = list(summaries)
    while work:
        key = work.pop()
        mask = latent[key]
        for caller in callers[key]:
            if latent[caller] | mask != latent[caller]:
                latent[caller] |= mask
                work.append(caller)
    return latent


class _Bits(ExprFunctor):
    """Walk B: the effects of evaluating each expression, memoized, from the latent effects."""

    def __init__(self, analysis):
        super().__init__()
        self.analysis = analysis

    def visit_default(self, node):
        # a node with no effect of its own (a tuple, a projection, an if, and any new node
        # class): the union of what its operands do
        mask = 0
        for child in operands(node):
            mask |= self.visit(child)
        return mask

    def visit_Var(self, e): return 0
    def visit_GlobalVar(self, e): return 0
    def visit_Constant(self, e): return 0
    def visit_Op(self, e): return 0
    def visit_Constructor(self, e): return 0
    def visit_Function(self, e): return 0        # building a closure runs nothing

    def visit_Call(self, e):
        op = e.op
        mask = 0
        for a in e.args:
            mask |= self.visit(a)
        if isinstance(op, Op):
            return mask | _op_mask(op)
        if isinstance(op, Constructor):
            return mask
        return mask | self.visit(op) | self.analysis.call_mask(op)

    def visit_Let(self, e):
        chain = []
        while isinstance(e, Let):           # a loop down the chain, then accumulate from the end
            if id(e) in self.memo:
                break
            chain.append(e)
            e = e.body
        mask = self.visit(e)
        for let in reversed(chain):
            mask |= self.visit(let.value)
            self.memo[id(let)] = mask
            self._keep.append(let)
        return mask

    def visit_Match(self, e):
        return self.visit_default(e) | _match_mask(e)

    def visit_RefCreate(self, e):
        return self.visit_default(e) | _ALLOC

    def visit_RefRead(self, e):
        return self.visit_default(e) | _READ

    def visit_RefWrite(self, e):
        return self.visit_default(e) | _WRITE


class Effects:
    """The effect analysis of a Module (every global) or of one expression (whose calls of
    globals are followed into `mod`, when given).

        >>> eff = Effects(mod)
        >>> eff(mod["main"].body)
        frozenset({'write'})
        >>> eff.droppable(some_let.value)
        True

    Expressions built after the analysis (a pass's output) may be asked about too: their
    effects are computed on demand; a call of a function literal the analysis has not seen
    counts that function's body, and a Var it has not seen bound to a function is unknown.
    """

    def __init__(self, program, mod=None):
        if isinstance(program, Module):
            mod, roots = program, list(program.functions.values())
        elif isinstance(program, Expr):
            roots = [program]
        else:
            raise RelayishError(f"Effects analyses a Module or an expression, got "
                                f"{describe(program)}")
        if mod is not None and not isinstance(mod, Module):
            raise RelayishError(f"Effects: mod must be a Module (its globals are the callees), "
                                f"got {describe(mod)}")
        self._collect = _Collect(mod)
        self._bits = _Bits(self)
        with no_gc():       # tables keyed by node: all alive, nothing for gc to free
            run_deep(self._analyse, roots)

    def _analyse(self, roots):
        collect = self._collect
        for root in roots:
            if not isinstance(root, Function):
                collect.frame = _Summary(None)    # a bare expression: only its callees matter
            collect.visit(root)
        self._latent = _fixpoint(collect.summaries)

    # ---- queries ---------------------------------------------------------------------------
    def __call__(self, expr) -> frozenset:
        """The effects of evaluating `expr` (a frozenset of effect names)."""
        return _SETS[self.mask(expr)]

    def mask(self, expr) -> int:
        """The effects of `expr` as a bit mask (the passes' fast form of __call__)."""
        hit = self._bits.memo.get(id(expr))
        if hit is not None:
            return hit
        return run_deep(self._bits.visit, expr)

    def droppable(self, expr) -> bool:
        """Whether an unused value of `expr` may be left out: it at most reads or allocates."""
        return not self.mask(expr) & ~_DROPPABLE

    def of_call(self, func) -> frozenset:
        """What calling `func` (a Function, a GlobalVar of the module, a let-bound Var) may do;
        an unknown callee may do anything, reported as {"call"}."""
        return _SETS[self.call_mask(func)]

    def call_mask(self, op) -> int:
        func = self._collect.callee(op)
        if func is None:
            return _CALL
        latent = self._latent.get(id(func))
        if latent is None:        # a Function built after the analysis: its body, once
            latent = self.mask(func.body)
            self._latent[id(func)] = latent
            self._collect.summaries[id(func)] = _Summary(func)     # keeps func alive (its id)
        return latent


def effects_of(expr, mod=None) -> frozenset:
    """The effects of one expression, its calls of `mod`'s globals followed."""
    return Effects(expr, mod)(expr)
