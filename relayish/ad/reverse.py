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

Type mapping L (the "lifted" type of a value; lifted.py's `lifted_types`):
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
lifted binder is put in scope before its value is lifted (`bind_recursive_function`). The output
uses only ordinary IR nodes, so it type-checks, prints, parses, runs anywhere and can be
differentiated again.

This module is the expression transform (`ReverseAD`: `visit(e)` gives the lifted atom of e,
the visit_<Node> rules, op calls and their backward steps, globals). It emits through
reverse_scopes.py (scopes, segments, deferred pairs); the lifted type map and the constants it
builds from are lifted.py's. The function the user gets (`bp := fn () { () }`, the inputs lifted
with fresh zero references, the lifted body, the output seeded, `(!bp)()`, the input
references read back) is built by reverse_entry.py. Every conversion that follows a value's
type (an op's primal arguments, an op result paired with fresh references, reading those back,
adding a cotangent in) is the one structure map of structure.py with its own action at a
tensor.
"""
from __future__ import annotations

from relayish.errors import GradientError, RelayishError
from relayish.ir.expr import (Call, Clause, Constant, Constructor, Function, GlobalVar, If,
                              Let, Match, PatternConstructor, PatternTuple, PatternVar,
                              PatternWildcard, RefCreate, RefRead, RefWrite, Tuple, TupleGetItem,
                              Var, _short_text)
from relayish.ir.analysis import walk
from relayish.ir.module import Module, fresh_name
from relayish.ir.op import Op, gradient_rule, make_call
from relayish.ir.types import is_tensor_tree
from relayish.ad.lifted import (BP_TYPE, const_type, lifted_types, param_type, type_of,
                                zeros_of)
from relayish.ad.origins import origin_of
from relayish.ad.reverse_scopes import Deferred, ScopedEmitter
from relayish.ad.rewrite import replace_node, with_checked_type
from relayish.ad.structure import has_float, is_float_tensor, map_structure
from relayish.ad.twins import adt_definitions


def _text(node, limit=200):
    return _short_text(node, limit)


# ---- the transform ---------------------------------------------------------------------------

class ReverseAD(ScopedEmitter):
    """Lifts expressions, functions and globals of a type-checked module (see module docstring).

    `out_mod` receives the lifted globals (`<name>_ad`), ADT twins and conversion helpers.
    """

    def __init__(self, src_mod: Module, out_mod: Module):
        self.src = src_mod
        self.out = out_mod
        self.lifted_type = lifted_types(out_mod)
        for data in src_mod.type_definitions.values():
            self.lifted_type.add_type_data(data)
        super().__init__()
        self.env: dict = {}            # original Var -> lifted atom
        # ids of fresh vars renamed after a user's let binder (the dict keeps them alive, so
        # that their ids stay unique)
        self.named: dict = {}
        # name (or (name, indices of constant parameters)) -> lifted GlobalVar
        self.lifted_globals: dict = {}
        self.todo_globals: list = []   # (original GlobalVar, constant parameters) to build
        self.varying: dict = {}        # global's name -> parameters its self-calls change
        self.generated = False         # whether any global function was added to out_mod
        # Zero each gradient reference after reading it, so that the backpropagator can run
        # again (vjp). A gradient program runs its backpropagator once per forward run (every
        # run creates fresh references), so it skips the resets.
        self.reset = True
        self.tuple_fields: dict = {}   # id(lifted tuple var) -> (var, its field atoms)

    def register_adts(self, expr):
        """Make the ADTs of the constructors used in expr known (for inputs of ADT type)."""
        for data in adt_definitions(expr).values():
            self.lifted_type.add_type_data(data)

    # -- dispatch (the visit_<Node> idiom, memoized per scope) ------------------------------
    def visit(self, e):
        """The lifted atom of e (a Var, a non-float Constant, a lifted GlobalVar)."""
        v = self.deferrable(e)
        if isinstance(v, Deferred):
            v.remaining -= 1
            return self.force(v)
        return v

    def deferrable(self, e):
        """Like visit, but float op results and constants may come back as Deferred.

        The caller consumes the value: it decrements `remaining` once it has used it (until
        then a flush keeps the value's reference, see flush)."""
        key = id(e)
        result = self.memo.get(key)
        if result is None:
            method = getattr(self, "visit_" + type(e).__name__, None)
            if method is None:
                raise GradientError(f"cannot differentiate {type(e).__name__} nodes: {_text(e)}")
            outer = self.origin
            here = origin_of(e)                     # what the bindings emitted now come from
            if here is not None:
                self.origin = here
            result = method(e)
            self.origin = outer
            if not isinstance(e, Var):
                self.remember(key, result)
                self._keep.append(e)
        return result

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
        return self.deferred(e, const_type(e), e, inactive=True, hint="c")

    def visit_Tuple(self, e):
        fields = [self.visit(f) for f in e.fields]
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
        return self.emit(TupleGetItem(self.visit(e.tuple_value), e.index), "proj")

    def visit_Function(self, e):
        return self.emit(self.lifted_function(e), "f")

    def lifted_function(self, e):
        params = [self.bind_param(p) for p in e.params]
        bp = Var("bp", BP_TYPE)
        body = self.in_scope(lambda: self.visit(e.body), bp=bp)
        ret = self.lifted_type(e.ret_type) if e.ret_type is not None else None
        return Function(params + [bp], body, ret, e.type_params)

    def bind_recursive_function(self, let):
        """`let %f = fn (..) { .. %f(..) .. }`: the lifted binder is in scope in its own value.

        The binding stays a recursive local let (both backends and the type checker read
        `let v = fn` as letrec), so the lifted closure calls itself with the caller's bp, like a
        lifted global calls `@<name>_ad`."""
        var = let.var
        v = Var(var.name_hint)
        if var.type_annotation is not None:
            v.type_annotation = self.lifted_type(var.type_annotation)
        self.env[var] = v
        self.named[id(v)] = v
        self.scope.bindings.append((v, self.lifted_function(let.value)))
        self.remember(id(let.value), v)
        self._keep.append(let.value)

    def bind_param(self, p):
        t = getattr(p, "_checked_type", None) or p.type_annotation
        if t is None:
            raise GradientError(f"the type of parameter %{p.name_hint} is unknown; "
                                "run rl.infer_type on the program first")
        v = Var(p.name_hint, self.lifted_type(t))
        self.env[p] = v
        return v

    def visit_Let(self, e):
        while isinstance(e, Let):               # a loop down the chain
            if isinstance(e.value, Function) and id(e.value) not in self.memo:
                self.bind_recursive_function(e)
                e = e.body
                continue
            n = len(self.scope.bindings)
            value = self.deferrable(e.value)
            bindings = self.scope.bindings
            if isinstance(value, Deferred):
                # the let consumes the value once; its variable's references will use it
                value.remaining += self.uses.get(id(e.var), 1) - 1 - 1   # binder, let
                if value.hint is None or value.hint == "c":
                    value.hint = e.var.name_hint
                self.env[e.var] = value
            elif isinstance(value, Var) and len(bindings) > n and bindings[-1][0] is value \
                    and id(value) not in self.named:
                value.name_hint = e.var.name_hint   # keep the user's name on the fresh binding
                if e.var.type_annotation is not None:
                    value.type_annotation = self.lifted_type(e.var.type_annotation)
                self.env[e.var] = value
                self.named[id(value)] = value
            else:
                ann = e.var.type_annotation
                v = self.emit(value, e.var.name_hint)
                if ann is not None:
                    v.type_annotation = self.lifted_type(ann)
                if id(value) in self.inactive:
                    self.mark_inactive(v)
                self.env[e.var] = v
            e = e.body
        return self.visit(e)

    def visit_If(self, e):
        cond = self.visit(e.cond)
        self.flush()
        then = self.in_scope(lambda: self.visit(e.true_branch))
        other = self.in_scope(lambda: self.visit(e.false_branch))
        return self.emit(If(cond, then, other), "if")

    def visit_Match(self, e):
        data = self.visit(e.data)
        self.flush()
        clauses = []
        for c in e.clauses:
            lhs = self.visit_pattern(c.lhs)
            rhs = self.in_scope(lambda c=c: self.visit(c.rhs))
            clauses.append(Clause(lhs, rhs))
        return self.emit(Match(data, clauses, e.complete), "m")

    def visit_pattern(self, p):
        if isinstance(p, PatternVar):
            t = getattr(p.var, "_checked_type", None) or p.var.type_annotation
            v = Var(p.var.name_hint, self.lifted_type(t) if t is not None and p.var.type_annotation
                    is not None else None)
            self.env[p.var] = v
            return PatternVar(v)
        if isinstance(p, PatternConstructor):
            return PatternConstructor(self.lifted_type.ctor(p.constructor),
                                      [self.visit_pattern(s) for s in p.patterns])
        if isinstance(p, PatternTuple):
            return PatternTuple([self.visit_pattern(s) for s in p.patterns])
        return PatternWildcard()

    def visit_RefCreate(self, e):
        return self.emit(RefCreate(self.visit(e.value)), "r")

    def visit_RefRead(self, e):
        return self.emit(RefRead(self.visit(e.ref)), "v")

    def visit_RefWrite(self, e):
        ref = self.visit(e.ref)
        return self.emit(RefWrite(ref, self.visit(e.value)), "u")

    def visit_Constructor(self, e):
        if not e.inputs:     # a bare nullary constructor (`Nil`) is a value, as in the checker
            return self.emit(Call(self.lifted_type.ctor(e), []), "adt")
        # a constructor used as a function value: eta-expand so that it takes a bp like any
        # lifted function
        twin = self.lifted_type.ctor(e)
        data = self.lifted_type.data_of(e.belong_to)
        params = [Var("a", self.lifted_type(t)) for t in e.inputs]
        bp = Var("bp", BP_TYPE)
        return self.emit(Function(params + [bp], Call(twin, params), None, list(data.type_vars)),
                         "ctor")

    def visit_Op(self, e):
        raise GradientError(f"operator '{e.name}' used as a value cannot be differentiated; "
                            f"wrap it in a function: fn (%x, ...) {{ {e.name}(%x, ...) }}")

    def visit_Call(self, e):
        op = e.op
        if isinstance(op, Op):
            return self.op_call(e)
        if isinstance(op, Constructor):
            args = [self.visit(a) for a in e.args]
            return self.emit(Call(self.lifted_type.ctor(op), args), "adt")
        if isinstance(op, GlobalVar) and op.name_hint in self.src:
            return self.global_call(e)
        callee = self.visit(op)
        args = [self.visit(a) for a in e.args]
        self.flush()
        return self.emit(Call(callee, args + [self.scope.bp]), "call")

    def global_call(self, e):
        """`@g(args)`: float tensor arguments that carry constants (inputs outside argnums, and
        what is computed from them only) are passed as plain tensors to a copy of @g lifted
        with those parameters constant (`@g_ad_const0`), so that no gradient is computed for
        them anywhere down the call tree (a frozen embedding's dense take_backward).

        Not a parameter that @g's calls of itself change (a left fold's accumulator, a loop's
        state): there the constant lasts one step, and the copy would only be a first step
        peeled off the lifted @g (a function that is no fold, so the jax backend's rule could
        not run the recursion as one loop for every length); the constant goes in as a pair
        with a gradient reference nothing reads."""
        ptypes = [getattr(p, "_checked_type", None) or p.type_annotation
                  for p in self.src[e.op].params]
        varying = self.varying_params(e.op.name_hint)
        args, consts = [], []
        for i, a in enumerate(e.args):
            v = self.deferrable(a)
            if isinstance(v, Deferred):
                v.remaining -= 1
            if i < len(ptypes) and is_float_tensor(ptypes[i]) and i not in varying and \
                    self.is_inactive(v):
                consts.append(i)
                v = v.z if isinstance(v, Deferred) else self.project(v, 0, "p", ptypes[i])
            args.append(self.force(v))
        callee = self.lifted_global(e.op, tuple(consts))
        self.flush()
        return self.emit(Call(callee, args + [self.scope.bp]), "call")

    # -- op calls: the heart of the transform -----------------------------------------------
    def op_call(self, call):
        op = call.op
        args = [self.deferrable(a) for a in call.args]
        arg_types = [type_of(a) for a in call.args]
        out_type = type_of(call)
        # a deferred argument from another scope, or from a segment already flushed, needs
        # its reference: its gradient is read by a closure pushed earlier
        args = [a if not isinstance(a, Deferred) or a.inactive or a.pair is not None
                or (a.home is self.scope and a.segment == self.scope.segment) else self.force(a)
                for a in args]
        for a in args:
            if isinstance(a, Deferred):
                a.remaining -= 1
        prims = [self.primal_atom(a, t) for a, t in zip(args, arg_types)]
        z = self.emit(with_checked_type(Call(op, prims, call.attrs), out_type),
                      op.name.split(".")[-1], out_type)
        if not has_float(out_type):
            if not is_tensor_tree(out_type):
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
            result, _ = self.pair_with_fresh_refs(z, out_type)
            self.mark_inactive(result)
            return result
        rule = gradient_rule(call)
        if is_float_tensor(out_type):
            result = out = self.deferred(z, out_type, call, inactive=False)
        else:
            result, out = self.pair_with_fresh_refs(z, out_type)

        def backward():
            self.origin = origin_of(call, "backward")   # its source position (origins.py)
            g = self.cotangent(out, out_type)
            if g is None:               # nothing used the result: no gradient flows back
                return
            orig = with_checked_type(Call(op, prims, call.attrs), out_type)
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
                if gi is None or isinstance(gi, Call) and isinstance(gi.op, Op) and \
                        gi.op.fills_zeros:
                    # no gradient flows (`zeros_like(%like)`): the adjoint stays what it was, a
                    # zero adjoint if nothing else is added, which the passes may fold
                    continue
                gi = replace_node(gi, orig, z)
                if (isinstance(gi, Call) and isinstance(gi.op, Op) and gi.op.scatters_rows
                        and is_float_tensor(arg_types[i])
                        and not (isinstance(args[i], Deferred) and args[i].pair is None)):
                    # `r := !r + take_backward(..)` stays one expression: the interpreter
                    # scatters the rows into the reference in place (no dense gradient)
                    self.accumulate(args[i], arg_types[i], gi)
                    continue
                if not isinstance(gi, (Var, Constant, Tuple)):
                    gi = self.emit(gi, "g", arg_types[i])
                self.accumulate(args[i], arg_types[i], gi)

        self.scope.pending.append(backward)
        return result

    def cotangent(self, out, t):
        """In a backward step: the cotangent of an op's result of type t (None when it is zero);
        `out` is the result's Deferred or the references of pair_with_fresh_refs."""
        if isinstance(out, Deferred):
            if out.pair is not None:
                return self.read_and_reset(out.ref, out.t)
            if not out.contribs:
                return None
            g = out.contribs[0]
            for more in out.contribs[1:]:
                g = self.emit(make_call("add", [g, more]), "g", out.t)
            return g
        return self.read_and_reset(out, t)

    # The conversions below follow the type of a value: each is the structure map of
    # structure.py with its own action at a tensor (ops take and return tensors and tuples).
    def primal_atom(self, a, t):
        """The primal value of a lifted argument a (of original type t) of an op call."""
        if isinstance(a, Deferred):
            return a.z

        def tensor(a, t):
            return self.project(a, 0, "p", t) if t.is_float else a
        return map_structure(
            t, a, tensor, field=lambda a, i, ft: self.field(a, i),
            pack=lambda parts, t: self.emit(with_checked_type(Tuple(parts), t), "p", t),
            adt=_unchanged, other=_unchanged)

    def pair_with_fresh_refs(self, z, t):
        """Pair the primal value z (of tensor/tuple type t) with fresh zero references.

        Returns the lifted atom and the references, a structure like t's (None at a tensor
        without gradient), for read_and_reset."""
        def tensor(z, t):
            if not t.is_float:
                return z, None
            r = self.emit(RefCreate(zeros_of(t)), "r")
            return self.emit(Tuple([z, r]), "d"), r

        def pack(parts, t):
            return self.emit(Tuple([p for p, _ in parts]), "d"), [r for _, r in parts]
        return map_structure(t, z, tensor, pack=pack,
                             field=lambda z, i, ft: self.emit(TupleGetItem(z, i), "f", ft))

    def read_and_reset(self, refs, t):
        """The cotangent of type t held in the references of pair_with_fresh_refs; zeroes them."""
        def tensor(r, t):
            if r is None:
                return self.emit(zeros_of(t), "g", t)
            g = self.emit(RefRead(r), "g", t)
            if self.reset:
                self.emit(RefWrite(r, zeros_of(t)), "u")
            return g
        return map_structure(t, refs, tensor, field=lambda refs, i, ft: refs[i],
                             pack=lambda parts, t: self.emit(Tuple(parts), "g", t))

    def accumulate(self, a, t, g):
        """Add the cotangent g into the references of the lifted value a (of original type t)."""
        if isinstance(a, Deferred):
            if a.inactive:
                return
            if a.pair is None:
                a.contribs.append(g)
                return
            a = a.pair

        def tensor(pair, t):
            a, g = pair
            if t.is_float:
                r = self.project(a, 1, "r")
                self.emit(RefWrite(r, make_call("add", [RefRead(r), g])), "u")

        def field(pair, i, ft):
            a, g = pair
            gi = g.fields[i] if isinstance(g, Tuple) else self.project(g, i, "g")
            if not isinstance(gi, (Var, Constant)):
                gi = self.emit(gi, "g", ft)
            return self.field(a, i), gi
        map_structure(t, (a, g), tensor, field=field, keep=has_float, adt=_unchanged,
                      other=_unchanged)

    # -- globals ---------------------------------------------------------------------------
    def varying_params(self, name):
        """Positions at which some call of @name in its own body passes anything but @name's
        own parameter there (a loop over the body's calls, once per global)."""
        found = self.varying.get(name)
        if found is None:
            func = self.src[name]
            found = set()
            for node in walk(func.body):
                if isinstance(node, Call) and isinstance(node.op, GlobalVar) and \
                        node.op.name_hint == name:
                    found.update(i for i, (a, p) in enumerate(zip(node.args, func.params))
                                 if a is not p)
            self.varying[name] = found
        return found

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
            params = [Var(p.name_hint, param_type(p)) if i in consts else self.bind_param(p)
                      for i, p in enumerate(func.params)]

            def body(func=func, params=params, consts=consts):
                for i in consts:      # constants: deferred values that never get a gradient
                    p, v = func.params[i], params[i]
                    self.env[p] = self.deferred(v, v.type_annotation, p, inactive=True,
                                                hint=p.name_hint)
                return self.visit(func.body)
            bp = Var("bp", BP_TYPE)
            body = self.in_scope(body, bp=bp)
            ret = self.lifted_type(func.ret_type) if func.ret_type is not None else None
            key = (gv.name_hint, consts) if consts else gv.name_hint
            self.out[self.lifted_globals[key]] = Function(params + [bp], body, ret,
                                                          func.type_params)
            self.generated = True


def _unchanged(value, t):
    return value
