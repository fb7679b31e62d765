"""Types: frozen values, equal when structurally equal, hashable.

TensorType(shape, dtype) | TupleType(fields) | FuncType(arg_types, ret_type, type_params)
| RefType(value) | TypeVar(name) | GlobalTypeVar(name) | TypeCall(func, args)
TypeData (an ADT definition, in expr.py: it holds Constructors) is not a type but the
definition behind a GlobalTypeVar. Each type class declares its fields (fields.py), so
`type_components` and `map_type` walk any type; `type_text` is a type's text form (str(t)).
"""
from __future__ import annotations

import re

import attrs
import numpy as np

from relayish.errors import RelayishError
from relayish.ir.fields import DATA, TYPE, TYPES, fields_of, node_field

DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "float32", "float64")
FLOAT_DTYPES = ("float16", "float32", "float64")
_CANONICAL = frozenset(DTYPES)
_NUMPY_NAMES = {np.dtype(d): d for d in DTYPES}
INT_DTYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")


# dtype names that numpy and Relay's text format read differently (numpy: float64, int64,
# uint64; Relay: float32, int32, uint32): the Python API refuses them rather than guess
_AMBIGUOUS = {"float": ("float32", "float64"), "int": ("int32", "int64"),
              "uint": ("uint32", "uint64")}


def normalize_dtype(dtype) -> str:
    """np.float64 or "float64" -> "float64"; Python's float, int and bool follow numpy
    (float64, int64, bool). The bare names "float", "int" and "uint" are a RelayishError (numpy
    reads "float" as float64, Relay's text format as float32), as is anything unknown."""
    if type(dtype) is str and dtype in _CANONICAL:    # the common case, and the fast one
        return dtype
    known = _NUMPY_NAMES.get(dtype) if isinstance(dtype, np.dtype) else None
    if known is not None:           # an array's dtype: numpy's .name costs about 9 us
        return known
    # only the strings: np.dtype("float64") == "float" is True in numpy
    if isinstance(dtype, str) and dtype in _AMBIGUOUS:
        narrow, wide = _AMBIGUOUS[dtype]
        raise RelayishError(f"the dtype name {dtype!r} is ambiguous: numpy reads it as {wide}, "
                            f"Relay's text format as {narrow}; write {narrow!r} or {wide!r}")
    try:
        name = np.dtype(dtype).name
    except (TypeError, ValueError):       # ValueError: an object whose .dtype is no dtype
        raise RelayishError(f"unknown dtype {_described(dtype)}; expected one of "
                            f"{', '.join(DTYPES)}") from None
    if name not in DTYPES:
        raise RelayishError(f"unsupported dtype {name!r}; expected one of {', '.join(DTYPES)}")
    return name


def _shape(shape) -> tuple:
    if isinstance(shape, (int, np.integer)):
        shape = (shape,)
    try:
        dims = tuple(shape)
    except TypeError:
        raise RelayishError(f"a shape is a tuple of ints, got {_described(shape)}") from None
    for d in dims:
        if not isinstance(d, (int, np.integer)) or isinstance(d, bool) or d < 0:
            raise RelayishError(f"a shape is a tuple of non-negative ints, got {_described(shape)}")
        if d > _MAX_DIM:     # no array has such a dimension; the text format reads int64 dims
            raise RelayishError(f"a shape's dimensions are at most 2**63 - 1, got {d} in {_described(shape)}")
    return tuple(int(d) for d in dims)


_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_MAX_DIM = 2**63 - 1


def printable_name(name) -> str | None:
    """Why `name` cannot be a constructor or ADT name (None when it can): the text format prints
    those bare, so they must read back as the same name."""
    from relayish.ir.text.lexer import KEYWORDS     # the text format's reserved words
    if not isinstance(name, str):
        return f"a name is a str, got {type(name).__name__}"
    if not _IDENTIFIER.fullmatch(name):
        return f"{name!r} is not an identifier (letters, digits and _, not starting with a digit)"
    if name in KEYWORDS:
        return f"{name!r} is a keyword of the text format"
    return None


def _types(node_name, what):
    """A converter to a tuple of Types, naming the type and field when an item is not one."""
    def convert(value):
        if isinstance(value, (Type, str)) or not _iterable(value):
            raise RelayishError(f"rl.{node_name}: {what} must be a list of relayish Types, "
                                f"got {_described(value)}")
        items = tuple(value)
        for k, t in enumerate(items):
            if not isinstance(t, Type):
                raise RelayishError(f"rl.{node_name}: {what} must be a list of relayish Types; "
                                    f"item {k} is {_described(t)}")
        return items
    return convert


def _a_type(node_name, what):
    def validate(node, attribute, value):
        if not isinstance(value, Type):
            raise RelayishError(f"rl.{node_name}: {what} must be a relayish Type, "
                                f"got {_described(value)}")
    return validate


def _iterable(value) -> bool:
    return isinstance(value, (list, tuple)) or hasattr(value, "__next__")


def _described(value) -> str:
    """A short, address-free text of a wrong field value (expr.describe, without importing it)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        text = repr(value)
        return text if len(text) <= 60 else text[:57] + "..."
    if isinstance(value, Type):
        return f"the type {value}"
    if isinstance(value, (list, tuple)):        # a shape: its items matter
        text = _ADDRESS.sub("", repr(value))
        return text if len(text) <= 60 else text[:57] + "..."
    return "an object" if type(value) is object else f"a {type(value).__name__} object"


_ADDRESS = re.compile(r" (object )?at 0x[0-9a-fA-F]+")


def _type_name(kind):
    def validate(node, attribute, name):
        if kind == "TypeVar":
            # printed bare, so an identifier (`a b%` would not read back); dtype and keyword
            # names are fine: the parser reads a bound type variable's name first
            if not isinstance(name, str):
                problem = f"a name is a str, got {_described(name)}"
            elif not _IDENTIFIER.fullmatch(name):
                problem = (f"{name!r} is not an identifier (letters, digits and _, not starting "
                           "with a digit)")
            else:
                problem = None
        else:
            problem = printable_name(name)
            if problem is None and name in DTYPES:
                problem = f"{name!r} is a dtype, which the text format reads as a tensor type"
        if problem is not None:
            raise RelayishError(f"rl.{kind}: {problem}; choose another name")
    return validate


class Type:
    """Base of all types. str(t) is its text form."""

    def __str__(self):
        return type_text(self)


@attrs.frozen(repr=False)
class TensorType(Type):
    shape: tuple = node_field(DATA, converter=_shape, default=())
    dtype: str = node_field(DATA, converter=normalize_dtype, default="float32")

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def is_float(self):
        return self.dtype in FLOAT_DTYPES

    def __repr__(self):
        return f"TensorType({self.shape}, {self.dtype!r})"


@attrs.frozen(repr=False)
class TupleType(Type):
    fields: tuple = node_field(TYPES, converter=_types("TupleType", "fields"), default=())

    def __repr__(self):
        return f"TupleType({list(self.fields)!r})"


@attrs.frozen(repr=False)
class TypeVar(Type):
    name: str = node_field(DATA, validator=_type_name("TypeVar"))

    def __repr__(self):
        return f"TypeVar({self.name!r})"


@attrs.frozen(repr=False)
class GlobalTypeVar(Type):
    name: str = node_field(DATA, validator=_type_name("GlobalTypeVar"))

    def __repr__(self):
        return f"GlobalTypeVar({self.name!r})"


@attrs.frozen(repr=False)
class FuncType(Type):
    arg_types: tuple = node_field(TYPES, converter=_types("FuncType", "arg_types"))
    ret_type: Type = node_field(TYPE, validator=_a_type("FuncType", "ret_type"))
    # binders of type variables, not components: DATA
    type_params: tuple = node_field(DATA, converter=_types("FuncType", "type_params"), default=())

    def __repr__(self):
        return f"FuncType({list(self.arg_types)!r}, {self.ret_type!r}, {list(self.type_params)!r})"


@attrs.frozen(repr=False)
class RefType(Type):
    value: Type = node_field(TYPE, validator=_a_type("RefType", "value"))

    def __repr__(self):
        return f"RefType({self.value!r})"


@attrs.frozen(repr=False)
class TypeCall(Type):
    func: GlobalTypeVar = node_field(DATA)        # the ADT's name, not a component
    args: tuple = node_field(TYPES, converter=_types("TypeCall", "args"), default=())

    @func.validator
    def _check_func(self, attribute, value):
        if not isinstance(value, GlobalTypeVar):
            raise RelayishError(f"rl.TypeCall: func must be the GlobalTypeVar of an ADT, "
                                f"got {_described(value)}")

    def __repr__(self):
        return f"TypeCall({self.func!r}, {list(self.args)!r})"


def unit_type() -> TupleType:
    """The type of `()`, which RefWrite returns."""
    return TupleType(())


def scalar_type(dtype="float32") -> TensorType:
    return TensorType((), dtype)


def type_components(t: Type) -> list:
    """The types directly inside `t`, in field order: tuple fields, argument and result types,
    a ref's content, a type call's arguments (its TYPE and TYPES fields)."""
    declared = _type_fields(type(t))
    out = []
    for name, kind in declared:
        if kind == TYPE:
            out.append(getattr(t, name))
        else:
            out.extend(getattr(t, name))
    return out


def map_type(t: Type, fn) -> Type:
    """`t` with `fn` applied to each type directly inside it (type_components); `t` itself when
    fn returned each unchanged. One level: fn recurses if it wants the whole type, e.g.

        def widen(t):           # every float32 tensor inside t becomes float64
            if isinstance(t, TensorType):
                return TensorType(t.shape, "float64") if t.dtype == "float32" else t
            return map_type(t, widen)
    """
    declared = _type_fields(type(t))
    if not declared:
        return t
    changed, values = False, {}
    for name, kind in declared:
        old = getattr(t, name)
        if kind == TYPE:
            new = fn(old)
        else:
            new = tuple(fn(x) for x in old)
            if all(a is b for a, b in zip(new, old)):
                new = old
        changed = changed or new is not old
        values[name] = new
    return attrs.evolve(t, **values) if changed else t


_COMPONENTS: dict = {}      # type class -> its TYPE and TYPES fields


def _type_fields(cls) -> tuple:
    declared = _COMPONENTS.get(cls)
    if declared is None:
        # a type class that is no attrs class (the checker's holes) has no components
        declared = () if not attrs.has(cls) else tuple(
            (name, kind) for name, kind in fields_of(cls) if kind in (TYPE, TYPES))
        _COMPONENTS[cls] = declared
    return declared


def is_tensor_tree(t: Type) -> bool:
    """Whether `t` is a tensor or a (nested) tuple of tensors: what ops take and return."""
    stack = [t]
    while stack:
        t = stack.pop()
        if isinstance(t, TupleType):
            stack.extend(t.fields)
        elif not isinstance(t, TensorType):
            return False
    return True


def walk_type(t: Type, resolve=None):
    """Every type inside `t`, `t` included, with an explicit stack (types can be deep).

    `resolve` maps each visited type first (the type checker passes its union-find lookup).
    """
    stack = [t]
    while stack:
        t = stack.pop()
        if resolve is not None:
            t = resolve(t)
        yield t
        stack.extend(reversed(type_components(t)))


def free_type_vars(t: Type) -> list:
    """The TypeVars in `t` that are not bound by an enclosing FuncType, in order of appearance."""
    out, bound, stack = [], set(), [(t, frozenset())]
    while stack:
        t, bound = stack.pop()
        if isinstance(t, TypeVar):
            if t not in bound and t not in out:
                out.append(t)
            continue
        if isinstance(t, FuncType) and t.type_params:
            bound = bound | frozenset(t.type_params)
        stack.extend((c, bound) for c in reversed(type_components(t)))
    return out


def substitute(t: Type, subst: dict) -> Type:
    """Replace TypeVars by the types `subst` maps them to (type_params of a FuncType shadow)."""
    if not subst:
        return t
    if isinstance(t, TypeVar):
        return subst.get(t, t)
    if isinstance(t, FuncType) and any(p in subst for p in t.type_params):
        inner = {k: v for k, v in subst.items() if k not in t.type_params}
        return map_type(t, lambda c: substitute(c, inner))
    return map_type(t, lambda c: substitute(c, subst))


# ---- text ------------------------------------------------------------------------------------

def type_text(t, shadowed=()) -> str:
    """`float32`, `Tensor[(2, 3), float64]`, `(T1, T2)`, `fn [a](a) -> a`, `ref(T)`, `List[a]`.

    `shadowed`: the names of the type variables in scope. A type variable may be named like a
    dtype or an ADT (`type T[float32] { C(float32) }`); the parser reads a name in scope as the
    variable, so within its scope the scalar type prints as `Tensor[(), float32]` and an ADT
    without arguments as `Nat[]`. A loop with an explicit stack: types may nest deeply.
    """
    out, stack = [], [(t, shadowed)]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            out.append(item)
            continue
        t, shadowed = item
        rule = _TEXT.get(type(t))
        if rule is None:
            if t is None:
                out.append("?")
                continue
            raise RelayishError(f"cannot print {t!r} as a type")
        stack.extend(reversed(rule(t, shadowed)))
    return "".join(out)


def _listed(types, shadowed) -> list:
    """The pieces of `T1, T2, ...`."""
    pieces = []
    for k, t in enumerate(types):
        if k:
            pieces.append(", ")
        pieces.append((t, shadowed))
    return pieces


def _tensor_text(t, shadowed):
    if not t.shape:
        return [f"Tensor[(), {t.dtype}]" if t.dtype in shadowed else t.dtype]
    if len(t.shape) == 1:
        return [f"Tensor[({t.shape[0]}), {t.dtype}]"]
    return [f"Tensor[({', '.join(str(d) for d in t.shape)}), {t.dtype}]"]


def _tuple_text(t, shadowed):
    if len(t.fields) == 1:
        return ["(", (t.fields[0], shadowed), ",)"]
    return ["(", *_listed(t.fields, shadowed), ")"]


def _func_text(t, shadowed):
    params = ""
    if t.type_params:
        params = "[" + ", ".join(p.name for p in t.type_params) + "]"
        shadowed = set(shadowed) | {p.name for p in t.type_params}
    return [f"fn {params}(", *_listed(t.arg_types, shadowed), ") -> ", (t.ret_type, shadowed)]


def _type_call_text(t, shadowed):
    if not t.args:
        # `Nat`: the parser reads it back as Nat[]; `Nat[]` where a type variable is Nat
        return [t.func.name + ("[]" if t.func.name in shadowed else "")]
    return [t.func.name, "[", *_listed(t.args, shadowed), "]"]


_TEXT = {
    TensorType: _tensor_text,
    TupleType: _tuple_text,
    FuncType: _func_text,
    RefType: lambda t, shadowed: ["ref(", (t.value, shadowed), ")"],
    TypeVar: lambda t, shadowed: [t.name],
    GlobalTypeVar: lambda t, shadowed: [t.name],
    TypeCall: _type_call_text,
}
