"""One structure map over a value's type, and the type predicates the AD modes ask.

Converting a value between an original type T and its AD type (reverse mode's lifted type L T,
forward mode's dual type) follows the structure of T: something at each tensor, the same thing
field by field through tuples, something else at an ADT value (a generated helper global) and at
a function or reference. Relay's gradient pass writes that walk once (`LiftTensor`) and derives
its converters from it; so does relayish:

    map_structure(t, value, tensor, field=, pack=, adt=, other=, keep=)

walks `value` (whatever a converter carries: an atom, a pair of atoms, a structure of
references) by the type t and calls

    tensor(value, t)       at a tensor type (float or not: the converter decides)
    field(value, i, ft)    the value to walk into the i-th field of a tuple (it may emit a
                           projection); only for the fields with keep(ft) (default: all)
    pack(parts, t)         the tuple's result from its fields' results (default: None)
    adt(value, t)          at an ADT (TypeCall or GlobalTypeVar)
    other(value, t)        at a function, reference or type variable

Fields are walked in order, each field's `field` call just before the walk into it, so the
bindings a converter emits come out in the order of the type. Types are shallow (what a user
wrote): the walk recurses over the type, never over a program.

`has_float(t)` and ir.types `is_tensor_tree(t)` are the two questions about a type the transforms ask
before they convert: does a value carry a float tensor, is it made of tensors and tuples only.
"""
from __future__ import annotations

from relayish.errors import GradientError
from relayish.ir.types import GlobalTypeVar, TensorType, TupleType, TypeCall, is_tensor_tree

__all__ = ["map_structure", "has_float", "is_float_tensor"]


def map_structure(t, value, tensor, *, field=None, pack=None, adt=None, other=None, keep=None):
    """The converter given by the callbacks applied to `value` of type t (module docstring)."""
    # Not map_type: each kind of type calls its own callback on a value, no type is rebuilt.
    if isinstance(t, TensorType):
        return tensor(value, t)
    if isinstance(t, TupleType):
        parts = [map_structure(ft, field(value, i, ft), tensor, field=field, pack=pack, adt=adt,
                               other=other, keep=keep)
                 for i, ft in enumerate(t.fields) if keep is None or keep(ft)]
        return pack(parts, t) if pack is not None else None
    if isinstance(t, (TypeCall, GlobalTypeVar)):
        if adt is None:
            raise GradientError(f"cannot convert a value of the ADT type {t} here")
        return adt(value, t)
    if other is None:
        raise GradientError(f"cannot convert a value of type {t} here")
    return other(value, t)


def is_float_tensor(t) -> bool:
    return isinstance(t, TensorType) and t.is_float


def has_float(t) -> bool:
    """Whether a value of type `t` (tensors and tuples of them) carries any float tensor."""
    # Tuples only, not walk_type: a float inside a function or reference type is no float the
    # value carries.
    stack = [t]
    while stack:
        t = stack.pop()
        if is_float_tensor(t):
            return True
        if isinstance(t, TupleType):
            stack.extend(t.fields)
    return False


