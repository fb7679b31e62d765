"""Forward-mode AD: dual numbers through the IR, closure-preserving.

    jvp : (fn(T1..Tn) -> R)  ->  fn(T1..Tn, T1..Tn) -> (R, R)     x1..xn, v1..vn -> (f(x), J(x) v)

Every value of type T becomes a value of its dual type D(T):

    D(Tensor[s, float]) = (Tensor[s, float], Tensor[s, float])      (value, tangent)
    D(Tensor[s, int|bool]) = Tensor[s, int|bool]                    (no tangent)
    D((T1, .., Tn)) = (D(T1), .., D(Tn))      D(Ref[T]) = Ref[D(T)]
    D(fn(A..) -> B) = fn(D(A)..) -> D(B)      D(a) = a   (type variables)
    D(G[A..]) = G[D(A)..], or G_fwd[D(A)..] when G's constructors hold float tensors directly
               (a dual ADT with constructors C_fwd whose fields have the dual types)

The transform is a rewrite of each expression e : T into e' : D(T). Only operator calls do any
work: their primal arguments are projected out, the op runs on them, and the op's tangent rule
(`op.tangent(orig_call, arg_tangents)`, registered beside its gradient rule) builds the output
tangent:

    op(a, b)   ~>   let %z = op(a'.0, b'.0); let %dz = TANGENT_op(z-call, [a'.1, b'.1]); (%z, %dz)

Variables, tuples, closures, refs, constructors, match, if and calls of functions and globals
(recursion included) map structurally; branches test primal values. A let-bound function may
call itself (`let %f = fn (..) { .. %f(..) .. }`): its dual binder is bound before its value.
The output is an ordinary relayish program, so it prints, parses, type-checks, runs on every
backend and can be differentiated again: `jvp(gradient(f))` is forward-over-reverse and gives
Hessian-vector products.

Converting between a value and its dual (`split_dual`, `make_dual`, zeros of a value) is the
structure map of structure.py; the op call in a tangent rule's result is replaced by its
variable with rewrite.py's `replace_node`.

This module is the transform only (`transform_function`, `transform_module`); the entry points
(`rl.jvp`, `hvp`, `hessian_forward`, ...) are in api.py, which imports this module and never the
other way round. Let-chains are transformed with a loop; the entry points run it under `run_deep`.
"""
from __future__ import annotations

from relayish.errors import GradientError
from relayish.ir.analysis import global_refs
from relayish.ir.expr import (Call, Clause, Constant, Function, GlobalVar, If, Let, Match,
                              PatternConstructor, PatternTuple, PatternVar, PatternWildcard,
                              RefCreate, RefRead, RefWrite, Tuple, TupleGetItem, Var, _short_text)
from relayish.ir.module import Module
from relayish.ir.op import Op, make_call
from relayish.ir.types import TensorType, TupleType
from relayish.ir.visitor import ExprFunctor
from relayish.ad.origins import mark, origin_of
from relayish.ad.rewrite import replace_node, with_checked_type
from relayish.ad.structure import map_structure
from relayish.ad.twins import TwinTypes, adt_definitions

__all__ = ["transform_function", "transform_module", "dual_type", "split_dual", "make_dual"]


# ---- the type mapping -----------------------------------------------------------------------

def _dual_tensor(t: TensorType):
    return TupleType([t, t]) if t.is_float else t


def dual_types(type_definitions=None, module=None, taken_names=()) -> TwinTypes:
    """The dual type map D (module docstring); ADT twins are named `<G>_fwd`, `<C>_fwd`."""
    return TwinTypes(_dual_tensor, "_fwd", module=module, type_definitions=type_definitions,
                     taken_names=taken_names)


def dual_type(t, module=None):
    """D(t) for the types of a module (see the module docstring)."""
    defs = module.type_definitions if module is not None else {}
    return dual_types(defs)(t)


# ---- the expression transform ---------------------------------------------------------------

def _type_of(e):
    t = getattr(e, "_checked_type", None)
    if t is None:
        raise GradientError(f"jvp: the program must be type-checked first; no type for "
                            f"{_short_text(e)}")
    return t


class ForwardTransform(ExprFunctor):
    """e : T  ~>  e' : D(T). Binders map through `env`; helper bindings go to the open scope.

    Not memoized: nodes shared between scopes (AD output is a DAG) are transformed once per
    occurrence, so an emitted helper binding is never referenced outside its scope.
    """

    def __init__(self, types: TwinTypes, global_names: dict):
        super().__init__()
        self.dual_type = types
        self.global_names = global_names             # original name -> transformed name
        self.env = {}                                # id(Var) -> transformed expression
        self.scopes = []

    origin = None       # origins.origin_of of the primal expression being transformed

    def visit(self, expr):
        outer = self.origin
        here = origin_of(expr, "tangent")       # what the bindings emitted now come from
        if here is not None:
            self.origin = here
        result = self.dispatch(expr)
        if here is not None:
            mark(result, here)      # the transformed expression, bound by its parent
        self.origin = outer
        return result

    # ---- scopes and bindings --------------------------------------------------------------
    def scoped(self, expr):
        self.scopes.append([])
        result = self.visit(expr)
        bindings = self.scopes.pop()
        for var, value in reversed(bindings):
            result = Let(var, value, result)
        return result

    def emit(self, name, value, t=None):
        v = Var(name, None)
        if t is not None:
            v._checked_type = t
        if self.origin is not None:
            mark(value, self.origin)        # its source position, for a debugger (origins.py)
        self.scopes[-1].append((v, value))
        return v

    def atom(self, e, name="a"):
        if isinstance(e, (Var, Constant, GlobalVar)):
            return e
        return self.emit(name, e)

    def bind_var(self, var):
        t = getattr(var, "_checked_type", None) or var.type_annotation
        if t is None:
            raise GradientError(f"jvp: the program must be type-checked first; no type for "
                                f"%{var.name_hint}")
        new = Var(var.name_hint, self.dual_type(t))
        new._checked_type = self.dual_type(t)
        self.env[id(var)] = new
        return new

    # ---- nodes ----------------------------------------------------------------------------
    def visit_Var(self, e):
        try:
            return self.env[id(e)]
        except KeyError:
            raise GradientError(f"jvp: free variable %{e.name_hint}") from None

    def visit_GlobalVar(self, e):
        name = self.global_names.get(e.name_hint)
        if name is None:
            raise GradientError(f"jvp: unknown global @{e.name_hint}")
        return GlobalVar(name)

    def visit_Constant(self, e):
        if e.data.dtype.kind == "f":
            return Tuple([e, make_call("zeros_like", [e])])
        return e

    def visit_Constructor(self, e):
        return self.dual_type.ctor(e)

    def visit_Op(self, e):
        raise GradientError(f"jvp: operator '{e.name}' used as a value; call it instead")

    def visit_Tuple(self, e):
        return Tuple([self.visit(f) for f in e.fields])

    def visit_TupleGetItem(self, e):
        return TupleGetItem(self.visit(e.tuple_value), e.index)

    def visit_Let(self, e):
        while isinstance(e, Let):
            if isinstance(e.value, Function):
                # `let %f = fn (..) { .. %f(..) .. }` is a recursive local let: the dual
                # binder must be in scope in its own value (it stays a letrec in the output)
                new = self.bind_var(e.var)
                value = self.visit(e.value)
            else:
                value = self.visit(e.value)
                new = self.bind_var(e.var)
            self.scopes[-1].append((new, value))
            e = e.body
        return self.visit(e)

    def visit_Function(self, e):
        params = [self.bind_var(p) for p in e.params]
        ret = _type_of(e).ret_type if getattr(e, "_checked_type", None) is not None else e.ret_type
        return Function(params, self.scoped(e.body), None if ret is None else self.dual_type(ret),
                        e.type_params)

    def visit_If(self, e):
        cond = self.visit(e.cond)
        return If(cond, self.scoped(e.true_branch), self.scoped(e.false_branch))

    def visit_Match(self, e):
        data = self.atom(self.visit(e.data), "m")
        clauses = [Clause(self.pattern(c.lhs), self.scoped(c.rhs)) for c in e.clauses]
        return Match(data, clauses, e.complete)

    def pattern(self, p):
        if isinstance(p, PatternVar):
            return PatternVar(self.bind_var(p.var))
        if isinstance(p, PatternConstructor):
            return PatternConstructor(self.dual_type.ctor(p.constructor),
                                      [self.pattern(s) for s in p.patterns])
        if isinstance(p, PatternTuple):
            return PatternTuple([self.pattern(s) for s in p.patterns])
        return PatternWildcard()

    def visit_RefCreate(self, e):
        return RefCreate(self.visit(e.value))

    def visit_RefRead(self, e):
        return RefRead(self.visit(e.ref))

    def visit_RefWrite(self, e):
        return RefWrite(self.visit(e.ref), self.visit(e.value))

    def visit_Call(self, e):
        if isinstance(e.op, Op):
            return self.op_call(e)
        fn = self.visit(e.op)
        return Call(fn, [self.visit(a) for a in e.args], e.attrs)

    def op_call(self, e):
        op = e.op
        out_t = _type_of(e)
        primals, tangents = [], []
        for a in e.args:
            t = _type_of(a)
            if isinstance(a, Constant):              # no tangent: no (c, zeros) pair to build
                primals.append(a)
                tangents.append(None)
                continue
            a2 = self.atom(self.visit(a))
            p, d = split_dual(a2, t)
            primals.append(p)
            tangents.append(d)
        z = with_checked_type(Call(op, primals, e.attrs), out_t)
        if self.dual_type(out_t) == out_t:           # no tangent: int/bool results
            return z
        if not isinstance(out_t, (TensorType, TupleType)):
            raise GradientError(f"jvp: operator '{op.name}' returns {out_t}, which forward mode "
                                f"does not support yet")
        zv = self.emit("z", z, out_t)
        if not op.differentiable or all(d is None for d in tangents):
            return make_dual(zv, _zeros_like_value(zv, out_t), out_t)
        if op.tangent is None:
            raise GradientError(f"no tangent rule for operator '{op.name}' in "
                                f"{_short_text(e, 200)}; register one with "
                                f"@rl.register_tangent({op.name!r})")
        tangents = [d if d is not None else _zeros_like_value(p, _type_of(a))
                    for d, p, a in zip(tangents, primals, e.args)]
        dz = op.tangent(z, tangents)
        dz = replace_node(dz, z, zv)
        dzv = self.emit("dz", dz, out_t)
        return make_dual(zv, dzv, out_t)        # a tuple result (split): one dual per field


# The conversions between a value and its dual follow the value's type: each is the structure
# map of structure.py with its own action at a tensor (tensors and tuples only: what operators
# take and what an entry point takes and returns).

def _zeros_like_value(p, t):
    return map_structure(t, p, lambda p, t: make_call("zeros_like", [p]),
                         field=lambda p, k, f: TupleGetItem(p, k),
                         pack=lambda parts, t: Tuple(parts), adt=_unchanged, other=_unchanged)


def _unchanged(value, t):
    return value


def split_dual(e, t):
    """(primal, tangent) expressions of a dual value e' : D(t); tangent None when t has none."""
    def tensor(e, t):
        if not t.is_float:
            return e, None
        return with_checked_type(TupleGetItem(e, 0), t), with_checked_type(TupleGetItem(e, 1), t)

    def pack(parts, t):
        primal = with_checked_type(Tuple([p for p, _ in parts]), t)
        if all(d is None for _, d in parts):
            return primal, None
        tangent = Tuple([d if d is not None else make_call("zeros_like", [p])
                         if isinstance(f, TensorType) else p
                         for (p, d), f in zip(parts, t.fields)])
        return primal, with_checked_type(tangent, t)

    def refuse(e, t):
        raise GradientError(f"jvp: a value of type {t} cannot be split into primal and tangent "
                            "(only tensors and tuples of them can)")
    return map_structure(t, e, tensor, pack=pack, adt=refuse, other=refuse,
                         field=lambda e, k, f: with_checked_type(TupleGetItem(e, k), None))


def make_dual(x, v, t):
    """The dual value of primal `x` with tangent `v` (both of type t)."""
    def refuse(pair, t):
        raise GradientError(f"jvp: inputs of type {t} are not supported yet (tensors and tuples "
                            "of tensors are); build such values inside the function instead")
    return map_structure(t, (x, v), lambda xv, t: Tuple(list(xv)) if t.is_float else xv[0],
                         field=lambda xv, k, f: (TupleGetItem(xv[0], k), TupleGetItem(xv[1], k)),
                         pack=lambda parts, t: Tuple(parts), adt=refuse, other=refuse)


def _output(r, t):
    if isinstance(t, (TensorType, TupleType)):
        p, d = split_dual(r, t)
        if d is None:
            d = _zeros_like_value(p, t)
        return Tuple([p, d])
    raise GradientError(f"jvp: outputs of type {t} are not supported yet (tensors and tuples of "
                        "tensors are)")


# ---- entry points ---------------------------------------------------------------------------

def _reachable(mod, start):
    """@start and the globals it reaches; the order names the transformed globals."""
    order, todo = [], [start]
    while todo:
        name = todo.pop()
        if name in order:
            continue
        order.append(name)
        todo.extend(n for n in global_refs(mod[name]) if n not in order)
    return order


def _infer(x):
    from relayish.ir.typecheck import infer_type
    return infer_type(x)


def _entry(func, body_of, dual_of):
    """fn(x.., v..) { (f(x), J v) } around `body_of(lifted params) -> dual result`."""
    ftype = _type_of(func)
    xs = [Var(p.name_hint, t) for p, t in zip(func.params, ftype.arg_types)]
    vs = [Var("v_" + p.name_hint, t) for p, t in zip(func.params, ftype.arg_types)]
    bindings = [(Var(x.name_hint + "_dual", dual_of(t)), make_dual(x, v, t))
                for x, v, t in zip(xs, vs, ftype.arg_types)]
    r = Var("r", None)
    body = Let(r, body_of([b for b, _ in bindings]), _output(r, ftype.ret_type))
    for b, value in reversed(bindings):
        body = Let(b, value, body)
    ret = TupleType([ftype.ret_type, ftype.ret_type])
    return Function(xs + vs, body, ret)


def transform_function(f):
    """jvp of a type-checkable Function that calls no globals: fn(x.., v..) -> (f(x), J v)."""
    f = _infer(f)
    dual_of = dual_types(adt_definitions(f))
    tx = ForwardTransform(dual_of, {})

    def body_of(lifted):
        for p, l in zip(f.params, lifted):
            tx.env[id(p)] = l
        return tx.scoped(f.body)
    out = _entry(f, body_of, dual_of)
    if dual_of.created:
        raise GradientError("jvp: this function uses ADTs with float fields, which need a module; "
                            "pass rl.Module.from_expr(f) with its type definitions")
    return out


def transform_module(mod, entry_name="main"):
    """jvp of a Module's @main: a Module with @<name>_jvp for every global @main reaches, the
    dual ADTs, and @<entry_name> the entry fn(x.., v..) -> (value, tangent)."""
    mod = _infer(mod)
    start = mod.get_global_var("main").name_hint
    names = _reachable(mod, start)
    taken = {gv.name_hint for gv in mod.functions} | {entry_name}
    global_names = {}
    for name in names:
        new, k = name + "_jvp", 1
        while new in taken:
            k += 1
            new = f"{name}_jvp{k}"
        taken.add(new)
        global_names[name] = new
    out = Module()
    for data in mod.type_definitions.values():
        out.add_type(data)
    dual_of = dual_types(module=out)                 # dual ADTs are added to out as made
    tx = ForwardTransform(dual_of, global_names)
    transformed = {}
    for name in names:
        tx.scopes.append([])
        fn = tx.visit(mod[name])
        assert not tx.scopes.pop()
        transformed[global_names[name]] = fn
    for name, fn in transformed.items():
        out[name] = fn
    main = mod["main"]
    out[entry_name] = _entry(main, lambda lifted: Call(GlobalVar(global_names[start]), lifted),
                             dual_of)
    return out
