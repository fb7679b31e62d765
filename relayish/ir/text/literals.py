"""Scalar literal text shared by the printer and the parser.

A scalar literal is a number with a dtype suffix (`1f`, `2.5f64`, `3`, `3i64`, `7u8`, `True`).
Floats print as the shortest decimal that parses back to the same bits; infinities are the
words `inf`/`-inf`, the default NaN is `nan`, any other NaN (sign bit or payload) is
`nanx<bits in UPPERCASE hex>`, all followed by the float suffix (`inff`, `nanf64`,
`nanxFFC00000f`: the usual x86 NaN, float32). The hex digits are uppercase because the suffixes
are lowercase: `nanxffc00000f` could not tell the digit f from the suffix f.
Inside `const(...)` arrays the same texts appear without suffixes.
"""
from __future__ import annotations

import re

import numpy as np

from relayish.ir.float_range import float_overflows, float_range_message

SUFFIX_OF = {"float32": "f", "float64": "f64", "float16": "f16", "int32": "",
             "int8": "i8", "int16": "i16", "int64": "i64",
             "uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64"}

DTYPE_OF_SUFFIX = {"f": "float32", "f16": "float16", "f32": "float32", "f64": "float64",
                   "i": "int32", "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64",
                   "u8": "uint8", "u16": "uint16", "u32": "uint32", "u64": "uint64"}

_UINT_OF = {"float16": np.uint16, "float32": np.uint32, "float64": np.uint64}

SPECIAL_FLOAT = re.compile(r"(inf|nan|nanx[0-9A-F]+)(f16|f32|f64|f)?")
_SPECIAL_ELEMENT = re.compile(r"inf|nan|nanx[0-9A-F]+")


def _bits(x, dtype):
    return int(np.asarray(x, dtype=dtype).reshape(()).view(_UINT_OF[dtype]))


def _canonical_nan_bits(dtype):
    return _bits(np.nan, dtype)


def float_text(x, dtype) -> str:
    """The shortest text of a float that parses back to the same bits (no suffix)."""
    x = np.asarray(x, dtype=dtype).reshape(())
    if np.isnan(x):
        bits = _bits(x, dtype)
        return "nan" if bits == _canonical_nan_bits(dtype) else f"nanx{bits:X}"
    if np.isinf(x):
        return "inf" if x > 0 else "-inf"
    value = x[()]
    text = repr(float(value)) if dtype == "float64" else str(value)
    if text.endswith(".0"):
        text = text[:-2]
    if _float_bits_of_text(text, dtype) != _bits(x, dtype):
        text = "%.17g" % float(value)      # exact: every float16/32 value is a double
    return text


def _float_bits_of_text(text, dtype):
    return _bits(float_value(text, dtype), dtype)


def float_value(text, dtype):
    """A float of `dtype` (a 0-d array) from a number text or a special word (may start with -)."""
    neg = text.startswith("-")
    body = text[1:] if neg else text
    if body.startswith("nanx"):
        bits = int(body[4:], 16)
        uint = _UINT_OF[dtype]
        if bits > np.iinfo(uint).max:
            raise ValueError(f"NaN bits 0x{bits:x} do not fit {dtype}")
        value = np.asarray(bits, dtype=uint).view(dtype)
        if not np.isnan(value):
            raise ValueError(f"0x{bits:x} is not the bit pattern of a {dtype} NaN")
    elif body == "nan":
        value = np.asarray(np.nan, dtype=dtype)
    elif body == "inf":
        value = np.asarray(np.inf, dtype=dtype)
    else:
        x = float(body)
        with np.errstate(over="ignore"):
            value = np.asarray(x, dtype=dtype)
        # the range check rl.const shares (a text reading as inf, 1e999, is out of range too)
        if np.isinf(value) or float_overflows(x, dtype):
            raise ValueError(float_range_message(body, dtype))
    return np.asarray(-value if neg else value, dtype=dtype)    # `-` of a 0-d array is a scalar


def int_value(text, dtype):
    """An integer of `dtype` (a 0-d array) from decimal text (may start with -)."""
    value = int(text)
    info = np.iinfo(dtype)
    if not info.min <= value <= info.max:
        raise ValueError(f"{text} is out of range for {dtype} ({info.min}..{info.max})")
    return np.asarray(value, dtype=dtype)


def element_text(x, dtype) -> str:
    """One element of an array constant, without suffix."""
    if dtype == "bool":
        return "True" if bool(x) else "False"
    if dtype in _UINT_OF:
        return float_text(x, dtype)
    return str(int(x))


def scalar_text(arr) -> str:
    """A 0-d array as a literal with its dtype suffix."""
    dtype = arr.dtype.name
    if dtype == "bool":
        return "True" if bool(arr[()]) else "False"
    return element_text(arr[()], dtype) + SUFFIX_OF[dtype]


def is_special_element(word) -> bool:
    return _SPECIAL_ELEMENT.fullmatch(word) is not None
