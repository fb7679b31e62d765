"""Elementwise operators: arithmetic with numpy broadcasting, unary math (log1p, expm1,
softplus, logaddexp among them), where, the tensor constructors (zeros_like, ones_like,
full_like, zeros, ones, cast, cast_like), and the piecewise constant sign, floor, ceil, round
(zero derivatives, registered differentiable=False as the comparisons are).

Each op: register_op(type rule, impl), then its gradient `<op>_grad(orig_call, out_grad)` and its
tangent `<op>_tangent(orig_call, arg_tangents)`, both building relayish expressions through
relayish.ops.api so that they can be differentiated again. A binary op's gradient is reduced
back to each input's shape with collapse_sum_like (skipped when the shapes are known equal).
"""
from __future__ import annotations

import functools

import numpy as np

from relayish.errors import TypeCheckError
from relayish.ir.expr import Constant
from relayish.ir.op import (Infix, arg_dtype, attr_dtype, make_call, register_gradient,
                            register_op, register_tangent)
from relayish.ir.types import FLOAT_DTYPES, TensorType
from relayish.ops import api
from relayish.ops._common import (NUMERIC, as_array, broadcast_shapes, canon_dtype, canon_float,
                                  canon_ints, fixed_fast, normalizer, require_dtype, same_dtype, scalar_like,
                                  static_type, tensor_arg, tensor_args)


# ---- shared rules ---------------------------------------------------------------------------

def binary_rule(op, allowed=NUMERIC, kind="numeric", out_dtype=None):
    """Two tensors of one dtype, broadcast together."""
    def rule(types, attrs):
        x, y = tensor_args(op, types)
        dtype = same_dtype(op, x, y)
        require_dtype(op, x, allowed, kind)
        return TensorType(broadcast_shapes(op, x.shape, y.shape), out_dtype or dtype)
    return rule


def unary_rule(op, allowed=FLOAT_DTYPES, kind="floating-point"):
    def rule(types, attrs):
        x = tensor_arg(op, types, 0)
        require_dtype(op, x, allowed, kind)
        return x
    return rule


def unbroadcast(g, x, orig):
    """The cotangent `g` of a broadcasting op's output, summed back to the shape of input `x`."""
    tx, tout = static_type(x), static_type(orig)
    if isinstance(tx, TensorType) and isinstance(tout, TensorType) and tx.shape == tout.shape:
        return g
    return api.collapse_sum_like(g, x)


def elementwise_derivative(name):
    """Register the gradient and tangent of a unary op from `d(orig, v) = v * f'(x)`."""
    def register(d):
        register_gradient(name)(lambda orig, g: [d(orig, g)])
        register_tangent(name)(lambda orig, ts: d(orig, ts[0]))
        return d
    return register


# ---- binary arithmetic ----------------------------------------------------------------------

register_op("add", 2, type_rule=binary_rule("add"),
            impl=lambda xp, x, y: as_array(xp, xp.add(x, y)),
            infix=Infix("+", "add"), fast_impl=fixed_fast(np.add), linear_in=(0, 1),
            accumulates=True, identity_in={0: 0, 1: 0},
            doc="x + y")


@register_gradient("add")
def add_grad(orig, g):
    x, y = orig.args
    return [unbroadcast(g, x, orig), unbroadcast(g, y, orig)]


@register_tangent("add")
def add_tangent(orig, ts):
    return api.add(ts[0], ts[1])


register_op("subtract", 2, type_rule=binary_rule("subtract"),
            impl=lambda xp, x, y: as_array(xp, xp.subtract(x, y)),
            infix=Infix("-", "add"), fast_impl=fixed_fast(np.subtract), linear_in=(0, 1),
            identity_in={1: 0}, doc="x - y")


@register_gradient("subtract")
def subtract_grad(orig, g):
    x, y = orig.args
    return [unbroadcast(g, x, orig), unbroadcast(api.negative(g), y, orig)]


@register_tangent("subtract")
def subtract_tangent(orig, ts):
    return api.subtract(ts[0], ts[1])


register_op("multiply", 2, type_rule=binary_rule("multiply"),
            impl=lambda xp, x, y: as_array(xp, xp.multiply(x, y)),
            infix=Infix("*", "mul"), fast_impl=fixed_fast(np.multiply), bilinear=True,
            identity_in={0: 1, 1: 1}, doc="x * y")


@register_gradient("multiply")
def multiply_grad(orig, g):
    x, y = orig.args
    return [unbroadcast(g * y, x, orig), unbroadcast(g * x, y, orig)]


@register_tangent("multiply")
def multiply_tangent(orig, ts):
    x, y = orig.args
    return ts[0] * y + x * ts[1]


def _divide_impl(xp, x, y):
    """Integer division floors, keeping the dtype; x / 0 is 0 and int-min / -1 wraps to int-min
    on every backend (XLA alone would give -2 for 7 / 0). See notes/ops.md, integer semantics."""
    if x.dtype.kind not in "iu":
        return as_array(xp, xp.divide(x, y))
    zero = y == 0
    with np.errstate(over="ignore"):     # numpy warns on int-min // -1; XLA wraps silently
        q = xp.floor_divide(x, xp.where(zero, xp.ones_like(y), y))
    return as_array(xp, xp.where(zero, xp.zeros_like(q), q))


register_op("divide", 2, type_rule=binary_rule("divide"), impl=_divide_impl,
            infix=Infix("/", "mul"), linear_in=(0,), identity_in={1: 1},
            doc="x / y (floor division for integer tensors)")


@register_gradient("divide")
def divide_grad(orig, g):
    x, y = orig.args
    gx = g / y
    return [unbroadcast(gx, x, orig), unbroadcast(api.negative(gx * orig), y, orig)]


@register_tangent("divide")
def divide_tangent(orig, ts):
    x, y = orig.args
    return (ts[0] - orig * ts[1]) / y


def _power_impl(xp, x, y):
    """Float power is IEEE `pow`. Integer power is computed here by squaring, the same on numpy
    and jax.numpy: products wrap (mod 2^bits), and a negative exponent gives 1 / x truncated
    (1 for x = 1, +-1 for x = -1, else 0) where numpy raises and jax's own loop disagrees."""
    if x.dtype.kind not in "iu":
        return as_array(xp, xp.power(x, y))
    x, y = xp.broadcast_arrays(x, y)
    one = xp.ones_like(x)
    result, base = one, x
    e = xp.where(y < 0, xp.zeros_like(y), y) if x.dtype.kind == "i" else y
    with np.errstate(over="ignore"):     # products wrap, as in XLA
        for _ in range(8 * x.dtype.itemsize):
            result = xp.where((e & 1) == 1, result * base, result)
            base = base * base
            e = e >> 1
    if x.dtype.kind == "i":
        odd = (y & 1) == 1
        inverse = xp.where(x == one, one, xp.where(x == -one, xp.where(odd, -one, one),
                                                   xp.zeros_like(x)))
        result = xp.where(y < 0, inverse, result)
    return as_array(xp, result)


# x ** 1 is x bit for bit: integer power by squaring multiplies 1 by x once, and C's pow gave
# x back for every float16/32/64 bit pattern tried (2 million each, NaNs and subnormals too)
register_op("power", 2, type_rule=binary_rule("power"), impl=_power_impl,
            identity_in={1: 1}, doc="x ** y")


def _safe_log(x):
    """log(x) with log(0) replaced by 0: d(x**y)/dy at x = 0 is 0, not nan."""
    return api.log(api.where(api.equal(x, api.zeros_like(x)), api.ones_like(x), x))


def _power_minus_one(x, y):
    """x ** (y - 1); a constant exponent stays a constant, so its rules skip log(x) again."""
    if isinstance(y, Constant):
        return api.power(x, Constant(np.asarray(y.data - 1, dtype=y.data.dtype)))
    return api.power(x, y - api.ones_like(y))


@register_gradient("power")
def power_grad(orig, g):
    x, y = orig.args
    dx = g * y * _power_minus_one(x, y)
    if isinstance(y, Constant):          # x ** 2.0: no log(x) (nan for x < 0) for a constant
        return [unbroadcast(dx, x, orig), api.zeros_like(y)]
    dy = g * orig * _safe_log(x)
    return [unbroadcast(dx, x, orig), unbroadcast(dy, y, orig)]


@register_tangent("power")
def power_tangent(orig, ts):
    x, y = orig.args
    tx = ts[0] * y * _power_minus_one(x, y)
    if isinstance(y, Constant):
        return tx
    return tx + ts[1] * orig * _safe_log(x)


register_op("maximum", 2, type_rule=binary_rule("maximum"),
            impl=lambda xp, x, y: as_array(xp, xp.maximum(x, y)), fast_impl=fixed_fast(np.maximum),
            doc="elementwise max")


def _select_weights(first_wins, tie, like):
    """1 where `first_wins`, 1/2 where `tie`, else 0: ties split the gradient evenly."""
    half = api.full_like(like, fill_value=0.5)
    return api.where(first_wins, api.ones_like(like), api.where(tie, half, api.zeros_like(like)))


@register_gradient("maximum")
def maximum_grad(orig, g):
    x, y = orig.args
    tie = api.equal(x, y)
    wx = _select_weights(api.greater(x, y), tie, g)
    wy = _select_weights(api.less(x, y), tie, g)
    return [unbroadcast(g * wx, x, orig), unbroadcast(g * wy, y, orig)]


@register_tangent("maximum")
def maximum_tangent(orig, ts):
    x, y = orig.args
    tie = api.equal(x, y)
    return (ts[0] * _select_weights(api.greater(x, y), tie, orig)
            + ts[1] * _select_weights(api.less(x, y), tie, orig))


register_op("minimum", 2, type_rule=binary_rule("minimum"),
            impl=lambda xp, x, y: as_array(xp, xp.minimum(x, y)), fast_impl=fixed_fast(np.minimum),
            doc="elementwise min")


@register_gradient("minimum")
def minimum_grad(orig, g):
    x, y = orig.args
    tie = api.equal(x, y)
    wx = _select_weights(api.less(x, y), tie, g)
    wy = _select_weights(api.greater(x, y), tie, g)
    return [unbroadcast(g * wx, x, orig), unbroadcast(g * wy, y, orig)]


@register_tangent("minimum")
def minimum_tangent(orig, ts):
    x, y = orig.args
    tie = api.equal(x, y)
    return (ts[0] * _select_weights(api.less(x, y), tie, orig)
            + ts[1] * _select_weights(api.greater(x, y), tie, orig))


# ---- unary ----------------------------------------------------------------------------------

register_op("negative", 1, type_rule=unary_rule("negative", NUMERIC, "numeric"),
            impl=lambda xp, x: as_array(xp, xp.negative(x)),
            prefix="-", fast_impl=fixed_fast(np.negative), linear_in=(0,),
            involution=True, doc="-x")


@elementwise_derivative("negative")
def negative_grad(orig, v):
    return api.negative(v)


def _sign_times(x, v):
    """v * sign(x), with sign(0) = 0."""
    zero = api.zeros_like(x)
    return api.where(api.greater(x, zero), v,
                     api.where(api.less(x, zero), api.negative(v), api.zeros_like(v)))


register_op("abs", 1, type_rule=unary_rule("abs", NUMERIC, "numeric"),
            impl=lambda xp, x: as_array(xp, xp.abs(x)), fast_impl=fixed_fast(np.absolute),
            doc="|x|")


@elementwise_derivative("abs")
def abs_grad(orig, v):
    return _sign_times(orig.args[0], v)


register_op("relu", 1, type_rule=unary_rule("relu", NUMERIC, "numeric"),
            impl=lambda xp, x: as_array(xp, xp.maximum(x, xp.zeros_like(x))), doc="max(x, 0)")


@elementwise_derivative("relu")
def relu_grad(orig, v):
    x = orig.args[0]
    return api.where(api.greater(x, api.zeros_like(x)), v, api.zeros_like(v))


register_op("exp", 1, type_rule=unary_rule("exp"),
            impl=lambda xp, x: as_array(xp, xp.exp(x)), fast_impl=fixed_fast(np.exp),
            doc="e ** x")


@elementwise_derivative("exp")
def exp_grad(orig, v):
    return v * orig


register_op("log", 1, type_rule=unary_rule("log"),
            impl=lambda xp, x: as_array(xp, xp.log(x)), fast_impl=fixed_fast(np.log),
            doc="natural logarithm")


@elementwise_derivative("log")
def log_grad(orig, v):
    return v / orig.args[0]


register_op("sin", 1, type_rule=unary_rule("sin"),
            impl=lambda xp, x: as_array(xp, xp.sin(x)), fast_impl=fixed_fast(np.sin),
            doc="sine")


@elementwise_derivative("sin")
def sin_grad(orig, v):
    return v * api.cos(orig.args[0])


register_op("cos", 1, type_rule=unary_rule("cos"),
            impl=lambda xp, x: as_array(xp, xp.cos(x)), fast_impl=fixed_fast(np.cos),
            doc="cosine")


@elementwise_derivative("cos")
def cos_grad(orig, v):
    return api.negative(v * api.sin(orig.args[0]))


register_op("tan", 1, type_rule=unary_rule("tan"),
            impl=lambda xp, x: as_array(xp, xp.tan(x)), fast_impl=fixed_fast(np.tan),
            doc="tangent")


@elementwise_derivative("tan")
def tan_grad(orig, v):
    return v * (api.ones_like(orig) + orig * orig)


register_op("tanh", 1, type_rule=unary_rule("tanh"),
            impl=lambda xp, x: as_array(xp, xp.tanh(x)), fast_impl=fixed_fast(np.tanh),
            doc="hyperbolic tangent")


@elementwise_derivative("tanh")
def tanh_grad(orig, v):
    return v * (scalar_like(1.0, orig) - orig * orig)


def _sigmoid_impl(xp, x):
    half = xp.asarray(0.5, dtype=x.dtype)
    return as_array(xp, half * xp.tanh(half * x) + half)   # no overflow for large |x|


register_op("sigmoid", 1, type_rule=unary_rule("sigmoid"), impl=_sigmoid_impl,
            doc="1 / (1 + e ** -x)")


@elementwise_derivative("sigmoid")
def sigmoid_grad(orig, v):
    # a scalar 1, not ones_like (one numpy call less per use: np.ones_like costs 2 us)
    return v * orig * (scalar_like(1.0, orig) - orig)


register_op("sqrt", 1, type_rule=unary_rule("sqrt"),
            impl=lambda xp, x: as_array(xp, xp.sqrt(x)), fast_impl=fixed_fast(np.sqrt),
            doc="square root")


@elementwise_derivative("sqrt")
def sqrt_grad(orig, v):
    return v / (orig + orig)


# ---- log/exp variants (accurate near 0 and for large |x|) -----------------------------------

register_op("log1p", 1, type_rule=unary_rule("log1p"),
            impl=lambda xp, x: as_array(xp, xp.log1p(x)), fast_impl=fixed_fast(np.log1p),
            doc="log(1 + x), accurate for small x")


@elementwise_derivative("log1p")
def log1p_grad(orig, v):
    x = orig.args[0]
    return v / (x + scalar_like(1.0, x))


register_op("expm1", 1, type_rule=unary_rule("expm1"),
            impl=lambda xp, x: as_array(xp, xp.expm1(x)), fast_impl=fixed_fast(np.expm1),
            doc="e ** x - 1, accurate for small x")


@elementwise_derivative("expm1")
def expm1_grad(orig, v):
    return v * (orig + scalar_like(1.0, orig))


register_op("softplus", 1, type_rule=unary_rule("softplus"),
            impl=lambda xp, x: as_array(xp, xp.logaddexp(x, xp.zeros_like(x))),
            doc="log(1 + e ** x), without overflow for large x")


@elementwise_derivative("softplus")
def softplus_grad(orig, v):
    return v * api.sigmoid(orig.args[0])


register_op("logaddexp", 2, type_rule=binary_rule("logaddexp", FLOAT_DTYPES, "floating-point"),
            impl=lambda xp, x, y: as_array(xp, xp.logaddexp(x, y)),
            fast_impl=fixed_fast(np.logaddexp), doc="log(e ** x + e ** y), without overflow")


def _logaddexp_weights(orig):
    """d/dx and d/dy of log(e^x + e^y): e^(x - out) and e^(y - out) (softmax of the pair)."""
    x, y = orig.args
    return api.exp(x - orig), api.exp(y - orig)


@register_gradient("logaddexp")
def logaddexp_grad(orig, g):
    x, y = orig.args
    wx, wy = _logaddexp_weights(orig)
    return [unbroadcast(g * wx, x, orig), unbroadcast(g * wy, y, orig)]


@register_tangent("logaddexp")
def logaddexp_tangent(orig, ts):
    wx, wy = _logaddexp_weights(orig)
    return ts[0] * wx + ts[1] * wy


# ---- where ----------------------------------------------------------------------------------

def where_rule(types, attrs):
    c, x, y = (tensor_arg("where", types, i, what) for i, what in
               enumerate(("the condition", "the second argument", "the third argument")))
    if c.dtype != "bool":
        raise TypeCheckError(f"where: the condition must be a bool tensor, got {c}")
    dtype = same_dtype("where", x, y)
    return TensorType(broadcast_shapes("where", c.shape, x.shape, y.shape), dtype)


register_op("where", 3, type_rule=where_rule,
            impl=lambda xp, c, x, y: as_array(xp, xp.where(c, x, y)),
            result_dtype=arg_dtype(1),
            doc="where(cond, x, y): x where cond holds, else y (broadcasting)")


@register_gradient("where")
def where_grad(orig, g):
    c, x, y = orig.args
    zero = api.zeros_like(g)
    return [api.zeros_like(c),
            unbroadcast(api.where(c, g, zero), x, orig),
            unbroadcast(api.where(c, zero, g), y, orig)]


@register_tangent("where")
def where_tangent(orig, ts):
    return api.where(orig.args[0], ts[1], ts[2])


# ---- tensor constructors and casts ----------------------------------------------------------

def _like_rule(op):
    def rule(types, attrs):
        return tensor_arg(op, types, 0)
    return rule


def _zero_grads(orig, g):
    return [api.zeros_like(a) for a in orig.args]


def _zero_tangent(orig, ts):
    return api.zeros_like(orig)


register_op("zeros_like", 1, type_rule=_like_rule("zeros_like"),
            impl=lambda xp, x: xp.zeros_like(x),
            fast_impl=fixed_fast(np.zeros_like), constant_in=(0,), fills_zeros=True,
            doc="zeros of the shape and dtype of x")
zeros_like_grad = register_gradient("zeros_like")(_zero_grads)
zeros_like_tangent = register_tangent("zeros_like")(_zero_tangent)

register_op("ones_like", 1, type_rule=_like_rule("ones_like"),
            impl=lambda xp, x: xp.ones_like(x),
            fast_impl=fixed_fast(np.ones_like), constant_in=(0,),
            doc="ones of the shape and dtype of x")
ones_like_grad = register_gradient("ones_like")(_zero_grads)
ones_like_tangent = register_tangent("ones_like")(_zero_tangent)

def full_like_rule(types, attrs):
    """full_like(x, fill_value=c) (an attribute: constants in gradient rules) or Relay's
    full_like(x, v) with v a scalar tensor, cast to x's dtype."""
    if len(types) not in (1, 2):
        raise TypeCheckError(f"full_like: takes a tensor and optionally a scalar fill value, got "
                             f"{len(types)} arguments")
    x = tensor_arg("full_like", types, 0)
    if len(types) == 2 and tensor_arg("full_like", types, 1, "the fill value").ndim:
        raise TypeCheckError(f"full_like: the fill value must be a scalar, got {types[1]}")
    return x


def _full_like_impl(xp, x, *fill, fill_value):
    if not fill:
        return xp.full_like(x, fill_value)
    out = xp.broadcast_to(cast_impl(xp, fill[0], x.dtype), x.shape)
    return np.array(out) if xp is np else out


register_op("full_like", -1, attrs={"fill_value": 0.0}, type_rule=full_like_rule,
            impl=_full_like_impl,
            normalize_attrs=normalizer("full_like", fill_value=canon_float),
            constant_in=(0,),
            doc="full_like(x, fill) with a scalar tensor fill (Relay), or full_like(x, "
                "fill_value=c): the fill in the shape and dtype of x")


@register_gradient("full_like")
def full_like_grad(orig, g):
    grads = _zero_grads(orig, g)
    if len(orig.args) == 2 and static_type(orig) is not None and static_type(orig).is_float:
        grads[1] = api.cast_like(api.sum(g), orig.args[1])
    return grads


@register_tangent("full_like")
def full_like_tangent(orig, ts):
    if len(orig.args) == 1:
        return _zero_tangent(orig, ts)
    return api.full_like(orig.args[0], ts[1])


def _filled_rule(op):
    def rule(types, attrs):
        if types:
            raise TypeCheckError(f"{op}: takes no tensor arguments, only shape= and dtype=")
        return TensorType(attrs["shape"], attrs["dtype"])
    return rule


def _filled_fast(fill):
    """zeros/ones straight from numpy, skipping the impl's keyword wrapper."""
    def factory(attrs, out_type):
        shape, dtype = attrs["shape"], np.dtype(attrs["dtype"])
        return lambda: fill(shape, dtype)
    return factory


register_op("zeros", 0, attrs={"shape": (), "dtype": "float32"}, type_rule=_filled_rule("zeros"),
            impl=lambda xp, shape, dtype: xp.zeros(shape, dtype=dtype),
            normalize_attrs=normalizer("zeros", shape=canon_ints, dtype=canon_dtype),
            fast_impl=_filled_fast(np.zeros), result_dtype=attr_dtype("dtype"),
            fills_zeros=True,
            doc="zeros(shape, dtype)")
register_gradient("zeros")(_zero_grads)
register_tangent("zeros")(_zero_tangent)

# Reverse AD's adjoint initial values: zeros that mean "nothing was added here" (notes/ad.md,
# "Zero adjoints"). Computed as zeros everywhere; what the record's symbolic_zero allows is that
# simplify and the jax backend fold `g * zero_adjoint(..)` to a zero adjoint, as jax keeps such
# cotangents symbolic (not IEEE where g is inf or nan). A user's `zeros` is never folded so.
register_op("zero_adjoint", 0, attrs={"shape": (), "dtype": "float32"},
            type_rule=_filled_rule("zero_adjoint"),
            impl=lambda xp, shape, dtype: xp.zeros(shape, dtype=dtype),
            normalize_attrs=normalizer("zero_adjoint", shape=canon_ints, dtype=canon_dtype),
            fast_impl=_filled_fast(np.zeros), result_dtype=attr_dtype("dtype"),
            fills_zeros=True, symbolic_zero=True,
            doc="zero_adjoint(shape, dtype): zeros standing for an adjoint nothing was added to")
register_gradient("zero_adjoint")(_zero_grads)


@register_tangent("zero_adjoint")
def zero_adjoint_tangent(orig, ts):
    # the tangent of "nothing added" is nothing added: forward over reverse folds it too
    return make_call("zero_adjoint", [], dict(orig.attrs))

register_op("ones", 0, attrs={"shape": (), "dtype": "float32"}, type_rule=_filled_rule("ones"),
            impl=lambda xp, shape, dtype: xp.ones(shape, dtype=dtype),
            normalize_attrs=normalizer("ones", shape=canon_ints, dtype=canon_dtype),
            fast_impl=_filled_fast(np.ones), result_dtype=attr_dtype("dtype"),
            doc="ones(shape, dtype)")
register_gradient("ones")(_zero_grads)
register_tangent("ones")(_zero_tangent)


def cast_rule(types, attrs):
    x = tensor_arg("cast", types, 0)
    return TensorType(x.shape, attrs["dtype"])


@functools.lru_cache(maxsize=None)
def _float_bounds(src, dst):
    """The float values of dtype `src` closest to the range of the integer dtype `dst` from
    inside (info.max rounds up in float32/float64; a range wider than float16's is all of it)."""
    info, fmax = np.iinfo(dst), float(np.finfo(src).max)
    bounds = []
    for limit, toward in ((info.max, -np.inf), (info.min, np.inf)):
        if abs(limit) > fmax:
            bounds.append(np.asarray(fmax if limit > 0 else -fmax, dtype=src))
            continue
        v = np.asarray(float(limit)).astype(src)
        if (int(v) > limit) if limit > 0 else (int(v) < limit):
            v = np.nextafter(v, np.asarray(toward, dtype=src))
        bounds.append(np.asarray(v, dtype=src))
    return bounds


def cast_impl(xp, x, dtype):
    """astype, except float -> integer, which saturates at the integer range and sends NaN to
    0 (XLA's rule) on every backend: numpy's own conversion of NaN/out-of-range floats is
    undefined (int-min on x86, 255 for -1.0 -> uint8)."""
    x = xp.asarray(x)
    dst = np.dtype(dtype)
    if x.dtype.kind != "f" or dst.kind not in "iu":
        with np.errstate(over="ignore"):     # to a narrower float: inf, as in XLA
            return x.astype(dst)
    hi, lo = _float_bounds(x.dtype, dst)
    info = np.iinfo(dst)
    above, below = x > hi, x < lo
    inside = ~(above | below | (x != x))
    fits = xp.where(inside, x, xp.zeros_like(x)).astype(dst)
    return xp.where(above, xp.asarray(info.max, dtype=dst),
                    xp.where(below, xp.asarray(info.min, dtype=dst),
                             xp.where(inside, fits, xp.zeros_like(fits))))


register_op("cast", 1, attrs={"dtype": "float32"}, type_rule=cast_rule,
            impl=cast_impl,
            normalize_attrs=normalizer("cast", dtype=canon_dtype),
            result_dtype=attr_dtype("dtype"), linear_in=(0,),
            doc="cast(x, dtype)")


@register_gradient("cast")
def cast_grad(orig, g):
    x = orig.args[0]
    if orig.attrs["dtype"] not in FLOAT_DTYPES:
        return [api.zeros_like(x)]
    return [api.cast_like(g, x)]


@register_tangent("cast")
def cast_tangent(orig, ts):
    if orig.attrs["dtype"] not in FLOAT_DTYPES:
        return api.zeros_like(orig)
    return api.cast(ts[0], orig.attrs["dtype"])


def cast_like_rule(types, attrs):
    x = tensor_arg("cast_like", types, 0)
    like = tensor_arg("cast_like", types, 1)
    return TensorType(x.shape, like.dtype)


register_op("cast_like", 2, type_rule=cast_like_rule,
            impl=lambda xp, x, like: cast_impl(xp, x, like.dtype),
            result_dtype=arg_dtype(1), linear_in=(0,), shape_only_in=(1,),
            doc="internal: cast x to the dtype of like (the gradient of cast)")


@register_gradient("cast_like")
def cast_like_grad(orig, g):
    x, like = orig.args
    if static_type(like) is not None and static_type(like).dtype not in FLOAT_DTYPES:
        return [api.zeros_like(x), api.zeros_like(like)]
    return [api.cast_like(g, x), api.zeros_like(like)]


@register_tangent("cast_like")
def cast_like_tangent(orig, ts):
    return api.cast_like(ts[0], orig.args[1])


# ---- piecewise constant: sign and rounding (zero derivative, as in jax) ---------------------

def _piecewise_constant(name, fn, allowed, kind, doc):
    register_op(name, 1, type_rule=unary_rule(name, allowed, kind),
                impl=lambda xp, x: as_array(xp, getattr(xp, fn)(x)),
                fast_impl=fixed_fast(getattr(np, fn)), differentiable=False, doc=doc)
    register_gradient(name)(_zero_grads)
    register_tangent(name)(_zero_tangent)


_piecewise_constant("sign", "sign", NUMERIC, "numeric",
                    "-1, 0 or 1 by the sign of x (0 for 0, nan for nan); zero gradient")
_piecewise_constant("floor", "floor", FLOAT_DTYPES, "floating-point",
                    "the largest integer <= x (a float); zero gradient")
_piecewise_constant("ceil", "ceil", FLOAT_DTYPES, "floating-point",
                    "the smallest integer >= x (a float); zero gradient")
_piecewise_constant("round", "round", FLOAT_DTYPES, "floating-point",
                    "x rounded to the nearest integer, halves to even (numpy.round); "
                    "zero gradient")

# jax's stop_gradient (rl.from_jax reads it: logsumexp and softmax use it): the value, with no
# gradient or tangent flowing back through it
register_op("stop_gradient", 1, type_rule=_like_rule("stop_gradient"),
            impl=lambda xp, x: x, fast_impl=lambda attrs, out_type: (lambda x: x),
            differentiable=False,     # AD treats its result as a constant: what it means
            doc="stop_gradient(x): x, through which no gradient flows")
register_gradient("stop_gradient")(_zero_grads)
register_tangent("stop_gradient")(_zero_tangent)
