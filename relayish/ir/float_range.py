"""The range of the float dtypes: the one check of float literals (`1e39f`,
ir/text/literals.py) and of rl.const (ir/expr.py), so that both refuse the same values.

    float_overflows(values, dtype) -> bool array     where values lie past dtype's range
    float_range_message(text, dtype) -> str          the error's words
"""
from __future__ import annotations

import numpy as np

__all__ = ["float_overflows", "float_range_message"]


def float_overflows(values, dtype) -> np.ndarray:
    """Where the float64 `values` lie beyond `dtype`'s largest finite value (infinities
    included): a bool array. A value past it counts even where it would round down to it
    (65505 in float16), except the value of the largest one's shortest text (3.4028235e38 in
    float32, a bit above the exact value), which is how that value prints. The one range
    check of float literals (`1e39f`, ir/text/literals.py) and of rl.const."""
    top, printed, _ = _largest_float(dtype)
    magnitude = np.abs(np.asarray(values, dtype="float64"))
    return (magnitude > top) & (magnitude != printed)


def float_range_message(value_text, dtype) -> str:
    """The message for a float value past `dtype`'s range (float_overflows)."""
    return (f"{value_text} is out of range for {dtype} (the largest finite value is "
            f"{_largest_float(dtype)[2]})")


_LARGEST: dict = {}


def _largest_float(dtype):
    """(the largest finite value, the value of its shortest text, that text), as float64s."""
    found = _LARGEST.get(dtype)
    if found is None:
        top = np.finfo(dtype).max
        text = repr(float(top)) if dtype == "float64" else str(top)
        found = _LARGEST[dtype] = (float(top), float(text), repr(float(top)).removesuffix(".0"))
    return found
