"""A relayish objective as a function of one flat float64 vector.

The variable may be a tensor or any structure of tensors (tuples, ADT values such as prelude
Lists). Its float tensors are flattened into one float64 vector; integer and bool leaves stay
fixed. When the variable is not already a float64 vector, the objective is wrapped in a
relayish function of the flat vector,

    fn(%x: Tensor[(n), float64]) { f(<the structure rebuilt from slices of %x>, args...) }

so that gradients, Hessians and Hessian-vector products are always taken of a function of one
vector (hessian.py derives them), and the structure is rebuilt for the result (`spec.value`).
"""
from __future__ import annotations

import numpy as np

from relayish.errors import RelayishError
from relayish.ir.expr import Call, Function, GlobalVar, Tuple, Var, const
from relayish.ir.link import link_program
from relayish.ir.module import Module
from relayish.ir.types import TensorType, TupleType, TypeCall, substitute
from relayish.ir.visitor import ExprMutator, run_deep
from relayish.backend.values import ConstructorValue
from relayish.ops import api as ops


# ---- the variable's structure ---------------------------------------------------------------

class Leaf:
    """A float tensor of the variable: flat[offset:offset+size] reshaped."""

    def __init__(self, offset, shape, dtype):
        self.offset, self.shape, self.dtype = offset, tuple(shape), dtype
        self.size = int(np.prod(self.shape, dtype=np.int64))

    def expr(self, flat, n):
        e = flat
        if not (self.offset == 0 and self.size == n and self.shape == (n,)):
            e = ops.strided_slice(flat, [self.offset], [self.offset + self.size])
            if self.shape != (self.size,):
                e = ops.reshape(e, self.shape)
        if self.dtype != "float64":
            e = ops.cast(e, self.dtype)
        return e

    def value(self, flat):
        return np.asarray(flat[self.offset:self.offset + self.size].reshape(self.shape),
                          dtype=self.dtype)


class Fixed:
    """A leaf that is not optimized (integer or bool tensor): kept as given."""

    def __init__(self, value):
        self.value_ = value

    def expr(self, flat, n):
        return const(self.value_)

    def value(self, flat):
        return self.value_


class TupleSpec:
    def __init__(self, parts):
        self.parts = parts

    def expr(self, flat, n):
        return Tuple([p.expr(flat, n) for p in self.parts])

    def value(self, flat):
        return tuple(p.value(flat) for p in self.parts)


class CtorSpec:
    """An ADT value; `as_list` when the user gave a Python list for a prelude List."""

    def __init__(self, ctor, parts, as_list=False):
        self.ctor, self.parts, self.as_list = ctor, parts, as_list

    def expr(self, flat, n):
        return Call(self.ctor, [p.expr(flat, n) for p in self.parts])

    def value(self, flat):
        v = ConstructorValue(self.ctor, [p.value(flat) for p in self.parts])
        if self.as_list:
            from relayish.backend.values import from_list_value
            return from_list_value(v)
        return v


def build_spec(t, x0, mod, offset=0, what="x0"):
    """(spec, leaves' flat values, new offset) for the value x0 of the parameter type t."""
    # Per kind of type (not map_type): each kind reads x0 its own way; the rest are refused.
    if isinstance(t, TensorType):
        try:
            arr = np.asarray(x0)
            if arr.dtype == object:
                raise ValueError
            arr = arr.astype(np.float64 if t.is_float else t.dtype)
        except (TypeError, ValueError):
            raise RelayishError(f"{what} must be a tensor of type {t} (a number or nested list of "
                                f"numbers), got {_shown(x0)}") from None
        if arr.shape != t.shape:
            raise RelayishError(f"{what} has shape {arr.shape}, but the objective's variable has "
                                f"type {t} (shape {t.shape})")
        if not t.is_float:
            return Fixed(arr.astype(t.dtype)), [], offset
        leaf = Leaf(offset, t.shape, t.dtype)
        return leaf, [arr.reshape(-1)], offset + leaf.size
    if isinstance(t, TupleType):
        if not isinstance(x0, (tuple, list)) or len(x0) != len(t.fields):
            raise RelayishError(f"{what} must be a tuple of {len(t.fields)} values for the "
                                f"variable of type {t}, got {_shown(x0)}")
        parts, flats = [], []
        for k, (ft, item) in enumerate(zip(t.fields, x0)):
            spec, fl, offset = build_spec(ft, item, mod, offset, f"{what}[{k}]")
            parts.append(spec)
            flats.extend(fl)
        return TupleSpec(parts), flats, offset
    if isinstance(t, TypeCall):
        as_list = False
        if isinstance(x0, (list, tuple)) and t.func.name == "List" and mod is not None:
            from relayish.backend.values import list_value
            x0, as_list = list_value(mod, list(x0)), True
        if not isinstance(x0, ConstructorValue):
            raise RelayishError(f"{what} must be a value of type {t} (an rl.ConstructorValue"
                                f"{' or a Python list' if t.func.name == 'List' else ''}), "
                                f"got {_shown(x0)}")
        return _ctor_spec(t, x0, mod, offset, what, as_list)
    raise RelayishError(f"cannot optimize over a variable of type {t}: the variable must be a "
                        "float tensor or a structure (tuple, ADT) of tensors")


def _ctor_spec(t, x0, mod, offset, what, as_list):
    # Lists are long: walk the spine with a loop, recursing only into the items.
    specs, flats, node = [], [], x0
    chain = []
    while True:
        ctor = node.constructor
        data = ctor.type_data
        if data is None or data.header.name != t.func.name:
            raise RelayishError(f"{what} must be a value of type {t}, got a {ctor.name_hint} value")
        subst = dict(zip(data.type_vars, t.args))
        inputs = [substitute(i, subst) for i in ctor.inputs]
        if len(inputs) != len(node.fields):
            raise RelayishError(f"{what}: {ctor.name_hint} takes {len(inputs)} fields, "
                                f"the value has {len(node.fields)}")
        parts, tail = [], None
        for k, (it, field) in enumerate(zip(inputs, node.fields)):
            if (k == len(inputs) - 1 and isinstance(it, TypeCall) and it == t
                    and isinstance(field, ConstructorValue)):
                tail = field
                parts.append(None)
                continue
            spec, fl, offset = build_spec(it, field, mod, offset, f"{what}.{ctor.name_hint}[{k}]")
            parts.append(spec)
            flats.extend(fl)
        chain.append((ctor, parts))
        if tail is None:
            break
        node = tail
    spec = None
    for ctor, parts in reversed(chain):
        if parts and parts[-1] is None:
            parts[-1] = spec
        spec = CtorSpec(ctor, parts)
    spec.as_list = as_list
    return spec, flats, offset


def _shown(value, limit=60):
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


# ---- the objective as a function of one flat vector -----------------------------------------

class _RenameGlobal(ExprMutator):
    def __init__(self, old, new):
        super().__init__()
        self.old, self.new = old, new

    def visit_GlobalVar(self, e):
        return GlobalVar(self.new) if e.name_hint == self.old else e


def _fresh_name(mod, base):
    name, k = base, 1
    while name in mod:
        k += 1
        name = f"{base}{k}"
    return name


def flat_objective(f, x0, args=()):
    """(objective over a float64 vector — a Function or a Module —, spec, flat x0)."""
    from relayish.ir.typecheck import infer_type
    if not isinstance(f, (Function, Module)):
        raise RelayishError(f"minimize takes a relayish Function or Module (with @main), got "
                            f"{type(f).__name__}")
    checked = infer_type(link_program(f))        # called Modules' globals merged
    mod = checked if isinstance(checked, Module) else None
    main = checked["main"] if mod is not None else checked
    ftype = main.checked_type
    where = "@main" if mod is not None else "the objective"
    if not ftype.arg_types:
        raise RelayishError(f"{where} has no parameter to minimize over")
    ret = ftype.ret_type
    if not (isinstance(ret, TensorType) and ret.is_float and ret.shape == ()):
        raise RelayishError(f"the objective must return a float scalar (Tensor[(), float64] or "
                            f"float32); {where} returns {ret}")
    args = tuple(args)
    if len(args) != len(ftype.arg_types) - 1:
        fixed = len(ftype.arg_types) - 1
        raise RelayishError(f"{where} takes the variable and {fixed} fixed argument(s), but "
                            f"args= gives {len(args)}")
    spec, flats, n = build_spec(ftype.arg_types[0], x0, mod)
    if n == 0:
        raise RelayishError(f"the variable of type {ftype.arg_types[0]} has no float tensor to "
                            "optimize")
    x_flat = np.concatenate(flats).astype(np.float64) if flats else np.zeros(0)
    fixed = []
    for k, (t, a) in enumerate(zip(ftype.arg_types[1:], args)):
        if not isinstance(t, TensorType):
            raise RelayishError(f"args[{k}]: fixed arguments must be tensors; the parameter has "
                                f"type {t}")
        try:
            arr = np.asarray(a, dtype=t.dtype)
        except (TypeError, ValueError):
            raise RelayishError(f"args[{k}] must be a tensor of type {t}, got {_shown(a)}") from None
        if arr.shape != t.shape:
            raise RelayishError(f"args[{k}] has shape {arr.shape}, the parameter has type {t}")
        fixed.append(const(arr))
    direct = (isinstance(spec, Leaf) and spec.dtype == "float64" and spec.shape == (n,)
              and not fixed)
    if direct:
        return checked, spec, x_flat
    flat = Var("x", TensorType((n,), "float64"))
    structured = spec.expr(flat, n)
    if mod is None:
        return Function([flat], Call(checked, [structured] + fixed)), spec, x_flat
    new = mod.copy()
    inner = _fresh_name(new, "objective")
    # the mutator recurses down nested calls: under the deep-run guard, as the AD and backends
    body = run_deep(_RenameGlobal("main", inner).visit, main)
    new[inner] = body
    new["main"] = Function([flat], Call(GlobalVar(inner), [structured] + fixed))
    return new, spec, x_flat
