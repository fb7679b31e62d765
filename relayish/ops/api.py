"""Every operator as a Python function building a call: `rl.add(x, y)`, `rl.op.sum(x, axis=1)`.

The public operators (API.md) are in `__all__` and so also reachable as `rl.NAME`; the internal
ones that gradient rules emit (collapse_sum_like, broadcast_to_like, ...) only as `rl.op.NAME`.
Python scalars become constants with the dtype of the other tensor argument:

    x = rl.var("x", shape=(3,), dtype="float64")
    y = rl.add(x, 1.0)                  # add(%x, 1f64)
    s = rl.sum(y * y, axis=0)
"""
# ruff: noqa: A001 - sum/max/min/abs mirror numpy's names on purpose
from __future__ import annotations

import functools
import inspect

import numpy as np

from relayish.errors import RelayishError
from relayish.ir.expr import Expr, Tuple, const
from relayish.ir.op import make_call

__all__ = [
    "add", "subtract", "multiply", "divide", "negative", "power", "maximum", "minimum",
    "exp", "log", "sin", "cos", "tan", "tanh", "sigmoid", "sqrt", "abs", "relu",
    "less", "greater", "less_equal", "greater_equal", "equal", "not_equal",
    "logical_and", "logical_or", "logical_not", "where",
    "sum", "mean", "max", "min", "matmul", "transpose", "reshape", "broadcast_to",
    "zeros_like", "ones_like", "zeros", "ones", "cast", "concatenate", "take", "stack",
    "log_softmax", "softmax",
]


def _call(name, *args, **attrs):
    return make_call(name, list(args), attrs)


def _fields(fields, op):
    """A list/tuple of expressions becomes an rl.Tuple; an Expr (of tuple type) stays as is."""
    if isinstance(fields, Expr):
        return fields
    if isinstance(fields, (list, tuple)):
        from relayish.ir.expr import as_expr
        items = list(fields)
        like = next((f for f in items if isinstance(f, Expr)), None)
        return Tuple([as_expr(f, like=like) for f in items])
    raise RelayishError(f"{op} takes a list of tensors or an expression of tuple type, "
                        f"got {fields!r}")


def _indices(indices):
    """Python ints and int lists are int32 index constants (not the dtype of the data)."""
    if isinstance(indices, Expr):
        return indices
    arr = np.asarray(indices)
    if arr.dtype.kind not in "iu":
        raise RelayishError(f"take: indices must be integers, got {indices!r}")
    keep = isinstance(indices, (np.ndarray, np.generic))
    return const(arr, dtype=arr.dtype.name if keep else "int32")


# ---- elementwise ----------------------------------------------------------------------------
def add(x, y): return _call("add", x, y)
def subtract(x, y): return _call("subtract", x, y)
def multiply(x, y): return _call("multiply", x, y)
def divide(x, y): return _call("divide", x, y)
def power(x, y): return _call("power", x, y)
def maximum(x, y): return _call("maximum", x, y)
def minimum(x, y): return _call("minimum", x, y)
def negative(x): return _call("negative", x)
def exp(x): return _call("exp", x)
def log(x): return _call("log", x)
def sin(x): return _call("sin", x)
def cos(x): return _call("cos", x)
def tan(x): return _call("tan", x)
def tanh(x): return _call("tanh", x)
def sigmoid(x): return _call("sigmoid", x)
def sqrt(x): return _call("sqrt", x)
def abs(x): return _call("abs", x)
def relu(x): return _call("relu", x)


def where(cond, x, y):
    """`where(cond, x, y)`: x where the bool tensor cond holds, else y (broadcasting).
    A Python scalar x or y takes the dtype of the other branch: `where(x > 0.0, x, 0.0)`."""
    from relayish.ir.expr import as_expr
    x = x if isinstance(x, Expr) else as_expr(x, like=y if isinstance(y, Expr) else None)
    y = y if isinstance(y, Expr) else as_expr(y, like=x)
    return _call("where", cond, x, y)


# ---- comparisons and logic ------------------------------------------------------------------
def less(x, y): return _call("less", x, y)
def greater(x, y): return _call("greater", x, y)
def less_equal(x, y): return _call("less_equal", x, y)
def greater_equal(x, y): return _call("greater_equal", x, y)
def equal(x, y): return _call("equal", x, y)
def not_equal(x, y): return _call("not_equal", x, y)
def logical_and(x, y): return _call("logical_and", x, y)
def logical_or(x, y): return _call("logical_or", x, y)
def logical_not(x): return _call("logical_not", x)


# ---- constructors and casts -----------------------------------------------------------------
def zeros_like(x): return _call("zeros_like", x)
def ones_like(x): return _call("ones_like", x)


def zeros(shape, dtype="float32"):
    """`zeros((2, 3), "float64")`: a tensor of zeros (an op call with no inputs)."""
    return _call("zeros", shape=shape, dtype=dtype)


def ones(shape, dtype="float32"):
    return _call("ones", shape=shape, dtype=dtype)


def cast(x, dtype):
    """`cast(x, "int32")`."""
    return _call("cast", x, dtype=dtype)


# ---- reductions -----------------------------------------------------------------------------
def sum(x, axis=None, keepdims=False):
    """`sum(x)`, `sum(x, axis=1)`, `sum(x, axis=(0, 2), keepdims=True)`."""
    return _call("sum", x, axis=axis, keepdims=keepdims)


def mean(x, axis=None, keepdims=False): return _call("mean", x, axis=axis, keepdims=keepdims)
def max(x, axis=None, keepdims=False): return _call("max", x, axis=axis, keepdims=keepdims)
def min(x, axis=None, keepdims=False): return _call("min", x, axis=axis, keepdims=keepdims)


# ---- shapes ---------------------------------------------------------------------------------
def matmul(x, y):
    """numpy matmul: 1-D, 2-D and batched (broadcast leading dimensions)."""
    return _call("matmul", x, y)


def transpose(x, axes=None):
    """`transpose(x)` reverses the axes; `transpose(x, (1, 0, 2))` permutes them."""
    return _call("transpose", x, axes=axes)


def reshape(x, newshape):
    """`reshape(x, (2, -1))`: one -1 entry is inferred from the size."""
    return _call("reshape", x, newshape=newshape)


def broadcast_to(x, shape): return _call("broadcast_to", x, shape=shape)


def concatenate(fields, axis=0):
    """`concatenate([a, b], axis=0)`; also takes one expression of tuple type."""
    return _call("concatenate", _fields(fields, "concatenate"), axis=axis)


def stack(fields, axis=0):
    """`stack([a, b], axis=0)`: a new axis; also takes one expression of tuple type."""
    return _call("stack", _fields(fields, "stack"), axis=axis)


def take(x, indices, axis=None):
    """numpy.take: integer indices; axis=None indexes the flattened tensor."""
    return _call("take", x, _indices(indices), axis=axis)


# ---- nn -------------------------------------------------------------------------------------
def softmax(x, axis=-1): return _call("softmax", x, axis=axis)
def log_softmax(x, axis=-1): return _call("log_softmax", x, axis=axis)


# ---- internal ops (emitted by gradient rules; rl.op.NAME only) ------------------------------
def collapse_sum_like(x, like):
    """Sum x over the axes that broadcasting added to `like`'s shape: back to like's shape."""
    return _call("collapse_sum_like", x, like)


def broadcast_to_like(x, like): return _call("broadcast_to_like", x, like)
def reshape_like(x, like): return _call("reshape_like", x, like)
def cast_like(x, like): return _call("cast_like", x, like)
def full_like(x, fill_value=0.0): return _call("full_like", x, fill_value=fill_value)
def expand_dims(x, axis): return _call("expand_dims", x, axis=axis)


def take_backward(g, indices, like, axis=None):
    """Scatter-add g into zeros shaped like `like` at `indices` (the gradient of take)."""
    return _call("take_backward", g, _indices(indices), like, axis=axis)


def strided_slice(x, begin, end):
    """x[begin[0]:end[0], begin[1]:end[1], ...] (one entry per axis, step 1)."""
    return _call("strided_slice", x, begin=begin, end=end)


def slice_scatter(g, like, begin, end):
    """Zeros shaped like `like` with g written at [begin:end] (the gradient of strided_slice)."""
    return _call("slice_scatter", g, like, begin=begin, end=end)


# ---- a wrong call of an op function is a relayish error, not a bare TypeError --------------
def _with_checked_arguments(fn):
    signature = inspect.signature(fn)

    @functools.wraps(fn)
    def checked(*args, **kwargs):
        try:
            signature.bind(*args, **kwargs)
        except TypeError as error:
            raise RelayishError(f"rl.{fn.__name__}{signature}: {error}") from None
        return fn(*args, **kwargs)
    return checked


for _name, _fn in list(globals().items()):
    if inspect.isfunction(_fn) and not _name.startswith("_") and _fn.__module__ == __name__:
        globals()[_name] = _with_checked_arguments(_fn)
del _name, _fn
