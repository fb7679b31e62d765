"""Every operator as a Python function building a call: `rl.add(x, y)`, `rl.op.sum(x, axis=1)`.

Every operator function is in `__all__` and so also reachable as `rl.NAME`, the internal ones
that gradient rules emit (collapse_sum_like, broadcast_to_like, take_backward, ...) too.
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
from relayish.ir.expr import Expr, Tuple, const, describe
from relayish.ir.op import make_call



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
                        f"got {describe(fields)}")


def _indices(indices):
    """Python ints and int lists are int32 index constants (not the dtype of the data)."""
    if isinstance(indices, Expr):
        return indices
    arr = np.asarray(indices)
    if arr.dtype.kind not in "iu":
        raise RelayishError(f"take: indices must be integers, got {describe(indices)}")
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
def log1p(x): return _call("log1p", x)
def expm1(x): return _call("expm1", x)
def softplus(x): return _call("softplus", x)
def logaddexp(x, y): return _call("logaddexp", x, y)
def sign(x): return _call("sign", x)
def floor(x): return _call("floor", x)
def ceil(x): return _call("ceil", x)
def round(x): return _call("round", x)  # noqa: A001 - numpy's name
def stop_gradient(x): return _call("stop_gradient", x)


# ---- special functions (ops/special.py) -----------------------------------------------------
def lgamma(x): return _call("lgamma", x)
def digamma(x): return _call("digamma", x)


def polygamma(n, x):
    """`polygamma(n, x)`: the n-th derivative of digamma (n >= 1, a Python int)."""
    return _call("polygamma", x, n=n)


def multigammaln(a, d):
    """`multigammaln(a, d)`: log of the multivariate gamma function of dimension d (an int)."""
    return _call("multigammaln", a, d=d)


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


def logsumexp(x, axis=None, keepdims=False):
    """log(sum(exp(x))) over axis, without overflow (its gradient: softmax weights)."""
    return _call("logsumexp", x, axis=axis, keepdims=keepdims)


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


def roll(x, shift, axis=None):
    """numpy.roll: `roll(x, 1)` (flattened), `roll(x, (1, -2), axis=(0, 1))`."""
    return _call("roll", x, shift=shift, axis=axis)


def take(x, indices, axis=None):
    """numpy.take: integer indices; axis=None indexes the flattened tensor."""
    return _call("take", x, _indices(indices), axis=axis)


def einsum(subscripts, *operands):
    """`einsum("ij,jk->ik", a, b)`: numpy.einsum (no "...", no repeated letter in an operand)."""
    return _call("einsum", *operands, subscripts=subscripts)


def index_update(x, indices, values, axis=0):
    """`index_update(x, i, v)`: x with v written where `take(x, i, axis)` reads (jax's
    `x.at[i].set(v)`; v broadcasts to take's shape; a repeated index keeps its last value)."""
    from relayish.ir.expr import as_expr
    return _call("index_update", x, _indices(indices), as_expr(values, like=x), axis=axis)


def index_add(x, indices, values, axis=0):
    """`index_add(x, i, v)`: x with v added where `take(x, i, axis)` reads (`x.at[i].add(v)`;
    repeated indices add up)."""
    from relayish.ir.expr import as_expr
    return _call("index_add", x, _indices(indices), as_expr(values, like=x), axis=axis)


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
def full_like(x, fill_value=0.0):
    """`full_like(x, 0.5)`: the constant in x's shape and dtype; a scalar tensor expression as
    fill_value makes Relay's two-argument form `full_like(%x, %v)`."""
    if isinstance(fill_value, Expr):
        return _call("full_like", x, fill_value)
    return _call("full_like", x, fill_value=fill_value)
def expand_dims(x, axis, num_newaxis=1):
    """numpy.expand_dims(x, axis); Relay's num_newaxis=k inserts k axes at the int axis."""
    return _call("expand_dims", x, axis=axis, num_newaxis=num_newaxis)


def take_backward(g, indices, like, axis=None):
    """Scatter-add g into zeros shaped like `like` at `indices` (the gradient of take)."""
    return _call("take_backward", g, _indices(indices), like, axis=axis)


def strided_slice(x, begin, end, strides=None):
    """x[begin[0]:end[0]:strides[0], ...] (one entry per axis; strides None: step 1)."""
    return _call("strided_slice", x, begin=begin, end=end, strides=strides)


def slice_scatter(g, like, begin, end, strides=None):
    """Zeros shaped like `like` with g written at [begin:end:strides] (strided_slice's
    gradient)."""
    return _call("slice_scatter", g, like, begin=begin, end=end, strides=strides)


# ---- Relay's operators (relayish/ops/layers.py, tensor.py): rl.clip ..., rl.nn.conv2d ... -------
def clip(x, a_min, a_max):
    """`clip(x, 0.0, 6.0)`: x limited to [a_min, a_max]."""
    return _call("clip", x, a_min=a_min, a_max=a_max)


def split(x, indices_or_sections, axis=0):
    """`split(x, 3)`: a tuple of 3 equal pieces; `split(x, (1, 4), axis=1)` cuts at 1 and 4."""
    return _call("split", x, indices_or_sections=indices_or_sections, axis=axis)


def squeeze(x, axis=None): return _call("squeeze", x, axis=axis)


def full(fill_value, shape, dtype=None):
    """`full(rl.const(2.0), (2, 3))`: fill_value (a scalar tensor; a Python number becomes a
    float32 constant unless dtype says otherwise) everywhere in `shape`."""
    if not isinstance(fill_value, Expr):
        fill_value = const(fill_value, dtype=dtype or "float32")
    return _call("full", fill_value, shape=shape, dtype=dtype)


def one_hot(indices, on_value, off_value, depth, axis=-1, dtype="float32"):
    """`one_hot(labels, 1.0, 0.0, depth=10)`: on_value where the position equals the index."""
    on = on_value if isinstance(on_value, Expr) else const(on_value, dtype=dtype)
    off = off_value if isinstance(off_value, Expr) else const(off_value, dtype=dtype)
    return _call("one_hot", _indices(indices), on, off, depth=depth, axis=axis, dtype=dtype)


def argmax(x, axis=None, keepdims=False, exclude=False, select_last_index=False):
    """int32 positions of the maxima (zero gradient)."""
    return _call("argmax", x, axis=axis, keepdims=keepdims, exclude=exclude,
                 select_last_index=select_last_index)


def argmin(x, axis=None, keepdims=False, exclude=False, select_last_index=False):
    return _call("argmin", x, axis=axis, keepdims=keepdims, exclude=exclude,
                 select_last_index=select_last_index)


def erf(x): return _call("erf", x)


def cumsum(x, axis=None, dtype=None, exclusive=False):
    """Cumulative sum along axis (None: of the flattened x); exclusive starts at 0."""
    return _call("cumsum", x, axis=axis, dtype=dtype, exclusive=exclusive)


def cumprod(x, axis=None, dtype=None, exclusive=False):
    """Cumulative product along axis (None: of the flattened x); exclusive starts at 1."""
    return _call("cumprod", x, axis=axis, dtype=dtype, exclusive=exclusive)


def gather(data, axis, indices):
    """Relay's `gather(data, axis, indices)`: out[i][j] = data[indices[i][j]][j] for axis 0
    (numpy.take_along_axis). The text form is `gather(%data, %indices, axis=0)`."""
    return _call("gather", data, _indices(indices), axis=axis)


def scatter_add(data, indices, updates, axis=0):
    """data with `updates` added at the positions that gather(data, axis, indices) reads."""
    return _call("scatter_add", data, _indices(indices), updates, axis=axis)


class _NN:
    """`rl.nn.conv2d(...)` etc.: the `nn.` operators under Relay's Python names."""

    @staticmethod
    def dense(data, weight, units=None, out_dtype=""):
        """`nn.dense(x, w)`: x @ w^T with w of shape (units, in_features)."""
        return _call("nn.dense", data, weight, units=units, out_dtype=out_dtype)

    @staticmethod
    def bias_add(data, bias, axis=1): return _call("nn.bias_add", data, bias, axis=axis)

    @staticmethod
    def batch_flatten(data): return _call("nn.batch_flatten", data)

    @staticmethod
    def conv2d(data, weight, strides=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1,
               channels=None, kernel_size=None, data_layout="NCHW", kernel_layout="OIHW",
               out_layout="", out_dtype=""):
        """NCHW data, OIHW weight; padding is 1, 2 (top/bottom, left/right) or 4 ints."""
        return _call("nn.conv2d", data, weight, strides=strides, padding=padding,
                     dilation=dilation, groups=groups, channels=channels,
                     kernel_size=kernel_size, data_layout=data_layout,
                     kernel_layout=kernel_layout, out_layout=out_layout, out_dtype=out_dtype)

    @staticmethod
    def max_pool2d(data, pool_size=(1, 1), strides=(1, 1), dilation=(1, 1), padding=(0, 0),
                   layout="NCHW", out_layout="", ceil_mode=False):
        return _call("nn.max_pool2d", data, pool_size=pool_size, strides=strides,
                     dilation=dilation, padding=padding, layout=layout, out_layout=out_layout,
                     ceil_mode=ceil_mode)

    @staticmethod
    def avg_pool2d(data, pool_size=(1, 1), strides=(1, 1), dilation=(1, 1), padding=(0, 0),
                   layout="NCHW", out_layout="", ceil_mode=False, count_include_pad=False):
        return _call("nn.avg_pool2d", data, pool_size=pool_size, strides=strides,
                     dilation=dilation, padding=padding, layout=layout, out_layout=out_layout,
                     ceil_mode=ceil_mode, count_include_pad=count_include_pad)

    @staticmethod
    def global_avg_pool2d(data, layout="NCHW", out_layout=""):
        return _call("nn.global_avg_pool2d", data, layout=layout, out_layout=out_layout)

    @staticmethod
    def softmax(data, axis=-1): return _call("softmax", data, axis=axis)

    @staticmethod
    def log_softmax(data, axis=-1): return _call("log_softmax", data, axis=axis)

    @staticmethod
    def relu(data): return _call("relu", data)

    @staticmethod
    def dropout(data, rate=0.5):
        """Inference form: `data` itself (Relay's op returns (data, mask); this is field 0)."""
        from relayish.ir.expr import TupleGetItem
        return TupleGetItem(_call("nn.dropout", data, rate=rate), 0)

    @staticmethod
    def dropout_raw(data, rate=0.5):
        """The (data, mask) tuple that the `nn.dropout` op returns."""
        return _call("nn.dropout", data, rate=rate)

    @staticmethod
    def layer_norm(data, gamma, beta, axis=-1, epsilon=1e-5, center=True, scale=True):
        return _call("nn.layer_norm", data, gamma, beta, axis=axis, epsilon=epsilon,
                     center=center, scale=scale)

    @staticmethod
    def batch_matmul(x, y, out_dtype="", transpose_a=False, transpose_b=True):
        """Per batch x @ y^T (Relay's default transpose_b=True): (B, M, K), (B, N, K) -> (B, M, N)."""
        return _call("nn.batch_matmul", x, y, out_dtype=out_dtype, transpose_a=transpose_a,
                     transpose_b=transpose_b)


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

nn = _NN()
for _name in [n for n in vars(_NN) if not n.startswith("_")]:
    setattr(_NN, _name, staticmethod(_with_checked_arguments(getattr(_NN, _name))))

# every operator function here, public and internal, is also `rl.NAME` (relayish/__init__.py)
__all__ = sorted(name for name, fn in globals().items() if inspect.isfunction(fn)
                 and not name.startswith("_") and fn.__module__ == __name__) + ["nn"]
