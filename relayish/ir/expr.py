"""Expression nodes: plain data, compared by identity.

Var | GlobalVar | Constant | Tuple | TupleGetItem | Function | Call | Let | If | Match
| Constructor | RefCreate | RefRead | RefWrite | Op (in op.py)
Match clauses hold patterns: PatternWildcard | PatternVar | PatternConstructor | PatternTuple.

Nodes carry no pass logic. `checked_type` is filled in by type inference. Python operators on
expressions build op calls (`x + y` is `add(x, y)`); `==` stays identity, use `rl.equal`.
"""
from __future__ import annotations

from attrs import define, field
import numpy as np

from relayish.errors import RelayishError
from relayish.ir.types import Type, TensorType, normalize_dtype


class Node:
    """Base of expressions and patterns; identity equality, shallow repr."""

    __slots__ = ()

    def __repr__(self):
        return f"<{type(self).__name__} {_short_text(self)}>"

    def __str__(self):
        from relayish.ir.text.printer import astext
        return astext(self)


def _short_text(node, limit=80):
    try:
        from relayish.ir.text.printer import astext
        text = " ".join(astext(node).split())
    except Exception:  # noqa: BLE001 - repr must never fail, even half-built nodes print
        return f"at {id(node):#x}"
    return text if len(text) <= limit else text[: limit - 3] + "..."


class Expr(Node):
    __slots__ = ()

    # ---- type inference results ------------------------------------------------------------
    @property
    def checked_type(self) -> Type:
        t = getattr(self, "_checked_type", None)
        if t is None:
            raise RelayishError(f"the type of {_short_text(self)} has not been inferred; "
                                "call rl.infer_type first or use rl.typeof")
        return t

    # ---- operator overloads ----------------------------------------------------------------
    def __add__(self, other): return _binary("add", self, other)
    def __radd__(self, other): return _binary("add", other, self)
    def __sub__(self, other): return _binary("subtract", self, other)
    def __rsub__(self, other): return _binary("subtract", other, self)
    def __mul__(self, other): return _binary("multiply", self, other)
    def __rmul__(self, other): return _binary("multiply", other, self)
    def __truediv__(self, other): return _binary("divide", self, other)
    def __rtruediv__(self, other): return _binary("divide", other, self)
    def __pow__(self, other): return _binary("power", self, other)
    def __rpow__(self, other): return _binary("power", other, self)
    def __matmul__(self, other): return _binary("matmul", self, other)
    def __rmatmul__(self, other): return _binary("matmul", other, self)
    def __lt__(self, other): return _binary("less", self, other)
    def __gt__(self, other): return _binary("greater", self, other)
    def __le__(self, other): return _binary("less_equal", self, other)
    def __ge__(self, other): return _binary("greater_equal", self, other)
    def __neg__(self): return _call_op("negative", [self])

    __hash__ = object.__hash__

    def __eq__(self, other):
        return self is other

    def __ne__(self, other):
        return self is not other

    def __bool__(self):
        return True

    def __getitem__(self, index):
        if not isinstance(index, (int, np.integer)):
            raise RelayishError(f"expr[i] projects a tuple field and needs an int, got {index!r}")
        return TupleGetItem(self, int(index))

    def __call__(self, *args):
        return Call(self, list(args))


def _call_op(name, args, **op_attrs):
    from relayish.ir.op import make_call
    return make_call(name, list(args), op_attrs)


def dtype_hint(expr, depth=8):
    """The dtype an expression evidently has, without type inference (None when unknown).

    Used to give Python scalars in `x * 2.0` the dtype of `x`, so float64 programs stay float64.
    """
    for _ in range(depth):
        t = getattr(expr, "_checked_type", None)
        if isinstance(t, TensorType):
            return t.dtype
        if isinstance(expr, Var):
            t = expr.type_annotation
            if isinstance(t, TensorType):
                return t.dtype
            if t is None and expr._value_hint is not None:
                expr = expr._value_hint
                continue
            return None
        if isinstance(expr, Constant):
            return expr.data.dtype.name
        if isinstance(expr, Tuple) and expr.fields:     # concatenate/stack((a, ...)): a's dtype
            expr = expr.fields[0]
            continue
        if isinstance(expr, Call) and type(expr.op).__name__ == "Op" and expr.op.name in (
                "cast", "zeros", "ones"):
            return expr.attrs.get("dtype")
        if isinstance(expr, Call) and expr.args and type(expr.op).__name__ == "Op":
            if expr.op.name in ("less", "greater", "less_equal", "greater_equal", "equal",
                                "not_equal", "logical_and", "logical_or", "logical_not"):
                return None
            # where(cond, x, y) and cast_like(x, like) take their dtype from a later argument
            expr = expr.args[{"where": 1, "cast_like": 1}.get(expr.op.name, 0)]
            continue
        return None
    return None


def as_expr(value, like=None) -> Expr:
    """Expr as is; Python scalars and arrays become Constants (with the dtype of `like`)."""
    if isinstance(value, Expr):
        return value
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, Expr) for v in value):
        return Tuple(list(value))
    dtype = None
    if isinstance(value, (bool, np.bool_)):
        dtype = "bool"
    elif isinstance(value, (float, int)) and like is not None:
        hint = dtype_hint(like)
        if hint is not None and hint != "bool" and not (isinstance(value, float) and hint.startswith(("int", "uint"))):
            dtype = hint
    return const(value, dtype=dtype)


def _binary(name, a, b):
    if not isinstance(a, Expr):
        a = as_expr(a, like=b)
    if not isinstance(b, Expr):
        b = as_expr(b, like=a)
    return _call_op(name, [a, b])


def _const_array(value, dtype):
    if dtype is not None:
        arr = np.asarray(value, dtype=normalize_dtype(dtype))
    elif isinstance(value, (bool, np.bool_)):
        arr = np.asarray(value, dtype="bool")
    elif isinstance(value, int):
        arr = np.asarray(value, dtype="int32")
    elif isinstance(value, float) and not isinstance(value, np.generic):  # np.float64 keeps its dtype
        arr = np.asarray(value, dtype="float32")
    else:
        arr = np.asarray(value)
        if arr.dtype.kind == "f" and not isinstance(value, np.ndarray | np.generic):
            arr = arr.astype("float32")      # a nested Python list of floats: float32 like scalars
        elif arr.dtype.kind == "i" and not isinstance(value, np.ndarray | np.generic):
            arr = arr.astype("int32")
    normalize_dtype(arr.dtype)  # raises on object/complex/str arrays
    return arr


# ---- nodes ---------------------------------------------------------------------------------

@define(eq=False, repr=False)
class Var(Expr):
    """A binder. Two Vars with the same name are different variables."""
    name_hint: str
    type_annotation: Type | None = None
    _checked_type: Type | None = field(default=None, init=False)
    # the value a builder bound it to: only a dtype hint for Python scalars (`y > 1.0`)
    _value_hint: Expr | None = field(default=None, init=False)


@define(eq=False, repr=False)
class GlobalVar(Expr):
    """A module-level function name (`@f`)."""
    name_hint: str
    _checked_type: Type | None = field(default=None, init=False)


@define(eq=False, repr=False)
class Constant(Expr):
    data: np.ndarray
    _checked_type: Type | None = field(default=None, init=False)


@define(eq=False, repr=False)
class Tuple(Expr):
    fields: list = field(converter=list)
    _checked_type: Type | None = field(default=None, init=False)


@define(eq=False, repr=False)
class TupleGetItem(Expr):
    tuple_value: Expr
    index: int
    _checked_type: Type | None = field(default=None, init=False)


@define(eq=False, repr=False)
class Function(Expr):
    params: list = field(converter=list)
    body: Expr = field()
    ret_type: Type | None = None
    type_params: list = field(converter=list, factory=list)
    _checked_type: Type | None = field(default=None, init=False)


@define(eq=False, repr=False)
class Call(Expr):
    """`op(args)`; op is an Op, a Constructor, or any expression of function type.

    `attrs` holds an Op's keyword attributes (axis=, keepdims=, ...), empty otherwise.
    """
    op: Expr
    args: list = field(converter=list)
    attrs: dict = field(factory=dict, converter=lambda d: dict(d or {}))
    _checked_type: Type | None = field(default=None, init=False)


@define(eq=False, repr=False)
class Let(Expr):
    var: Var
    value: Expr
    body: Expr
    _checked_type: Type | None = field(default=None, init=False)


@define(eq=False, repr=False)
class If(Expr):
    cond: Expr
    true_branch: Expr
    false_branch: Expr
    _checked_type: Type | None = field(default=None, init=False)


@define(eq=False, repr=False)
class Constructor(Expr):
    """An ADT constructor; calling it (`Call(ctor, fields)`) builds a value."""
    name_hint: str
    inputs: list = field(converter=list)
    belong_to: object = None          # the GlobalTypeVar of its TypeData
    tag: int = -1                     # set when its TypeData is built
    type_data: object = None          # its TypeData, set when that is built
    _checked_type: Type | None = field(default=None, init=False)


@define(eq=False, repr=False)
class RefCreate(Expr):
    value: Expr
    _checked_type: Type | None = field(default=None, init=False)


@define(eq=False, repr=False)
class RefRead(Expr):
    ref: Expr
    _checked_type: Type | None = field(default=None, init=False)


@define(eq=False, repr=False)
class RefWrite(Expr):
    """`ref := value`; evaluates to ()."""
    ref: Expr
    value: Expr
    _checked_type: Type | None = field(default=None, init=False)


# ---- match and patterns --------------------------------------------------------------------

class Pattern(Node):
    __slots__ = ()


@define(eq=False, repr=False)
class PatternWildcard(Pattern):
    pass


@define(eq=False, repr=False)
class PatternVar(Pattern):
    var: Var


@define(eq=False, repr=False)
class PatternConstructor(Pattern):
    constructor: Constructor
    patterns: list = field(converter=list, factory=list)


@define(eq=False, repr=False)
class PatternTuple(Pattern):
    patterns: list = field(converter=list, factory=list)


@define(eq=False, repr=False)
class Clause(Node):
    lhs: Pattern
    rhs: Expr


@define(eq=False, repr=False)
class Match(Expr):
    """`match (data) { clauses }`. `complete=False` (Relay's `match?`) allows missing cases."""
    data: Expr
    clauses: list = field(converter=list)
    complete: bool = True
    _checked_type: Type | None = field(default=None, init=False)


# ---- convenience constructors --------------------------------------------------------------

def var(name, type=None, shape=None, dtype=None) -> Var:  # noqa: A002 - API name
    """`rl.var("x", shape=(3,), dtype="float32")` or `rl.var("x", type=t)`; default float32 scalar."""
    if type is not None and (shape is not None or dtype is not None):
        raise RelayishError("rl.var takes either type= or shape=/dtype=, not both")
    if type is None:
        type = TensorType(() if shape is None else shape, "float32" if dtype is None else dtype)
    if not isinstance(type, Type):
        raise RelayishError(f"rl.var: type must be a relayish Type, got {type!r}")
    return Var(name, type)


def const(value, dtype=None) -> Constant:
    """`rl.const(2.0)` is a float32 scalar, `rl.const(3)` int32, arrays keep their dtype."""
    return Constant(_const_array(value, dtype))
