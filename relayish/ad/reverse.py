"""Higher-order reverse-mode AD whose output is an ordinary relayish program.

Scheme (Demystifying Differentiable Programming, as in Relay's higher-order gradient): every
differentiable value travels with a reference that accumulates its gradient, and one reference
`bp : Ref[fn () -> ()]` holds the backpropagator built so far. An op call `z = op(x, y)` becomes

    let z   = op(x.0, y.0);
    let zr  = ref(zeros(shape of z));
    let old = !bp;
    bp := fn () { let g = !zr;                       // (vjp also resets: zr := zeros)
                  let gs = GRAD_op(op(x.0, y.0), g);   // the op's rule, relayish expressions
                  x.1 := !x.1 + gs.0;  y.1 := !y.1 + gs.1;  old() };
    (z, zr)

Two refinements keep the output small without changing its meaning:
  * segments: the steps of consecutive op calls go into ONE closure (run in reverse order);
    anything that may extend bp itself (a call of a function, if/match, the end of a scope)
    first pushes the pending steps (`flush`);
  * deferred pairs: a float op result (or constant) used only by op calls of the same segment
    never gets its `(z, ref)` pair: its cotangent is a local of the segment's closure (the sum
    of its consumers' contributions). Any other use builds the pair (`force`), in the scope
    that computed the value, and a value still used after a flush keeps its reference.

Type mapping L (the "lifted" type of a value):
    Tensor[s, float*]    -> (Tensor[s, float*], Ref[Tensor[s, float*]])
    Tensor[s, int*/bool] -> unchanged (no gradient)
    (T1, ..., Tn)        -> (L T1, ..., L Tn)
    Ref[T]               -> Ref[L T]
    fn (T1..Tn) -> R     -> fn (L T1, ..., L Tn, Ref[fn () -> ()]) -> L R   (the caller's bp)
    a (type variable)    -> a   (polymorphic code is lifted parametrically)
    D[T1..Tn] (ADT)      -> D'[L T1, ..., L Tn]  where D' is D itself when L leaves every field
                            of D unchanged (List, Option, Tree, Nat), else a lifted twin of D
                            added to the module (fields mapped by L, constructors `<C>_ad`).

Functions receive the bp they extend as their last argument, so a closure called later (or
inside another gradient) extends the backpropagator of the call site: nested gradients of
functions with free variables stay correct (no perturbation confusion). If/Match branch on
primal values; closures, refs, ADTs, globals (lifted to `@<name>_ad`) and recursion need nothing
beyond the mapping. A recursive local closure `let %f = fn (..) { .. %f(..) .. }` stays one: the
lifted binder is put in scope before its value is lifted (`lift_local_function`). The output uses only ordinary IR nodes, so it type-checks, prints, parses,
runs anywhere and can be differentiated again.

The entry point (`build_entry`) creates `bp := fn () { () }`, lifts the inputs (ADT inputs via
generated helper globals `@ad_lift_<D>`), runs the lifted body, seeds the output's reference
(ones, or the user's cotangent), calls `(!bp)()` and reads the input references back
(`@ad_grad_<D>` for ADTs). In vjp mode every reference is zeroed after it is read, so the
backpropagator may run any number of times.
"""
from __future__ import annotations

import numpy as np

from relayish.errors import GradientError, RelayishError
from relayish.ir.expr import (Call, Clause, Constant, Constructor, Function, GlobalVar, If,
                              Let, Match, PatternConstructor, PatternTuple, PatternVar,
                              PatternWildcard, RefCreate, RefRead, RefWrite, Tuple, TupleGetItem,
                              Var, _short_text)
from relayish.ir.module import Module
from relayish.ir.op import Op, gradient_rule, make_call
from relayish.ir.types import (FuncType, GlobalTypeVar, RefType, TensorType, TupleType, TypeCall,
                               substitute)
from relayish.ir.visitor import ExprMutator, ExprVisitor, build_let_chain, run_deep
from relayish.ad.twins import TwinTypes, fresh_name

UNIT = TupleType(())
BP_TYPE = RefType(FuncType([], UNIT))


def _text(node, limit=200):
    return _short_text(node, limit)


def is_float_tensor(t) -> bool:
    return isinstance(t, TensorType) and t.is_float


def has_float(t) -> bool:
    """Whether a value of type `t` (tensors and tuples of them) carries any float tensor."""
    stack = [t]
    while stack:
        t = stack.pop()
        if is_float_tensor(t):
            return True
        if isinstance(t, TupleType):
            stack.extend(t.fields)
    return False


# ---- the type mapping ------------------------------------------------------------------------

def _lifted_tensor(t: TensorType):
    return TupleType([t, RefType(t)]) if t.is_float else t


def type_lifter(mod: Module) -> TwinTypes:
    """The type mapping L (module docstring), its ADT twins `<G>_ad` added to mod."""
    return TwinTypes(_lifted_tensor, "_ad", extra_params=[BP_TYPE], module=mod)


# ---- the transform ---------------------------------------------------------------------------

class _Scope:
    """A let-chain being built: its bindings, the keys it added to the memo (ReverseAD.memo),
    the bp in effect, and the backward steps of its op calls not yet pushed onto bp (see
    ReverseAD.flush)."""
    __slots__ = ("bindings", "memo_keys", "bp", "pending", "segment", "produced")

    def __init__(self, bp):
        self.bindings = []
        self.memo_keys = []
        self.bp = bp
        self.pending = []
        self.segment = 0        # bumped by each flush
        self.produced = []      # the deferred pairs of the pending segment


class _Deferred:
    """The lifted value `(z, ref)` of a float op result (or constant), not built yet.

    Most op results are used only by later op calls of the same straight-line segment: their
    gradient then flows through a local variable of the segment's backpropagator, and the pair
    and its reference are never built. Any other use (a tuple field, a call argument, a result,
    a use from an inner scope, a use after the segment's flush) builds the pair (`force`)."""
    __slots__ = ("z", "t", "home", "segment", "remaining", "pair", "ref", "contribs", "inactive",
                 "hint")

    def __init__(self, z, t, home, remaining, inactive, hint):
        self.z, self.t, self.home, self.segment = z, t, home, home.segment
        self.remaining = remaining    # uses still to come in the original program
        self.pair = self.ref = None
        self.contribs = []            # cotangents from consumers in the same segment
        self.inactive = inactive      # a constant: no gradient wanted
        self.hint = hint


class _Replace(ExprMutator):
    """Replace one node (by identity) with another."""

    def __init__(self, old, new):
        super().__init__()
        self.old, self.new = old, new

    def visit(self, expr):
        if expr is self.old:
            return self.new
        return super().visit(expr)


def _typed(expr, t):
    expr._checked_type = t
    return expr


class ReverseAD:
    """Lifts expressions, functions and globals of a type-checked module (see module docstring).

    `out_mod` receives the lifted globals (`<name>_ad`), ADT twins and conversion helpers.
    """

    def __init__(self, src_mod: Module, out_mod: Module):
        self.src = src_mod
        self.out = out_mod
        self.types = type_lifter(out_mod)
        for data in src_mod.type_definitions.values():
            self.types.add_type_data(data)
        self.env: dict = {}            # original Var -> lifted atom
        # ids of lifted values known to carry constants, and of fresh vars renamed after a
        # user's let binder; the dicts keep the objects alive so that their ids stay unique
        self.inactive: dict = {}
        self.named: dict = {}
        self.scopes: list = []
        # what is already lifted (shared subexpressions, projections) in the open scopes: one
        # dict for all of them, each scope removing its own keys when it closes, so that a
        # lookup costs the same at any nesting depth (a dict per scope, searched innermost
        # first, made nested programs quadratic)
        self.memo: dict = {}
        # name (or (name, indices of constant parameters)) -> lifted GlobalVar
        self.lifted_globals: dict = {}
        self.todo_globals: list = []   # (original GlobalVar, constant parameters) to build
        self.helpers: dict = {}        # (kind, type) -> helper GlobalVar
        self.generated = False         # whether any global function was added to out_mod
        # Zero each gradient reference after reading it, so that the backpropagator can run
        # again (vjp). A gradient program runs its backpropagator once per forward run (every
        # run creates fresh references), so it skips the resets.
        self.reset = True
        self._keep = []
        self.uses: dict = {}           # id(original node) -> number of references to it
        self.tuple_fields: dict = {}   # id(lifted tuple var) -> (var, its field atoms)

    def register_adts(self, expr):
        """Make the ADTs of the constructors used in expr known (for inputs of ADT type)."""
        seen = _Constructors()
        run_deep(seen.visit, expr)
        for c in seen.found:
            if c.type_data is not None:
                self.types.add_type_data(c.type_data)

    def mark_inactive(self, v):
        self.inactive[id(v)] = v

    # -- scopes and emission ---------------------------------------------------------------
    @property
    def scope(self) -> _Scope:
        return self.scopes[-1]

    def emit(self, value, hint="t", t=None) -> Var:
        v = Var(hint)
        if t is not None:
            v._checked_type = t
        self.scope.bindings.append((v, value))
        return v

    def project(self, a, i, hint="f", t=None):
        """`a.i`, bound once per scope (projections of lifted values repeat a lot)."""
        key = ("proj", id(a), i)
        hit = self.memo.get(key)
        if hit is not None:
            return hit
        v = self.emit(TupleGetItem(a, i), hint, t)
        self.remember(key, v)
        self._keep.append(a)
        return v

    def remember(self, key, value):
        """Memoize in the current scope: visible there and in the scopes it opens."""
        self.memo[key] = value
        self.scope.memo_keys.append(key)

    def in_scope(self, fn, bp=None):
        """Run fn() in a fresh scope; return the let-chain of what it emitted around its result."""
        self.scopes.append(_Scope(self.scope.bp if bp is None and self.scopes else bp))
        try:
            result = fn()
            self.flush()
            bindings = self.scope.bindings
            if bindings and bindings[-1][0] is result and result.type_annotation is None:
                result = bindings.pop()[1]      # `let v = e; v` is just `e`
            return build_let_chain(bindings, result)
        finally:
            memo = self.memo
            for key in self.scopes.pop().memo_keys:
                memo.pop(key, None)

    def flush(self):
        """Push the pending backward steps of this scope onto bp as one closure.

        Consecutive op calls share one backpropagator closure (their steps run in reverse order
        inside it): fewer closures, reads and writes of bp. Anything that may extend bp itself
        (a call of a function, a branch, the end of a scope) flushes first, so the chain of
        closures still runs every step after the steps of the values' later uses."""
        scope = self.scope
        for v in scope.produced:        # values used after this point keep a real reference
            if v.remaining > 0 and v.pair is None:
                self.materialize(v)
        scope.produced = []
        scope.segment += 1
        steps = scope.pending
        if not steps:
            return
        scope.pending = []
        bp = scope.bp
        old = Var("prev")
        emitted = []

        def backward():
            for step in reversed(steps):
                step()
            emitted.append(bool(self.scope.bindings))
            return Call(old, [])
        body = self.in_scope(backward)
        if emitted[0]:                  # steps whose results nobody used emit nothing
            self.scope.bindings.append((old, RefRead(bp)))
            self.emit(RefWrite(bp, Function([], body)), "u")

    # -- dispatch (the visit_<Node> idiom, memoized per scope) ------------------------------
    def lift(self, e):
        """The lifted atom of e (a Var, a non-float Constant, a lifted GlobalVar)."""
        v = self.lift_raw(e)
        if isinstance(v, _Deferred):
            v.remaining -= 1
            return self.force(v)
        return v

    def lift_raw(self, e):
        """Like lift, but float op results and constants may come back as _Deferred.

        The caller consumes the value: it decrements `remaining` once it has used it (until
        then a flush keeps the value's reference, see flush)."""
        key = id(e)
        result = self.memo.get(key)
        if result is None:
            method = getattr(self, "visit_" + type(e).__name__, None)
            if method is None:
                raise GradientError(f"cannot differentiate {type(e).__name__} nodes: {_text(e)}")
            result = method(e)
            if not isinstance(e, Var):
                self.remember(key, result)
                self._keep.append(e)
        return result

    def force(self, v):
        if not isinstance(v, _Deferred):
            return v
        if v.pair is None:
            self.materialize(v)
        return v.pair

    def materialize(self, v):
        """Build `(z, ref(zeros))` for a deferred value, in the scope that computed it."""
        home = v.home
        r = Var("r")
        d = Var(v.hint if v.hint else "d")
        home.bindings.append((r, RefCreate(zeros_of(v.t))))
        home.bindings.append((d, Tuple([v.z, r])))
        v.pair, v.ref = d, r
        if v.inactive:
            self.mark_inactive(d)

    def deferred(self, z, t, node, inactive, hint=None):
        v = _Deferred(z, t, self.scope, self.uses.get(id(node), 1), inactive, hint)
        if not inactive:
            self.scope.produced.append(v)
        self._keep.append(v)
        return v

    def count_uses(self, func):
        counter = _UseCounter(self.uses)
        run_deep(counter.visit, func)

    def visit_Var(self, e):
        try:
            return self.env[e]
        except KeyError:
            raise GradientError(f"variable %{e.name_hint} is not bound in the differentiated "
                                "program") from None

    def visit_GlobalVar(self, e):
        return self.lifted_global(e)

    def visit_Constant(self, e):
        if e.data.dtype.kind != "f":
            return e
        return self.deferred(e, _const_type(e), e, inactive=True, hint="c")

    def visit_Tuple(self, e):
        fields = [self.lift(f) for f in e.fields]
        v = self.emit(Tuple(fields), "tup")
        self.tuple_fields[id(v)] = (v, fields)   # op calls on the tuple use its fields directly
        return v

    def field(self, a, i, hint="f"):
        """`a.i` for a lifted tuple a: the field itself when this transform built the tuple."""
        known = self.tuple_fields.get(id(a))
        if known is not None:
            return known[1][i]
        return self.project(a, i, hint)

    def visit_TupleGetItem(self, e):
        return self.emit(TupleGetItem(self.lift(e.tuple_value), e.index), "proj")

    def visit_Function(self, e):
        return self.emit(self.lifted_function(e), "f")

    def lifted_function(self, e):
        params = [self.lifted_param(p) for p in e.params]
        bp = Var("bp", BP_TYPE)
        body = self.in_scope(lambda: self.lift(e.body), bp=bp)
        ret = self.types(e.ret_type) if e.ret_type is not None else None
        return Function(params + [bp], body, ret, e.type_params)

    def lift_local_function(self, let):
        """`let %f = fn (..) { .. %f(..) .. }`: the lifted binder is in scope in its own value.

        The binding stays a recursive local let (both backends and the type checker read
        `let v = fn` as letrec), so the lifted closure calls itself with the caller's bp, like a
        lifted global calls `@<name>_ad`."""
        var = let.var
        v = Var(var.name_hint)
        if var.type_annotation is not None:
            v.type_annotation = self.types(var.type_annotation)
        self.env[var] = v
        self.named[id(v)] = v
        self.scope.bindings.append((v, self.lifted_function(let.value)))
        self.remember(id(let.value), v)
        self._keep.append(let.value)

    def lifted_param(self, p):
        t = getattr(p, "_checked_type", None) or p.type_annotation
        if t is None:
            raise GradientError(f"the type of parameter %{p.name_hint} is unknown; "
                                "run rl.infer_type on the program first")
        v = Var(p.name_hint, self.types(t))
        self.env[p] = v
        return v

    def visit_Let(self, e):
        while isinstance(e, Let):               # a loop down the chain
            if isinstance(e.value, Function) and id(e.value) not in self.memo:
                self.lift_local_function(e)
                e = e.body
                continue
            n = len(self.scope.bindings)
            value = self.lift_raw(e.value)
            bindings = self.scope.bindings
            if isinstance(value, _Deferred):
                # the let consumes the value once; its variable's references will use it
                value.remaining += self.uses.get(id(e.var), 1) - 1 - 1   # binder, let
                if value.hint is None or value.hint == "c":
                    value.hint = e.var.name_hint
                self.env[e.var] = value
            elif isinstance(value, Var) and len(bindings) > n and bindings[-1][0] is value \
                    and id(value) not in self.named:
                value.name_hint = e.var.name_hint   # keep the user's name on the fresh binding
                if e.var.type_annotation is not None:
                    value.type_annotation = self.types(e.var.type_annotation)
                self.env[e.var] = value
                self.named[id(value)] = value
            else:
                ann = e.var.type_annotation
                v = self.emit(value, e.var.name_hint)
                if ann is not None:
                    v.type_annotation = self.types(ann)
                if id(value) in self.inactive:
                    self.mark_inactive(v)
                self.env[e.var] = v
            e = e.body
        return self.lift(e)

    def visit_If(self, e):
        cond = self.lift(e.cond)
        self.flush()
        then = self.in_scope(lambda: self.lift(e.true_branch))
        other = self.in_scope(lambda: self.lift(e.false_branch))
        return self.emit(If(cond, then, other), "if")

    def visit_Match(self, e):
        data = self.lift(e.data)
        self.flush()
        clauses = []
        for c in e.clauses:
            lhs = self.lift_pattern(c.lhs)
            rhs = self.in_scope(lambda c=c: self.lift(c.rhs))
            clauses.append(Clause(lhs, rhs))
        return self.emit(Match(data, clauses, e.complete), "m")

    def lift_pattern(self, p):
        if isinstance(p, PatternVar):
            t = getattr(p.var, "_checked_type", None) or p.var.type_annotation
            v = Var(p.var.name_hint, self.types(t) if t is not None and p.var.type_annotation
                    is not None else None)
            self.env[p.var] = v
            return PatternVar(v)
        if isinstance(p, PatternConstructor):
            return PatternConstructor(self.types.ctor(p.constructor),
                                      [self.lift_pattern(s) for s in p.patterns])
        if isinstance(p, PatternTuple):
            return PatternTuple([self.lift_pattern(s) for s in p.patterns])
        return PatternWildcard()

    def visit_RefCreate(self, e):
        return self.emit(RefCreate(self.lift(e.value)), "r")

    def visit_RefRead(self, e):
        return self.emit(RefRead(self.lift(e.ref)), "v")

    def visit_RefWrite(self, e):
        ref = self.lift(e.ref)
        return self.emit(RefWrite(ref, self.lift(e.value)), "u")

    def visit_Constructor(self, e):
        if not e.inputs:     # a bare nullary constructor (`Nil`) is a value, as in the checker
            return self.emit(Call(self.types.ctor(e), []), "adt")
        # a constructor used as a function value: eta-expand so that it takes a bp like any
        # lifted function
        twin = self.types.ctor(e)
        data = self.types.data_of(e.belong_to)
        params = [Var("a", self.types(t)) for t in e.inputs]
        bp = Var("bp", BP_TYPE)
        return self.emit(Function(params + [bp], Call(twin, params), None, list(data.type_vars)),
                         "ctor")

    def visit_Op(self, e):
        raise GradientError(f"operator '{e.name}' used as a value cannot be differentiated; "
                            f"wrap it in a function: fn (%x, ...) {{ {e.name}(%x, ...) }}")

    def visit_Call(self, e):
        op = e.op
        if isinstance(op, Op):
            return self.lift_op_call(e)
        if isinstance(op, Constructor):
            args = [self.lift(a) for a in e.args]
            return self.emit(Call(self.types.ctor(op), args), "adt")
        if isinstance(op, GlobalVar) and op.name_hint in self.src:
            return self.lift_global_call(e)
        callee = self.lift(op)
        args = [self.lift(a) for a in e.args]
        self.flush()
        return self.emit(Call(callee, args + [self.scope.bp]), "call")

    def lift_global_call(self, e):
        """`@g(args)`: float tensor arguments that carry constants (inputs outside argnums, and
        what is computed from them only) are passed as plain tensors to a copy of @g lifted
        with those parameters constant (`@g_ad_const0`), so that no gradient is computed for
        them anywhere down the call tree (a frozen embedding's dense take_backward)."""
        ptypes = [getattr(p, "_checked_type", None) or p.type_annotation
                  for p in self.src[e.op].params]
        args, consts = [], []
        for i, a in enumerate(e.args):
            v = self.lift_raw(a)
            if isinstance(v, _Deferred):
                v.remaining -= 1
            if i < len(ptypes) and is_float_tensor(ptypes[i]) and self.is_inactive(v):
                consts.append(i)
                v = v.z if isinstance(v, _Deferred) else self.project(v, 0, "p", ptypes[i])
            args.append(self.force(v))
        callee = self.lifted_global(e.op, tuple(consts))
        self.flush()
        return self.emit(Call(callee, args + [self.scope.bp]), "call")

    # -- op calls: the heart of the transform -----------------------------------------------
    def lift_op_call(self, call):
        op = call.op
        args = [self.lift_raw(a) for a in call.args]
        arg_types = [_type_of(a) for a in call.args]
        out_type = _type_of(call)
        # a deferred argument from another scope, or from a segment already flushed, needs
        # its reference: its gradient is read by a closure pushed earlier
        args = [a if not isinstance(a, _Deferred) or a.inactive or a.pair is not None
                or (a.home is self.scope and a.segment == self.scope.segment) else self.force(a)
                for a in args]
        for a in args:
            if isinstance(a, _Deferred):
                a.remaining -= 1
        prims = [self.primal_atom(a, t) for a, t in zip(args, arg_types)]
        z = self.emit(_typed(Call(op, prims, call.attrs), out_type), op.name.split(".")[-1],
                      out_type)
        if not has_float(out_type):
            if not _is_tensorish(out_type):
                raise GradientError(f"operator '{op.name}' returns {out_type}, which reverse "
                                    f"mode cannot lift, in {_text(call)}")
            return z
        # an op constant in an argument (zeros_like's, by its record) sends it no gradient;
        # with no argument left, no backpropagator step is built
        active = [i for i, (a, t) in enumerate(zip(args, arg_types))
                  if i not in op.constant_in and has_float(t) and not self.is_inactive(a)]
        if not op.differentiable or not active:
            if is_float_tensor(out_type):
                return self.deferred(z, out_type, call, inactive=True)
            result, _ = self.fresh_lift(z, out_type)
            self.mark_inactive(result)
            return result
        rule = gradient_rule(call)
        if is_float_tensor(out_type):
            result = out = self.deferred(z, out_type, call, inactive=False)
        else:
            result, out = self.fresh_lift(z, out_type)

        def backward():
            g = self.cotangent(out)
            if g is None:               # nothing used the result: no gradient flows back
                return
            orig = _typed(Call(op, prims, call.attrs), out_type)
            try:
                grads = rule(orig, g)
            except RelayishError:
                raise
            except Exception as exc:  # noqa: BLE001 - a broken rule is reported with the call
                raise GradientError(f"the gradient rule of '{op.name}' failed on "
                                    f"{_text(call)}: {exc}") from exc
            if not isinstance(grads, (list, tuple)) or len(grads) != len(call.args):
                raise GradientError(f"the gradient rule of '{op.name}' must return one "
                                    f"expression per input ({len(call.args)}), got {grads!r}")
            for i in active:
                gi = grads[i]
                if gi is None:
                    continue
                gi = _Replace(orig, z).visit(gi)
                if (isinstance(gi, Call) and isinstance(gi.op, Op)
                        and gi.op.name == "take_backward"
                        and is_float_tensor(arg_types[i])
                        and not (isinstance(args[i], _Deferred) and args[i].pair is None)):
                    # `r := !r + take_backward(..)` stays one expression: the interpreter
                    # scatters the rows into the reference in place (no dense gradient)
                    self.accumulate(args[i], arg_types[i], gi)
                    continue
                if not isinstance(gi, (Var, Constant, Tuple)):
                    gi = self.emit(gi, "g", arg_types[i])
                self.accumulate(args[i], arg_types[i], gi)

        self.scope.pending.append(backward)
        return result

    def is_inactive(self, a):
        if isinstance(a, _Deferred):
            return a.inactive
        return id(a) in self.inactive

    def cotangent(self, out):
        """In a backward step: the cotangent of an op's result (None when it is zero)."""
        if isinstance(out, _Deferred):
            if out.pair is not None:
                return self.read_and_reset(("ref", out.ref, out.t))
            if not out.contribs:
                return None
            g = out.contribs[0]
            for more in out.contribs[1:]:
                g = self.emit(make_call("add", [g, more]), "g", out.t)
            return g
        return self.read_and_reset(out)

    def primal_atom(self, a, t):
        if isinstance(a, _Deferred):
            return a.z
        if is_float_tensor(t):
            return self.project(a, 0, "p", t)
        if isinstance(t, TupleType):
            fields = [self.primal_atom(self.field(a, i), ft)
                      for i, ft in enumerate(t.fields)]
            return self.emit(_typed(Tuple(fields), t), "p", t)
        return a

    def fresh_lift(self, z, t):
        """Pair the primal value z (of tensor/tuple type t) with fresh zero references.

        Returns the lifted atom and the reference structure (for read_and_reset)."""
        if is_float_tensor(t):
            zr = self.emit(RefCreate(zeros_of(t)), "r")
            return self.emit(Tuple([z, zr]), "d"), ("ref", zr, t)
        if isinstance(t, TupleType):
            parts = [self.fresh_lift(self.emit(TupleGetItem(z, i), "f", ft), ft)
                     for i, ft in enumerate(t.fields)]
            return self.emit(Tuple([p[0] for p in parts]), "d"), ("tuple", [p[1] for p in parts], t)
        return z, ("const", z, t)

    def read_and_reset(self, refs):
        """The output cotangent from the reference structure of fresh_lift; zeroes the refs."""
        kind, what, t = refs
        if kind == "const":
            return self.emit(zeros_of(t), "g", t)
        if kind == "ref":
            g = self.emit(RefRead(what), "g", t)
            if self.reset:
                self.emit(RefWrite(what, zeros_of(t)), "u")
            return g
        return self.emit(Tuple([self.read_and_reset(r) for r in what]), "g", t)

    def accumulate(self, a, t, g):
        """Add the cotangent g into the references of the lifted value a (of original type t)."""
        if isinstance(a, _Deferred):
            if a.inactive:
                return
            if a.pair is None:
                a.contribs.append(g)
                return
            a = a.pair
        if is_float_tensor(t):
            r = self.project(a, 1, "r")
            self.emit(RefWrite(r, make_call("add", [RefRead(r), g])), "u")
        elif isinstance(t, TupleType):
            for i, ft in enumerate(t.fields):
                if has_float(ft):
                    gi = g.fields[i] if isinstance(g, Tuple) else self.project(g, i, "g")
                    if not isinstance(gi, (Var, Constant)):
                        gi = self.emit(gi, "g", ft)
                    self.accumulate(self.field(a, i), ft, gi)

    # -- globals ---------------------------------------------------------------------------
    def lifted_global(self, gv, consts=()):
        """The lifted @gv; `consts`: indices of float tensor parameters taken as constants."""
        name = gv.name_hint
        key = (name, consts) if consts else name
        lifted = self.lifted_globals.get(key)
        if lifted is None:
            if name not in self.src:
                raise GradientError(f"the program calls @{name}, which the module does not define; "
                                    "pass the Module (rl.gradient(mod) or mod=)")
            taken = {g.name_hint for g in self.out.functions} | set(self.lifted_globals) \
                | {g.name_hint for g in self.lifted_globals.values()} | {"main"}
            suffix = "_ad_const" + "_".join(map(str, consts)) if consts else "_ad"
            lifted = GlobalVar(fresh_name(name + suffix, taken))
            self.lifted_globals[key] = lifted
            self.todo_globals.append((self.src.get_global_var(name), consts))
        return lifted

    def finish_globals(self):
        """Build the lifted body of every global reached so far (and those they reach)."""
        while self.todo_globals:
            gv, consts = self.todo_globals.pop()
            func = self.src[gv]
            self.count_uses(func)
            params = [Var(p.name_hint, _param_type(p)) if i in consts else self.lifted_param(p)
                      for i, p in enumerate(func.params)]

            def body(func=func, params=params, consts=consts):
                for i in consts:      # constants: deferred values that never get a gradient
                    p, v = func.params[i], params[i]
                    self.env[p] = self.deferred(v, v.type_annotation, p, inactive=True,
                                                hint=p.name_hint)
                return self.lift(func.body)
            bp = Var("bp", BP_TYPE)
            body = self.in_scope(body, bp=bp)
            ret = self.types(func.ret_type) if func.ret_type is not None else None
            key = (gv.name_hint, consts) if consts else gv.name_hint
            self.out[self.lifted_globals[key]] = Function(params + [bp], body, ret,
                                                          func.type_params)
            self.generated = True

    # -- conversions at the entry point: T -> L T, L T -> T ----------------------------------
    def lift_input(self, x, t, what):
        """The lifted value of input x of type t, with fresh zero references."""
        if is_float_tensor(t):
            return self.emit(Tuple([x, RefCreate(zeros_of(t))]), "d")
        if isinstance(t, TensorType):
            return x
        if isinstance(t, TupleType):
            return self.emit(Tuple([self.lift_input(self.emit(TupleGetItem(x, i), "f"), ft, what)
                                    for i, ft in enumerate(t.fields)]), "d")
        if isinstance(t, (TypeCall, GlobalTypeVar)):
            if not self.types.changes(t):
                return x
            return self.emit(Call(self.helper("lift", t), [x]), "d")
        raise GradientError(f"{what} has type {t}: reverse mode differentiates inputs that are "
                            "tensors, tuples and ADT values, not functions or references")

    def primal(self, x, t, what):
        """The primal value of lifted x (of original type t)."""
        if is_float_tensor(t):
            return self.emit(TupleGetItem(x, 0), "v")
        if isinstance(t, TensorType):
            return x
        if isinstance(t, TupleType):
            return self.emit(Tuple([self.primal(self.emit(TupleGetItem(x, i), "f"), ft, what)
                                    for i, ft in enumerate(t.fields)]), "v")
        if isinstance(t, (TypeCall, GlobalTypeVar)):
            if not self.types.changes(t):
                return x
            return self.emit(Call(self.helper("primal", t), [x]), "v")
        raise GradientError(f"{what} has type {t}: a gradient program can only return tensors, "
                            "tuples and ADT values, not functions or references")

    def read_grad(self, x, t, what):
        """The gradient accumulated in lifted x (of original type t); resets the references."""
        if is_float_tensor(t):
            r = self.emit(TupleGetItem(x, 1), "r")
            g = self.emit(RefRead(r), "grad")
            if self.reset:
                self.emit(RefWrite(r, zeros_of(t)), "u")
            return g
        if isinstance(t, TensorType):
            return self.emit(zeros_of(t), "grad")
        if isinstance(t, TupleType):
            return self.emit(Tuple([self.read_grad(self.emit(TupleGetItem(x, i), "f"), ft, what)
                                    for i, ft in enumerate(t.fields)]), "grad")
        if isinstance(t, (TypeCall, GlobalTypeVar)):
            return self.emit(Call(self.helper("grad", t), [x]), "grad")
        raise GradientError(f"{what} has type {t}: reverse mode differentiates inputs that are "
                            "tensors, tuples and ADT values, not functions or references")

    def seed(self, x, t, ct, what):
        """Add the cotangent ct (an expression of type t) into the references of lifted x."""
        if is_float_tensor(t):
            r = self.emit(TupleGetItem(x, 1), "r")
            self.emit(RefWrite(r, make_call("add", [RefRead(r), ct])), "u")
        elif isinstance(t, TensorType):
            return
        elif isinstance(t, TupleType):
            for i, ft in enumerate(t.fields):
                if _seedable(ft):
                    self.seed(self.emit(TupleGetItem(x, i), "f"), ft,
                              self.emit(TupleGetItem(ct, i), "ct"), what)
        else:
            raise GradientError(f"{what} has type {t}: a cotangent can only be given for "
                                "tensors and tuples of tensors")

    def helper(self, kind, t):
        """A global function converting an ADT value: lift (T -> L T), primal and grad (L T -> T)."""
        key = (kind, t)
        gv = self.helpers.get(key)
        if gv is not None:
            return gv
        head = t.func if isinstance(t, TypeCall) else t
        args = list(t.args) if isinstance(t, TypeCall) else []
        data = self.types.data_of(head)
        twin = self.types.twin_data(head)
        lt = self.types(t)
        src_t, dst_t = (t, lt) if kind == "lift" else (lt, t)
        # a vjp's helper must zero the references it reads: a differently named helper
        name = "ad_vjpgrad" if kind == "grad" and self.reset else f"ad_{kind}"
        for old_gv, old in self.out.functions.items():     # made by an earlier transform
            if old_gv.name_hint.startswith(f"{name}_{head.name}") and len(old.params) == 1 \
                    and old.params[0].type_annotation == src_t and old.ret_type == dst_t:
                self.helpers[key] = old_gv
                return old_gv
        taken = {g.name_hint for g in self.out.functions} | {g.name_hint for g in
                                                            self.helpers.values()}
        taken |= {g.name_hint for g in self.lifted_globals.values()} | {"main"}
        gv = GlobalVar(fresh_name(f"{name}_{head.name}", taken))
        self.helpers[key] = gv
        subst = dict(zip(data.type_vars, args))
        src_ctors, dst_ctors = (data.constructors, twin.constructors) if kind == "lift" else \
            (twin.constructors, data.constructors)
        v = Var("v", src_t)
        clauses = []
        for c_src, c_dst, c_orig in zip(src_ctors, dst_ctors, data.constructors):
            fvars = [Var("x") for _ in c_orig.inputs]
            ftypes = [substitute(ft, subst) for ft in c_orig.inputs]

            def rhs(fvars=fvars, ftypes=ftypes, c_dst=c_dst):
                conv = {"lift": self.lift_input, "primal": self.primal, "grad": self.read_grad}[kind]
                return Call(c_dst, [conv(fv, ft, f"a field of {t}")
                                    for fv, ft in zip(fvars, ftypes)])
            body = self.in_scope(rhs, bp=None)
            clauses.append(Clause(PatternConstructor(c_src, [PatternVar(fv) for fv in fvars]), body))
        self.out[gv] = Function([v], Match(v, clauses), dst_t)
        self.generated = True
        return gv


class _Constructors(ExprVisitor):
    def __init__(self):
        super().__init__()
        self.found = []

    def visit_Constructor(self, e):
        self.found.append(e)

    def visit_pattern(self, p):
        if isinstance(p, PatternConstructor):
            self.found.append(p.constructor)
        super().visit_pattern(p)


def zeros_of(t: TensorType):
    """A zero tensor of static type t: a literal for scalars, else a `zeros` call (small text)."""
    if t.shape == ():
        return Constant(np.zeros((), t.dtype))
    return make_call("zeros", [], {"shape": t.shape, "dtype": t.dtype})


def ones_of(t: TensorType):
    if t.shape == ():
        return Constant(np.ones((), t.dtype))
    return make_call("ones", [], {"shape": t.shape, "dtype": t.dtype})


_CONST_TYPES: dict = {}


def _const_type(c: Constant) -> TensorType:
    t = getattr(c, "_checked_type", None)
    if isinstance(t, TensorType):
        return t
    key = (c.data.shape, c.data.dtype)
    t = _CONST_TYPES.get(key)
    if t is None:
        t = _CONST_TYPES[key] = TensorType(c.data.shape, c.data.dtype.name)
    return t


class _UseCounter(ExprVisitor):
    """How often each node is referenced (a Var: its binder counts once too)."""

    def __init__(self, counts):
        super().__init__()
        self.counts = counts

    def visit(self, expr):
        self.counts[id(expr)] = self.counts.get(id(expr), 0) + 1
        return super().visit(expr)


def _seedable(t):
    if isinstance(t, TensorType):
        return True
    if isinstance(t, TupleType):
        return all(_seedable(f) for f in t.fields)
    return False


def _is_tensorish(t):
    return isinstance(t, TensorType) or (isinstance(t, TupleType)
                                         and all(_is_tensorish(f) for f in t.fields))


def _type_of(e):
    t = getattr(e, "_checked_type", None)
    if t is None:
        raise GradientError(f"the type of {_text(e)} is unknown; run rl.infer_type first")
    return t


# ---- entry points ----------------------------------------------------------------------------

MODES = ("gradient", "grad", "value_and_grad", "vjp")


def build_entry(ad: ReverseAD, func: Function, mode: str, argnums=None) -> Function:
    """The user-facing function of `mode` for the type-checked `func` (see module docstring).

    gradient:        fn(T1..Tn) -> (R, (T1..Tn))        output's first float tensor seeded with ones
    grad:            fn(T1..Tn) -> Ti or (Ti, Tj, ...)    scalar float output; argnums selects
    value_and_grad:  fn(T1..Tn) -> (R, grads)
    vjp:             fn(T1..Tn) -> (R, fn(R) -> (T1..Tn))   the backpropagator may run many times
    """
    from relayish.ir.visitor import free_vars
    ptypes = [_param_type(p) for p in func.params]
    params = [Var(p.name_hint, t) for p, t in zip(func.params, ptypes)]
    out_t = _type_of(func.body)
    _check_output(func, out_t, mode)
    if argnums is not None or mode in ("grad", "value_and_grad"):   # None: gradient, vjp
        argnums = _normalize_argnums(argnums, len(params))

    ad.register_adts(func)
    ad.count_uses(func)
    ad.reset = mode == "vjp"
    wanted = range(len(params)) if argnums is None else \
        ([argnums] if isinstance(argnums, int) else argnums)

    def body():
        bp = ad.emit(RefCreate(Function([], Tuple([]))), "bp")
        ad.scope.bp = bp
        for fv in free_vars(func):
            if fv in ad.env:
                continue
            t = getattr(fv, "_checked_type", None) or fv.type_annotation
            if is_float_tensor(t):      # a constant of this gradient: paired only if needed
                ad.env[fv] = ad.deferred(fv, t, fv, inactive=True, hint=fv.name_hint)
                continue
            lifted = ad.lift_input(fv, t, f"free variable %{fv.name_hint}")
            ad.mark_inactive(lifted)
            ad.env[fv] = lifted
        lifted_params = []
        for i, (p, new, t) in enumerate(zip(func.params, params, ptypes)):
            if argnums is not None and i not in wanted and is_float_tensor(t):
                ad.env[p] = ad.deferred(new, t, p, inactive=True, hint=p.name_hint)
                lifted_params.append(None)
                continue
            lp = ad.lift_input(new, t, f"parameter %{p.name_hint}")
            ad.env[p] = lp
            if argnums is not None and i not in wanted:
                ad.mark_inactive(lp)     # no gradient asked for: treated as a constant
            lifted_params.append(lp)
        out = ad.lift(func.body)
        ad.flush()

        def backward(ct=None):
            if ct is None:          # seed the (first) float output with ones
                first, first_t = out, out_t
                if isinstance(out_t, TupleType):
                    first, first_t = ad.emit(TupleGetItem(out, 0), "out"), out_t.fields[0]
                ad.seed(first, first_t, ones_of(first_t), "the output")
            else:
                ad.seed(out, out_t, ct, "the output")
            ad.emit(Call(RefRead(bp), []), "u")
            grads = {}
            for i in wanted:       # only the gradients asked for are read back
                if i not in grads:
                    grads[i] = ad.read_grad(lifted_params[i], ptypes[i],
                                            f"parameter %{func.params[i].name_hint}")
            return grads

        if mode == "vjp":
            ct = Var("ct", out_t)
            back = Function([ct], ad.in_scope(lambda: Tuple(list(backward(ct).values()))))
            value = ad.primal(out, out_t, "the output")
            return Tuple([value, back])
        value = ad.primal(out, out_t, "the output")
        grads = backward()
        if mode == "gradient":
            return Tuple([value, Tuple(list(grads.values()))])
        picked = grads[argnums] if isinstance(argnums, int) else Tuple([grads[i] for i in argnums])
        if mode == "grad":
            return picked
        return Tuple([value, picked])

    return Function(params, ad.in_scope(body, bp=None))


def _param_type(p):
    t = getattr(p, "_checked_type", None) or p.type_annotation
    if t is None:
        raise GradientError(f"the type of parameter %{p.name_hint} is unknown; "
                            "run rl.infer_type first")
    return t


def _check_output(func, t, mode):
    if mode == "vjp":
        if not _is_tensorish(t):
            raise GradientError(f"vjp needs a function returning tensors or tuples of tensors; "
                                f"this one returns {t}: {_text(func)}")
        return
    if mode == "gradient":
        first = t.fields[0] if isinstance(t, TupleType) and t.fields else t
        if not is_float_tensor(first):
            raise GradientError(f"gradient needs a function returning a float tensor (or a tuple "
                                f"whose first field is one); this one returns {t}: {_text(func)}")
        return
    if not (is_float_tensor(t) and t.shape == ()):
        raise GradientError(f"{mode} needs a function returning a float scalar; this one returns "
                            f"{t} (use rl.gradient or rl.vjp for other outputs): {_text(func)}")


def _normalize_argnums(argnums, n):
    def one(i):
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)):
            raise GradientError(f"argnums must be an int or a tuple of ints, got {argnums!r}")
        if not -n <= i < n:
            raise GradientError(f"argnums {argnums!r} out of range for a function of {n} "
                                "parameter(s)")
        return int(i) % n
    if isinstance(argnums, (tuple, list)):
        return tuple(one(i) for i in argnums)
    return one(argnums)
