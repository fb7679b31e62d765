"""The type grammar: annotations, types, shapes, and `type` / `extern type` definitions.

    T ::= (T, ...) | fn [a, ...](T, ...) -> T | ref(T) | Tensor[(d, ...), dtype] | dtype
        | Adt | Adt[T, ...] | a         dtype: a DTYPES name, or Relay's int, uint, float
    type Adt[a, ...] { Ctor(T, ...), ... }      extern type Adt[a, ...]

A name bound by the enclosing `[...]` type parameters reads as that type variable before
anything else (unless `(` or `[` follows), so a type variable may be named like a dtype or an
ADT. `_` as a whole annotation is left to inference. Type nesting counts toward MAX_DEPTH.
"""
from __future__ import annotations

from relayish.errors import RelayishError
from relayish.ir.expr import Constructor, TypeData
from relayish.ir.text.lexer import KEYWORDS
from relayish.ir.text.parse_core import ParserCore
from relayish.ir.types import (DTYPES, FuncType, GlobalTypeVar, RefType, TensorType, TupleType,
                               TypeCall, TypeVar)

# Relay's short dtype names: `int` is int32, `uint` uint32, `float` float32 (its DataType
# parser reads a bare type code with 32 bits); the printer writes the full names
DTYPE_ALIASES = {"int": "int32", "uint": "uint32", "float": "float32"}
_DTYPE_NAMES = {**{d: d for d in DTYPES}, **DTYPE_ALIASES}
_SCALAR_TYPES = {name: TensorType((), d) for name, d in _DTYPE_NAMES.items()}
_MAX_DIM = 2**63 - 1           # TensorType's own limit: shapes are int64


class TypeSyntax(ParserCore):
    """Types and type definitions (the module's parse adds each TypeData to the module)."""

    def type_definition(self):
        """`type T[a] { C(a), D }`, or `extern type T[a]`: an ADT without constructors (what
        Relay declares for types defined outside the program)."""
        extern = self.at("extern", "ident")
        if extern:
            start = self.advance()
            self.expect("type", "'type' after 'extern'")
        else:
            start = self.expect("type")
        if self.tok[0] != "ident":
            raise self.error(f"expected the type's name, found {self.describe()}")
        name_tok = self.advance()
        header = self.type_names.get(name_tok[1])
        if header is None:        # pass 1 missed it (unbalanced brackets before it)
            header = self.type_names[name_tok[1]] = self.build(GlobalTypeVar, name_tok, name_tok[1])
        type_vars = self.type_params()
        self.type_scopes.open({v.name: v for v in type_vars})
        ctors = []
        if extern:
            if self.at("{"):
                raise self.error("an extern type has no constructors: write `type` to define them")
            self.type_scopes.close()
            return self.add_type_data(header, type_vars, ctors, start, name_tok)
        self.expect("{")
        while not self.at("}"):
            if self.tok[0] != "ident" or self.tok[1] in KEYWORDS:
                raise self.error(f"expected a constructor name, found {self.describe()}")
            if any(c.name_hint == self.tok[1] for c in ctors):
                raise self.error(f"the type has two constructors named {self.tok[1]}")
            ctor_tok = self.advance()
            ctor_name = ctor_tok[1]
            inputs = []
            if self.at("("):
                self.advance()
                while not self.at(")"):
                    inputs.append(self.type())
                    if not self.at(")"):
                        self.expect(",", "',' or ')'")
                self.advance()
            ctors.append(self.build(Constructor, ctor_tok, ctor_name, inputs, header))
            if not self.at("}"):
                self.expect(",", "',' or '}'")
        self.advance()
        self.type_scopes.close()
        return self.add_type_data(header, type_vars, ctors, start, name_tok)

    def add_type_data(self, header, type_vars, ctors, start, name_tok):
        try:
            self.mod.add_type(TypeData(header, type_vars, ctors))
        except RelayishError as exc:
            raise self.error(str(exc), start) from None
        self.constructors.update((c.name_hint, c) for c in ctors)
        return name_tok[1]

    def type_params(self):
        params = []
        if self.at("["):
            self.advance()
            while not self.at("]"):
                if self.tok[0] != "ident":
                    raise self.error(f"expected a type parameter name, found {self.describe()}")
                params.append(TypeVar(self.advance()[1]))
                if not self.at("]"):
                    self.expect(",", "',' or ']'")
            self.advance()
        return params

    def annotation(self):
        if self.at(":"):
            self.advance()
            return self.whole_type()
        return None

    def whole_type(self):
        """A type annotation; `_` (Relay's incomplete type: left to inference) is the same as
        no annotation. Inside a type (`(_, int32)`) relayish has no unknown parts."""
        tok = self.tok
        if tok[0] == "ident" and tok[1] == "_" and self.type_scopes.get("_") is None:
            self.advance()
            return None
        return self.type()

    def type(self):
        self.enter()
        try:
            return self._type()
        finally:
            self.depth -= 1

    def _type(self):
        tok = self.tok
        if tok[0] == "punct" and tok[1] == "(":
            self.advance()
            fields, trailing = [], False
            while not self.at(")"):
                fields.append(self.type())
                trailing = False
                if not self.at(")"):
                    self.expect(",", "',' or ')'")
                    trailing = True
            self.advance()
            if len(fields) == 1 and not trailing:
                return fields[0]
            return TupleType(fields)
        if tok[0] != "ident":
            raise self.error(f"expected a type, found {self.describe()}")
        name = tok[1]
        bound = self.type_scopes.get(name)
        if bound is not None and self.peek()[1] not in ("(", "["):
            # a type variable in scope wins over a dtype or keyword of its name (`type T[float32]
            # { C(float32) }`); the printer writes the shadowed scalar type as Tensor[(), float32]
            self.advance()
            return bound
        if name == "fn":
            self.advance()
            type_params = self.type_params()
            self.type_scopes.open({p.name: p for p in type_params})
            self.expect("(")
            args = []
            while not self.at(")"):
                args.append(self.type())
                if not self.at(")"):
                    self.expect(",", "',' or ')'")
            self.advance()
            self.expect("->")
            ret = self.type()
            self.type_scopes.close()
            return FuncType(args, ret, type_params)
        if name == "ref":
            self.advance()
            self.expect("(")
            value = self.type()
            self.expect(")")
            return RefType(value)
        if name == "Tensor" and self.peek()[1] == "[":
            self.advance()
            self.advance()
            shape = self.shape()
            self.expect(",")
            dtype = self.dtype()
            self.expect("]")
            return TensorType(shape, dtype)
        scalar = _SCALAR_TYPES.get(name)
        if scalar is not None:
            self.advance()
            return scalar
        gtv = self.type_names.get(name)
        if gtv is not None:
            self.advance()
            if not self.at("["):
                return TypeCall(gtv, []) if name in self.nullary_types else gtv
            self.advance()
            args = []
            while not self.at("]"):
                args.append(self.type())
                if not self.at("]"):
                    self.expect(",", "',' or ']'")
            self.advance()
            return TypeCall(gtv, args)
        if name == "_":
            raise self.error("`_` (a type left to inference) stands only for a whole annotation "
                             "(`let %x: _ = ...`), not for part of a type")
        if self.peek()[1] == "[" or name in KEYWORDS:
            raise self.error(f"unknown type {name!r}")
        self.advance()
        return TypeVar(name)          # a type variable bound further out

    def dtype(self):
        dtype = _DTYPE_NAMES.get(self.tok[1]) if self.tok[0] == "ident" else None
        if dtype is None:
            raise self.error(f"expected a dtype ({', '.join(DTYPES)}), found {self.describe()}")
        self.advance()
        return dtype

    def shape(self):
        """`(2, 3)`, `(2)`, `(2,)` or `()`."""
        self.expect("(", "'(' and a shape")
        dims = []
        while not self.at(")"):
            tok = self.tok
            if tok[0] != "number" or not tok[1].isdigit():
                raise self.error(f"expected a dimension (a non-negative integer), found {self.describe()}")
            self.advance()
            if len(tok[1]) > 19 or int(tok[1]) > _MAX_DIM:
                raise self.error(f"the dimension {tok[1][:30]} is too large (at most 2**63 - 1)", tok)
            dims.append(int(tok[1]))
            if not self.at(")"):
                self.expect(",", "',' or ')'")
        self.advance()
        return tuple(dims)
