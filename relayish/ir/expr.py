"""Expression nodes: plain data, compared by identity.

Var | GlobalVar | Constant | Tuple | TupleGetItem | Function | Call | Let | If | Match
| Constructor | RefCreate | RefRead | RefWrite | Op (in op.py)
Match clauses hold patterns: PatternWildcard | PatternVar | PatternConstructor | PatternTuple.

Nodes carry no pass logic. `checked_type` is filled in by type inference. Python operators on
expressions build op calls (`x + y` is `add(x, y)`, `x == y` is `equal(x, y)`); nodes compare
by identity everywhere else (`is`; the hash is the identity's).
"""
from __future__ import annotations

import math
import re

from attrs import Converter, define, field
import numpy as np

from relayish.errors import RelayishError
from relayish.ir.fields import (CLAUSES, DATA, EXPR, EXPRS, PATTERN, PATTERNS, TYPE, TYPES, VAR,
                                VARS, node_field)
from relayish.ir.float_range import float_overflows, float_range_message
from relayish.ir.types import (DTYPES, FuncType, GlobalTypeVar, Type, TensorType, TypeVar,
                               normalize_dtype, printable_name)


class Node:
    """Base of expressions and patterns; identity equality, shallow repr."""

    __slots__ = ()

    def __repr__(self):
        return f"<{type(self).__name__} {_short_text(self)}>"

    def __str__(self):
        return program_text(self)

    def __iter__(self):
        # without this, Python iterates any class with __getitem__ by calling it with 0, 1, 2...
        # forever: `list(x)` or `rl.Tuple(x)` would build projections until memory runs out
        raise RelayishError(f"{_short_text(self)} is a relayish {type(self).__name__}, not a "
                            "Python sequence: it cannot be iterated. Build a tuple with "
                            "rl.Tuple([a, b]) and take its fields with t[0], t[1]")

    def __contains__(self, item):
        raise RelayishError(f"`in` does not apply to the relayish {type(self).__name__} "
                            f"{_short_text(self)}: an expression is not a container")


def _short_text(node, limit=80):
    try:
        text = " ".join(program_text(node).split())
    except Exception:  # noqa: BLE001 - repr must never fail, even half-built nodes print
        return _summary(node)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _summary(node) -> str:
    """A node's kind and name, read without walking it (a fallback for text that fails)."""
    kind = type(node).__name__
    name = getattr(node, "name_hint", None)
    if isinstance(name, str):
        return {"Var": "%", "GlobalVar": "@"}.get(kind, kind + " ") + name
    return f"a {kind} node"


def describe(value, limit=60) -> str:
    """`value` as a message shows it: program text for nodes and types, a short repr for plain
    Python data, the class name for anything else; never a memory address."""
    if isinstance(value, Expr):
        return f"the expression {_short_text(value, limit)}"
    if isinstance(value, Node):
        return f"the {type(value).__name__} {_short_text(value, limit)}"
    if isinstance(value, Type):
        try:
            return f"the type {value}"
        except Exception:  # noqa: BLE001 - a message must never fail to build
            return f"a {type(value).__name__}"
    if value is None or isinstance(value, (bool, int, float, complex, str, bytes, np.generic)):
        text = repr(value)
        text = text if len(text) <= limit else text[: limit - 3] + "..."
        return text if value is None else f"{text} ({_article(type(value).__name__)})"
    if isinstance(value, np.ndarray):
        return f"a numpy array of shape {value.shape} and dtype {value.dtype}"
    if isinstance(value, (list, tuple, dict, set)):
        text = _shown(value, limit)       # short ones as written: (1, 2.5), [x]
        if len(text) < limit:
            return text
        return f"{_article(type(value).__name__)} of {len(value)} item(s)"
    return "an object" if type(value) is object else f"{_article(type(value).__name__)} object"


def _article(noun) -> str:
    return ("an " if noun[:1].lower() in "aeiou" else "a ") + noun


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

    # `==` and `!=` build elementwise comparisons, as on numpy and jax arrays:
    # `rl.where(x == 0.0, x, 1.0)`. Nodes still compare by identity everywhere else: the hash
    # is the identity's (Exprs are dict keys and set members all over relayish), containers
    # test `is` before `==`, and code that asks whether two nodes are the same one says `is`.
    __hash__ = object.__hash__

    def __eq__(self, other):
        return _comparison("equal", self, other)

    def __ne__(self, other):
        return _comparison("not_equal", self, other)

    # numpy must not treat an expression as an array element: `np.ones(3) + x` would build an
    # object array of `1.0 + x` calls. With __array_ufunc__ = None numpy's operators return
    # NotImplemented, so Python calls x.__radd__ and the relayish op is built.
    __array_ufunc__ = None
    __array_priority__ = 1000

    def __array__(self, dtype=None, copy=None):
        # np.asarray(x) would otherwise make a 0-d object array holding the expression
        raise RelayishError(f"{_short_text(self)} is a relayish expression, not an array: it has "
                            "no value until the program runs (rl.evaluate, rl.compile)")

    def _no_value(self, what):
        raise RelayishError(f"{what} of the relayish expression {_short_text(self)} is not known "
                            "while the program is built; run it (rl.evaluate, rl.compile) to get "
                            "values, or use rl.typeof(x) for its type and shape")

    def __float__(self): self._no_value("the float value")
    def __int__(self): self._no_value("the int value")
    def __index__(self): self._no_value("the int value")
    def __complex__(self): self._no_value("the complex value")
    def __len__(self): self._no_value("the length")

    def __bool__(self):
        # the value is not known while the program is built: `if x < y:` would silently take
        # one branch for every run (jax raises the same way for tracers)
        same = ""
        if isinstance(self, Call) and isinstance(self.op, Primitive) and \
                self.op.name in ("equal", "not_equal"):
            same = (" (`==` and `!=` on expressions build equal/not_equal; whether two nodes "
                    "are the same one is `a is b`)")
        raise RelayishError(
            f"the truth value of the relayish expression {_short_text(self)} is not known while "
            "the program is built: `if`, `while`, `and`, `or`, `not` and `assert` would decide "
            "once, now. Use rl.If(cond, then, else) (or sb.if_scope) for a branch in the "
            "program, rl.where(cond, a, b) to choose elementwise, and rl.logical_and/or/not "
            f"to combine conditions{same}")

    def __getitem__(self, index):
        if isinstance(index, (bool, np.bool_)) or not isinstance(index, (int, np.integer)):
            what = "a slice" if isinstance(index, slice) else describe(index)
            raise RelayishError(
                f"{_short_text(self)}[...] projects a field of a tuple and takes one int "
                f"(t[0]), got {what}; to index or slice a tensor use rl.take(x, indices, axis) "
                "or rl.strided_slice(x, begin, end, strides)")
        return TupleGetItem(self, int(index))

    def __call__(self, *args):
        return Call(self, list(args))


# ---- what the layers above provide ---------------------------------------------------------
# str(node) needs the printer, and `x + y` the op registry; both import this module, so importing
# them from here would tie ir/ into one import cycle. Instead each installs its entry point here
# when it is imported (relayish/__init__ imports both, so a program never meets an empty slot).

_PROVIDERS = {"astext": "relayish.ir.text.printer", "make_call": "relayish.ir.op"}
_PROVIDED: dict = {}


def provide(name, implementation):
    """Install a service of a higher layer: "astext" (node -> text), "make_call" (op name,
    args, attrs -> Call)."""
    if name not in _PROVIDERS:
        raise RelayishError(f"no service named {name!r}; the services are {', '.join(_PROVIDERS)}")
    _PROVIDED[name] = implementation


def _provided(name):
    implementation = _PROVIDED.get(name)
    if implementation is None:
        raise RelayishError(f"{_PROVIDERS[name]} is not loaded; import relayish first")
    return implementation


def program_text(node) -> str:
    """The text form of a node, module or ADT definition (the printer's astext)."""
    return _provided("astext")(node)


class Primitive(Expr):
    """Base of op.py's Op: an expression naming a primitive operator, which is only ever called.
    Declared here so that expressions recognise op calls (attrs, dtype hints) without
    importing op.py, which imports this module."""
    __slots__ = ()


def _call_op(name, args, **op_attrs):
    return _provided("make_call")(name, list(args), op_attrs)


_UNKNOWN = ""       # a Var's memoized hint when none was found


def dtype_hint(expr):
    """The dtype an expression evidently has, without type inference (None when unknown).

    Used to give Python scalars in `x * 2.0` the dtype of `x`, so float64 programs stay float64.
    The walk follows builder-bound Vars to their values as far as the chain goes (a loop, no hop
    limit), and memoizes the answer on each Var it passed, so a chain built one `sb.let` at a
    time costs O(1) per step, not O(length).
    """
    passed, seen = [], set()
    hint = None
    while id(expr) not in seen:
        seen.add(id(expr))          # an explicit Var bound to a value that uses it: a cycle
        t = getattr(expr, "_checked_type", None)
        if isinstance(t, TensorType):
            hint = t.dtype
            break
        if isinstance(expr, Var):
            t = expr.type_annotation
            if isinstance(t, TensorType):
                hint = t.dtype
                break
            if expr._dtype_hint is not None:
                hint = expr._dtype_hint or None
                break
            if t is None and expr._value_hint is not None:
                passed.append(expr)
                expr = expr._value_hint
                continue
            break
        if isinstance(expr, Constant):
            hint = normalize_dtype(expr.data.dtype)
            break
        if isinstance(expr, Tuple) and expr.fields:     # concatenate/stack((a, ...)): a's dtype
            expr = expr.fields[0]
            continue
        if isinstance(expr, Let):            # a let-chain's value is its body's
            expr = expr.body
            continue
        if isinstance(expr, Call) and isinstance(expr.op, Function):   # (fn (..) { body })(..)
            t = expr.op.ret_type
            if isinstance(t, TensorType):
                hint = t.dtype
                break
            expr = expr.op.body
            continue
        if isinstance(expr, Call) and isinstance(expr.op, Primitive):
            # the op's record says: a dtype ("bool", cast's attribute) or an argument to follow
            # (where(cond, x, y): 1)
            found = expr.op.result_dtype(expr.attrs)
            if isinstance(found, int) and 0 <= found < len(expr.args):
                expr = expr.args[found]
                continue
            hint = found if isinstance(found, str) else None
            break
        break
    for v in passed:
        v._dtype_hint = _UNKNOWN if hint is None else hint
    return hint


def as_expr(value, like=None) -> Expr:
    """Expr as is; Python scalars and arrays become Constants.

    Python numbers, and (nested) lists of them, have no dtype of their own: they take the dtype
    `like` evidently has (`x + 2.0`, `x + [1., 2.]` stay float64 when x is), as jax's weakly typed
    Python scalars do. numpy scalars and arrays keep their own dtype, which the user chose.
    """
    if isinstance(value, Expr):
        return value
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, Expr) for v in value):
        return Tuple(list(value))
    hint = None
    if like is not None and _python_number_kind(value) is not None:
        hint = dtype_hint(like)
    return _constant(value, hint)


def _constant(value, hint):
    """rl.const(value), where a Python number (or list of them) takes the dtype `hint` when that
    is numeric and would not truncate it (a float never becomes an int)."""
    dtype = None
    if isinstance(value, (bool, np.bool_)):
        dtype = "bool"
    elif hint is not None and hint != "bool":
        kind = _python_number_kind(value)
        if kind is not None and not (kind == "f" and hint.startswith(("int", "uint"))):
            dtype = hint
    return const(value, dtype=dtype)


def _python_number_kind(value):
    """'f' for a Python float or a nested list holding a float, 'i' for Python ints (and lists
    of them), None for anything else (bools, numpy values, mixed content)."""
    kind, stack = "i", [value]
    while stack:
        v = stack.pop()
        if isinstance(v, list):
            stack.extend(v)
        elif isinstance(v, float) and not isinstance(v, np.generic):
            kind = "f"
        elif not isinstance(v, int) or isinstance(v, (bool, np.generic)):
            return None
    return kind


def _binary(name, a, b):
    if not isinstance(a, Expr):
        a = as_expr(a, like=b)
    if not isinstance(b, Expr):
        b = as_expr(b, like=a)
    return _call_op(name, [a, b])


def _comparison(name, a, b):
    """`a == b` / `a != b` with an expression on the left: the op call when b is an expression
    or a constant-like value (a number, a bool, a numpy value, a list of numbers); anything
    else (None, a string, a Type) is NotImplemented, so Python compares identities: False."""
    if not (isinstance(b, Expr) or isinstance(b, (bool, np.bool_)) or _constant_like(b)):
        return NotImplemented
    return _binary(name, a, b)


def _const_array(value, dtype):
    if isinstance(value, (str, bytes)):
        raise RelayishError(f"{_shown(value)} is a string, not a value a relayish program can "
                            "hold: a constant is a number, a bool, or an array of them")
    if value is None or isinstance(value, Node):
        raise RelayishError(f"{describe(value)} is not a constant: a constant is a number, a bool, "
                            "or an array of them")
    if dtype is not None:
        dtype = normalize_dtype(dtype)
    try:
        with np.errstate(over="ignore"):    # a float past the dtype's range: checked below
            arr, narrow = _as_array(value, dtype)
    except RelayishError:       # an expression inside a list: Expr.__array__ refused it
        raise RelayishError(f"{_shown(value)} is not a constant: it holds expressions; a list of "
                            "expressions is built with rl.Tuple([...]) or rl.stack([...])"
                            ) from None
    except OverflowError:
        raise RelayishError(_overflow_message(value, dtype or "int32")) from None
    except ValueError:
        if isinstance(value, (list, tuple)):
            raise RelayishError(f"{_shown(value)} is not a constant: its nested lists have "
                                "different lengths (a constant is a rectangular array)") from None
        raise RelayishError(f"{_shown(value)} cannot be made a constant"
                            + (f" of dtype {dtype}" if dtype is not None else "")) from None
    if narrow:
        arr = _fitting(value, arr, "int32")
    if arr.dtype.kind == "O" and _python_number_kind(value) == "i":   # ints past int64
        raise RelayishError(_overflow_message(value, dtype or "int32"))
    if arr.dtype.kind in "OUS":
        held = "strings" if arr.dtype.kind in "US" else "values that are not numbers"
        raise RelayishError(f"{_shown(value)} is not a constant: it holds {held}; a constant is "
                            "a number, a bool, or an array of them")
    normalize_dtype(arr.dtype)  # raises on complex and other unsupported arrays
    if arr.dtype.kind == "f" and arr.dtype.itemsize < 8:
        _check_float_range(value, arr)
    if arr.dtype.kind in "iub" and dtype is not None:
        _check_exact_integers(value, arr)
    return arr


def _as_array(value, dtype):
    """(the array of `value`, whether it is a nested list of Python ints still to be narrowed
    to int32): Python numbers are float32 and int32, numpy values keep their dtype."""
    if dtype is not None:
        return np.asarray(value, dtype=dtype), False
    if isinstance(value, (bool, np.bool_)):
        return np.asarray(value, dtype="bool"), False
    if isinstance(value, int):
        return np.asarray(value, dtype="int32"), False
    if isinstance(value, float) and not isinstance(value, np.generic):  # np.float64 keeps its dtype
        return np.asarray(value, dtype="float32"), False
    arr = np.asarray(value)
    if isinstance(value, np.ndarray | np.generic):
        return arr, False
    if arr.dtype.kind == "f":
        return arr.astype("float32"), False     # a nested Python list of floats: like scalars
    return arr, arr.dtype.kind == "i"           # a nested Python list of ints: int32 like scalars


def _check_float_range(value, arr):
    """A RelayishError when a finite number in `value` lies past the range of arr's float
    dtype (it became inf or the largest value), as the text literal `1e39f` is."""
    dtype = arr.dtype.name
    if isinstance(value, np.ndarray | np.generic) and value.dtype.kind == "f" and \
            value.dtype.itemsize <= arr.dtype.itemsize:
        return                              # no wider than the target: nothing to lose
    if isinstance(value, float):            # the common case: a Python scalar
        if not (math.isfinite(value) and float_overflows(value, dtype)):
            return
        bad = value
    else:
        try:
            wide = np.asarray(value, dtype="float64")
        except OverflowError:               # a Python int past float64
            raise RelayishError(float_range_message(_shown(value), dtype)) from None
        except (TypeError, ValueError):
            return
        over = float_overflows(wide, dtype) & np.isfinite(wide)
        if not over.any():
            return
        bad = float(wide[over].flat[0]) if wide.ndim else value
    raise RelayishError(float_range_message(_shown(bad), dtype)
                        + f'; give a wider dtype, e.g. rl.const({_shown(bad)}, dtype="float64")')


def _check_exact_integers(value, arr):
    """A RelayishError when a float in `value` would change on becoming arr's integer or bool
    dtype (2.5 -> 2, nan -> a garbage int): numpy truncates silently, and the text format has
    no such literal. A conversion that loses digits is written out, with rl.cast."""
    try:
        source = np.asarray(value)
    except (TypeError, ValueError):
        return
    if source.dtype.kind != "f":
        return
    wide = source.astype("float64")
    with np.errstate(invalid="ignore"):
        exact = np.isfinite(wide) & (arr.astype("float64") == wide)
    if exact.all():
        return
    bad = float(wide[~exact].flat[0]) if wide.ndim else float(wide)
    made = arr[~exact].flat[0] if arr.ndim else arr
    raise RelayishError(f"{_shown(bad)} is not a value of {arr.dtype.name}: rl.const would make "
                        f"it {made}; give a float dtype, and rl.cast(x, \"{arr.dtype.name}\") "
                        "where that conversion is meant")


_ADDRESS = re.compile(r" (object )?at 0x[0-9a-fA-F]+")


def _fitting(value, arr, dtype):
    """arr as `dtype`, or a RelayishError when a Python int does not fit in it."""
    info = np.iinfo(dtype)
    if arr.size and (arr.max() > info.max or arr.min() < info.min):
        raise RelayishError(_overflow_message(value, dtype))
    return arr.astype(dtype)


def _overflow_message(value, dtype):
    text = _shown(value)
    fits_int64 = True
    try:
        np.asarray(value, dtype="int64")
    except (OverflowError, ValueError):
        fits_int64 = False
    if fits_int64 and dtype != "int64":
        advice = f'; give the dtype, e.g. rl.const({text}, dtype="int64")'
    else:
        advice = f'; it fits no integer dtype (use a float, e.g. rl.const({text}, dtype="float64"))'
    return f"the value {text} does not fit in {dtype}" + advice


def _shown(value, limit=60) -> str:
    """A user's value as a message quotes it: its repr, shortened, without memory addresses."""
    text = _ADDRESS.sub("", repr(value))
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ---- field checks ----------------------------------------------------------------------------
# Every node field says what it holds, and a node built with anything else is a RelayishError
# naming the node, the field and what it expects: a wrong field would otherwise surface far
# away, as an AttributeError in the printer or an internal class name in a backend.

_FIELD_NAMES = {"params": "parameters", "type_params": "type parameters", "ret_type": "ret_type",
                "op": "the called value (op)", "name_hint": "the name", "lhs": "the pattern (lhs)",
                "rhs": "the body (rhs)"}


def _field_error(node, attribute, expected, value, advice="") -> RelayishError:
    name = _FIELD_NAMES.get(attribute.name, attribute.name)
    return RelayishError(f"rl.{type(node).__name__}: {name} must be {expected}, "
                         f"got {describe(value)}{advice}")


def _is(kind, expected, optional=False):
    """A validator: the field holds a `kind` (or None when optional)."""
    def validate(node, attribute, value):
        if not isinstance(value, kind) and not (optional and value is None):
            raise _field_error(node, attribute, expected, value)
    return validate


def _list_of(kind, expected, constants=False):
    """A converter to a new list of `kind`s from a list, tuple or iterator. With `constants`
    (call arguments, tuple fields) Python numbers and arrays become constants, as in `x + 2.0`."""
    def convert(value, node, attribute):
        if isinstance(value, (list, tuple)) or (
                hasattr(value, "__next__") and not isinstance(value, (Node, Type))):
            items = list(value)
        else:
            advice = ""
            if isinstance(value, Node):
                advice = f"; put it in a list: [{_short_text(value, 40)}]"
            raise _field_error(node, attribute, f"a list of {expected}", value, advice)
        for k, item in enumerate(items):
            if isinstance(item, kind):
                continue
            if constants and _constant_like(item):
                try:
                    items[k] = _constant(item, _parameter_dtype(node, k))
                    continue
                except RelayishError as err:
                    raise RelayishError(f"rl.{type(node).__name__}: item {k} of "
                                        f"{_FIELD_NAMES.get(attribute.name, attribute.name)}: "
                                        f"{err}") from None
            name = _FIELD_NAMES.get(attribute.name, attribute.name)
            raise RelayishError(f"rl.{type(node).__name__}: {name} must be a list of {expected}; "
                                f"item {k} is {describe(item)}")
        return items
    return Converter(convert, takes_self=True, takes_field=True)


def _parameter_dtype(node, k):
    """The dtype a called function declares for its k-th parameter, if it is evident (a Python
    number passed there takes it); None for tuple fields and unknown callees."""
    op = getattr(node, "op", None)
    if isinstance(op, Function):
        t = op.params[k].type_annotation if k < len(op.params) else None
    else:
        t = getattr(op, "_checked_type", None) or getattr(op, "type_annotation", None)
        if isinstance(t, FuncType):
            t = t.arg_types[k] if k < len(t.arg_types) else None
    return t.dtype if isinstance(t, TensorType) else None


def _constant_like(value) -> bool:
    return (isinstance(value, (int, float, np.generic, np.ndarray))
            or isinstance(value, list) and _python_number_kind(value) is not None)


def _distinct_params(func, attribute, params):
    seen = set()
    for p in params:
        if id(p) in seen:
            raise RelayishError(f"rl.{type(func).__name__}: the parameter {_short_text(p)} "
                                "appears twice among the parameters; each parameter is a "
                                "distinct Var")
        seen.add(id(p))


def _call_attrs(call, attrs) -> dict:
    """A new dict of the call's keyword attributes: an op's, with its defaults filled in (as
    make_call does); none for a call of anything else."""
    if attrs is None:
        attrs = {}
    if not isinstance(attrs, dict):
        raise RelayishError(f"rl.Call: attrs must be a dict of an operator's keyword attributes, "
                            f"got {describe(attrs)}")
    known = call.op.attr_defaults if isinstance(call.op, Primitive) else None
    if not isinstance(known, dict):
        if attrs:
            raise RelayishError(f"rl.Call: attrs are an operator's keyword attributes; a call of "
                                f"{_short_text(call.op, 40)} takes none, got {describe(attrs)}")
        return {}
    if attrs.keys() == known.keys():
        return dict(attrs)
    unknown = [k for k in attrs if k not in known]
    if unknown:
        raise RelayishError(f"rl.Call: operator '{call.op.name}' has no attribute(s) "
                            f"{', '.join(map(str, unknown))}; its attributes are: "
                            f"{', '.join(known) or 'none'}")
    return {**known, **attrs}


def _tuple_index(value):
    return int(value) if isinstance(value, np.integer) else value


def _index(node, attribute, value):
    if not isinstance(value, int) or isinstance(value, bool):
        raise _field_error(node, attribute, "an int", value)


def _array_of_scalar(value):
    """A numpy scalar (`-np.float32(nan)`) is the 0-d array of its dtype."""
    return np.asarray(value) if isinstance(value, np.generic) else value


def _tensor_data(node, attribute, value):
    if not isinstance(value, np.ndarray) or (value.dtype not in _SUPPORTED_DTYPES
                                             and value.dtype.name not in DTYPES):
        raise _field_error(node, attribute,
                           f"a numpy array of one of the dtypes {', '.join(DTYPES)}",
                           value, " (rl.const(value, dtype) makes a Constant from Python values)")


_SUPPORTED_DTYPES = frozenset(np.dtype(d) for d in DTYPES)   # numpy's dtype.name is slow
def _constructor_name(node, attribute, value):
    problem = printable_name(value)
    if problem is not None:
        raise RelayishError(f"rl.Constructor: {problem}; choose another constructor name")


# ---- nodes ---------------------------------------------------------------------------------

_EXPR = _is(Expr, "an expression")


@define(eq=False, repr=False)
class Var(Expr):
    """A binder. Two Vars with the same name are different variables."""
    name_hint: str = node_field(DATA, validator=_is(str, "a str"))
    type_annotation: Type | None = node_field(TYPE, default=None, validator=_is(
        Type, "a relayish Type or None", True))
    _checked_type: Type | None = field(default=None, init=False)
    # the value a builder bound it to: only a dtype hint for Python scalars (`y > 1.0`)
    _value_hint: Expr | None = field(default=None, init=False)
    _dtype_hint: str | None = field(default=None, init=False)   # dtype_hint's memo ("": none)


@define(eq=False, repr=False)
class GlobalVar(Expr):
    """A module-level function name (`@f`); any str (the text format quotes odd names).

    `linked`: the Module whose @main this names, for the callee of `rl.Call(module, args)`
    (Module.as_callee; ir/link.py merges that module into the caller's before it runs)."""
    name_hint: str = node_field(DATA, validator=_is(str, "a str"))
    _checked_type: Type | None = field(default=None, init=False)
    linked: object = field(default=None, init=False)


@define(eq=False, repr=False)
class Constant(Expr):
    data: np.ndarray = node_field(DATA, converter=_array_of_scalar, validator=_tensor_data)
    _checked_type: Type | None = field(default=None, init=False)


@define(eq=False, repr=False)
class Tuple(Expr):
    fields: list = node_field(EXPRS, converter=_list_of(Expr, "expressions", constants=True))
    _checked_type: Type | None = field(default=None, init=False)


@define(eq=False, repr=False)
class TupleGetItem(Expr):
    tuple_value: Expr = node_field(EXPR, validator=_EXPR)
    index: int = node_field(DATA, converter=_tuple_index, validator=_index)
    _checked_type: Type | None = field(default=None, init=False)


@define(eq=False, repr=False)
class Function(Expr):
    params: list = node_field(VARS, converter=_list_of(Var, "Vars"), validator=_distinct_params)
    body: Expr = node_field(EXPR, validator=_EXPR)
    ret_type: Type | None = node_field(TYPE, default=None,
                                       validator=_is(Type, "a relayish Type or None", True))
    # binders of type variables, not types to map: DATA
    type_params: list = node_field(DATA, converter=_list_of(TypeVar, "TypeVars"), factory=list)
    _checked_type: Type | None = field(default=None, init=False)


@define(eq=False, repr=False)
class Call(Expr):
    """`op(args)`; op is an Op, a Constructor, any expression of function type, or a Module
    (its @main, with its globals: see ir/link.py).

    `attrs` holds an Op's keyword attributes (axis=, keepdims=, ...), empty otherwise.
    """
    op: Expr = node_field(EXPR, converter=lambda op: _callee(op), validator=_EXPR)
    args: list = node_field(EXPRS, converter=_list_of(Expr, "expressions", constants=True))
    attrs: dict = node_field(DATA, factory=dict, converter=Converter(
        lambda d, call, _: _call_attrs(call, d), takes_self=True, takes_field=True))
    _checked_type: Type | None = field(default=None, init=False)


def _callee(op):
    """A Module as a callee is its @main, linked (rl.Call(rl.grad(mod), [x]))."""
    as_callee = getattr(op, "as_callee", None)
    return as_callee() if as_callee is not None and not isinstance(op, Expr) else op


@define(eq=False, repr=False)
class Let(Expr):
    var: Var = node_field(VAR, validator=_is(Var, "a Var (rl.var(name, ...))"))
    value: Expr = node_field(EXPR, validator=_EXPR)
    body: Expr = node_field(EXPR, validator=_EXPR)
    _checked_type: Type | None = field(default=None, init=False)


@define(eq=False, repr=False)
class If(Expr):
    cond: Expr = node_field(EXPR, validator=_EXPR)
    true_branch: Expr = node_field(EXPR, validator=_EXPR)
    false_branch: Expr = node_field(EXPR, validator=_EXPR)
    _checked_type: Type | None = field(default=None, init=False)


@define(eq=False, repr=False)
class Constructor(Expr):
    """An ADT constructor; calling it (`Call(ctor, fields)`) builds a value."""
    name_hint: str = node_field(DATA, validator=_constructor_name)
    inputs: list = node_field(TYPES, converter=_list_of(Type, "relayish Types"))
    belong_to: object = node_field(DATA, default=None,   # the GlobalTypeVar of its TypeData
                                   validator=_is(GlobalTypeVar, "a GlobalTypeVar or None", True))
    tag: int = node_field(DATA, default=-1)            # set when its TypeData is built
    type_data: object = node_field(DATA, default=None)  # its TypeData, set when that is built
    _checked_type: Type | None = field(default=None, init=False)


@define(eq=False, repr=False)
class RefCreate(Expr):
    value: Expr = node_field(EXPR, validator=_EXPR)
    _checked_type: Type | None = field(default=None, init=False)


@define(eq=False, repr=False)
class RefRead(Expr):
    ref: Expr = node_field(EXPR, validator=_EXPR)
    _checked_type: Type | None = field(default=None, init=False)


@define(eq=False, repr=False)
class RefWrite(Expr):
    """`ref := value`; evaluates to ()."""
    ref: Expr = node_field(EXPR, validator=_EXPR)
    value: Expr = node_field(EXPR, validator=_EXPR)
    _checked_type: Type | None = field(default=None, init=False)


# ---- match and patterns --------------------------------------------------------------------

class Pattern(Node):
    __slots__ = ()


@define(eq=False, repr=False)
class PatternWildcard(Pattern):
    pass


@define(eq=False, repr=False)
class PatternVar(Pattern):
    var: Var = node_field(VAR, validator=_is(Var, "a Var (rl.var(name, ...))"))


@define(eq=False, repr=False)
class PatternConstructor(Pattern):
    # the constructor is matched against, not evaluated: DATA, not a child expression
    constructor: Constructor = node_field(DATA, validator=_is(Constructor, "a Constructor"))
    patterns: list = node_field(PATTERNS, converter=_list_of(Pattern, "patterns"), factory=list)


@define(eq=False, repr=False)
class PatternTuple(Pattern):
    patterns: list = node_field(PATTERNS, converter=_list_of(Pattern, "patterns"), factory=list)


@define(eq=False, repr=False)
class Clause(Node):
    lhs: Pattern = node_field(PATTERN, validator=_is(Pattern, "a pattern"))
    rhs: Expr = node_field(EXPR, validator=_EXPR)


@define(eq=False, repr=False)
class Match(Expr):
    """`match (data) { clauses }`. `complete=False` (Relay's `match?`) allows missing cases."""
    data: Expr = node_field(EXPR, validator=_EXPR)
    clauses: list = node_field(CLAUSES,
                               converter=_list_of(Clause, "Clauses (rl.Clause(pattern, body))"))
    complete: bool = node_field(DATA, default=True,
                                validator=_is((bool, np.bool_), "True or False"))
    _checked_type: Type | None = field(default=None, init=False)


# ---- algebraic data types ------------------------------------------------------------------

@define(eq=False, repr=False)
class TypeData:
    """An algebraic data type: `type header[type_vars] { constructors }`. Not a type, nor an
    expression: the definition behind a GlobalTypeVar, held by a Module.

    Building a TypeData numbers its constructors (their `tag`) and points them at `header`.
    """
    header: GlobalTypeVar
    type_vars: list = field(converter=lambda v: _definition_items("type_vars", v))
    constructors: list = field(converter=lambda v: _definition_items("constructors", v))

    def __attrs_post_init__(self):
        if not isinstance(self.header, GlobalTypeVar):
            raise RelayishError(f"rl.TypeData: header must be a GlobalTypeVar, "
                                f"got {describe(self.header)}")
        for what, items, kind in (("type_vars", self.type_vars, TypeVar),
                                  ("constructors", self.constructors, Constructor)):
            for k, item in enumerate(items):
                if not isinstance(item, kind):
                    raise RelayishError(f"rl.TypeData: {what} must be a list of "
                                        f"{kind.__name__}s; item {k} is {describe(item)}")
        for tag, ctor in enumerate(self.constructors):
            ctor.tag = tag
            ctor.belong_to = self.header
            ctor.type_data = self

    def __repr__(self):
        return f"TypeData({self.header.name}, {[c.name_hint for c in self.constructors]})"


def _definition_items(what, value) -> list:
    if isinstance(value, (Type, str, Node)) or not (
            isinstance(value, (list, tuple)) or hasattr(value, "__next__")):
        raise RelayishError(f"rl.TypeData: {what} must be a list, got {describe(value)}")
    return list(value)


# ---- convenience constructors --------------------------------------------------------------

def var(name, type=None, shape=None, dtype=None) -> Var:  # noqa: A002 - API name
    """`rl.var("x", shape=(3,), dtype="float32")` or `rl.var("x", type=t)`; default float32 scalar."""
    if type is not None and (shape is not None or dtype is not None):
        raise RelayishError("rl.var takes either type= or shape=/dtype=, not both")
    if type is None:
        type = TensorType(() if shape is None else shape, "float32" if dtype is None else dtype)
    if not isinstance(type, Type):
        raise RelayishError(f"rl.var: type must be a relayish Type, got {describe(type)}")
    return Var(name, type)


def const(value, dtype=None) -> Constant:
    """`rl.const(2.0)` is a float32 scalar, `rl.const(3)` int32, arrays keep their dtype."""
    return Constant(_const_array(value, dtype))
