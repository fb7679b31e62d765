"""Literals, constants and attribute values in the text.

    1f  2.5f64  3  3i64  -2i8  7u8  True  inff  nanf64  nanxFFC00000f      scalar literals
    const([[1, 2], [3, 4]], float32)   const([], int64, shape=(0, 3))      arrays
    sum(%x, axis=[0, 1], keepdims=True)                                      attribute values

Scalars become 0-d Constants (the decoding of each literal text is cached: a program repeats
its literals); `const` data is read with an explicit stack, so its nesting costs no recursion.
Out-of-range literals and ragged arrays are ParseErrors at the literal. literals.py holds the
text of numbers shared with the printer.
"""
from __future__ import annotations

import json
import re

import numpy as np

from relayish.ir.expr import Constant
from relayish.ir.text.literals import (DTYPE_OF_SUFFIX, SPECIAL_FLOAT, float_value, int_value,
                                       is_special_element)
from relayish.ir.text.parse_core import MAX_DEPTH
from relayish.ir.text.parse_types import TypeSyntax
from relayish.ir.types import FLOAT_DTYPES

_NUMBER = re.compile(r"([0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?)([A-Za-z_][A-Za-z0-9_]*)?")


def _attr_suffix_kind(suffix):
    """'f' or 'i' for a literal suffix allowed on an attribute value (f, f16..f64, i, i8..i64),
    None for any other."""
    if re.fullmatch(r"f(16|32|64)?", suffix):
        return "f"
    if re.fullmatch(r"i(8|16|32|64)?", suffix):
        return "i"
    return None


_LITERALS: dict = {}           # literal text -> its 0-d array (copied for each Constant)


def _fits(text, dtype):
    info = np.iinfo(dtype)
    return len(text) < 30 and info.min <= int(text) <= info.max


def _array(elements, dtype, shape):
    if dtype == "bool":
        if any(e not in ("True", "False") for e in elements):
            raise ValueError("a bool constant holds True and False")
        flat = np.array([e == "True" for e in elements], dtype=bool)
    elif dtype in FLOAT_DTYPES:
        if any(e in ("True", "False") for e in elements):
            raise ValueError(f"a {dtype} constant holds numbers")
        flat = np.array([float_value(e, dtype) for e in elements], dtype=dtype).reshape(-1)
    else:
        bad = [e for e in elements if not re.fullmatch(r"-?[0-9]+", e)]
        if bad:
            raise ValueError(f"a {dtype} constant holds integers, not {bad[0]}")
        flat = np.array([int_value(e, dtype) for e in elements], dtype=dtype).reshape(-1)
    return flat.reshape(shape)


class ConstantSyntax(TypeSyntax):
    """Scalar literals, `True`/`False`, `const(...)` arrays and op attribute values."""

    def attr_value(self):
        self.enter()
        try:
            tok = self.tok
            if tok[0] == "punct" and tok[1] in ("[", "("):
                close = "]" if tok[1] == "[" else ")"
                self.advance()
                values = []
                while not self.at(close):
                    values.append(self.attr_value())
                    if not self.at(close):
                        self.expect(",", f"',' or '{close}'")
                self.advance()
                return tuple(values)
            negative = tok[0] == "punct" and tok[1] == "-"
            if negative:
                self.advance()
                tok = self.tok
            if tok[0] == "number":
                m = _NUMBER.fullmatch(tok[1])
                # Relay prints float attributes with a dtype suffix (rate=0.5f, a_min=0f): the
                # suffix says float or int; the op's normalizer decides the attribute's own type
                suffix = None if m is None else m.group(2)
                if m is None or (suffix is not None and _attr_suffix_kind(suffix) is None):
                    raise self.error(f"expected a number as an attribute value, found {tok[1]!r}")
                self.advance()
                text = ("-" if negative else "") + m.group(1)
                if suffix is not None and _attr_suffix_kind(suffix) == "f":
                    return float(text)
                if re.fullmatch(r"-?[0-9]+", text):
                    if len(text) > 1000:         # Python ints are unbounded; attributes too
                        raise self.error(f"the number {text[:30]}... is too large here", tok)
                    return int(text)
                return float(text)
            special = SPECIAL_FLOAT.fullmatch(tok[1]) if tok[0] == "ident" else None
            if special is not None and special.group(1) in ("inf", "nan"):
                # `a_max=inff`, `a_min=-inff`: Relay prints float attributes with their suffix
                self.advance()
                value = float(special.group(1))
                return -value if negative else value
            if negative:
                raise self.error(f"expected a number after '-', found {self.describe()}")
            if tok[0] == "string":
                self.advance()
                try:
                    return json.loads(tok[1])
                except ValueError:
                    raise self.error(f"bad string {tok[1]}", tok) from None
            if tok[0] == "ident":
                self.advance()
                return {"True": True, "False": False, "None": None}.get(tok[1], tok[1])
            raise self.error(f"expected an attribute value, found {self.describe()}")
        finally:
            self.depth -= 1

    def literal(self, negative=False):
        key = ("-" if negative else "") + self.tok[1]
        data = _LITERALS.get(key)
        if data is None:
            data = self._literal(negative).data
            if len(_LITERALS) > 100_000:
                _LITERALS.clear()
            _LITERALS[key] = data
        else:
            self.advance()
        return Constant(data.copy())

    def _literal(self, negative):
        tok = self.advance()
        sign = "-" if negative else ""
        try:
            if tok[0] == "ident":
                m = SPECIAL_FLOAT.fullmatch(tok[1])
                dtype = DTYPE_OF_SUFFIX[m.group(2) or "f"]
                return Constant(float_value(sign + m.group(1), dtype))
            m = _NUMBER.fullmatch(tok[1])
            number, suffix = m.group(1), m.group(2)
            is_float = "." in number or "e" in number or "E" in number
            if suffix is None:
                dtype = "float32" if is_float else "int32"
            else:
                dtype = DTYPE_OF_SUFFIX.get(suffix)
                if dtype is None:
                    raise self.error(f"unknown literal suffix {suffix!r} in {tok[1]!r}; use f, f16, "
                                     "f32, f64, i (int32), i8, i16, i32, i64, u8, u16, u32 or u64",
                                     tok)
            if dtype in FLOAT_DTYPES:
                return Constant(float_value(sign + number, dtype))
            if is_float:
                raise self.error(f"an integer literal has no fraction or exponent: {tok[1]!r}", tok)
            if suffix is None and len(number) > 9 and not _fits(sign + number, "int32"):
                dtype = "int64"      # as Relay: a number without suffix too large for int32
            return Constant(int_value(sign + number, dtype))
        except ValueError as exc:
            raise self.error(f"bad literal {sign}{tok[1]}: {exc}", tok) from None

    def kw_bool(self):
        return Constant(np.asarray(self.advance()[1] == "True"))

    def kw_const(self):
        start = self.advance()
        self.expect("(", "'(' after 'const'")
        elements, shape = self.const_data()
        self.expect(",", "',' and the dtype")
        dtype = self.dtype()
        given_shape = None
        if self.at(","):
            self.advance()
            if self.tok[1] != "shape":
                raise self.error(f"expected 'shape=' or ')', found {self.describe()}")
            self.advance()
            self.expect("=")
            given_shape = self.shape()
        self.expect(")")
        if given_shape is not None:
            if int(np.prod(given_shape)) != len(elements) or (elements and given_shape != shape):
                raise self.error(f"shape={given_shape} does not match the data of shape {shape}", start)
            shape = given_shape
        try:
            return Constant(_array(elements, dtype, shape))
        except ValueError as exc:
            raise self.error(f"bad constant: {exc}", start) from None

    def const_data(self):
        """Nested `[...]` lists of element texts and their shape, read with an explicit stack."""
        if not self.at("["):
            return [self.const_element()], ()
        elements, counts, opened = [], [], []
        dims, leaf_depth = {}, None          # children per list at each level; depth of leaves
        while True:
            if self.at("["):
                if counts:
                    counts[-1] += 1
                if len(counts) >= MAX_DEPTH:
                    raise self.error("the constant is nested too deeply")
                opened.append(self.advance())
                counts.append(0)
                continue
            if self.at("]"):
                tok, count = opened.pop(), counts.pop()
                if dims.setdefault(len(counts), count) != count:
                    raise self.error("the constant's lists have different lengths (a ragged array)", tok)
                self.advance()
            else:
                if not counts:
                    raise self.error(f"expected '[' or a number, found {self.describe()}")
                if leaf_depth is None:
                    leaf_depth = len(counts)
                elif leaf_depth != len(counts):
                    raise self.error("the constant's elements sit at different depths")
                elements.append(self.const_element())
                counts[-1] += 1
            if not counts:
                break
            if self.at(","):
                self.advance()
            elif not self.at("]"):
                raise self.error(f"expected ',' or ']' in the constant, found {self.describe()}")
        shape = tuple(dims[level] for level in range(len(dims)))
        if leaf_depth is not None and leaf_depth != len(shape):
            raise self.error("the constant's elements sit at different depths")
        return elements, shape

    def const_element(self):
        tok = self.tok
        sign = ""
        if tok[0] == "punct" and tok[1] == "-":
            sign = "-"
            self.advance()
            tok = self.tok
        if tok[0] == "number" and _NUMBER.fullmatch(tok[1]).group(2) is None:
            self.advance()
            return sign + tok[1]
        if tok[0] == "ident" and (is_special_element(tok[1]) or (tok[1] in ("True", "False") and not sign)):
            self.advance()
            return sign + tok[1]
        raise self.error(f"expected a number, inf, nan, True or False in the constant, found {self.describe()}")
