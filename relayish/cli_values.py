"""The command line's JSON values (relayish/cli.py): arguments read as values of a
parameter's type, results printed, in one form both ways.

    json_value(data, t, mod, what)      JSON data -> a value of type t (tensor, tuple, ADT)
    tensor_value(data, t, what)         JSON data -> an array of tensor type t
    to_json(value), strict_json(data)   a runtime value -> JSON data -> strict JSON text

A tensor is a number or nested lists, a tuple a list of its fields, an ADT value
{"Ctor": [fields]}; NaN and the infinities are the strings "NaN", "Infinity", "-Infinity"
(strict JSON has no such numbers); float32 prints at float32's length. Nothing is converted
silently: a mistake is a CommandError naming the parameter (exit 1, an input error).
"""
from __future__ import annotations

import json
import math

import numpy as np

from relayish.errors import did_you_mean

MESSAGE_LINE_LIMIT = 400    # characters of one error-message line shown before it is cut


class CommandError(Exception):
    """A user-facing failure that is not a RelayishError (an unreadable file, a bad argument)."""


def excerpt(message):
    """The message with each overlong line cut: an error shows a piece of the program, never
    a whole generated one."""
    lines = []
    for text in str(message).splitlines() or [""]:
        if len(text) > MESSAGE_LINE_LIMIT:
            text = (text[:MESSAGE_LINE_LIMIT] +
                    f"... ({len(text) - MESSAGE_LINE_LIMIT} more characters)")
        lines.append(text)
    return "\n".join(lines)


def _leaves(value):
    """The scalars of a nested list, in order (a loop: the nesting may be deep)."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, list):
            stack.extend(reversed(v))
        else:
            yield v


KIND_WORDS = {"f": "numbers", "i": "integers", "u": "non-negative integers", "b": "true or false"}


NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def tensor_value(data, t, what, expects="@main expects"):
    """JSON data as a value of tensor type t, converting nothing silently: a float tensor takes
    numbers (not true/false; NaN and infinities as the strings "NaN", "Infinity",
    "-Infinity" the command prints, or Python's bare NaN/Infinity), an integer tensor
    integers in its range (not 10.5, not 10.0), a bool tensor true/false; the shape must be
    t's (`expects` says whose type it is in the message)."""
    dtype = np.dtype(t.dtype)
    kind = dtype.kind
    if kind == "f":
        data = _non_finite_read(data)
    for v in _leaves(data):
        if isinstance(v, dict):
            raise CommandError(f"{what}: {t} takes {KIND_WORDS[kind]} in nested lists, got "
                               f"the object {excerpt(json.dumps(v))}")
        if kind == "b":
            ok = isinstance(v, bool)
        elif kind in "iu":
            ok = isinstance(v, int) and not isinstance(v, bool)
            if ok and not np.iinfo(dtype).min <= v <= np.iinfo(dtype).max:
                raise CommandError(f"{what}: {v} is out of the range of {t.dtype}")
        else:
            ok = isinstance(v, (int, float)) and not isinstance(v, bool)
        if not ok:
            raise CommandError(f"{what}: {t.dtype} takes {KIND_WORDS[kind]}, got "
                               f"{json.dumps(v)}")
    try:
        arr = np.array(data, dtype=dtype)
    except (ValueError, OverflowError):
        raise CommandError(f"{what}: the nested lists are not rectangular (expected {t})") \
            from None
    if kind == "f" and not np.isfinite(arr).all():
        with np.errstate(all="ignore"):
            wide = np.array(data, dtype=np.float64)
        if (np.isinf(arr) & np.isfinite(wide)).any():
            raise CommandError(f"{what}: a value is out of the range of {t.dtype}")
    if arr.shape != tuple(t.shape):
        raise CommandError(f"{what}: has shape {arr.shape}, {expects} {t}")
    return arr


def _non_finite_read(data):
    """Nested lists with the strings "NaN", "Infinity" and "-Infinity" read as those floats."""
    if isinstance(data, str):
        return NON_FINITE.get(data, data)
    if not isinstance(data, list):
        return data
    out = []
    stack = [(data, out)]
    while stack:
        items, into = stack.pop()
        for v in items:
            if isinstance(v, list):
                inner = []
                into.append(inner)
                stack.append((v, inner))
            else:
                into.append(NON_FINITE.get(v, v) if isinstance(v, str) else v)
    return out


def json_value(data, t, mod, what):
    """JSON data as a value of type t, as the command prints values (to_json): a tensor as
    a number or nested lists (tensor_value), a tuple as a list of its fields, an ADT value as
    {"Ctor": [fields]} (a prelude List too: {"Cons": [1.0, {"Nil": []}]}). A loop over an
    explicit stack: a list of 10^4 elements nests as deep."""
    from relayish.backend.values import ConstructorValue
    from relayish.ir.types import GlobalTypeVar, TensorType, TupleType, TypeCall, substitute
    todo, out = [(data, t, what)], []
    while todo:
        item = todo.pop()
        if item[0] is _BUILD:
            _, count, ctor = item
            fields = out[len(out) - count:]
            del out[len(out) - count:]
            out.append(tuple(fields) if ctor is None else ConstructorValue(ctor, fields))
            continue
        data, t, what = item
        if isinstance(t, TensorType):
            out.append(tensor_value(data, t, what))
        elif isinstance(t, TupleType):
            if not isinstance(data, list) or len(data) != len(t.fields):
                raise CommandError(f"{what}: a tuple {t} is a JSON list of its "
                                   f"{len(t.fields)} field(s), got {excerpt(json.dumps(data))}")
            todo.append((_BUILD, len(data), None))
            todo.extend((data[k], t.fields[k], f"{what} field {k}")
                        for k in reversed(range(len(data))))
        elif isinstance(t, (GlobalTypeVar, TypeCall)):
            head, type_args = (t.func, t.args) if isinstance(t, TypeCall) else (t, [])
            type_data = mod.get_type_data(head)
            names = [c.name_hint for c in type_data.constructors]
            if not (isinstance(data, dict) and len(data) == 1):
                raise CommandError(f"{what}: a {t} value is a JSON object {{\"Ctor\": "
                                   f"[fields]}} with Ctor one of {', '.join(names)}; got "
                                   f"{excerpt(json.dumps(data))}")
            (name, fields), = data.items()
            ctor = next((c for c in type_data.constructors if c.name_hint == name), None)
            if ctor is None:
                raise CommandError(f"{what}: {t} has no constructor {name!r} (it has "
                                   f"{', '.join(names)}){did_you_mean(name, names)}")
            if not isinstance(fields, list) or len(fields) != len(ctor.inputs):
                raise CommandError(f"{what}: {name} takes a JSON list of {len(ctor.inputs)} "
                                   f"field(s), got {excerpt(json.dumps(fields))}")
            subst = dict(zip(type_data.type_vars, type_args))
            todo.append((_BUILD, len(fields), ctor))
            todo.extend((fields[k], substitute(ctor.inputs[k], subst), f"{what}: {name} field {k}")
                        for k in reversed(range(len(fields))))
        else:
            raise CommandError(f"{what}: the command line passes tensors, tuples and ADT "
                               f"values, not a value of type {t}")
    return out[0]


_BUILD = object()        # json_value's marker: build a tuple or ADT value from its fields


def param_text(param, t):
    return f"%{param.name_hint}: {t}"


def npz_value(arr, param, t, what):
    """A .npz array for a tensor parameter: same kind of dtype, widening only, same shape."""
    want = np.dtype(t.dtype)
    if not (arr.dtype.kind == want.kind and np.can_cast(arr.dtype, want, "safe")):
        raise CommandError(f"{what} ({param_text(param, t)}): the array has dtype {arr.dtype}, "
                           f"which does not convert to {t.dtype} without loss")
    if arr.shape != tuple(t.shape):
        raise CommandError(f"{what} ({param_text(param, t)}): the array has shape {arr.shape}, "
                           f"@main expects {t}")
    return arr.astype(want)


def to_json(value):
    """A runtime value as JSON-able data: tensors as (nested) lists, tuples as lists, ADT values
    as {"Ctor": [fields]}, refs as {"ref": value}; closures as their text."""
    from relayish.backend.values import ConstructorValue, RefValue
    if isinstance(value, tuple):
        return [to_json(v) for v in value]
    if isinstance(value, ConstructorValue):
        return {value.constructor.name_hint: [to_json(f) for f in value.fields]}
    if isinstance(value, RefValue):
        return {"ref": to_json(value.value)}
    try:
        arr = np.asarray(value)
    except Exception:  # noqa: BLE001 - closures and other values print as text
        return repr(value)
    if arr.dtype == object:
        return repr(value)
    if arr.dtype.kind == "f" and arr.dtype.itemsize < 8:
        # each element at its own dtype's length: float32's 0.1 prints 0.1, not
        # 0.10000000149011612 (numpy's shortest text that reads back as the same float32)
        return np.array([float(str(v)) for v in arr.reshape(-1)]).reshape(arr.shape).tolist()
    return arr.tolist()


def strict_json(data):
    """json.dumps that `json.loads` in strict mode and jq accept: NaN and +-inf print as the
    strings "NaN", "Infinity" and "-Infinity", which the command reads back as floats."""
    return json.dumps(_finite(data), allow_nan=False)


def _finite(data):
    if isinstance(data, dict):
        return {k: _finite(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [_finite(v) for v in data]
    if isinstance(data, np.generic):
        data = data.item()
    if isinstance(data, float) and not math.isfinite(data):
        return "NaN" if math.isnan(data) else ("Infinity" if data > 0 else "-Infinity")
    return data
