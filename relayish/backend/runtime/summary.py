"""Short descriptions of runtime values, for the debugger (relayish/debug/) and the debug
modes (the interpreter's debug_nans error shows its inputs this way).

    summarize(value) -> str       'float32[3, 4] min -1.2 max 3.5 nan 0 inf 0', '(2-tuple)',
                                  'Cons(...)', 'ref float32[3]', 'closure %f'
    nonfinite(value) -> (nan count, inf count)    of an array (0, 0 for anything else)
    has_nonfinite(value) -> bool     a NaN or an Inf anywhere in a result

A tensor's summary reads each element once (min, max, NaN and Inf counts over the finite and
non-finite parts); elements themselves are never printed here (locals() gives the values).
"""
from __future__ import annotations

import numpy as np

from relayish.backend.values import Closure, ConstructorValue, RefValue

__all__ = ["summarize", "nonfinite", "type_summary", "has_nonfinite"]


def nonfinite(value):
    """(number of NaNs, number of Infs) of a floating-point array; (0, 0) otherwise."""
    if isinstance(value, np.ndarray) and value.dtype.kind in "fc":
        nan = int(np.count_nonzero(np.isnan(value)))
        inf = int(np.count_nonzero(np.isinf(value)))
        return nan, inf
    return 0, 0


def has_nonfinite(value):
    """Whether a result (arrays, also jax arrays, inside tuples, ADT values and references)
    holds a NaN or an Inf anywhere; iterative, so a 10^5-long list is fine."""
    stack = [value]
    seen = set()
    while stack:
        v = stack.pop()
        if isinstance(v, tuple):
            stack.extend(v)
        elif isinstance(v, ConstructorValue):
            stack.extend(v.fields)
        elif isinstance(v, RefValue):
            if id(v) not in seen:
                seen.add(id(v))
                stack.append(v.value)
        elif hasattr(v, "dtype") and hasattr(v, "shape"):
            a = np.asarray(v)
            if a.dtype.kind in "fc" and not np.isfinite(a).all():
                return True
    return False


def type_summary(value):
    """The type of a runtime value, as text: 'float32[3, 4]', 'tuple', 'Cons', 'ref', 'fn'."""
    if isinstance(value, np.ndarray):
        return f"{value.dtype}[{', '.join(map(str, value.shape))}]"
    if isinstance(value, np.generic):
        return f"{value.dtype}[]"
    if isinstance(value, tuple):
        return f"({', '.join(type_summary(v) for v in value[:8])}{', ...' if len(value) > 8 else ''})"
    if isinstance(value, ConstructorValue):
        return value.constructor.name_hint
    if isinstance(value, RefValue):
        return "ref " + type_summary(value.value)
    if isinstance(value, Closure) or callable(value):
        return "fn"
    return type(value).__name__


def summarize(value):
    """A one-line summary of `value` (see the module docstring)."""
    if isinstance(value, (np.ndarray, np.generic)):
        a = np.asarray(value)
        text = type_summary(a)
        if a.size == 0:
            return text + " (empty)"
        if a.dtype.kind in "fc":
            nan, inf = nonfinite(a)
            finite = a[np.isfinite(a)] if (nan or inf) else a
            if finite.size:
                lo, hi = finite.min(), finite.max()
                if a.dtype.kind == "c":
                    text += " (complex)"
                else:
                    text += f" min {lo:.6g} max {hi:.6g}"
            return text + f" nan {nan} inf {inf}"
        if a.dtype.kind in "iub":
            return text + f" min {a.min()} max {a.max()}"
        return text
    if isinstance(value, tuple):
        return type_summary(value)
    if isinstance(value, ConstructorValue):
        n = len(value.fields)
        return f"{value.constructor.name_hint}({', '.join(['...'] * n)})" if n else \
            value.constructor.name_hint
    if isinstance(value, RefValue):
        return "ref " + summarize(value.value)
    if isinstance(value, Closure):
        code = getattr(value, "code", None)
        return f"closure {code.name}" if code is not None else "closure"
    if callable(value):
        return f"function {getattr(value, '__name__', type(value).__name__)}"
    return type(value).__name__
