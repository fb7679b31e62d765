"""The entry point of a reverse-mode gradient program, and its conversions between T and L T.

    gradient:        fn(T1..Tn) -> (R, (T1..Tn))        output's first float tensor seeded with ones
    grad:            fn(T1..Tn) -> Ti or (Ti, Tj, ...)    scalar float output; argnums selects
    value_and_grad:  fn(T1..Tn) -> (R, grads)
    vjp:             fn(T1..Tn) -> (R, fn(R) -> (T1..Tn))   the backpropagator may run many times

argnums (every mode; None: all parameters, as a tuple) selects the gradients: an int gives that
one, a tuple a tuple of them; the parameters outside it are constants of the program.

`build_entry` makes that function around the lifted body (reverse.py's ReverseAD): it creates
`bp := fn () { () }`, lifts the inputs (`lift_input`: fresh zero references), runs the lifted
body, seeds the output's reference (`seed`: ones, or the user's cotangent), calls `(!bp)()` and
reads the input references back (`read_grad`); `primal` gives the output's value. The four
conversions are the one structure map of structure.py with their own action at a tensor and at
an ADT value; an ADT value is converted by a generated helper global (`@ad_lift_<D>`,
`@ad_primal_<D>`, `@ad_grad_<D>`; `@ad_vjpgrad_<D>` also zeroes what it reads), a match over
the constructors converting each field the same way. In vjp mode every reference is zeroed
after it is read, so the backpropagator may run any number of times.
"""
from __future__ import annotations

import numpy as np

from relayish.errors import GradientError
from relayish.ir.analysis import FreeVars
from relayish.ir.expr import (Call, Clause, Function, GlobalVar, Match, PatternConstructor,
                              PatternVar, RefCreate, RefRead, RefWrite, Tuple, TupleGetItem, Var,
                              _short_text)
from relayish.ir.module import fresh_name
from relayish.ir.op import make_call
from relayish.ir.types import TupleType, TypeCall, is_tensor_tree, substitute
from relayish.ad.lifted import ones_of, param_type, type_of, zeros_of
from relayish.ad.reverse import ReverseAD
from relayish.ad.structure import is_float_tensor, map_structure

__all__ = ["MODES", "build_entry"]

MODES = ("gradient", "grad", "value_and_grad", "vjp")


class _Conversions:
    """T -> L T (`lift_input`) and L T -> T (`primal`, `read_grad`), and the output's seed, for
    the values at the entry point of `ad`'s program; `helper` makes the ADT conversion globals."""

    def __init__(self, ad: ReverseAD):
        self.ad = ad
        self.helpers: dict = {}        # (kind, type) -> helper GlobalVar

    def _emitted_field(self, x, i, ft):
        return self.ad.emit(TupleGetItem(x, i), "f")

    def _packer(self, hint):
        return lambda parts, t: self.ad.emit(Tuple(parts), hint)

    def lift_input(self, x, t, what):
        """The lifted value of input x of type t, with fresh zero references."""
        ad = self.ad

        def tensor(x, t):
            return ad.emit(Tuple([x, RefCreate(zeros_of(t))]), "d") if t.is_float else x

        def adt(x, t):
            if not ad.lifted_type.changes(t):
                return x
            return ad.emit(Call(self.helper("lift", t), [x]), "d")
        return map_structure(t, x, tensor, field=self._emitted_field, pack=self._packer("d"),
                             adt=adt, other=_refuse(what, "reverse mode differentiates inputs"))

    def primal(self, x, t, what):
        """The primal value of lifted x (of original type t)."""
        ad = self.ad

        def tensor(x, t):
            return ad.emit(TupleGetItem(x, 0), "v") if t.is_float else x

        def adt(x, t):
            if not ad.lifted_type.changes(t):
                return x
            return ad.emit(Call(self.helper("primal", t), [x]), "v")
        return map_structure(t, x, tensor, field=self._emitted_field, pack=self._packer("v"),
                             adt=adt, other=_refuse(what, "a gradient program can only return"))

    def read_grad(self, x, t, what):
        """The gradient accumulated in lifted x (of original type t); resets the references."""
        ad = self.ad

        def tensor(x, t):
            if not t.is_float:
                return ad.emit(zeros_of(t), "grad")
            r = ad.emit(TupleGetItem(x, 1), "r")
            g = ad.emit(RefRead(r), "grad")
            if ad.reset:
                ad.emit(RefWrite(r, zeros_of(t)), "u")
            return g

        def adt(x, t):
            return ad.emit(Call(self.helper("grad", t), [x]), "grad")
        return map_structure(t, x, tensor, field=self._emitted_field, pack=self._packer("grad"),
                             adt=adt, other=_refuse(what, "reverse mode differentiates inputs"))

    def seed(self, x, t, ct, what):
        """Add the cotangent ct (an expression of type t) into the references of lifted x."""
        ad = self.ad

        def tensor(pair, t):
            x, ct = pair
            if t.is_float:
                r = ad.emit(TupleGetItem(x, 1), "r")
                ad.emit(RefWrite(r, make_call("add", [RefRead(r), ct])), "u")

        def field(pair, i, ft):
            x, ct = pair
            return ad.emit(TupleGetItem(x, i), "f"), ad.emit(TupleGetItem(ct, i), "ct")

        def refuse(pair, t):
            raise GradientError(f"{what} has type {t}: a cotangent can only be given for "
                                "tensors and tuples of tensors")
        # ADT fields of a tuple output are returned but not seeded (notes/ad.md)
        map_structure(t, (x, ct), tensor, field=field, keep=is_tensor_tree, adt=refuse,
                      other=refuse)

    def helper(self, kind, t):
        """A global converting an ADT value: kind lift (T -> L T), primal or grad (L T -> T)."""
        key = (kind, t)
        gv = self.helpers.get(key)
        if gv is not None:
            return gv
        ad = self.ad
        head = t.func if isinstance(t, TypeCall) else t
        args = list(t.args) if isinstance(t, TypeCall) else []
        data = ad.lifted_type.data_of(head)
        twin = ad.lifted_type.twin_data(head)
        lt = ad.lifted_type(t)
        src_t, dst_t = (t, lt) if kind == "lift" else (lt, t)
        # a vjp's helper must zero the references it reads: a differently named helper
        name = "ad_vjpgrad" if kind == "grad" and ad.reset else f"ad_{kind}"
        for old_gv, old in ad.out.functions.items():     # made by an earlier transform
            if old_gv.name_hint.startswith(f"{name}_{head.name}") and len(old.params) == 1 \
                    and old.params[0].type_annotation == src_t and old.ret_type == dst_t:
                self.helpers[key] = old_gv
                return old_gv
        taken = {g.name_hint for g in ad.out.functions} | {g.name_hint for g in
                                                          self.helpers.values()}
        taken |= {g.name_hint for g in ad.lifted_globals.values()} | {"main"}
        gv = GlobalVar(fresh_name(f"{name}_{head.name}", taken))
        self.helpers[key] = gv
        subst = dict(zip(data.type_vars, args))
        src_ctors, dst_ctors = (data.constructors, twin.constructors) if kind == "lift" else \
            (twin.constructors, data.constructors)
        convert = {"lift": self.lift_input, "primal": self.primal, "grad": self.read_grad}[kind]
        v = Var("v", src_t)
        clauses = []
        for c_src, c_dst, c_orig in zip(src_ctors, dst_ctors, data.constructors):
            fvars = [Var("x") for _ in c_orig.inputs]
            ftypes = [substitute(ft, subst) for ft in c_orig.inputs]

            def rhs(fvars=fvars, ftypes=ftypes, c_dst=c_dst):
                return Call(c_dst, [convert(fv, ft, f"a field of {t}")
                                    for fv, ft in zip(fvars, ftypes)])
            body = ad.in_scope(rhs, bp=None)
            lhs = PatternConstructor(c_src, [PatternVar(fv) for fv in fvars])
            clauses.append(Clause(lhs, body))
        ad.out[gv] = Function([v], Match(v, clauses), dst_t)
        ad.generated = True
        return gv


def _refuse(what, doing):
    """The `other` action of a conversion: functions and references have no conversion."""
    def refuse(x, t):
        raise GradientError(f"{what} has type {t}: {doing} tensors, tuples and ADT values, "
                            "not functions or references")
    return refuse


def build_entry(ad: ReverseAD, func: Function, mode: str, argnums=None) -> Function:
    """The user-facing function of `mode` for the type-checked `func` (see module docstring)."""
    ptypes = [param_type(p) for p in func.params]
    params = [Var(p.name_hint, t) for p, t in zip(func.params, ptypes)]
    out_t = type_of(func.body)
    _check_output(func, out_t, mode)
    if argnums is not None or mode in ("grad", "value_and_grad"):   # None: gradient, vjp
        argnums = _normalize_argnums(argnums, len(params))

    ad.register_adts(func)
    ad.count_uses(func)
    ad.reset = mode == "vjp"
    convert = _Conversions(ad)
    wanted = range(len(params)) if argnums is None else \
        ([argnums] if isinstance(argnums, int) else argnums)

    def body():
        bp = ad.emit(RefCreate(Function([], Tuple([]))), "bp")
        ad.scope.bp = bp
        for fv in FreeVars()(func):
            if fv in ad.env:
                continue
            t = getattr(fv, "_checked_type", None) or fv.type_annotation
            if is_float_tensor(t):      # a constant of this gradient: paired only if needed
                ad.env[fv] = ad.deferred(fv, t, fv, inactive=True, hint=fv.name_hint)
                continue
            lifted = convert.lift_input(fv, t, f"free variable %{fv.name_hint}")
            ad.mark_inactive(lifted)
            ad.env[fv] = lifted
        lifted_params = []
        for i, (p, new, t) in enumerate(zip(func.params, params, ptypes)):
            if argnums is not None and i not in wanted and is_float_tensor(t):
                ad.env[p] = ad.deferred(new, t, p, inactive=True, hint=p.name_hint)
                lifted_params.append(None)
                continue
            lp = convert.lift_input(new, t, f"parameter %{p.name_hint}")
            ad.env[p] = lp
            if argnums is not None and i not in wanted:
                ad.mark_inactive(lp)     # no gradient asked for: treated as a constant
            lifted_params.append(lp)
        out = ad.visit(func.body)
        ad.flush()

        def backward(ct=None):
            if ct is None:          # seed the (first) float output with ones
                first, first_t = out, out_t
                if isinstance(out_t, TupleType):
                    first, first_t = ad.emit(TupleGetItem(out, 0), "out"), out_t.fields[0]
                convert.seed(first, first_t, ones_of(first_t), "the output")
            else:
                convert.seed(out, out_t, ct, "the output")
            ad.emit(Call(RefRead(bp), []), "u")
            grads = {}
            for i in wanted:       # only the gradients asked for are read back
                if i not in grads:
                    grads[i] = convert.read_grad(lifted_params[i], ptypes[i],
                                                 f"parameter %{func.params[i].name_hint}")
            return grads

        def picked(grads):
            """All gradients as a tuple (argnums None), one (an int), or a tuple of some."""
            if argnums is None:
                return Tuple(list(grads.values()))
            return grads[argnums] if isinstance(argnums, int) else \
                Tuple([grads[i] for i in argnums])

        if mode == "vjp":
            ct = Var("ct", out_t)
            back = Function([ct], ad.in_scope(lambda: picked(backward(ct))))
            value = convert.primal(out, out_t, "the output")
            return Tuple([value, back])
        value = convert.primal(out, out_t, "the output")
        grads = backward()
        if mode == "grad":
            return picked(grads)
        return Tuple([value, picked(grads)])

    return Function(params, ad.in_scope(body, bp=None))


def _text(node, limit=200):
    return _short_text(node, limit)


def _check_output(func, t, mode):
    if mode == "vjp":
        if not is_tensor_tree(t):
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
