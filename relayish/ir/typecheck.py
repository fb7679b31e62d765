"""Type inference: `infer_type(mod_or_expr, mod=None)` and `typeof(expr, mod=None)`.

Scheme: one walk over the program builds constraints and solves them as it goes.
  * Every unknown type (an unannotated binder, a call's result...) is a fresh `IncompleteType`
    ("hole"); `unify` binds holes in a union-find table (with an occurs check: no recursive
    types). TypeVars from type_params are rigid: equal only to themselves.
  * Polymorphic functions (FuncType with type_params: @map, constructors, `fn[a](...)`) are
    instantiated with fresh holes at each call, and when unified with a monomorphic function type.
  * An op call whose argument types are complete runs the op's `type_rule` at once; otherwise
    the call waits in `pending` (as do tuple projections of a still-unknown type) and is retried
    whenever the solver runs; what is still pending or unknown at the end is a TypeCheckError.
  * Modules: every global gets a signature up front (its annotations, holes elsewhere), so
    globals may be used before they are checked; bodies are checked callees first (strongly
    connected components of the call graph), solving after each component, so a polymorphic
    global is complete before other components instantiate it.
  * Let-chains are walked with loops; the entry points run under `deep` for other nesting.
After solving, each node's type is resolved and stored in `node._checked_type`.
"""
from __future__ import annotations

import itertools

import numpy as np

from relayish.errors import RelayishError, TypeCheckError
from relayish.ir.analysis import CallGraph, FreeVars
from relayish.ir.expr import (Clause, Constant, Constructor, Expr, Function, Let,
                              PatternConstructor, PatternTuple, PatternVar, PatternWildcard, Var,
                              _short_text)
from relayish.ir.module import Module
from relayish.ir.op import Op, not_a_value_message, type_rule_error
from relayish.ir.types import (FuncType, GlobalTypeVar, RefType, TensorType, TupleType, Type,
                               TypeCall, TypeVar, map_type, substitute, type_components,
                               walk_type)
from relayish.ir.visitor import ExprFunctor, deep

__all__ = ["infer_type", "typeof", "IncompleteType"]

_BOOL = TensorType((), "bool")
_CONSTANT_TYPES: dict = {}   # (shape, numpy dtype) -> TensorType: building one is not cheap
_TEXT_LIMIT = 300


# ---- holes and their text --------------------------------------------------------------------

class IncompleteType(Type):
    """A type not known yet: a union-find variable of the solver. Compared by identity.

    Holes stand for monomorphic types: a polymorphic function type bound to one is instantiated,
    except for `poly_ok` holes (the variable of `let %f = fn[a] ...`), which keep the scheme.
    """

    __slots__ = ("id", "poly_ok")
    _ids = itertools.count()

    def __init__(self, poly_ok=False):
        self.id = next(self._ids)
        self.poly_ok = poly_ok

    def __eq__(self, other):
        return self is other

    def __hash__(self):
        return id(self)

    def __repr__(self):
        return f"?{self.id}"

    __str__ = __repr__


def type_str(t) -> str:
    """The text of a type, `?` for unknown parts; never raises."""
    if not _has_hole(t):
        try:
            return str(t)
        except Exception:  # noqa: BLE001 - an error message must never fail to build
            pass
    return _fallback_text(t)


def _has_hole(t) -> bool:
    return any(isinstance(s, IncompleteType) for s in walk_type(t))


def _fallback_text(t) -> str:
    try:
        if isinstance(t, IncompleteType):
            return "?"
        if isinstance(t, TensorType):
            if t.shape == ():
                return t.dtype
            return f"Tensor[({', '.join(str(d) for d in t.shape)}), {t.dtype}]"
        if isinstance(t, TupleType):
            inner = ", ".join(_fallback_text(f) for f in t.fields)
            return f"({inner},)" if len(t.fields) == 1 else f"({inner})"
        if isinstance(t, FuncType):
            params = f"[{', '.join(p.name for p in t.type_params)}]" if t.type_params else ""
            args = ", ".join(_fallback_text(a) for a in t.arg_types)
            return f"fn {params}({args}) -> {_fallback_text(t.ret_type)}"
        if isinstance(t, RefType):
            return f"ref({_fallback_text(t.value)})"
        if isinstance(t, TypeCall):
            if not t.args:
                return t.func.name
            return f"{t.func.name}[{', '.join(_fallback_text(a) for a in t.args)}]"
        if isinstance(t, (TypeVar, GlobalTypeVar)):
            return t.name
        return repr(t)
    except Exception:  # noqa: BLE001
        return f"<{type(t).__name__}>"


CAST_HINT = "(use cast to convert one of them)"


def _literal_hint(error, call, arg_types) -> str:
    """The type rule's message; where operands' dtypes clash and one of them is a scalar
    literal, the literal written in the other operand's dtype instead of the advice to cast:
    `2.0` reads as float32, so a float64 program writes `2f64`."""
    message = str(error)
    if CAST_HINT not in message:
        return message
    literals = [k for k, a in enumerate(call.args)
                if isinstance(a, Constant) and getattr(a.data, "ndim", None) == 0]
    others = {t.dtype for k, t in enumerate(arg_types)
              if k not in literals and isinstance(t, TensorType)}
    if len(literals) != 1 or len(others) != 1:
        return message
    dtype = others.pop()
    value = call.args[literals[0]].data
    try:
        with np.errstate(all="ignore"):
            converted = np.asarray(value, dtype=dtype)
            exact = bool(converted.astype(np.asarray(value).dtype) == value)
    except (TypeError, ValueError):
        return message
    if not exact:                   # 2.5 is no int32 literal: casting is the advice
        return message
    written = Constant(converted)
    own = str(np.asarray(value).dtype)
    why = (f": a number without a suffix is {own}" if own in ("float32", "int32")
           else ", the other operand's dtype")
    return message.replace(CAST_HINT, f"(write the literal {_text(call.args[literals[0]])} as "
                                      f"{_text(written)}{why})")


def _text(node) -> str:
    return _short_text(node, _TEXT_LIMIT)


class _Mismatch(Exception):
    """Internal: unify found two types that disagree (or a recursive type)."""

    def __init__(self, a, b, recursive=False):
        super().__init__()
        self.a, self.b, self.recursive = a, b, recursive


# ---- the checker -----------------------------------------------------------------------------

class TypeChecker(ExprFunctor):
    """Visits expressions, returning each node's (possibly incomplete) type, memoized per node."""

    def __init__(self, mod=None, global_types=None):
        super().__init__()
        self.mod = mod
        self.checking_module = False        # unknown ADT names are errors only in a module
        self.subst: dict = {}               # hole -> the type it is bound to
        self.var_types: dict = {}           # id(Var) -> type
        self.binding_site: dict = {}        # id(Var) -> the node that binds it
        self.global_types = dict(global_types or {})   # global name -> type
        self.signatures: dict = {}          # id(global Function) -> its FuncType signature
        self.pending: list = []             # deferred constraints: (kind, node, data, result)
        self._cache_keep: list = []         # keeps the types _final_type caches by id alive
        self._ground: dict = {}             # id(type) -> a type with no hole in it (kept alive)

    # ---- the solver: holes, resolve, zonk, unify -----------------------------------------------
    def fresh(self, poly_ok=False) -> IncompleteType:
        return IncompleteType(poly_ok)

    def resolve(self, t):
        """Follow hole bindings at the top of `t` (with path compression)."""
        if not isinstance(t, IncompleteType):
            return t
        path = []
        while isinstance(t, IncompleteType) and t in self.subst:
            path.append(t)
            t = self.subst[t]
        for h in path[:-1]:
            self.subst[h] = t
        return t

    def zonk(self, t):
        """`t` with every bound hole replaced by its solution (unsolved holes stay)."""
        t = self.resolve(t)
        return t if type(t) is TensorType else map_type(t, self.zonk)

    def complete(self, t):
        """The zonked type, or None when parts of it are still unknown."""
        if type(t) is TensorType:
            return t
        z = self.zonk(t)
        return None if _has_hole(z) else z

    def instantiate(self, t: FuncType) -> FuncType:
        """A polymorphic function type with its type_params replaced by fresh holes."""
        t = self.zonk(t)
        sub = {p: self.fresh() for p in t.type_params}
        return FuncType([substitute(a, sub) for a in t.arg_types], substitute(t.ret_type, sub))

    def unify(self, a, b):
        """Make `a` and `b` equal by binding holes, or raise _Mismatch."""
        stack = [(a, b)]
        while stack:
            a, b = stack.pop()
            a, b = self.resolve(a), self.resolve(b)
            if a is b:
                continue
            if isinstance(a, IncompleteType):
                self._bind_hole(a, b)
                continue
            if isinstance(b, IncompleteType):
                self._bind_hole(b, a)
                continue
            if isinstance(a, FuncType) and isinstance(b, FuncType):
                a, b = self._align_polymorphism(a, b)
                if len(a.arg_types) != len(b.arg_types):
                    raise _Mismatch(a, b)
                stack.append((a.ret_type, b.ret_type))
                stack.extend(reversed(list(zip(a.arg_types, b.arg_types))))
                continue
            if type(a) is not type(b):
                raise _Mismatch(a, b)
            if isinstance(a, TupleType):
                if len(a.fields) != len(b.fields):
                    raise _Mismatch(a, b)
                stack.extend(reversed(list(zip(a.fields, b.fields))))
            elif isinstance(a, RefType):
                stack.append((a.value, b.value))
            elif isinstance(a, TypeCall):
                if a.func != b.func or len(a.args) != len(b.args):
                    raise _Mismatch(a, b)
                stack.extend(reversed(list(zip(a.args, b.args))))
            elif a != b:      # tensors, type variables: structural equality
                raise _Mismatch(a, b)

    def _align_polymorphism(self, a, b):
        if not a.type_params and not b.type_params:
            return a, b
        if a.type_params and b.type_params:
            if len(a.type_params) != len(b.type_params):
                raise _Mismatch(a, b)
            rename = dict(zip(b.type_params, a.type_params))
            b = self.zonk(b)
            return (FuncType(a.arg_types, a.ret_type),
                    FuncType([substitute(t, rename) for t in b.arg_types],
                             substitute(b.ret_type, rename)))
        # a polymorphic function used where a monomorphic one is expected: instantiate it
        return (self.instantiate(a) if a.type_params else a,
                self.instantiate(b) if b.type_params else b)

    def _bind_hole(self, hole, t):
        if isinstance(t, FuncType) and t.type_params and not hole.poly_ok:
            t = self.instantiate(t)
        if self._occurs(hole, t):
            raise _Mismatch(hole, t, recursive=True)
        self.subst[hole] = t

    def _occurs(self, hole, t) -> bool:
        """Whether `hole` occurs in `t`. Types are immutable, so one found hole-free (ground)
        stays so and is not walked again: binding each of n nested closures' holes to the type
        of the one inside it walked that whole type each time (quadratic: 3,000 levels, 4 s)."""
        stack, seen_holes = [t], False
        while stack:
            s = self.resolve(stack.pop())
            if s is hole:
                return True
            if isinstance(s, IncompleteType):
                seen_holes = True
            elif id(s) not in self._ground:
                stack.extend(type_components(s))
        if not seen_holes:
            self._ground[id(t)] = t
        return False

    def expect(self, node, expected, actual, what=None):
        """unify(expected, actual), turning a mismatch into a TypeCheckError about `node`.

        `what` (a str, or a function returning one) says which constraint this is. Text that
        prints program pieces is passed as a function: it is built only when the check fails,
        since printing a call's text for each of its arguments made nested calls quadratic.
        """
        try:
            self.unify(expected, actual)
        except _Mismatch as m:
            raise self.mismatch_error(node, expected, actual, m, what) from None

    def mismatch_error(self, node, expected, actual, m, what=None):
        exp, act = type_str(self.zonk(expected)), type_str(self.zonk(actual))
        if callable(what):
            what = what()
        where = f"{_text(node)} ({what})" if what else _text(node)
        if m.recursive:
            return TypeCheckError(
                f"recursive type in {where}: a type would have to contain itself, as in "
                f"{type_str(self.zonk(m.b))}; expected {exp}, got {act}")
        head = f"type mismatch in {where}"
        msg = f"{head}: expected {exp}, got {act}"
        sub_a, sub_b = type_str(self.zonk(m.a)), type_str(self.zonk(m.b))
        if (sub_a, sub_b) != (exp, act):
            msg += f" ({sub_a} and {sub_b} differ)"
        return TypeCheckError(msg)

    # ---- deferred constraints ----------------------------------------------------------------
    def solve(self, final=False):
        """Retry the pending constraints until none makes progress; if final, none may remain."""
        progress = True
        while self.pending and progress:
            progress = False
            waiting = []
            for c in self.pending:
                if self._try(c):
                    progress = True
                else:
                    waiting.append(c)
            self.pending = waiting
        if final and self.pending:
            kind, node, data, _ = self.pending[0]
            if kind == "op":
                shown = ", ".join(type_str(self.zonk(t)) for t in data)
                raise TypeCheckError(
                    f"cannot infer the type of {_text(node)}: operator '{node.op.name}' needs "
                    f"the types of its arguments, known only as ({shown}); add type annotations")
            raise TypeCheckError(
                f"cannot infer the type of {_text(node)}: the projected value has type "
                f"{type_str(self.zonk(data))}, which is not known to be a tuple; "
                "add a type annotation")

    def _try(self, c) -> bool:
        kind, node, data, result = c
        if kind == "op":
            arg_types = [self.complete(t) for t in data]
            if any(t is None for t in arg_types):
                return False
            self.expect(node, result, self.apply_op_rule(node, arg_types), "result of the operator")
            return True
        t = self.resolve(data)
        if isinstance(t, IncompleteType):
            return False
        self.expect(node, result, self.project(node, t))
        return True

    def apply_op_rule(self, call, arg_types) -> Type:
        op = call.op
        if op.type_rule is None:
            raise TypeCheckError(f"operator '{op.name}' has no type rule, in {_text(call)}")
        try:
            out = op.type_rule(list(arg_types), dict(call.attrs))
        except RelayishError as e:
            message = _literal_hint(e, call, arg_types)
            raise type_rule_error(e, f"{message}\n  in {_text(call)}") from None
        except Exception as e:  # noqa: BLE001 - a rule that breaks on odd input is still a type error
            shown = ", ".join(type_str(t) for t in arg_types)
            # the user's own exception, as an instance of its class too (type_rule_error)
            raise type_rule_error(e, f"operator '{op.name}' cannot take arguments of types "
                                     f"({shown}) in {_text(call)} ({type(e).__name__}: {e})") from e
        if not isinstance(out, Type):
            raise TypeCheckError(f"the type rule of operator '{op.name}' returned {out!r}, "
                                 f"not a type, in {_text(call)}")
        return out

    def project(self, node, t) -> Type:
        if not isinstance(t, TupleType):
            hint = ""
            if isinstance(t, TensorType):   # `x[0]` in Python builds a tuple projection
                hint = (f"; to take element {node.index} of a tensor, use rl.take(x, "
                        f"{node.index}) (in the text: take(x, {node.index}))")
            raise TypeCheckError(f"{_text(node)} projects field {node.index} of a value that is "
                                 f"not a tuple: expected a tuple type, got "
                                 f"{type_str(self.zonk(t))}{hint}")
        if not 0 <= node.index < len(t.fields):
            raise TypeCheckError(f"{_text(node)}: index {node.index} is out of range for a tuple "
                                 f"of {len(t.fields)} field(s), of type {type_str(self.zonk(t))}")
        return t.fields[node.index]

    # ---- binders -----------------------------------------------------------------------------
    def bind(self, var, t, site):
        """Give the binder `var` the type `t` (checked against its annotation)."""
        if not isinstance(var, Var):
            raise TypeCheckError(f"{_text(site)} binds {_text(var)}, which is not a variable")
        ann = var.type_annotation
        if ann is not None:
            self.check_annotation(ann, var)
            self.expect(site, ann, t, lambda: f"the annotation of {_text(var)}")
            t = ann
        key = id(var)
        if key in self.var_types:       # bound twice (shared subprograms): one type
            self.expect(site, self.var_types[key], t, lambda: f"the variable {_text(var)}")
            return
        self.var_types[key] = t
        self.binding_site.setdefault(key, site)
        self.memo[key] = t
        self._keep.append(var)

    def binder_type(self, var, poly_ok=False):
        """The type a binder starts with: its annotation, or a fresh hole."""
        if isinstance(var, Var) and var.type_annotation is not None:
            self.check_annotation(var.type_annotation, var)
            return var.type_annotation
        return self.fresh(poly_ok)

    def check_annotation(self, t, node):
        """Annotations must be types, and ADT applications must match their definition."""
        if not isinstance(t, Type):
            raise TypeCheckError(f"the annotation of {_text(node)} is {t!r}, not a type")
        if self.mod is None:
            return
        for t in walk_type(t):
            if isinstance(t, TypeCall):
                data = self.mod.type_definitions.get(t.func)
                if data is None and self.checking_module:
                    raise TypeCheckError(f"unknown type {t.func.name} in the annotation of "
                                         f"{_text(node)}")
                if data is not None and len(t.args) != len(data.type_vars):
                    raise TypeCheckError(
                        f"type {t.func.name} takes {len(data.type_vars)} type argument(s), got "
                        f"{len(t.args)} in {type_str(t)}, in the annotation of {_text(node)}")
            elif isinstance(t, GlobalTypeVar):
                data = self.mod.type_definitions.get(t)
                if data is None and self.checking_module:
                    raise TypeCheckError(f"unknown type {t.name} in the annotation of "
                                         f"{_text(node)}")
                if data is not None and data.type_vars:
                    raise TypeCheckError(f"type {t.name} takes {len(data.type_vars)} type "
                                         f"argument(s), in the annotation of {_text(node)}")

    # ---- visiting ----------------------------------------------------------------------------
    def visit(self, expr):
        if type(expr) is Constructor:     # shared nodes whose type differs at each use
            return self.constructor_value(expr)
        if not isinstance(expr, Expr):
            raise TypeCheckError(f"expected an expression, got {type(expr).__name__}: {expr!r}")
        try:
            return super().visit(expr)
        except TypeCheckError as error:
            if getattr(error, "node", None) is None:
                error.node = expr       # the innermost expression being checked, for positions
            raise

    def visit_default(self, node):
        raise TypeCheckError(f"cannot type-check a {type(node).__name__} node: {_text(node)}")

    def visit_Var(self, e):
        t = self.var_types.get(id(e))
        if t is not None:
            return t
        if e.type_annotation is None:
            raise TypeCheckError(f"unbound variable {_text(e)}: it is not bound by any let, "
                                 "function parameter or pattern, and has no type annotation")
        if self.checking_module:     # as Relay's module: a global function must be closed
            raise TypeCheckError(f"free variable {_text(e)} in a global function: a global "
                                 "may use only its parameters and the variables it binds")
        self.check_annotation(e.type_annotation, e)
        self.var_types[id(e)] = e.type_annotation   # a free variable with its declared type
        return e.type_annotation

    def visit_GlobalVar(self, e):
        t = self.global_types.get(e.name_hint)
        if t is None:
            if e.linked is not None:
                raise TypeCheckError(
                    f"{_text(e)} is a called Module (rl.Call(module, args)): rl.evaluate, "
                    "rl.compile and the AD entry points merge its globals first; to type-check "
                    "the program alone, merge them with relayish.ir.link.link_program(f)")
            if self.mod is None:
                raise TypeCheckError(f"unknown global {_text(e)}: no module was given to resolve it "
                                     "(pass the module that defines it, e.g. rl.evaluate(f, *args, "
                                     "mod=mod) or rl.typeof(expr, mod), or run the module itself)")
            known = ", ".join("@" + name for name in self.global_types) or "none"
            raise TypeCheckError(f"unknown global {_text(e)}: the module has no such function "
                                 f"(it has: {known})")
        return t

    def visit_Constant(self, e):
        data = getattr(e, "data", None)
        try:
            key = (data.shape, data.dtype)
            t = _CONSTANT_TYPES.get(key)
            if t is None:
                t = _CONSTANT_TYPES[key] = TensorType(data.shape, data.dtype)
            return t
        except (RelayishError, AttributeError, TypeError):
            raise TypeCheckError(f"the constant {_text(e)} is not a tensor of a supported dtype "
                                 f"(got {type(data).__name__})") from None

    def visit_Op(self, e):
        raise TypeCheckError(not_a_value_message(e))

    def constructor_type(self, ctor) -> FuncType:
        data = ctor.type_data
        if data is None:
            raise TypeCheckError(f"constructor {ctor.name_hint} belongs to no type definition "
                                 "(build a TypeData with it)")
        for t in ctor.inputs:
            if not isinstance(t, Type):
                raise TypeCheckError(f"field type {t!r} of constructor {ctor.name_hint} is not a type")
        ret = TypeCall(data.header, data.type_vars)
        t = FuncType(ctor.inputs, ret, data.type_vars)
        ctor._checked_type = t
        return t

    def constructor_value(self, ctor):
        """A constructor as a value: nullary ones are ADT values, others polymorphic functions."""
        t = self.constructor_type(ctor)
        if not ctor.inputs:
            return self.instantiate(t).ret_type
        return t

    def visit_Tuple(self, e):
        return TupleType([self.visit(f) for f in e.fields])

    def visit_TupleGetItem(self, e):
        if not isinstance(e.index, int) or isinstance(e.index, bool):
            raise TypeCheckError(f"{_text(e)}: a tuple index must be an int, got {e.index!r}")
        t = self.resolve(self.visit(e.tuple_value))
        if isinstance(t, IncompleteType):
            result = self.fresh()
            self.pending.append(("proj", e, t, result))
            return result
        return self.project(e, t)

    def visit_Function(self, e):
        check_type_params(e)
        sig = self.signatures.get(id(e))
        if sig is not None:
            param_types, ret = list(sig.arg_types), sig.ret_type
        else:
            param_types = [self.binder_type(p) for p in e.params]
            # poly_ok: `fn () { @id }` returns the polymorphic @id itself, not an instance
            ret = self.fresh(poly_ok=True) if e.ret_type is None else e.ret_type
        if e.ret_type is not None:
            self.check_annotation(e.ret_type, e)
        for p, t in zip(e.params, param_types):
            self.bind(p, t, e)
        body = self.visit(e.body)
        self.expect(e.body, ret, body, "the function's return type")
        return FuncType(param_types, ret, e.type_params)

    def visit_Call(self, e):
        op = e.op
        if isinstance(op, Op):
            if op.num_inputs >= 0 and len(e.args) != op.num_inputs:
                raise TypeCheckError(f"operator '{op.name}' takes {op.num_inputs} argument(s), "
                                     f"got {len(e.args)} in {_text(e)}")
            arg_types = [self.visit(a) for a in e.args]
            complete = [self.complete(t) for t in arg_types]
            if all(t is not None for t in complete):
                return self.apply_op_rule(e, complete)
            result = self.fresh()
            self.pending.append(("op", e, arg_types, result))
            return result
        if type(op) is Constructor:
            fn = self.instantiate(self.constructor_type(op))
        else:
            fn = self.resolve(self.visit(op))
            if isinstance(fn, IncompleteType):
                shape = FuncType([self.fresh() for _ in e.args], self.fresh())
                self.expect(e, fn, shape, "the called value")
                fn = shape
            elif not isinstance(fn, FuncType):
                raise TypeCheckError(f"{_text(e)} calls {_text(op)}, which is not a function: "
                                     f"expected a function type, got {type_str(self.zonk(fn))}")
            elif fn.type_params:
                fn = self.instantiate(fn)
        if len(fn.arg_types) != len(e.args):
            raise TypeCheckError(f"wrong number of arguments in {_text(e)}: {_text(op)} takes "
                                 f"{len(fn.arg_types)}, got {len(e.args)}; its type is "
                                 f"{type_str(self.zonk(fn))}")
        for k, (param, arg) in enumerate(zip(fn.arg_types, e.args)):
            self.expect(arg, param, self.visit(arg), lambda k=k: f"argument {k + 1} of {_text(e)}")
        return fn.ret_type

    def visit_Let(self, e):
        lets = []
        while isinstance(e, Let):            # a loop, never recursion, down the chain
            lets.append(e)
            var = e.var
            if isinstance(e.value, Function) and id(var) not in self.var_types:
                self.bind(var, self.binder_type(var, poly_ok=True), e)   # recursive local functions
                self.expect(e, self.var_types[id(var)], self.visit(e.value),
                            lambda var=var: f"the value bound to {_text(var)}")
            else:
                value = self.visit(e.value)
                self.bind(var, value, e)
            e = e.body
        body = self.visit(e)
        for let in lets:
            self.memo[id(let)] = body
            self._keep.append(let)
        return body

    def visit_If(self, e):
        self.expect(e.cond, _BOOL, self.visit(e.cond), "an if condition must be a bool scalar")
        result = self.fresh()           # monomorphic: the join of the two branches
        self.expect(e.true_branch, result, self.visit(e.true_branch))
        self.expect(e.false_branch, result, self.visit(e.false_branch),
                    "both branches of an if must have the same type")
        return result

    def visit_Match(self, e):
        data = self.visit(e.data)
        result = self.fresh()
        for clause in e.clauses:
            if not isinstance(clause, Clause):
                raise TypeCheckError(f"a match clause must be a Clause, got {clause!r} in {_text(e)}")
            self.check_pattern(clause.lhs, data, e)
            self.expect(clause.rhs, result, self.visit(clause.rhs),
                        "every clause of a match must have the same type")
        if e.complete:
            missing = uncovered_cases([c.lhs for c in e.clauses])
            if missing:
                raise TypeCheckError(f"the match {_text(e)} is not exhaustive: no clause for "
                                     f"{', '.join(missing)} (write match? for a partial match)")
        return result

    def check_pattern(self, p, t, match):
        stack = [(p, t)]
        while stack:
            p, t = stack.pop()
            if isinstance(p, PatternWildcard):
                continue
            if isinstance(p, PatternVar):
                self.bind(p.var, t, match)
            elif isinstance(p, PatternConstructor):
                ctor = p.constructor
                if not isinstance(ctor, Constructor):
                    raise TypeCheckError(f"the pattern {_text(p)} in {_text(match)} does not use a "
                                         "constructor")
                fn = self.instantiate(self.constructor_type(ctor))
                self.expect(match, t, fn.ret_type, lambda p=p: f"the pattern {_text(p)}")
                if len(p.patterns) != len(fn.arg_types):
                    raise TypeCheckError(f"the pattern {_text(p)} in {_text(match)} gives "
                                         f"{len(p.patterns)} field(s); constructor "
                                         f"{ctor.name_hint} has {len(fn.arg_types)}")
                stack.extend(zip(p.patterns, fn.arg_types))
            elif isinstance(p, PatternTuple):
                fields = [self.fresh() for _ in p.patterns]
                self.expect(match, t, TupleType(fields), lambda p=p: f"the pattern {_text(p)}")
                stack.extend(zip(p.patterns, fields))
            else:
                raise TypeCheckError(f"{_text(match)} has something that is not a pattern: {p!r}")

    def visit_RefCreate(self, e):
        # a reference holds one monomorphic type: a polymorphic value is instantiated (what
        # binding a fresh hole did, without its occurs check: a walk of the whole value type
        # per ref, quadratic in ref(ref(...)) nesting: 3,000 levels took 5 s)
        value = self.resolve(self.visit(e.value))
        if isinstance(value, FuncType) and value.type_params:
            value = self.instantiate(value)
        return RefType(value)

    def visit_RefRead(self, e):
        value = self.fresh()
        self.expect(e, RefType(value), self.visit(e.ref), "reading a reference")
        return value

    def visit_RefWrite(self, e):
        ref = self.visit(e.ref)
        value = self.visit(e.value)
        self.expect(e, ref, RefType(value), "the reference and the written value")
        return TupleType([])

    # ---- results -----------------------------------------------------------------------------
    def finish(self):
        """Solve what is left, then store every node's complete type in `_checked_type`."""
        self.solve(final=True)
        self._default_type_arguments()
        unknown = None
        cache: dict = {}
        for node in self._keep:
            t, holes = self._final_type(self.memo[id(node)], cache)
            if holes:
                if unknown is None or (isinstance(node, Var) and not isinstance(unknown, Var)):
                    unknown = node
                continue
            node._checked_type = t
        if unknown is not None:
            raise self.unknown_error(unknown)

    def _default_type_arguments(self):
        """Unsolved type arguments of ADTs become `()`: nothing can observe them.

        `@length(Nil())` leaves the element type of the empty list open; no operation uses a
        value of that type (else it would be solved, or an error), so any choice is sound.
        Holes elsewhere (a parameter's whole type, a ref's contents) stay errors.
        """
        seen = set()
        for node in self._keep:
            stack = [(self.memo[id(node)], False)]
            while stack:
                t, inside = stack.pop()
                t = self.resolve(t)
                key = (id(t), inside)
                if key in seen:
                    continue
                seen.add(key)
                self._cache_keep.append(t)
                if isinstance(t, IncompleteType):
                    if inside:
                        self.subst[t] = TupleType([])
                else:       # a type call's arguments are inside an ADT value
                    inner = inside or isinstance(t, TypeCall)
                    stack.extend((c, inner) for c in type_components(t))

    def _final_type(self, t, cache):
        """(zonked t, whether it has holes), memoized by type object: nodes share their types."""
        key = id(t)
        hit = cache.get(key)
        if hit is not None:
            return hit
        r = self.resolve(t)
        if isinstance(r, IncompleteType):
            out = (r, True)
        else:
            holes = []

            def final(component):
                zonked, has_holes = self._final_type(component, cache)
                holes.append(has_holes)
                return zonked
            out = (map_type(r, final), any(holes))
        cache[key] = out
        cache[id(r)] = out
        self._cache_keep.append(t)
        return out

    def unknown_error(self, node):
        t = type_str(self.zonk(self.memo[id(node)]))
        msg = f"cannot infer the type of {_text(node)} (known only as {t})"
        site = self.binding_site.get(id(node))
        if site is not None:
            msg += f", bound in {_text(site)}"
        return TypeCheckError(msg + "; add a type annotation")


def check_type_params(func):
    for p in func.type_params:
        if not isinstance(p, TypeVar):
            raise TypeCheckError(f"the type parameters of {_text(func)} must be TypeVars, got {p!r}")
    if len(set(func.type_params)) != len(func.type_params):
        raise TypeCheckError(f"{_text(func)} declares a type parameter twice")


# ---- exhaustiveness ----------------------------------------------------------------------------

_WILD = PatternWildcard()
_MAX_WITNESSES = 8


def uncovered_cases(patterns) -> list:
    """Text of values (as patterns) that no pattern matches; [] when the patterns are exhaustive."""
    return [w[0] for w in _uncovered([[p] for p in patterns], 1)]


def _is_wild(p):
    return isinstance(p, (PatternWildcard, PatternVar))


def _uncovered(rows, width):
    """Witness rows (lists of pattern text) not matched by any row of the pattern matrix."""
    if width == 0:
        return [] if rows else [[]]
    heads = [r[0] for r in rows]
    tuples = [h for h in heads if isinstance(h, PatternTuple)]
    if tuples:
        k = len(tuples[0].patterns)
        spec = [(list(r[0].patterns) if isinstance(r[0], PatternTuple) else [_WILD] * k) + r[1:]
                for r in rows]
        return [[_tuple_text(w[:k])] + w[k:] for w in _uncovered(spec, k + width - 1)]
    ctors = [h.constructor for h in heads if isinstance(h, PatternConstructor)]
    if not ctors:
        return [["_"] + w for w in _uncovered([r[1:] for r in rows], width - 1)]
    data = ctors[0].type_data
    everyone = list(data.constructors) if data is not None else ctors
    out = []       # every constructor, so that all missing cases get named (up to a limit)
    for c in everyone:
        k = len(c.inputs)
        spec = []
        for r in rows:
            if isinstance(r[0], PatternConstructor):
                if r[0].constructor.name_hint == c.name_hint:
                    spec.append(list(r[0].patterns) + r[1:])
            else:
                spec.append([_WILD] * k + r[1:])
        for w in _uncovered(spec, k + width - 1):
            out.append([_ctor_text(c, w[:k])] + w[k:])
            if len(out) >= _MAX_WITNESSES:
                return out
    return out


def _ctor_text(ctor, fields):
    return f"{ctor.name_hint}({', '.join(fields)})" if fields else ctor.name_hint


def _tuple_text(fields):
    return f"({fields[0]},)" if len(fields) == 1 else f"({', '.join(fields)})"


# ---- modules -----------------------------------------------------------------------------------

def _check_type_definitions(mod):
    checker = TypeChecker(mod)
    checker.checking_module = True
    for data in mod.type_definitions.values():
        for ctor in data.constructors:
            for t in ctor.inputs:
                checker.check_annotation(t, ctor)
                bad = [v.name for v in _type_vars(t) if v not in data.type_vars]
                if bad:
                    raise TypeCheckError(
                        f"constructor {ctor.name_hint} of type {data.header.name} uses type "
                        f"variable(s) {', '.join(bad)} that the type does not declare")


def _type_vars(t):
    from relayish.ir.types import free_type_vars
    return free_type_vars(t)


def _check_module(mod) -> Module:
    _check_type_definitions(mod)
    checker = TypeChecker(mod)
    checker.checking_module = True
    for gv, func in mod.functions.items():
        check_type_params(func)
        if func.ret_type is not None:
            checker.check_annotation(func.ret_type, func)
        sig = FuncType([checker.binder_type(p) for p in func.params],
                       checker.fresh(poly_ok=True) if func.ret_type is None else func.ret_type,
                       func.type_params)
        checker.signatures[id(func)] = sig
        checker.global_types[gv.name_hint] = sig
    free = FreeVars()
    for component in CallGraph(mod).components():
        for name in component:
            func = mod[name]
            checker.expect(func, checker.signatures[id(func)], checker.visit(func),
                           f"the signature of @{name}")
            _check_scopes(func, checker, free, f" in @{name}")  # a Var bound nowhere: above
        checker.solve()
    checker.finish()
    for gv, func in mod.functions.items():
        gv._checked_type = func._checked_type
    return mod


def _check_scopes(expr, checker, free, where=""):
    """Every use of a Var bound in `expr` lies inside its binder's scope. The checker types a
    Var by its binder wherever it is used, so a use after the scope ended (an IR built by hand,
    or a bad rewrite: a value bound inside a match clause used after the match) would pass it
    and read a stale slot on the interpreter; such a Var is free in `expr` although `expr`
    binds it (one free-variable walk, memoized per node)."""
    for var in free.of(expr):
        if id(var) in checker.binding_site:
            error = TypeCheckError(
                f"the variable {_text(var)} is used{where} outside the scope of its binder "
                "(the let, function parameter or pattern that binds it does not enclose the use)")
            error.node = var
            raise error


def _global_types_of(mod) -> dict:
    """The types of a module's globals, checking the module unless that was done already."""
    if any(getattr(f, "_checked_type", None) is None for f in mod.functions.values()):
        _check_module(mod)
    return {gv.name_hint: f._checked_type for gv, f in mod.functions.items()}


# ---- public entry points -------------------------------------------------------------------------

@deep
def infer_type(mod_or_expr, mod=None):
    """Infer and check types, storing each node's type in `node.checked_type`.

        mod = rl.infer_type(mod)          # checks every global; returns the module
        e = rl.infer_type(expr, mod)      # GlobalVars in expr resolve through mod

    Ill-typed programs raise TypeCheckError naming the offending expression and the types.
    """
    if isinstance(mod_or_expr, Module):
        return _check_module(mod_or_expr)
    if not isinstance(mod_or_expr, Expr):
        raise TypeCheckError(f"infer_type takes a Module or an expression, got "
                             f"{type(mod_or_expr).__name__}")
    if mod is not None and not isinstance(mod, Module):
        raise TypeCheckError(f"infer_type: mod must be a Module, got {type(mod).__name__}")
    if isinstance(mod_or_expr, Op):
        raise TypeCheckError(f"operator '{mod_or_expr.name}' has no type of its own; "
                             "type-check a call of it instead")
    if isinstance(mod_or_expr, Constructor):
        mod_or_expr._checked_type = TypeChecker(mod).constructor_type(mod_or_expr)
        return mod_or_expr
    checker = TypeChecker(mod, _global_types_of(mod) if mod is not None else None)
    checker.visit(mod_or_expr)
    _check_scopes(mod_or_expr, checker, FreeVars())
    checker.finish()
    return mod_or_expr


def typeof(expr, mod=None):
    """The type of `expr`, inferring it first if that has not been done.

        rl.typeof(rl.Tuple([rl.const(1.0), rl.const(2)]))   # (float32, int32)
    """
    if not isinstance(expr, Expr):
        raise TypeCheckError(f"typeof takes an expression, got {type(expr).__name__}")
    t = getattr(expr, "_checked_type", None)
    if t is None:
        infer_type(expr, mod)
        t = expr._checked_type
    return t
