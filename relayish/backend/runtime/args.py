"""Arguments from Python, checked against parameter types and converted into runtime values.

    checker = ValueChecker(function_conforms=..., convert_function=...)   # one per function
    params = Parameters("@main", main.params, checker)
    values = params.convert(args)     # a list, one runtime value per parameter

Contract. Arguments are checked against each parameter's type (`check.param_type`). A value
that already is exactly a runtime value of its type (`ValueChecker.conforms`: arrays of the
exact shape and dtype, tuples, ConstructorValues of the type's ADT, RefValues, functions the
backend accepts) passes through after one iterative check, unchanged; anything else is
converted into new values (`ValueChecker.to_value`):

- tensors (`to_tensor`): numpy arrays must match shape and dtype exactly; Python scalars and
  nested lists become arrays of the parameter's dtype (a float for an integer type, an integer
  out of range, a ragged list are errors); numpy scalars, jax arrays and other array-likes are
  read with np.asarray and must then match;
- tuples from tuples or lists, ADT values field by field (constructor field types from the
  ADT's type arguments), references with their contents converted in place (the reference is
  shared with the caller), and an unknown type (a type variable) as rl.const would take it;
- functions through the backend's hook: `convert_function(checker, v, t, where, fail)` returns
  the value to pass (`where` names the argument, "field 0 of parameter %f of @main"; `fail(got,
  why="")` raises the standard error); without a hook a function argument is an error.

Every walk is a loop (10^5-long ADT lists are fine). Errors are EvaluationErrors reading
"bad argument for parameter %x of @f (field 1 of Cons of field 0): expected Tensor[(2),
float32], got Tensor[(3), float32]": the parameter, the path inside it (innermost first), the
expected type and what was given. `to_value(..., subject=)` replaces the part before the path
(a Python callable's bad result).

Paths are linked pairs `(parent, label)` (None at the root) so that no string is built unless
an error is reported: building one per field would be quadratic in a list's length.
"""
from __future__ import annotations

import numpy as np

from relayish.errors import EvaluationError, RelayishError
from relayish.ir.types import (DTYPES, FuncType, RefType, TensorType, TupleType, TypeCall,
                               TypeVar, substitute)
from relayish.backend.values import Closure, ConstructorValue, RefValue
from relayish.backend.runtime.check import param_type
from relayish.backend.runtime.describe import short, type_text, value_type_text

__all__ = ["ValueChecker", "Parameters", "FieldTypes", "to_tensor", "path_text", "NP_DTYPES"]

_ndarray = np.ndarray
NP_DTYPES = {name: np.dtype(name) for name in DTYPES}   # comparing with a str parses it


class FieldTypes:
    """Memoized field types of constructors at ADT types: `field_types(ctor, t)`.

    Types hash structurally (slowly), so entries are keyed by object identity; the field types
    are made canonical (one object per distinct type), so that their own lookups hit too.
    """

    def __init__(self):
        self.by_id = {}        # (constructor, id(type)) -> [field types]
        self.canon = {}        # type -> its canonical object
        self.keep = []         # the types whose ids are keys

    def __call__(self, ctor, t):
        key = (ctor, id(t))
        types = self.by_id.get(key)
        if types is None:
            data = ctor.type_data
            subst = dict(zip(data.type_vars, t.args)) if data is not None else {}
            types = [self.canon.setdefault(f, f) for f in
                     (substitute(i, subst) for i in ctor.inputs)]
            self.by_id[key] = types
            self.keep.append(t)
        return types


def path_text(path):
    """The text of a linked path, innermost first: "field 0 of Cons of field 1"."""
    parts = []
    while path is not None:
        path, label = path
        parts.append(label)
    return " of ".join(parts)


def _no_function(checker, v, t, where, fail):
    fail("a function", " (this backend takes no function arguments)")


class ValueChecker:
    """Checks and converts values against types for one function (it memoizes field types).

    `function_conforms(v, t) -> bool`: whether a function value passes unchanged for FuncType t
    (default: none does). `convert_function`: see the module docstring. `tensor(v, t, path,
    fail) -> array`: the tensor conversion (default `to_tensor`).
    """

    __slots__ = ("field_types", "function_conforms", "convert_function", "tensor")

    def __init__(self, function_conforms=None, convert_function=None, tensor=None):
        self.field_types = FieldTypes()
        self.function_conforms = function_conforms or (lambda v, t: False)
        self.convert_function = convert_function or _no_function
        self.tensor = tensor or to_tensor

    def conforms(self, value, ty):
        """Whether `value` is exactly a runtime value of `ty` (no conversion needed)."""
        # A walk over value and type together, per kind of type (not type_components): an
        # ADT's field types come from its constructor, a function's check is the backend's.
        work = [(value, ty)]
        field_types = self.field_types
        known = field_types.by_id      # filled only for constructors already checked against t
        pop, extend = work.pop, work.extend
        while work:
            v, t = pop()
            cls = t.__class__
            if cls is TensorType:
                if not (v.__class__ is _ndarray and v.shape == t.shape
                        and v.dtype == NP_DTYPES[t.dtype]):
                    return False
            elif cls is TypeCall:
                if v.__class__ is not ConstructorValue:
                    return False
                ctor = v.constructor
                types = known.get((ctor, id(t)))
                if types is None:
                    if ctor.belong_to is None or ctor.belong_to.name != t.func.name:
                        return False
                    types = field_types(ctor, t)
                fields = v.fields
                if len(fields) != len(types):
                    return False
                extend(zip(fields, types))
            elif cls is TupleType:
                if v.__class__ is not tuple or len(v) != len(t.fields):
                    return False
                work.extend(zip(v, t.fields))
            elif cls is RefType:
                if v.__class__ is not RefValue:
                    return False
                work.append((v.value, t.value))
            elif cls is FuncType:
                if not self.function_conforms(v, t):
                    return False
            elif t is None or cls is TypeVar:
                if not isinstance(v, (_ndarray, tuple, ConstructorValue, RefValue, Closure)):
                    return False
                if v.__class__ is tuple:
                    work.extend((f, None) for f in v)
            else:
                return False
        return True

    def to_value(self, value, ty, owner, subject=None):
        """`value` checked against `ty` and converted; `owner` names it ("parameter %x of
        @f"). Errors: see the module docstring."""
        root = [None]
        work = [(value, ty, root, 0, None)]
        tuples = []        # lists standing for tuples, made tuples once their fields are done
        refs = []          # (RefValue, holder): write converted contents back
        if subject is None:
            subject = f"bad argument for {owner}"

        def fail(expected, got, path, why=""):
            where = f" ({path_text(path)})" if path is not None else ""
            raise EvaluationError(f"{subject}{where}: expected {type_text(expected)}, got "
                                  f"{got}{why}")

        # Per kind of type, as in conforms: each kind converts and checks the value its own way.
        while work:
            v, t, box, i, path = work.pop()
            if isinstance(t, TensorType):
                box[i] = self.tensor(v, t, path, fail)
            elif t is None or isinstance(t, TypeVar):
                box[i] = _default_value(v, work, box, i, path, tuples)
            elif isinstance(t, TupleType):
                if not isinstance(v, (tuple, list)) or len(v) != len(t.fields):
                    fail(t, value_type_text(v), path)
                items = list(v)
                box[i] = items
                tuples.append((box, i))
                for k in range(len(items) - 1, -1, -1):
                    work.append((items[k], t.fields[k], items, k, (path, f"field {k}")))
            elif isinstance(t, TypeCall):
                if not isinstance(v, ConstructorValue):
                    fail(t, value_type_text(v), path)
                ctor = v.constructor
                if ctor.belong_to is None or ctor.belong_to.name != t.func.name:
                    fail(t, f"a value of constructor {ctor.name_hint}", path)
                if len(v.fields) != len(ctor.inputs):
                    fail(t, f"{ctor.name_hint} with {len(v.fields)} field(s)", path,
                         f" (it takes {len(ctor.inputs)})")
                types = self.field_types(ctor, t)
                new = ConstructorValue(ctor, list(v.fields))
                box[i] = new
                for k in range(len(new.fields) - 1, -1, -1):
                    work.append((new.fields[k], types[k], new.fields, k,
                                 (path, f"field {k} of {ctor.name_hint}")))
            elif isinstance(t, RefType):
                if not isinstance(v, RefValue):
                    fail(t, value_type_text(v), path)
                box[i] = v
                holder = [None]
                refs.append((v, holder))
                work.append((v.value, t.value, holder, 0, (path, "the contents")))
            elif isinstance(t, FuncType):
                if not callable(v):
                    fail(t, value_type_text(v), path)
                inside = path_text(path) + " of " if path is not None else ""
                box[i] = self.convert_function(
                    self, v, t, inside + owner,
                    lambda got, why="", t=t, path=path: fail(t, got, path, why))
            else:
                box[i] = v
        for box, i in reversed(tuples):
            box[i] = tuple(box[i])
        for ref, holder in refs:
            ref.value = holder[0]
        return root[0]


def to_tensor(v, t, path, fail):
    """`v` as a numpy array of tensor type `t` (see the module docstring); `fail(expected,
    got, path, why="")` reports a mismatch."""
    if isinstance(v, _ndarray):
        arr = v
    elif isinstance(v, np.generic):
        arr = np.asarray(v)
    elif isinstance(v, (bool, int, float, list, tuple)):
        try:
            arr = np.asarray(v)
        except Exception:  # noqa: BLE001 - ragged nested lists and the like
            fail(t, f"{type(v).__name__} {short(v)}", path, " (not a rectangular array)")
        kind = arr.dtype.kind
        if kind not in "biuf":
            fail(t, f"{type(v).__name__} {short(v)}", path)
        if kind == "f" and not t.is_float:
            fail(t, f"the float value {short(v)}", path, " (a float does not convert to "
                 f"{t.dtype} exactly)")
        if arr.shape != t.shape:
            fail(t, f"a Python value of shape {arr.shape}", path)
        out = arr.astype(t.dtype, copy=False)
        if kind in "iu" and not t.is_float and not np.array_equal(out, arr):
            fail(t, f"the integer value {short(v)}", path, f" (out of range for {t.dtype})")
        return out
    elif hasattr(v, "__array__"):          # jax arrays and other array-likes
        try:
            arr = np.asarray(v)
        except Exception:  # noqa: BLE001
            fail(t, value_type_text(v), path)
    else:
        fail(t, value_type_text(v), path)
    if arr.dtype != NP_DTYPES[t.dtype] or arr.shape != t.shape:
        fail(t, value_type_text(arr), path)
    return arr


def _default_value(v, work, box, i, path, tuples):
    """An argument of unknown type: Python scalars/lists become arrays as rl.const makes them."""
    if isinstance(v, (_ndarray, ConstructorValue, RefValue, Closure)):
        return v
    if isinstance(v, tuple):
        items = list(v)
        tuples.append((box, i))
        for k in range(len(items) - 1, -1, -1):
            work.append((items[k], None, items, k, (path, f"field {k}")))
        return items
    if isinstance(v, (bool, int, float, list, np.generic)):
        from relayish.ir.expr import _const_array
        try:
            return _const_array(v, None)
        except RelayishError:
            raise
        except Exception as exc:  # noqa: BLE001 - ragged lists and the like
            raise EvaluationError(f"cannot convert {short(v)} to a tensor: {exc}") from None
    return v


class Parameters:
    """The parameters of a function a backend runs, and their arguments' checking.

    `name` ("@main", "%f", "fn") names the function in messages; `names` are "%x" texts;
    `types` the parameters' types (`check.param_type`); `tensors` per parameter (shape, numpy
    dtype) for a tensor type, else None (the fast path of `convert`).
    """

    __slots__ = ("name", "names", "types", "tensors", "checker")

    def __init__(self, name, params, checker):
        self.name = name
        self.names = ["%" + p.name_hint for p in params]
        self.types = [param_type(p) for p in params]
        self.tensors = [(t.shape, NP_DTYPES[t.dtype]) if isinstance(t, TensorType) else None
                        for t in self.types]
        self.checker = checker

    def __len__(self):
        return len(self.names)

    def arity_error(self, n, where=""):
        """The EvaluationError for a call with n arguments (`where`: " in <call text>")."""
        return EvaluationError(f"{self.name} takes {len(self.names)} argument(s) "
                               f"({', '.join(self.names)}), got {n}{where}")

    def convert(self, args):
        """The runtime values of `args` (a new list), checked and converted."""
        if len(args) != len(self.names):
            raise self.arity_error(len(args))
        checker = self.checker
        out = []
        for a, t, name, fast in zip(args, self.types, self.names, self.tensors):
            if (fast is not None and a.__class__ is _ndarray and a.shape == fast[0]
                    and a.dtype == fast[1]):
                out.append(a)                  # the common case, without the general walk
            elif fast is None and checker.conforms(a, t):
                out.append(a)                  # already a value of its type: nothing to convert
            else:
                out.append(checker.to_value(a, t, f"parameter {name} of {self.name}"))
        return out
