"""Partial evaluation and constant folding: `rl.passes.partial_eval`, `partially_evaluate(func)`.

An online partial evaluator in the manner of Relay's (transform/partial_eval.cc): the program is
run with what is known now, and what is not known is left as residual code. Each expression
evaluates to a partially static value:

    constant      a tensor known now (a Constant of the program, or an op call folded)
    tuple         a tuple whose fields are partially static values
    constructor   an ADT value: its constructor known, its fields partially static
    closure       a Function literal and the values of its free variables
    reference     a reference made by `ref(v)` here; its contents live in the store
    dynamic       nothing known: only the residual atom (a Var) that holds it at run time

What flows: static values through lets, projections of known tuples (`%t.0`), a `match` on a
known constructor or tuple (the first clause that matches is evaluated, its pattern variables
bound to the fields), an `if` on a known condition, calls of known closures (the body is
evaluated in place with the arguments' values: inlined, with fresh binders) and references whose
contents are known: the store maps each reference made here to its last written value, so `!r`
is static after `r := v`. Ops whose arguments are constants (or sit in the record's
`constant_in` positions, where only their type counts) are folded by running the op's numpy impl,
when the result has at most FOLD_LIMIT elements; an op declaring "fail" folds only when it runs
without error now (otherwise it stays, and fails at run time as before).

Residual code is emitted in evaluation order into let-lists (the program is put in A-normal
form first: anf.py), so effects keep their order: an op call, a read of an unknown reference, an
`if`/`match` on a dynamic value and a call of an unknown function are emitted where they run.
Tuples, ADT values, closures and references are residualized lazily: each reserves a slot in the
let-list where it was made, filled only if its atom is ever needed (it is passed to unknown code,
stored where nothing static follows it, returned...). A closure filled that way gets its body
partially evaluated then, with its parameters dynamic and an empty store (it may run at any time).

References and escape. A reference escapes when its atom is needed by residual code (anything but
the target of a write), and so does what it holds then or is written into it after; only then
can code the evaluator does not see (an unknown call, a residual closure, a write through an
unknown reference) touch it. So a read sees the store's
value unless the reference had escaped before the last unknown call after that value was written
(a clock orders writes, escapes and unknown calls). Writes to references made here are
deferred: at the end, the writes to references that escaped are put in their slots (a fixpoint:
filling one may make more escape), and the others are dropped, with the reference itself: on
the AD output of first-order code, every gradient reference and the backpropagator chain are
static, and what remains is the arithmetic (dead_code removes what that left unused). A write
to a reference that escaped stays; so does a write through an unknown reference.

Branches. An `if` or `match` on a dynamic value evaluates each branch with a copy of the store
and continues with the entries all branches left the same (the same value object, or equal
constants).

Fuel (recursion is never unrolled without bound). A known closure is inlined while its Function
has fewer than UNROLL activations on the stack of inlined calls, and while the pass's budget of
inlined calls (INLINE_BUDGET, plus 4 per node of the program) lasts. Past UNROLL, and for every
call of a global, the call is specialised to its static arguments as Relay's PartialEvaluate
does (`specialise`): when its arguments are all static, or partly and the callee is small, its
body is evaluated in place as an attempt that an `if`/`match` on a dynamic value or the end of
the fuel abandons, putting the state back (so `@nat_double(S(S(Z)))` is the constant nat and a
recursion on constants runs to its end; a polymorphic global runs as its instance at the call's
types). Otherwise the call is residual (the closure is filled in and called), which counts as an
unknown call. Polymorphic Function literals (type parameters) are never inlined. A match whose
static value no clause matches stays residual (it fails at run time).

Binders: every let, parameter and pattern variable of the output is a fresh Var with the
original's name and annotation, so a body inlined twice binds distinct Vars. Types: the output
keeps checked types (it preserves "typed"): each Var made here has the type of the Var or node it
stands for, each residual value the type of its Var. Let-chains are loops; nested scopes and
inlined calls recurse under `run_deep`.
"""
from __future__ import annotations

import numpy as np

from relayish.errors import RelayishError
from relayish.ir.analysis import FreeVars, walk
from relayish.ir.expr import (Call, Clause, Constant, Constructor, Expr, Function, GlobalVar, If,
                              Let, Match, PatternConstructor, PatternTuple, PatternVar, PatternWildcard,
                              RefCreate, RefRead, RefWrite, Tuple, TupleGetItem, Var, describe)
from relayish.ir.module import Module
from relayish.ir.op import Op
from relayish.ir.passes.anf import to_anf_expr
from relayish.ir.passes.base import TYPED, Pass, keep_position, keep_type, typed_let_chain
from relayish.ir.passes.effects import Effects
from relayish.ir.passes.fold_constant import FOLD_LIMIT, fold_call
from relayish.ir.passes.inline import SMALL, instantiate
from relayish.ir.typecheck import infer_type
from relayish.ir.types import (FuncType, TensorType, TupleType, TypeVar, free_type_vars,
                               type_components)
from relayish.ir.visitor import no_gc, run_deep

__all__ = ["PartialEval", "partially_evaluate", "FOLD_LIMIT", "UNROLL", "INLINE_BUDGET"]

UNROLL = 8               # activations of one Function on the stack of inlined calls
INLINE_BUDGET = 10_000   # inlined calls per pass run, plus 4 per node of the program

# kinds of partially static values
_CONST, _TUPLE, _CTOR, _CLOSURE, _REF, _DYN, _GLOBAL = range(7)
ATTEMPT_FUEL = 2_000     # inlined calls one specialisation may make (it also bounds the depth)


class _Dynamic(Exception):
    """Raised inside a specialisation when control depends on a dynamic value, or the fuel is
    spent (`out_of_fuel`): the call is left a call (the evaluator's state is put back as it was
    before the attempt)."""

    def __init__(self, out_of_fuel=False):
        super().__init__()
        self.out_of_fuel = out_of_fuel


class _Slot:
    """A binding reserved in a let-list: `value` is an Expr, a thunk building one, or None (the
    binding is left out)."""
    __slots__ = ("var", "value")

    def __init__(self, var, value=None):
        self.var = var
        self.value = value


class _Scope:
    """A let-list under construction (a function body, a branch, a clause)."""
    __slots__ = ("slots",)

    def __init__(self):
        self.slots: list = []

    def reserve(self, var, value=None) -> _Slot:
        slot = _Slot(var, value)
        self.slots.append(slot)
        return slot

    def build(self, result):
        bindings = []
        for slot in self.slots:
            value = slot.value
            if value is None:
                continue
            value = value if isinstance(value, Expr) else value()
            # a residual value has the type of the variable made for it (_hinted)
            bindings.append((slot.var, keep_type(value, slot.var)))
        if bindings and bindings[-1][0] is result and result.type_annotation is None:
            result = bindings.pop()[1]      # `let %v = e; %v` is `e`
        return typed_let_chain(bindings, result)


class _PV:
    """A partially static value: its kind, what is known (`data`), its residual atom once it
    has one, and for lazy values the slot reserved for it."""
    __slots__ = ("kind", "data", "atom", "slot", "extra")

    def __init__(self, kind, data=None, atom=None, slot=None, extra=None):
        self.kind = kind
        self.data = data
        self.atom = atom
        self.slot = slot
        self.extra = extra


# The output keeps checked types (the pass preserves "typed", so the pipeline does not check it
# again): every Var made here has the type of the Var or node it stands for, a residual value
# the type of its Var (_Scope.build), a let the type of its body.

def _unit():
    return _PV(_TUPLE, [], _unit_typed(Tuple([])))


def _unit_var():
    return _unit_typed(Var("u", None))


def _unit_typed(node):
    node._checked_type = TupleType([])
    return node


def _fresh(var):
    return keep_type(Var(var.name_hint, var.type_annotation), var)


def _hinted(hint, fallback, like):
    """A Var for a residual value: a fresh copy of the let-bound Var `hint`, or one named
    `fallback` with the type of `like`, the node whose value it holds."""
    return _fresh(hint) if hint is not None else keep_type(Var(fallback, None), like)


class _Shared:
    """What the evaluators of one pass run share: the monomorphic instances of polymorphic
    globals made so far, and the calls whose specialisation failed (per callee and shape of
    the arguments: not tried again)."""
    def __init__(self):
        self.instances: dict = {}
        self.failed: set = set()
        self.sizes: dict = {}          # id(Function) -> nodes of its body


class _PartialEvaluator:
    def __init__(self, mod, shared):
        self.local: dict = {}          # id(Var) -> _PV: parameters and lets of the current body
        self.captured: dict = {}       # id(Var) -> _PV: the current closure's free variables
        self.store: dict = {}          # ref key -> (_PV, time written)
        self.outer_stores: list = []   # the stores of the enclosing scopes, being evaluated
        self.scope = _Scope()
        self.free = FreeVars()
        self.clock = 0
        self.last_unknown = -1         # time of the last unknown call (or write through one)
        self.escaped: dict = {}        # ref key -> time it escaped
        self.lost: dict = {}           # ref key -> values a branch wrote that a merge forgot
        self.refs = 0
        self.pending: list = []        # deferred writes: (slot, ref _PV, value _PV)
        self.active: dict = {}         # id(Function) -> activations on the inline stack
        self.budget = INLINE_BUDGET
        self.mod = mod                 # its size extends the budget once, when it runs out
        self.module = mod
        self.globals = mod.functions   # GlobalVar -> Function (A-normal form, typed)
        self.shared = shared           # across the globals' runs: instances, failed attempts
        self.trial = 0                 # > 0 while specialising a call (_Dynamic ends it)
        self.attempt_calls = 0         # calls the specialisation under way has inlined

    # ---- environment, clock and store -------------------------------------------------------
    def lookup(self, var):
        pv = self.local.get(id(var))
        if pv is None:
            pv = self.captured.get(id(var))
            if pv is None:
                raise RelayishError(f"partial_eval: {describe(var)} is used outside the scope of "
                                    "any binder of it")
        return pv

    def tick(self):
        self.clock += 1
        return self.clock

    def unknown_code_runs(self):
        """Code the evaluator does not see runs now: it may touch any escaped reference."""
        self.last_unknown = self.tick()

    def read(self, ref):
        entry = self.store.get(ref.data)
        if entry is None:
            return None
        pv, written = entry
        escaped = self.escaped.get(ref.data)
        if escaped is not None and self.last_unknown > max(written, escaped):
            return None
        return pv

    # ---- residual atoms ---------------------------------------------------------------------
    def atom(self, pv):
        """The residual expression holding `pv`, filling in its slot on first use."""
        if pv.kind == _REF and pv.data not in self.escaped:
            self.escaped[pv.data] = self.tick()
            # what it holds is reachable by the code it escapes to (also the value an enclosing
            # scope knows: a closure's body escaping it runs where that value is current)
            for store in [self.store] + self.outer_stores:
                entry = store.get(pv.data)
                if entry is not None:
                    self.atom(entry[0])
            # and what a branch may have left in it (a backpropagator closure written in each
            # arm of an `if`): that code can now run, and what it reads escapes
            for value in self.lost.pop(pv.data, ()):
                self.atom(value)
        if pv.atom is not None:
            return pv.atom
        slot = pv.slot
        if pv.kind == _CLOSURE:
            pv.atom = slot.var          # set first: a recursive closure's body names itself
            slot.value = self.residual_function(pv)
            return pv.atom
        if pv.kind == _TUPLE:
            value = Tuple([self.atom(f) for f in pv.data])
        elif pv.kind == _CTOR:
            value = Call(pv.data[0], [self.atom(f) for f in pv.data[1]])
        else:                           # _REF
            value = RefCreate(self.atom(pv.extra))
        slot.value = value
        pv.atom = slot.var
        return pv.atom

    def emit(self, value, hint, fallback, like=None) -> _PV:
        var = _hinted(hint, fallback, like)
        if like is not None:
            keep_position(value, like)      # the residual call is where `like` was
        self.scope.reserve(var, value)
        return _PV(_DYN, atom=var)

    def lazy(self, kind, data, hint, fallback, like, extra=None) -> _PV:
        slot = self.scope.reserve(_hinted(hint, fallback, like))
        return _PV(kind, data, slot=slot, extra=extra)

    # ---- scopes -----------------------------------------------------------------------------
    def eval_scope(self, expr):
        """Evaluate a let-chain into the current let-list (a loop down the chain)."""
        while isinstance(expr, Let):
            var, value = expr.var, expr.value
            if isinstance(value, Function):
                pv = self.closure(value, var)
            else:
                pv = self.eval(value, var)
                if pv.kind == _CONST and pv.data.size > FOLD_LIMIT and \
                        isinstance(pv.atom, Constant):
                    # a large constant stays bound once rather than printed at every use
                    pv = _PV(_CONST, pv.data, self.emit(pv.atom, var, "c").atom)
            self.local[id(var)] = pv
            expr = expr.body
        return self.eval(expr, None)

    def in_scope(self, expr, store, bind=()):
        """Evaluate `expr` as a nested let-list with `store`; returns (scope, atom, store)."""
        saved = self.scope, self.store
        self.outer_stores.append(self.store)
        self.scope, self.store = _Scope(), store
        try:
            for var, pv in bind:
                self.local[id(var)] = pv
            result = self.atom(self.eval_scope(expr))
            return self.scope, result, self.store
        finally:
            self.scope, self.store = saved
            self.outer_stores.pop()

    def merge(self, stores, before):
        """The entries every branch left the same: the value they all had `before` the
        branches, or equal constants (then with the earliest time written, so no unknown call
        after it is missed). Anything else a branch wrote is bound inside that branch (a
        closure, a residual Var), out of scope after it: even a match with one clause forgets
        it, as a value only (it may still be in the reference, below)."""
        merged = {}
        for k, entry in stores[0].items():
            if before.get(k) is not entry and not _scope_free_constant(entry[0]):
                continue
            for other in stores[1:]:
                found = other.get(k)
                if found is entry:
                    continue
                if found is None or not _same_constant(found[0], entry[0]):
                    break
                entry = (entry[0], min(entry[1], found[1]))
            else:
                merged[k] = entry
        for store in stores:        # a forgotten value may still be in the reference
            for k, entry in store.items():
                kept = merged.get(k)
                if kept is None or kept[0] is not entry[0]:
                    self.lost.setdefault(k, []).append(entry[0])
        return merged

    # ---- expressions ------------------------------------------------------------------------
    def eval(self, e, hint):
        cls = type(e)
        if cls is Var:
            return self.lookup(e)
        if cls is Constant:
            return _PV(_CONST, e.data, e)
        if cls is Let:
            return self.eval_scope(e)
        method = getattr(self, "eval_" + cls.__name__, None)
        if method is None:          # GlobalVar, Op, Constructor: atoms known by name
            if cls is GlobalVar and e in self.globals:
                return _PV(_GLOBAL, e, atom=e)      # a known function (callable in place)
            return _PV(_DYN, atom=e)
        return method(e, hint)

    def eval_Tuple(self, e, hint):
        return self.lazy(_TUPLE, [self.eval(f, None) for f in e.fields], hint, "t", e)

    def eval_TupleGetItem(self, e, hint):
        t = self.eval(e.tuple_value, None)
        if t.kind == _TUPLE:
            return t.data[e.index]
        return self.emit(TupleGetItem(self.atom(t), e.index), hint, "p", e)

    def eval_Function(self, e, hint):
        return self.closure(e, hint)

    def closure(self, func, var):
        pv = self.lazy(_CLOSURE, (func, {}), var, "f", func)
        if var is not None:
            self.local[id(var)] = pv            # a let-bound closure may call itself
        captured = pv.data[1]
        for v in self.free(func):
            captured[id(v)] = self.lookup(v)
        return pv

    def eval_RefCreate(self, e, hint):
        init = self.eval(e.value, None)
        self.refs += 1
        pv = self.lazy(_REF, self.refs, hint, "r", e, extra=init)
        self.store[pv.data] = (init, self.tick())
        return pv

    def eval_RefRead(self, e, hint):
        ref = self.eval(e.ref, None)
        if ref.kind == _REF:
            known = self.read(ref)
            if known is not None:
                return known
        return self.emit(RefRead(self.atom(ref)), hint, "v", e)

    def eval_RefWrite(self, e, hint):
        ref = self.eval(e.ref, None)
        value = self.eval(e.value, None)
        if ref.kind == _REF:
            if ref.data in self.escaped:    # code that holds the reference can take the value
                self.atom(value)
            self.store[ref.data] = (value, self.tick())
            self.pending.append((self.scope.reserve(_unit_var()), ref, value))
        else:       # through an unknown reference: any escaped one may be it
            self.scope.reserve(_unit_var(), RefWrite(self.atom(ref), self.atom(value)))
            self.unknown_code_runs()
        return _unit()

    def eval_If(self, e, hint):
        cond = self.eval(e.cond, None)
        if cond.kind == _CONST:
            return self.eval_scope(e.true_branch if bool(cond.data) else e.false_branch)
        if self.trial:
            raise _Dynamic
        c = self.atom(cond)
        then = self.in_scope(e.true_branch, dict(self.store))
        other = self.in_scope(e.false_branch, dict(self.store))
        self.store = self.merge([then[2], other[2]], self.store)
        return self.emit(lambda: If(c, then[0].build(then[1]), other[0].build(other[1])),
                         hint, "if", e)

    def eval_Match(self, e, hint):
        data = self.eval(e.data, None)
        for clause in e.clauses:
            bound = _match(clause.lhs, data)
            if bound is _UNKNOWN:
                break
            if bound is not None:
                for var, pv in bound:
                    self.local[id(var)] = pv
                return self.eval_scope(clause.rhs)
        if self.trial:
            raise _Dynamic
        d = self.atom(data)
        arms = []
        for clause in e.clauses:
            pattern, bind = _fresh_pattern(clause.lhs)
            arms.append((pattern, self.in_scope(clause.rhs, dict(self.store), bind)))
        if arms:
            self.store = self.merge([arm[2] for _, arm in arms], self.store)

        def build():
            return Match(d, [Clause(p, arm[0].build(arm[1])) for p, arm in arms], e.complete)
        return self.emit(build, hint, "m", e)

    def eval_Call(self, e, hint):
        callee = self.eval(e.op, None)
        args = [self.eval(a, None) for a in e.args]
        op = e.op
        if isinstance(op, Op):
            value = _fold(e, args)
            if value is not None:
                return _PV(_CONST, value, keep_type(Constant(value), e))
            zero = self.zero_adjoint_rule(e, args, hint)
            if zero is not None:
                return zero
            pv = self.emit(Call(op, [self.atom(a) for a in args], e.attrs), hint, op.name, e)
            if op.symbolic_zero:
                pv.extra = op                   # a zero adjoint (dynamic, never a Constant)
            return pv
        if isinstance(op, Constructor):
            return self.lazy(_CTOR, (op, args), hint, op.name_hint.lower(), e)
        if callee.kind == _CLOSURE and self.can_inline(callee.data[0]):
            return self.inline(callee, args)
        if callee.kind in (_CLOSURE, _GLOBAL):
            known = self.specialise(callee, e, args)
            if known is not None:
                return known
        f = self.atom(callee)
        result = self.emit(Call(f, [self.atom(a) for a in args]), hint, "call", e)
        self.unknown_code_runs()
        return result

    def zero_adjoint_rule(self, call, args, hint):
        """simplify's zero adjoint rules (simplify.py), here so that what they give flows on:
        `z + g` is g (identity_in fill 0, no broadcasting), `g * z` (bilinear) and ops linear in
        zero adjoints alone give a zero adjoint; None when no rule applies."""
        op = call.op
        zeros = [a.kind == _DYN and isinstance(a.extra, Op) for a in args]
        out_type = getattr(call, "_checked_type", None)
        if not any(zeros) or op.effects or not isinstance(out_type, TensorType):
            return None
        if len(args) == 2:
            for k, fill in op.identity_in.items():
                if fill == 0 and zeros[k] and \
                        getattr(call.args[1 - k], "_checked_type", None) == out_type:
                    return args[1 - k]
        if op.bilinear and len(args) >= 2 and (zeros[0] or zeros[1]) or \
                op.linear_in and all(k < len(args) and zeros[k] for k in op.linear_in):
            if any(not isinstance(d, int) for d in out_type.shape):
                return None
            zero_op = next(a.extra for a, z in zip(args, zeros) if z)
            pv = self.emit(Call(zero_op, [], {"shape": tuple(out_type.shape),
                                              "dtype": out_type.dtype}), hint, zero_op.name,
                           call)
            pv.extra = zero_op
            return pv
        return None

    # ---- inlining known closures ------------------------------------------------------------
    def can_inline(self, func):
        return (not func.type_params and self.fuel_left()
                and (self.trial and self.attempt_calls < ATTEMPT_FUEL
                     or self.active.get(id(func), 0) < UNROLL))

    def fuel_left(self) -> bool:
        if self.budget <= 0 and self.mod is not None:
            self.budget += 4 * _size(self.mod)    # counted only when needed: a walk of it all
            self.mod = None
        return self.budget > 0

    # ---- specialising calls to their static arguments ---------------------------------------
    def specialise(self, callee, call, args):
        """A call of a global, or of a closure past UNROLL activations, evaluated in place
        when its arguments are partly static (or it takes none) and its control flow then
        depends on nothing dynamic: `@nat_double(S(S(Z)))` is a constant, `@hd(Cons(%x, Nil))`
        is %x, a recursion on a constant runs to its end. Only where that cannot grow AD
        output: every argument fully static (_fully_static), or the callee small (SMALL nodes)
        and some argument not dynamic. It is attempted: an `if` or `match` on a dynamic value,
        or running out of fuel (the pass's budget, ATTEMPT_FUEL inlined calls) ends the attempt
        and puts the state back. Effects are residual code emitted in order, as anywhere. A
        failed attempt is remembered per callee and shape of the arguments (one out of fuel,
        per callee). None: leave the call."""
        if self.trial and (not self.fuel_left() or self.attempt_calls >= ATTEMPT_FUEL):
            raise _Dynamic(out_of_fuel=True)     # the attempt ends, the call stays as written
        if args and all(a.kind == _DYN for a in args) or not self.fuel_left():
            return None
        func = callee.data[0] if callee.kind == _CLOSURE else self.function_of(callee.data, call)
        if func is None or func.type_params or \
                not self.trial and not _fully_static(args) and self.size(func) > SMALL:
            return None
        closure = callee if callee.kind == _CLOSURE else _PV(_CLOSURE, (func, {}))
        if self.trial:            # inside an attempt: one attempt, one state to put back
            return self.inline(closure, args)
        key = (id(func), _shape(args))
        if key in self.shared.failed or (id(func), None) in self.shared.failed:
            return None
        saved = self.save()
        self.trial, self.attempt_calls = 1, 0
        try:
            return self.inline(closure, args)
        except _Dynamic as stop:
            self.restore(saved)
            # a recursion that spent its fuel once is not tried again at any arguments
            self.shared.failed.add((id(func), None) if stop.out_of_fuel else key)
            return None
        finally:
            self.trial = 0

    def size(self, func) -> int:
        known = self.shared.sizes.get(id(func))
        if known is None:
            known = self.shared.sizes[id(func)] = sum(1 for _ in walk(func.body))
        return known

    def save(self):
        return (self.scope, len(self.scope.slots), dict(self.store), dict(self.escaped),
                {k: list(v) for k, v in self.lost.items()}, len(self.pending), self.last_unknown)

    def restore(self, saved):
        scope, slots, store, escaped, lost, pending, self.last_unknown = saved
        self.scope = scope
        del scope.slots[slots:]
        for now, before in ((self.store, store), (self.escaped, escaped), (self.lost, lost)):
            now.clear()
            now.update(before)
        del self.pending[pending:]

    def function_of(self, gv, call):
        """The Function to evaluate for a call of `gv`: the global, or for a polymorphic one its
        instance at the call's types (made and type-checked once per types); None when those
        are not all known."""
        func = self.globals[gv]
        if not func.type_params:
            return func
        type_args = _type_args(func, call)
        if type_args is None:
            return None
        key = (gv.name_hint, tuple((p.name, type_args[p]) for p in func.type_params))
        if key not in self.shared.instances:
            instance = instantiate(func, type_args)
            try:
                infer_type(instance, self.module)
            except RelayishError:
                instance = None
            self.shared.instances[key] = instance
        return self.shared.instances[key]

    def inline(self, closure, args):
        func, captured = closure.data
        self.budget -= 1
        self.attempt_calls += self.trial
        self.active[id(func)] = self.active.get(id(func), 0) + 1
        saved = self.local, self.captured
        self.local = {id(p): a for p, a in zip(func.params, args)}
        self.captured = captured
        try:
            return self.eval_scope(func.body)
        finally:
            self.local, self.captured = saved
            self.active[id(func)] -= 1

    def residual_function(self, closure):
        """A thunk building the Function a closure residualizes to: its body evaluated now with
        its parameters dynamic and an empty store (it may be called at any time)."""
        func, captured = closure.data
        params = [_fresh(p) for p in func.params]
        saved = self.local, self.captured, self.trial, self.attempt_calls
        # its body runs when the residual code calls it: not part of a specialisation
        self.local, self.captured, self.trial = {}, captured, 0
        try:
            scope, result, _ = self.in_scope(
                func.body, {}, [(p, _PV(_DYN, atom=q)) for p, q in zip(func.params, params)])
        finally:
            self.local, self.captured, self.trial, self.attempt_calls = saved
        return lambda: Function(params, scope.build(result), func.ret_type, func.type_params)

    # ---- the end: writes to escaped references ----------------------------------------------
    def settle_writes(self):
        """Fill in the deferred writes to references that escaped; filling one may make others
        escape (its value's atom), so repeat until nothing changes. The rest are dropped."""
        changed = True
        while changed:
            changed = False
            for k, entry in enumerate(self.pending):
                if entry is None:
                    continue
                slot, ref, value = entry
                if ref.data in self.escaped:
                    slot.value = RefWrite(self.atom(ref), self.atom(value))
                    self.pending[k] = None
                    changed = True
        self.pending = [entry for entry in self.pending if entry is not None]

    def run(self, func):
        params = [_fresh(p) for p in func.params]
        for p, q in zip(func.params, params):
            self.local[id(p)] = _PV(_DYN, atom=q)
        result = self.atom(self.eval_scope(func.body))
        self.settle_writes()
        return keep_type(Function(params, self.scope.build(result), func.ret_type,
                                  func.type_params), func)


_UNKNOWN = object()


def _scope_free_constant(pv) -> bool:
    """A constant whose residual is the Constant itself (not a Var bound where it was made)."""
    return pv.kind == _CONST and isinstance(pv.atom, Constant)


def _same_constant(a, b) -> bool:
    return (a.kind == _CONST and b.kind == _CONST and a.data.dtype == b.data.dtype
            and a.data.shape == b.data.shape and a.data.tobytes() == b.data.tobytes())


def _match(pattern, pv):
    """The (pattern Var, value) bindings if `pv` matches, None if it does not, _UNKNOWN if that
    is not known now."""
    bound, work = [], [(pattern, pv)]
    while work:
        p, v = work.pop()
        if isinstance(p, PatternWildcard):
            continue
        if isinstance(p, PatternVar):
            bound.append((p.var, v))
        elif isinstance(p, PatternConstructor):
            if v.kind != _CTOR:
                return _UNKNOWN
            if v.data[0] is not p.constructor:
                return None
            work.extend(zip(p.patterns, v.data[1]))
        elif isinstance(p, PatternTuple):
            if v.kind != _TUPLE:
                return _UNKNOWN
            work.extend(zip(p.patterns, v.data))
        else:
            return _UNKNOWN
    return bound


def _shape(args) -> tuple:
    """What a specialisation's outcome depends on in its arguments: each one's kind and
    structure, the bytes of small constants, the Function of a closure, a global's name."""
    out, stack = [], list(reversed(args))
    while stack:
        pv = stack.pop()
        kind = pv.kind
        if kind == _CONST:
            data = pv.data
            out.append((kind, data.dtype.str, data.shape,
                        data.tobytes() if data.size <= FOLD_LIMIT else id(data)))
        elif kind == _TUPLE:
            out.append((kind, len(pv.data)))
            stack.extend(reversed(pv.data))
        elif kind == _CTOR:
            out.append((kind, id(pv.data[0])))
            stack.extend(reversed(pv.data[1]))
        elif kind == _CLOSURE:
            out.append((kind, id(pv.data[0])))
        elif kind == _GLOBAL:
            out.append((kind, pv.data.name_hint))
        else:
            out.append((kind,))
    return tuple(out)


def _fully_static(args) -> bool:
    """Nothing dynamic in the values: constants, known functions, and tuples and ADT values of
    them (a reference holds state, so it is not)."""
    stack = list(args)
    while stack:
        pv = stack.pop()
        if pv.kind == _TUPLE:
            stack.extend(pv.data)
        elif pv.kind == _CTOR:
            stack.extend(pv.data[1])
        elif pv.kind not in (_CONST, _CLOSURE, _GLOBAL):
            return False
    return True


def _type_args(func, call):
    """TypeVar -> Type for the polymorphic global `func` at `call` (its argument and result
    types matched against the global's), or None unless every type parameter is bound to a
    type without type variables."""
    ftype = getattr(func, "_checked_type", None)
    out_type = getattr(call, "_checked_type", None)
    actual = [getattr(a, "_checked_type", None) for a in call.args]
    if not isinstance(ftype, FuncType) or out_type is None or None in actual:
        return None
    params, bound = set(ftype.type_params), {}
    stack = list(zip(ftype.arg_types, actual)) + [(ftype.ret_type, out_type)]
    while stack:
        pattern, t = stack.pop()
        if isinstance(pattern, TypeVar) and pattern in params:
            if bound.setdefault(pattern, t) != t:
                return None
            continue
        if isinstance(t, FuncType) and t.type_params:
            continue        # a polymorphic function passed in (@map(@id, ..)) binds nothing
        inner, given = type_components(pattern), type_components(t)
        if type(pattern) is not type(t) or len(inner) != len(given) or \
                not inner and pattern != t:
            return None
        stack.extend(zip(inner, given))
    if set(bound) != params or any(free_type_vars(t) for t in bound.values()):
        return None
    return bound


def _fresh_pattern(pattern):
    """A copy of `pattern` binding fresh Vars, and (old Var, dynamic value) for each."""
    bind = []

    def copy(p):
        if isinstance(p, PatternVar):
            var = _fresh(p.var)
            bind.append((p.var, _PV(_DYN, atom=var)))
            return PatternVar(var)
        if isinstance(p, PatternConstructor):
            return PatternConstructor(p.constructor, [copy(q) for q in p.patterns])
        if isinstance(p, PatternTuple):
            return PatternTuple([copy(q) for q in p.patterns])
        return PatternWildcard()
    return copy(pattern), bind


def _fold(call, args):
    """The value of an op call whose arguments are known (or sit where only their type counts),
    run with the op's numpy impl; None when it cannot be folded."""
    op = call.op
    out_type = getattr(call, "_checked_type", None)
    # a zero adjoint stays the call it is: as a Constant it would be a user's zeros, whose
    # products simplify and the jax backend must compute (IEEE; ir/op.py, symbolic_zero)
    if op.impl is None or op.symbolic_zero or not isinstance(out_type, TensorType) or \
            any(not isinstance(d, int) for d in out_type.shape) or \
            int(np.prod(out_type.shape, dtype=np.int64)) > FOLD_LIMIT:
        return None
    arrays = []
    for k, a in enumerate(args):
        if a.kind == _CONST:
            arrays.append(a.data)
            continue
        t = getattr(call.args[k], "_checked_type", None)
        if k not in op.constant_in or not isinstance(t, TensorType) or \
                any(not isinstance(d, int) for d in t.shape):
            return None
        arrays.append(np.zeros(t.shape, t.dtype))       # only its shape and dtype count
    return fold_call(op, call.attrs, arrays, out_type)


def _size(mod) -> int:
    return sum(sum(1 for _ in walk(f)) for f in mod.functions.values())


def partially_evaluate(mod: Module) -> Module:
    """`mod` partially evaluated: every global (the module text); a new Module."""
    shared = _Shared()
    effects = Effects(mod)
    anf = mod.copy()
    for gv, func in mod.functions.items():
        anf[gv] = to_anf_expr(func, effects)
    # the folds read the checked types of the calls; to_anf keeps those of a typed input (the
    # pass requires one), so only a module given here untyped is checked
    if any(getattr(f, "_checked_type", None) is None for f in anf.functions.values()):
        infer_type(anf)

    def run():
        out = mod.copy()
        for gv, func in anf.functions.items():
            out[gv] = _PartialEvaluator(anf, shared).run(func)
        return out
    with no_gc():
        return run_deep(run)


class PartialEval(Pass):
    """`rl.passes.partial_eval`: constant folding and partial evaluation (the module text).

        >>> f = rl.parse_expr("fn (%x: float32) { let %r = ref(2f); %r := !%r * 3f; "
        ...                   "let %t = (%x, !%r); %t.0 + %t.1 }")
        >>> print(rl.passes.partial_eval(f))
        fn (%x: float32) { %x + 6f }
    """

    name = "partial_eval"
    requires = frozenset([TYPED])
    preserves = frozenset([TYPED])      # its output keeps checked types (see _hinted)

    def run(self, mod):
        return partially_evaluate(mod)
