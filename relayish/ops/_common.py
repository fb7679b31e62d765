"""Helpers shared by the operator families: argument checks for type rules, broadcasting, axis
normalization, canonical attributes, and small builders used inside gradient rules.

Type rules raise TypeCheckError with a message in user terms; the type checker adds the text of
the offending call. Attribute normalizers raise RelayishError when the call is built.
"""
from __future__ import annotations

import numpy as np

from relayish.errors import GradientError, RelayishError, TypeCheckError
from relayish.ir.expr import Constant, Tuple, Var, const, describe
from relayish.ir.op import register_tangent
from relayish.ir.types import (FLOAT_DTYPES, INT_DTYPES, TensorType, TupleType, Type,
                               normalize_dtype)

NUMERIC = INT_DTYPES + FLOAT_DTYPES


# ---- the index_range records of take and gather (ir/op.py) ----------------------------------

def axis_range(k, at):
    """An index_range record (ir/op.py): argument k holds the indices, into the axis `axis`
    (an attribute; None: the flattened array) of argument `at`."""
    def index_range(shapes, attrs):
        shape, axis = shapes[at], attrs["axis"]
        return k, (int(np.prod(shape)) if axis is None else shape[axis % len(shape)])
    return index_range


# ---- argument checks for type rules ---------------------------------------------------------

def tensor_arg(op, types, i, what=None) -> TensorType:
    """The i-th argument type, which must be a tensor."""
    t = types[i]
    if not isinstance(t, TensorType):
        name = what or f"argument {i + 1}"
        raise TypeCheckError(f"{op}: {name} must be a tensor, got {_text(t)}")
    return t


def tensor_args(op, types) -> list:
    return [tensor_arg(op, types, i) for i in range(len(types))]


def tuple_of_tensors(op, types, i=0) -> list:
    """The fields of a tuple-typed argument (concatenate, stack), each a tensor, at least one."""
    t = types[i]
    if not isinstance(t, TupleType):
        raise TypeCheckError(f"{op}: takes one argument of tuple type (a tuple of tensors), "
                             f"got {_text(t)}")
    if not t.fields:
        raise TypeCheckError(f"{op}: needs at least one tensor, got an empty tuple")
    for k, f in enumerate(t.fields):
        if not isinstance(f, TensorType):
            raise TypeCheckError(f"{op}: field {k} of the tuple must be a tensor, got {_text(f)}")
    return list(t.fields)


def same_dtype(op, *ts) -> str:
    dtypes = {t.dtype for t in ts}
    if len(dtypes) > 1:
        shown = " and ".join(_text(t) for t in ts)
        raise TypeCheckError(f"{op}: operands must have the same dtype, got {shown} "
                             "(use cast to convert one of them)")
    return ts[0].dtype


def require_dtype(op, t, allowed, kind) -> None:
    if t.dtype not in allowed:
        raise TypeCheckError(f"{op}: expects {kind} tensors, got {_text(t)}")


def broadcast_shapes(op, *shapes) -> tuple:
    """numpy broadcasting of static shapes; a TypeCheckError names the clashing shapes."""
    ndim = max(len(s) for s in shapes)
    out = []
    for k in range(ndim):
        dims = {s[len(s) - ndim + k] for s in shapes if len(s) - ndim + k >= 0}
        dims.discard(1)
        if len(dims) > 1:
            shown = " and ".join(str(tuple(s)) for s in shapes)
            raise TypeCheckError(f"{op}: shapes {shown} cannot be broadcast together")
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def can_broadcast_to(shape, target) -> bool:
    if len(shape) > len(target):
        return False
    for a, b in zip(reversed(shape), reversed(target)):
        if a != 1 and a != b:
            return False
    return True


def norm_axis(op, axis, ndim) -> int:
    if not -ndim <= axis < ndim:
        raise TypeCheckError(f"{op}: axis {axis} is out of range for a tensor of rank {ndim} "
                             f"(valid: {-ndim} to {ndim - 1})" if ndim else
                             f"{op}: axis {axis} is out of range for a scalar (rank 0)")
    return axis % ndim


def norm_axes(op, axis, ndim) -> tuple:
    """axis None / int / tuple -> sorted tuple of non-negative axes (None: all)."""
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if isinstance(axis, int) else axis
    out = tuple(norm_axis(op, a, ndim) for a in axes)
    if len(set(out)) != len(out):
        raise TypeCheckError(f"{op}: axis {axis} names an axis twice")
    return tuple(sorted(out))


def _text(t) -> str:
    try:
        return str(t)
    except Exception:  # noqa: BLE001 - a message must never fail
        return repr(t)


# ---- attribute normalization (canonical forms, so text round-trips) --------------------------

def _is_int(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def canon_int(op, name, v) -> int:
    if not _is_int(v):
        raise RelayishError(f"operator '{op}': attribute {name} must be an int, "
                            f"got {describe(v)}")
    return int(v)


def canon_axis(op, name, v):
    """None, an int, or a tuple of ints (a one-element list/tuple stays a tuple)."""
    if v is None:
        return None
    if _is_int(v):
        return int(v)
    if isinstance(v, (list, tuple)) and all(_is_int(a) for a in v):
        return tuple(int(a) for a in v)
    raise RelayishError(f"operator '{op}': attribute {name} must be None, an int or a tuple of "
                        f"ints, got {describe(v)}")


def canon_ints(op, name, v, allow_none=False, allow_negative=False):
    """A tuple of ints (an int is a 1-tuple)."""
    if v is None and allow_none:
        return None
    if _is_int(v):
        v = (v,)
    if not isinstance(v, (list, tuple)) or not all(_is_int(a) for a in v):
        raise RelayishError(f"operator '{op}': attribute {name} must be a tuple of ints, "
                            f"got {describe(v)}")
    out = tuple(int(a) for a in v)
    if not allow_negative and any(a < 0 for a in out):
        raise RelayishError(f"operator '{op}': attribute {name} must be non-negative, "
                            f"got {describe(v)}")
    return out


def canon_bool(op, name, v) -> bool:
    if not isinstance(v, (bool, np.bool_)):
        raise RelayishError(f"operator '{op}': attribute {name} must be True or False, "
                            f"got {describe(v)}")
    return bool(v)


def canon_dtype(op, name, v) -> str:
    try:
        return normalize_dtype(v)
    except RelayishError as err:
        raise RelayishError(f"operator '{op}': attribute {name}: {err}") from None


def canon_float(op, name, v) -> float:
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise RelayishError(f"operator '{op}': attribute {name} must be a number, "
                            f"got {describe(v)}")
    return float(v)


def normalizer(op, **kinds):
    """An attrs normalizer from {attr: canon function}: normalizer("sum", axis=canon_axis)."""
    def normalize(attrs):
        return {k: (kinds[k](op, k, v) if k in kinds else v) for k, v in attrs.items()}
    return normalize


# ---- array implementations ------------------------------------------------------------------

def as_array(xp, value, dtype=None):
    """numpy turns 0-d results into numpy scalars; the runtime wants 0-d arrays of the declared
    dtype."""
    return xp.asarray(value) if dtype is None else xp.asarray(value, dtype=dtype)


def check_indices(xp, op, indices, n):
    """Under numpy, an index outside [-n, n) is an EvaluationError naming it (jax cannot raise:
    the ops clip or drop there, and the jax backend checks the range from the op's
    index_range record: axis_range, backend/jax/index_checks.py)."""
    if xp is np and indices.size and (indices.min() < -n or indices.max() >= n):
        from relayish.errors import EvaluationError
        bad = indices[(indices < -n) | (indices >= n)].flat[0]
        raise EvaluationError(f"{op}: index {bad} is out of range for an axis of size {n}")


def libm_impl(scalar_fn, jax_name):
    """The impl of a special function numpy lacks: libm's `scalar_fn` (math.erf) elementwise in
    float64 under numpy, `jax.scipy.special.<jax_name>` under jax (the kind of impl that
    branches on xp for the formula)."""
    elementwise = np.frompyfunc(scalar_fn, 1, 1)

    def impl(xp, x):
        if xp is np:
            values = np.asarray(elementwise(np.asarray(x, dtype=np.float64)), dtype=np.float64)
            return as_array(xp, values.astype(x.dtype), dtype=x.dtype)
        import jax.scipy.special
        return getattr(jax.scipy.special, jax_name)(x)
    return impl


# ---- inside gradient rules ------------------------------------------------------------------

def static_type(expr) -> Type | None:
    """The type an expression is known to have without running inference (None if unknown)."""
    t = getattr(expr, "_checked_type", None)
    if t is not None:
        return t
    if isinstance(expr, Var) and expr.type_annotation is not None:
        return expr.type_annotation
    if isinstance(expr, Constant):
        return TensorType(expr.data.shape, expr.data.dtype.name)
    if isinstance(expr, Tuple):
        fields = [static_type(f) for f in expr.fields]
        if all(f is not None for f in fields):
            return TupleType(fields)
    return None


def need_type(expr, rule) -> Type:
    """The type of `expr`, which the gradient/tangent rule `rule` needs: from inference results,
    annotations, or (last resort) inference of the expression on its own."""
    t = static_type(expr)
    if t is not None:
        return t
    try:
        from relayish.ir.typecheck import typeof
        return typeof(expr)
    except RelayishError:
        raise GradientError(f"the {rule} rule needs the type of {expr!r}; run rl.infer_type on "
                            "the program before differentiating it") from None


def tuple_size(expr, rule) -> int:
    if isinstance(expr, Tuple):
        return len(expr.fields)
    t = need_type(expr, rule)
    if not isinstance(t, TupleType):
        raise GradientError(f"the {rule} rule expected a tuple, got a value of type {_text(t)}")
    return len(t.fields)


def scalar_like(value, expr):
    """The constant `value` with the dtype of `expr` (a scalar when the dtype is known, else
    `full_like(expr, value)`), so float64 programs stay float64."""
    t = static_type(expr)
    if isinstance(t, TensorType):
        return const(value, dtype=t.dtype)
    from relayish.ops import api
    return api.full_like(expr, fill_value=value)


# ---- numpy fast paths (the interpreter; an Op record's fast_impl) ---------------------------

def fixed_fast(fn):
    """A fast path ignoring attrs and types: `fast_impl=fixed_fast(np.add)`."""
    return lambda attrs, out_type: fn


def reshape_fast(attrs, out_type):
    """The fast path of the reshapes (reshape, reshape_like, expand_dims): `x.reshape` to the
    call's inferred shape (none without one)."""
    if not isinstance(out_type, TensorType):
        return None
    shape = out_type.shape
    return lambda x, *like: x.reshape(shape)


# ---- tangent rules of linear and bilinear ops -------------------------------------------------

def linear_tangent(name):
    """Registers the tangent rule of op `name`, jointly linear in the arguments its record's
    `linear_in` names (the others are constants of the call, such as indices): the op itself
    applied to their tangents, with the call's other arguments and attributes."""
    from relayish.ir.op import get_op
    from relayish.ops import api
    linear = get_op(name).linear_in
    if not linear:
        raise RelayishError(f"linear_tangent: operator '{name}' declares no linear_in")

    def rule(orig, ts):
        args = [ts[i] if i in linear else a for i, a in enumerate(orig.args)]
        return api._call(name, *args, **orig.attrs)
    register_tangent(name)(rule)


def bilinear_tangent(name):
    """Registers the tangent rule of op `name`, declared `bilinear` (linear in each of its two
    arguments, matmul-like): op(dx, y) + op(x, dy)."""
    from relayish.ir.op import get_op
    from relayish.ops import api
    if not get_op(name).bilinear:
        raise RelayishError(f"bilinear_tangent: operator '{name}' is not declared bilinear")

    def rule(orig, ts):
        x, y = orig.args
        return api._call(name, ts[0], y, **orig.attrs) + api._call(name, x, ts[1], **orig.attrs)
    register_tangent(name)(rule)
