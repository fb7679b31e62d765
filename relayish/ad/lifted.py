"""Reverse mode's lifted type L and the small values it is built from.

    L(Tensor[s, float*])  = (Tensor[s, float*], Ref[Tensor[s, float*]])   (value, its gradient)
    L(Tensor[s, int*/bool]) = Tensor[s, int*/bool]
    L((T1..Tn)) = (L T1..L Tn)      L(Ref[T]) = Ref[L T]      L(a) = a
    L(fn (T1..Tn) -> R) = fn (L T1..L Tn, BP_TYPE) -> L R   (the caller's bp: ref(fn () -> ()))
    L(D[T1..Tn]) = D'[L T1..L Tn]   (D' = D, or D's twin `D_ad`: twins.py)

`lifted_types(mod)` is that map (twins.py's TwinTypes with reverse mode's leaf and extra
parameter); `zeros_of`/`ones_of` build the constant tensors a gradient program starts references
and seeds from; `type_of`/`param_type` read the types the type checker left on the program, and
`const_type` a constant's.
"""
from __future__ import annotations

import numpy as np

from relayish.errors import GradientError
from relayish.ir.expr import Constant, _short_text
from relayish.ir.module import Module
from relayish.ir.op import make_call
from relayish.ir.types import FuncType, RefType, TensorType, TupleType
from relayish.ad.twins import TwinTypes

__all__ = ["BP_TYPE", "lifted_types", "zeros_of", "ones_of", "const_type", "type_of",
           "param_type"]

UNIT = TupleType(())
BP_TYPE = RefType(FuncType([], UNIT))


def _lifted_tensor(t: TensorType):
    return TupleType([t, RefType(t)]) if t.is_float else t


def lifted_types(mod: Module) -> TwinTypes:
    """The type mapping L (module docstring), its ADT twins `<G>_ad` added to mod."""
    return TwinTypes(_lifted_tensor, "_ad", extra_params=[BP_TYPE], module=mod)


def zeros_of(t: TensorType):
    """The zero adjoint of static type t, `zero_adjoint(shape=.., dtype=..)`: every adjoint starts
    as one (and vjp resets to one). Not a `zeros` call or a `0f64` literal: the op says that
    nothing was added here, so the passes and the jax backend may fold `g * zero_adjoint(..)`
    as jax's symbolic zeros (notes/ad.md, "Zero adjoints"), which a user's zeros never are."""
    return make_call("zero_adjoint", [], {"shape": t.shape, "dtype": t.dtype})


def ones_of(t: TensorType):
    if t.shape == ():
        return Constant(np.ones((), t.dtype))
    return make_call("ones", [], {"shape": t.shape, "dtype": t.dtype})


_CONST_TYPES: dict = {}


def const_type(c: Constant) -> TensorType:
    """The tensor type of a constant (its checked type, else one made from its data, shared)."""
    t = getattr(c, "_checked_type", None)
    if isinstance(t, TensorType):
        return t
    key = (c.data.shape, c.data.dtype)
    t = _CONST_TYPES.get(key)
    if t is None:
        t = _CONST_TYPES[key] = TensorType(c.data.shape, c.data.dtype.name)
    return t


def type_of(e):
    """The checked type of e (set by rl.infer_type, which the entry points run first)."""
    t = getattr(e, "_checked_type", None)
    if t is None:
        raise GradientError(f"the type of {_short_text(e, 200)} is unknown; run rl.infer_type "
                            "first")
    return t


def param_type(p):
    """The type of parameter p: checked, or else annotated."""
    t = getattr(p, "_checked_type", None) or p.type_annotation
    if t is None:
        raise GradientError(f"the type of parameter %{p.name_hint} is unknown; "
                            "run rl.infer_type first")
    return t
