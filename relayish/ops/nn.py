"""Neural-network operators: matmul (numpy semantics: 1-D, 2-D, batched with broadcasting),
softmax and log_softmax along one axis.

The matmul gradient of operands of rank <= 2 is one op per input (an outer product is a
broadcast multiply). With batch axes it promotes 1-D operands to matrices (expand_dims), multiplies by the other
operand with its last two axes swapped, sums broadcast batch axes away (collapse_sum_like) and
reshapes back; it reads the operands' ranks from their inferred types.
"""
from __future__ import annotations

import numpy as np

from relayish.errors import TypeCheckError
from relayish.ir.op import register_gradient, register_op, register_tangent
from relayish.ir.types import FLOAT_DTYPES, TensorType
from relayish.ops import api
from relayish.ops._common import (NUMERIC, as_array, broadcast_shapes, canon_int, fixed_fast,
                                  need_type, norm_axis, normalizer, require_dtype, same_dtype,
                                  tensor_arg)


# ---- matmul ---------------------------------------------------------------------------------

def matmul_shape(x_shape, y_shape):
    """numpy.matmul's result shape, or a TypeCheckError saying which dimensions clash."""
    if not x_shape or not y_shape:
        raise TypeCheckError("matmul: operands must have at least one dimension, got shapes "
                             f"{x_shape} and {y_shape}")
    xs = (1,) + x_shape if len(x_shape) == 1 else x_shape
    ys = y_shape + (1,) if len(y_shape) == 1 else y_shape
    if xs[-1] != ys[-2]:
        raise TypeCheckError(f"matmul: inner dimensions differ: {x_shape} @ {y_shape} "
                             f"({xs[-1]} != {ys[-2]})")
    batch = broadcast_shapes("matmul", xs[:-2], ys[:-2])
    out = batch + ((xs[-2],) if len(x_shape) > 1 else ()) + ((ys[-1],) if len(y_shape) > 1 else ())
    return out


def matmul_rule(types, attrs):
    x = tensor_arg("matmul", types, 0)
    y = tensor_arg("matmul", types, 1)
    dtype = same_dtype("matmul", x, y)
    require_dtype("matmul", x, NUMERIC, "numeric")
    return TensorType(matmul_shape(x.shape, y.shape), dtype)


register_op("matmul", 2, type_rule=matmul_rule,
            impl=lambda xp, x, y: as_array(xp, xp.matmul(x, y)),
            fast_impl=fixed_fast(np.matmul), bilinear=True,
            doc="x @ y with numpy semantics")


def _swap_last(e, ndim):
    return api.transpose(e, tuple(range(ndim - 2)) + (ndim - 1, ndim - 2))


@register_gradient("matmul")
def matmul_grad(orig, g):
    x, y = orig.args
    tx, ty = need_type(x, "matmul gradient"), need_type(y, "matmul gradient")
    if tx.ndim <= 2 and ty.ndim <= 2:
        return _matmul_grad_small(x, y, tx.ndim, ty.ndim, g)
    x2 = api.expand_dims(x, 0) if tx.ndim == 1 else x
    y2 = api.expand_dims(y, -1) if ty.ndim == 1 else y
    xs = (1,) + tx.shape if tx.ndim == 1 else tx.shape
    ys = ty.shape + (1,) if ty.ndim == 1 else ty.shape
    new_axes = ((-2,) if tx.ndim == 1 else ()) + ((-1,) if ty.ndim == 1 else ())
    g2 = api.expand_dims(g, new_axes) if new_axes else g
    out_ndim = len(matmul_shape(xs, ys))
    dx = api.matmul(g2, _swap_last(y2, len(ys)))
    dy = api.matmul(_swap_last(x2, len(xs)), g2)
    if out_ndim != len(xs) or matmul_shape(xs, ys)[:-2] != xs[:-2]:
        dx = api.collapse_sum_like(dx, x2)
    if out_ndim != len(ys) or matmul_shape(xs, ys)[:-2] != ys[:-2]:
        dy = api.collapse_sum_like(dy, y2)
    if tx.ndim == 1:
        dx = api.reshape_like(dx, x)
    if ty.ndim == 1:
        dy = api.reshape_like(dy, y)
    return [dx, dy]


def _matmul_grad_small(x, y, nx, ny, g):
    """Operands of rank 1 or 2 (no batch axes): one op per input, an outer product as a
    broadcast multiply.

    (m,n) @ (n,): dx = g[:, None] * y, dy = g @ x      (n,) @ (n,k): dx = y @ g, dy = x[:, None] * g
    (n,) @ (n,):  dx = g * y, dy = g * x (g is 0-d)     (m,n) @ (n,k): dx = g @ y^T, dy = x^T @ g
    """
    if nx == 2 and ny == 1:
        return [api.expand_dims(g, -1) * y, api.matmul(g, x)]
    if nx == 1 and ny == 2:
        return [api.matmul(y, g), api.expand_dims(x, -1) * g]
    if nx == 1 and ny == 1:
        return [g * y, g * x]
    return [api.matmul(g, _swap_last(y, 2)), api.matmul(_swap_last(x, 2), g)]


@register_tangent("matmul")
def matmul_tangent(orig, ts):
    x, y = orig.args
    return api.matmul(ts[0], y) + api.matmul(x, ts[1])


# ---- softmax / log_softmax ------------------------------------------------------------------

def softmax_rule(op):
    def rule(types, attrs):
        x = tensor_arg(op, types, 0)
        require_dtype(op, x, FLOAT_DTYPES, "floating-point")
        norm_axis(op, attrs["axis"], x.ndim)
        return x
    return rule


def softmax_impl(xp, x, axis):
    e = xp.exp(x - xp.max(x, axis=axis, keepdims=True))
    return as_array(xp, e / xp.sum(e, axis=axis, keepdims=True))


def log_softmax_impl(xp, x, axis):
    s = x - xp.max(x, axis=axis, keepdims=True)
    return as_array(xp, s - xp.log(xp.sum(xp.exp(s), axis=axis, keepdims=True)))


register_op("softmax", 1, attrs={"axis": -1}, type_rule=softmax_rule("softmax"),
            impl=softmax_impl, normalize_attrs=normalizer("softmax", axis=canon_int),
            doc="softmax(x, axis=-1)")


@register_gradient("softmax")
def softmax_grad(orig, g):
    axis = orig.attrs["axis"]
    return [orig * (g - api.sum(g * orig, axis=axis, keepdims=True))]


@register_tangent("softmax")
def softmax_tangent(orig, ts):
    axis = orig.attrs["axis"]
    return orig * (ts[0] - api.sum(ts[0] * orig, axis=axis, keepdims=True))


register_op("log_softmax", 1, attrs={"axis": -1}, type_rule=softmax_rule("log_softmax"),
            impl=log_softmax_impl, normalize_attrs=normalizer("log_softmax", axis=canon_int),
            doc="log_softmax(x, axis=-1)")


@register_gradient("log_softmax")
def log_softmax_grad(orig, g):
    axis = orig.attrs["axis"]
    return [g - api.exp(orig) * api.sum(g, axis=axis, keepdims=True)]


@register_tangent("log_softmax")
def log_softmax_tangent(orig, ts):
    axis = orig.attrs["axis"]
    return ts[0] - api.sum(api.exp(orig) * ts[0], axis=axis, keepdims=True)
