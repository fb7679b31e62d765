"""Texts for a backend's error messages: program text, types and runtime values.

    node_text(node, limit=200)   the program text of a node on one line, shortened: "%x + 1f"
    type_text(t)                 a type as the text format writes it: "Tensor[(2), float32]"
    value_type_text(v)           what kind of runtime value v is: "Tensor[(3), float64]",
                                 "a tuple of 2 field(s)", "a value of constructor Cons",
                                 "a reference", "a function", "str 'hi'"
    value_text(v, limit=200)     a runtime value itself, shortened (its repr)
    short(v, limit=60)           any Python object's repr, shortened

None of them raises: a message must be built even for a half-built node or a value whose repr
fails (the fallbacks name the node's kind, or the object's class).
"""
from __future__ import annotations

import numpy as np

from relayish.errors import RelayishError
from relayish.ir.expr import Call, Var
from relayish.ir.op import Op
from relayish.ir.types import TensorType
from relayish.backend.values import Closure, ConstructorValue, RefValue

__all__ = ["node_text", "type_text", "value_type_text", "value_text", "short"]


def node_text(node, limit=200):
    """The program text of a node for an error message (one line, shortened)."""
    try:
        from relayish.ir.text.printer import astext
        text = " ".join(astext(node).split())
    except Exception:  # noqa: BLE001 - error messages must not fail while the printer cannot
        text = _fallback_text(node)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _fallback_text(node):
    if isinstance(node, Call):
        op = node.op
        name = (op.name if isinstance(op, Op) else getattr(op, "name_hint", None)
                or type(op).__name__)
        return f"{name}(...)"
    if isinstance(node, Var):
        return "%" + node.name_hint
    return f"<{type(node).__name__}>"


def type_text(t):
    try:
        return str(t)
    except Exception:  # noqa: BLE001 - error messages must not fail
        return repr(t)


def short(v, limit=60):
    try:
        text = repr(v)
    except Exception:  # noqa: BLE001 - a user object whose repr fails
        text = f"<{type(v).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def value_type_text(v):
    """A short description of a runtime value's type (numpy and jax arrays alike)."""
    if isinstance(v, np.ndarray) or (hasattr(v, "shape") and hasattr(v, "dtype")
                                     and not isinstance(v, np.generic)):
        try:
            shape, dtype = tuple(v.shape), np.dtype(v.dtype)
        except Exception:  # noqa: BLE001 - an object with odd shape/dtype attributes
            return f"{type(v).__name__} {short(v)}"
        try:
            return type_text(TensorType(shape, dtype.name))
        except RelayishError:                 # a dtype relayish has no name for
            return f"an array of shape {shape} and dtype {dtype}"
    if isinstance(v, np.generic):
        return f"numpy scalar {v.dtype.name}"
    if isinstance(v, tuple):
        return f"a tuple of {len(v)} field(s)"
    if isinstance(v, ConstructorValue):
        return f"a value of constructor {v.constructor.name_hint}"
    if isinstance(v, RefValue):
        return "a reference"
    if isinstance(v, Closure):
        return "a function"
    return f"{type(v).__name__} {short(v)}"


def value_text(v, limit=200):
    return short(v, limit)
