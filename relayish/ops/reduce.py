"""Reductions: sum, mean, max, min over `axis` (None: all axes; an int; a tuple), `keepdims`.

Gradients broadcast the output cotangent back over the reduced axes: `expand_dims` restores the
axes that keepdims=False dropped, then `broadcast_to_like` the input. max/min send the gradient
to the positions that attain the extremum, split evenly between ties.
"""
from __future__ import annotations

from relayish.errors import TypeCheckError
from relayish.ir.expr import const
from relayish.ir.op import register_gradient, register_op, register_tangent
from relayish.ir.types import DTYPES, FLOAT_DTYPES, TensorType
from relayish.ops import api
from relayish.ops._common import (NUMERIC, as_array, canon_axis, canon_bool, norm_axes,
                                  normalizer, require_dtype, static_type, tensor_arg)

_ATTRS = {"axis": None, "keepdims": False}


def reduce_rule(op, allowed, kind, nonempty=False):
    def rule(types, attrs):
        x = tensor_arg(op, types, 0)
        require_dtype(op, x, allowed, kind)
        axes = norm_axes(op, attrs["axis"], x.ndim)
        if nonempty and any(x.shape[a] == 0 for a in axes):
            raise TypeCheckError(f"{op}: reduces over an empty axis of {x}; it has no {op}imum"
                                 if op in ("max", "min") else f"{op}: reduces an empty axis")
        if attrs["keepdims"]:
            shape = tuple(1 if k in axes else d for k, d in enumerate(x.shape))
        else:
            shape = tuple(d for k, d in enumerate(x.shape) if k not in axes)
        return TensorType(shape, x.dtype)
    return rule


def _reduce_normalizer(op):
    return normalizer(op, axis=canon_axis, keepdims=canon_bool)


def restore_axes(g, orig):
    """The cotangent of a reduction's output with the reduced axes put back (size 1)."""
    axis = orig.attrs["axis"]
    if axis is None or orig.attrs["keepdims"]:
        return g
    return api.expand_dims(g, axis)


def _same_reduction(name, x, orig, keepdims=None):
    keep = orig.attrs["keepdims"] if keepdims is None else keepdims
    return getattr(api, name)(x, axis=orig.attrs["axis"], keepdims=keep)


# ---- sum ------------------------------------------------------------------------------------

def _sum_all_fast(attrs, out_type):
    if attrs["axis"] is not None or attrs["keepdims"]:
        return None
    return lambda x: x.sum(dtype=x.dtype)


register_op("sum", 1, attrs=_ATTRS, type_rule=reduce_rule("sum", NUMERIC, "numeric"),
            impl=lambda xp, x, axis, keepdims: as_array(
                xp, xp.sum(x, axis=axis, keepdims=keepdims, dtype=x.dtype)),
            normalize_attrs=_reduce_normalizer("sum"), fast_impl=_sum_all_fast, linear_in=(0,),
            doc="sum(x, axis=None, keepdims=False)")


@register_gradient("sum")
def sum_grad(orig, g):
    return [api.broadcast_to_like(restore_axes(g, orig), orig.args[0])]


@register_tangent("sum")
def sum_tangent(orig, ts):
    return _same_reduction("sum", ts[0], orig)


# ---- mean -----------------------------------------------------------------------------------

register_op("mean", 1, attrs=_ATTRS, type_rule=reduce_rule("mean", FLOAT_DTYPES, "floating-point"),
            impl=lambda xp, x, axis, keepdims: as_array(
                xp, xp.mean(x, axis=axis, keepdims=keepdims), dtype=x.dtype),
            normalize_attrs=_reduce_normalizer("mean"), doc="mean(x, axis=None, keepdims=False)")


def _mean_scale(v, orig):
    """v / (number of elements averaged): a constant when the input's shape is known."""
    x = orig.args[0]
    t = static_type(x)
    if isinstance(t, TensorType):
        axes = norm_axes("mean", orig.attrs["axis"], t.ndim)
        count = 1
        for a in axes:
            count *= t.shape[a]
        return v / const(float(count), dtype=t.dtype)
    return v / _same_reduction("sum", api.ones_like(x), orig, keepdims=True)


@register_gradient("mean")
def mean_grad(orig, g):
    x = orig.args[0]
    return [_mean_scale(api.broadcast_to_like(restore_axes(g, orig), x), orig)]


@register_tangent("mean")
def mean_tangent(orig, ts):
    return _same_reduction("mean", ts[0], orig)


# ---- max / min ------------------------------------------------------------------------------

def _extremum_weights(orig):
    """1 where x attains the reduction's result, else 0; and how many positions attain it."""
    x = orig.args[0]
    hit = api.equal(x, api.broadcast_to_like(restore_axes(orig, orig), x))
    w = api.where(hit, api.ones_like(x), api.zeros_like(x))
    return w, _same_reduction("sum", w, orig)


def _extremum_grad(orig, g):
    x = orig.args[0]
    w, count = _extremum_weights(orig)
    return [w * api.broadcast_to_like(restore_axes(g / count, orig), x)]


def _extremum_tangent(orig, ts):
    w, count = _extremum_weights(orig)
    return _same_reduction("sum", ts[0] * w, orig) / count


register_op("max", 1, attrs=_ATTRS, type_rule=reduce_rule("max", DTYPES, "any", nonempty=True),
            impl=lambda xp, x, axis, keepdims: as_array(xp, xp.max(x, axis=axis, keepdims=keepdims)),
            normalize_attrs=_reduce_normalizer("max"), doc="max(x, axis=None, keepdims=False)")
max_grad = register_gradient("max")(_extremum_grad)
max_tangent = register_tangent("max")(_extremum_tangent)

register_op("min", 1, attrs=_ATTRS, type_rule=reduce_rule("min", DTYPES, "any", nonempty=True),
            impl=lambda xp, x, axis, keepdims: as_array(xp, xp.min(x, axis=axis, keepdims=keepdims)),
            normalize_attrs=_reduce_normalizer("min"), doc="min(x, axis=None, keepdims=False)")
min_grad = register_gradient("min")(_extremum_grad)
min_tangent = register_tangent("min")(_extremum_tangent)


# ---- logsumexp --------------------------------------------------------------------------------

def logsumexp_impl(xp, x, axis, keepdims):
    """log(sum(exp(x))) shifted by the max (no overflow); an all -inf slice gives -inf."""
    m = xp.max(x, axis=axis, keepdims=True) if x.size else xp.zeros((1,) * x.ndim, x.dtype)
    m = xp.where(xp.isfinite(m), m, xp.zeros_like(m))
    out = xp.log(xp.sum(xp.exp(x - m), axis=axis, keepdims=True)) + m
    if not keepdims:
        out = xp.squeeze(out, axis=tuple(range(x.ndim)) if axis is None else axis)
    return as_array(xp, out, dtype=x.dtype)


register_op("logsumexp", 1, attrs=_ATTRS,
            type_rule=reduce_rule("logsumexp", FLOAT_DTYPES, "floating-point"),
            impl=logsumexp_impl, normalize_attrs=_reduce_normalizer("logsumexp"),
            doc="logsumexp(x, axis=None, keepdims=False): log(sum(exp(x))), without overflow")


def _softmax_weights(orig):
    """exp(x - logsumexp(x)) over the reduced axes: the derivative of logsumexp."""
    x = orig.args[0]
    return api.exp(x - api.broadcast_to_like(restore_axes(orig, orig), x))


@register_gradient("logsumexp")
def logsumexp_grad(orig, g):
    x = orig.args[0]
    return [api.broadcast_to_like(restore_axes(g, orig), x) * _softmax_weights(orig)]


@register_tangent("logsumexp")
def logsumexp_tangent(orig, ts):
    return _same_reduction("sum", ts[0] * _softmax_weights(orig), orig)
