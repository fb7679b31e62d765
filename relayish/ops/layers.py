"""Relay's `nn.*` layer operators: dense, bias_add, batch_flatten, conv2d, max_pool2d,
avg_pool2d, global_avg_pool2d, layer_norm, batch_matmul, dropout (inference form), and the
aliases nn.softmax, nn.log_softmax, nn.relu of the existing ops.

Layouts are Relay's defaults only: NCHW data, OIHW weights (other layouts are a type error).
Windows (convolution and pooling) go through two internal ops that are each other's gradient:

    nn.im2col(x)          (N, C, H, W) -> (N, C, KH, KW, HO, WO): every window, padded with pad_value
    nn.col2im(cols, like) (N, C, KH, KW, HO, WO) -> like's shape: adds each window back (padding dropped)

Both are linear, so their rules are one op each, and every gradient built from them (conv2d as
a matmul of windows and weights, pooling as weights on windows) differentiates again.
"""
from __future__ import annotations

import numpy as np

from relayish.errors import RelayishError, TypeCheckError
from relayish.ir.expr import Tuple, TupleGetItem, const
from relayish.ir.op import register_alias, register_gradient, register_op, register_tangent
from relayish.ir.types import FLOAT_DTYPES, TensorType, TupleType
from relayish.ops import api
from relayish.ops._common import (NUMERIC, as_array, bilinear_tangent, canon_bool, canon_float,
                                  canon_int, canon_ints, linear_tangent, need_type, norm_axis,
                                  normalizer, require_dtype, same_dtype, tensor_arg)

register_alias("nn.softmax", "softmax")
register_alias("nn.log_softmax", "log_softmax")
register_alias("nn.relu", "relu")


# ---- attribute canonicalizers ---------------------------------------------------------------

def canon_pair(op, name, v):
    """An int or 1/2 ints -> (a, b), each positive (strides, dilation, pool_size)."""
    out = canon_ints(op, name, v)
    if len(out) == 1:
        out = out * 2
    if len(out) != 2 or min(out) < 1:
        raise RelayishError(f"operator '{op}': attribute {name} must be one or two positive "
                            f"ints, got {v!r}")
    return out


def canon_padding(op, name, v):
    """Relay's padding: 1 int (all sides), 2 (top/bottom, left/right) or 4 (top, left, bottom,
    right); kept as the 4-tuple."""
    out = canon_ints(op, name, v)
    if len(out) == 1:
        out = out * 4
    elif len(out) == 2:
        out = out * 2
    if len(out) != 4:
        raise RelayishError(f"operator '{op}': attribute {name} must have 1, 2 or 4 entries, "
                            f"got {v!r}")
    return out


def canon_str(op, name, v):
    if not isinstance(v, str):
        raise RelayishError(f"operator '{op}': attribute {name} must be a string, got {v!r}")
    return v


def canon_opt_int(op, name, v):
    return None if v is None else canon_int(op, name, v)


def canon_opt_pair(op, name, v):
    return None if v is None else canon_pair(op, name, v)


def _check_layout(op, attrs, **expected):
    for key, want in expected.items():
        got = attrs.get(key, want)
        if got not in (want, ""):
            raise TypeCheckError(f"{op}: only the {want} layout is supported, got {key}={got!r}")


def _check_out_dtype(op, attrs, dtype):
    od = attrs.get("out_dtype", "")
    if od not in ("", dtype):
        raise TypeCheckError(f"{op}: out_dtype {od!r} differs from the operands' dtype {dtype}; "
                             "cast the operands instead")


# ---- windows: im2col / col2im ---------------------------------------------------------------

_WINDOW_ATTRS = {"kernel_size": (1, 1), "strides": (1, 1), "padding": (0, 0, 0, 0),
                 "dilation": (1, 1)}
_window_kinds = dict(kernel_size=canon_pair, strides=canon_pair, padding=canon_padding,
                     dilation=canon_pair)


def window_out(op, shape, kernel_size, strides, padding, dilation):
    """(HO, WO) of sliding a dilated kernel over a padded (H, W), or a TypeCheckError."""
    out = []
    for d, (size, k, s, dil, lo, hi) in enumerate(zip(shape, kernel_size, strides, dilation,
                                                      padding[:2], padding[2:])):
        span = dil * (k - 1) + 1
        if size + lo + hi < span:
            raise TypeCheckError(f"{op}: the window ({span} wide with dilation) is larger than "
                                 f"the padded input ({size + lo + hi}) along axis {d + 2}")
        out.append((size + lo + hi - span) // s + 1)
    return tuple(out)


def _four_d(op, t, what):
    if t.ndim != 4:
        raise TypeCheckError(f"{op}: {what} must be 4-D (NCHW), got {t}")


def windows_impl(xp, x, kernel_size, strides, padding, dilation, pad_value=0.0):
    """Every window of x as (N, C, KH, KW, HO, WO): strided slices of the padded input."""
    (kh, kw), (sh, sw), (dh, dw) = kernel_size, strides, dilation
    top, left, bottom, right = padding
    ho, wo = window_out("im2col", x.shape[2:], kernel_size, strides, padding, dilation)
    if any(padding):
        if x.dtype.kind in "iu" and np.isinf(pad_value):
            info = np.iinfo(x.dtype)
            pad_value = info.min if pad_value < 0 else info.max
        x = xp.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)),
                   constant_values=xp.asarray(pad_value, dtype=x.dtype))
    rows = [xp.stack([x[:, :, i * dh:i * dh + sh * (ho - 1) + 1:sh,
                        j * dw:j * dw + sw * (wo - 1) + 1:sw] for j in range(kw)], axis=2)
            for i in range(kh)]
    return xp.stack(rows, axis=2)


def col2im_impl(xp, cols, like, kernel_size, strides, padding, dilation):
    (kh, kw), (sh, sw), (dh, dw) = kernel_size, strides, dilation
    top, left, bottom, right = padding
    n, c, h, w = like.shape
    ho, wo = cols.shape[-2:]
    out = xp.zeros((n, c, h + top + bottom, w + left + right), dtype=cols.dtype)
    for i in range(kh):
        for j in range(kw):
            index = (slice(None), slice(None), slice(i * dh, i * dh + sh * (ho - 1) + 1, sh),
                     slice(j * dw, j * dw + sw * (wo - 1) + 1, sw))
            if xp is np:        # the slices of one (i, j) never overlap: a plain += is exact
                out[index] += cols[:, :, i, j]
            else:
                out = out.at[index].add(cols[:, :, i, j])
    return as_array(xp, out[:, :, top:top + h, left:left + w])


def im2col_rule(types, attrs):
    x = tensor_arg("nn.im2col", types, 0)
    _four_d("nn.im2col", x, "the data")
    ho, wo = window_out("nn.im2col", x.shape[2:], attrs["kernel_size"], attrs["strides"],
                        attrs["padding"], attrs["dilation"])
    return TensorType(x.shape[:2] + tuple(attrs["kernel_size"]) + (ho, wo), x.dtype)


register_op("nn.im2col", 1, attrs={**_WINDOW_ATTRS, "pad_value": 0.0}, type_rule=im2col_rule,
            impl=lambda xp, x, **a: as_array(xp, windows_impl(xp, x, **a)),
            normalize_attrs=normalizer("nn.im2col", pad_value=canon_float, **_window_kinds),
            doc="internal: the windows of an NCHW tensor as (N, C, KH, KW, HO, WO)")


def col2im_rule(types, attrs):
    cols = tensor_arg("nn.col2im", types, 0)
    like = tensor_arg("nn.col2im", types, 1)
    _four_d("nn.col2im", like, "the second argument")
    want = im2col_rule([like], {**attrs, "pad_value": 0.0}).shape
    if cols.shape != want:
        raise TypeCheckError(f"nn.col2im: the windows {cols} do not have the shape {want} that "
                             f"nn.im2col gives for {like}")
    return TensorType(like.shape, cols.dtype)


register_op("nn.col2im", 2, attrs=dict(_WINDOW_ATTRS), type_rule=col2im_rule, impl=col2im_impl,
            normalize_attrs=normalizer("nn.col2im", **_window_kinds), shape_only_in=(1,),
            doc="internal: add windows (N, C, KH, KW, HO, WO) back into the shape of like")


def _window_attrs(attrs, kernel_size):
    return dict(kernel_size=kernel_size, strides=attrs["strides"], padding=attrs["padding"],
                dilation=attrs["dilation"])


def im2col(x, kernel_size, attrs, pad_value=0.0):
    return api._call("nn.im2col", x, pad_value=pad_value, **_window_attrs(attrs, kernel_size))


def col2im(cols, like, kernel_size, attrs):
    return api._call("nn.col2im", cols, like, **_window_attrs(attrs, kernel_size))


@register_gradient("nn.im2col")
def im2col_grad(orig, g):
    a = orig.attrs
    return [col2im(g, orig.args[0], a["kernel_size"], a)]


@register_tangent("nn.im2col")
def im2col_tangent(orig, ts):
    return im2col(ts[0], orig.attrs["kernel_size"], orig.attrs)      # padding has no tangent


@register_gradient("nn.col2im")
def col2im_grad(orig, g):
    return [im2col(g, orig.attrs["kernel_size"], orig.attrs), api.zeros_like(orig.args[1])]


@register_tangent("nn.col2im")
def col2im_tangent(orig, ts):
    return col2im(ts[0], orig.args[1], orig.attrs["kernel_size"], orig.attrs)


# ---- nn.conv2d ------------------------------------------------------------------------------

_CONV_ATTRS = {"strides": (1, 1), "padding": (0, 0, 0, 0), "dilation": (1, 1), "groups": 1,
               "channels": None, "kernel_size": None, "data_layout": "NCHW",
               "kernel_layout": "OIHW", "out_layout": "", "out_dtype": ""}


def conv2d_rule(types, attrs):
    op = "nn.conv2d"
    x = tensor_arg(op, types, 0, "the data")
    w = tensor_arg(op, types, 1, "the weight")
    dtype = same_dtype(op, x, w)
    require_dtype(op, x, NUMERIC, "numeric")
    _check_layout(op, attrs, data_layout="NCHW", kernel_layout="OIHW", out_layout="NCHW")
    _check_out_dtype(op, attrs, dtype)
    _four_d(op, x, "the data")
    _four_d(op, w, "the weight")
    groups = attrs["groups"]
    n, c = x.shape[:2]
    o, i = w.shape[:2]
    if groups < 1 or c % groups or o % groups:
        raise TypeCheckError(f"{op}: groups={groups} must divide the input channels ({c}) and "
                             f"the output channels ({o})")
    if i * groups != c:
        raise TypeCheckError(f"{op}: the weight {w} has {i} input channels per group; the data "
                             f"{x} has {c} channels in {groups} group(s), so it needs {c // groups}")
    if attrs["channels"] is not None and attrs["channels"] != o:
        raise TypeCheckError(f"{op}: channels={attrs['channels']} but the weight {w} has {o} "
                             "output channels")
    if attrs["kernel_size"] is not None and tuple(attrs["kernel_size"]) != w.shape[2:]:
        raise TypeCheckError(f"{op}: kernel_size={list(attrs['kernel_size'])} but the weight "
                             f"{w} has a {w.shape[2]}x{w.shape[3]} kernel")
    ho, wo = window_out(op, x.shape[2:], w.shape[2:], attrs["strides"], attrs["padding"],
                        attrs["dilation"])
    return TensorType((n, o, ho, wo), dtype)


def conv2d_impl(xp, x, w, strides, padding, dilation, groups, **_layout):
    """The windows times the weights, one (batched) matmul per group."""
    n, c = x.shape[:2]
    o, _, kh, kw = w.shape
    cols = windows_impl(xp, x, (kh, kw), strides, padding, dilation)
    ho, wo = cols.shape[-2:]
    cols = xp.reshape(cols, (n, groups, (c // groups) * kh * kw, ho * wo))
    out = xp.matmul(xp.reshape(w, (groups, o // groups, -1)), cols)
    return as_array(xp, xp.reshape(out, (n, o, ho, wo)))


register_op("nn.conv2d", 2, attrs=_CONV_ATTRS, type_rule=conv2d_rule, impl=conv2d_impl,
            normalize_attrs=normalizer(
                "nn.conv2d", strides=canon_pair, padding=canon_padding, dilation=canon_pair,
                groups=canon_int, channels=canon_opt_int, kernel_size=canon_opt_pair,
                data_layout=canon_str, kernel_layout=canon_str, out_layout=canon_str,
                out_dtype=canon_str),
            bilinear=True,
            doc="nn.conv2d(data NCHW, weight OIHW, strides, padding, dilation, groups)")


def _conv_parts(orig):
    """The matmul form of a conv2d call: windows (N, G, K, L), weights (G, O/G, K) and the
    shapes to undo them (K = C/G*KH*KW, L = HO*WO)."""
    x, w = orig.args
    tx, tw = need_type(x, "nn.conv2d gradient"), need_type(w, "nn.conv2d gradient")
    n, c = tx.shape[:2]
    o, _, kh, kw = tw.shape
    groups = orig.attrs["groups"]
    to = need_type(orig, "nn.conv2d gradient")
    ho, wo = to.shape[2:]
    k, length = (c // groups) * kh * kw, ho * wo
    return (n, c, o, kh, kw, ho, wo, groups, k, length)


@register_gradient("nn.conv2d")
def conv2d_grad(orig, g):
    x, w = orig.args
    n, c, o, kh, kw, ho, wo, groups, k, length = _conv_parts(orig)
    cols = api.reshape(im2col(x, (kh, kw), orig.attrs), (n, groups, k, length))
    wm = api.reshape(w, (groups, o // groups, k))
    gm = api.reshape(g, (n, groups, o // groups, length))
    dcols = api.matmul(api.transpose(wm, (0, 2, 1)), gm)                 # (N, G, K, L)
    dx = col2im(api.reshape(dcols, (n, c, kh, kw, ho, wo)), x, (kh, kw), orig.attrs)
    dw = api.sum(api.matmul(gm, api.transpose(cols, (0, 1, 3, 2))), axis=0)   # (G, O/G, K)
    return [dx, api.reshape(dw, (o, c // groups, kh, kw))]


bilinear_tangent("nn.conv2d")


# ---- pooling --------------------------------------------------------------------------------

_POOL_ATTRS = {"pool_size": (1, 1), "strides": (1, 1), "dilation": (1, 1),
               "padding": (0, 0, 0, 0), "layout": "NCHW", "out_layout": "", "ceil_mode": False}
_pool_kinds = dict(pool_size=canon_pair, strides=canon_pair, dilation=canon_pair,
                   padding=canon_padding, layout=canon_str, out_layout=canon_str,
                   ceil_mode=canon_bool)


def pool_rule(op, allowed=NUMERIC, kind="numeric"):
    def rule(types, attrs):
        x = tensor_arg(op, types, 0)
        require_dtype(op, x, allowed, kind)
        _check_layout(op, attrs, layout="NCHW", out_layout="NCHW")
        if attrs["ceil_mode"]:
            raise TypeCheckError(f"{op}: ceil_mode=True is not supported (pad the bottom/right "
                                 "instead)")
        _four_d(op, x, "the data")
        ho, wo = window_out(op, x.shape[2:], attrs["pool_size"], attrs["strides"],
                            attrs["padding"], attrs["dilation"])
        return TensorType(x.shape[:2] + (ho, wo), x.dtype)
    return rule


def _pool_windows(xp, x, attrs, pad_value=0.0):
    return windows_impl(xp, x, attrs["pool_size"], attrs["strides"], attrs["padding"],
                        attrs["dilation"], pad_value)


register_op("nn.max_pool2d", 1, attrs=_POOL_ATTRS, type_rule=pool_rule("nn.max_pool2d"),
            impl=lambda xp, x, **a: as_array(
                xp, xp.max(_pool_windows(xp, x, a, -np.inf), axis=(2, 3))),
            normalize_attrs=normalizer("nn.max_pool2d", **_pool_kinds),
            doc="nn.max_pool2d(data NCHW, pool_size, strides, dilation, padding)")


def _max_weights(orig):
    """1 at each position of each window that attains its max, else 0; and how many do."""
    x = orig.args[0]
    cols = im2col(x, orig.attrs["pool_size"], orig.attrs, pad_value=-np.inf)
    hit = api.equal(cols, api.expand_dims(orig, (2, 3)))
    w = api.where(hit, api.ones_like(cols), api.zeros_like(cols))
    return w, api.sum(w, axis=(2, 3), keepdims=True)


@register_gradient("nn.max_pool2d")
def max_pool2d_grad(orig, g):
    """Ties split the gradient evenly, as the max reduction does."""
    w, count = _max_weights(orig)
    return [col2im(w * (api.expand_dims(g, (2, 3)) / count), orig.args[0],
                   orig.attrs["pool_size"], orig.attrs)]


@register_tangent("nn.max_pool2d")
def max_pool2d_tangent(orig, ts):
    w, count = _max_weights(orig)
    picked = api.sum(w * im2col(ts[0], orig.attrs["pool_size"], orig.attrs), axis=(2, 3),
                     keepdims=True)
    return api.reshape_like(picked / count, orig)


def _avg_count(shape, attrs):
    """How many inputs each output of avg_pool2d averages ((HO, WO), numpy float64)."""
    if attrs["count_include_pad"]:
        return None
    ones = np.ones((1, 1) + tuple(shape[2:]))
    return windows_impl(np, ones, attrs["pool_size"], attrs["strides"], attrs["padding"],
                        attrs["dilation"]).sum(axis=(2, 3))[0, 0]


def avg_pool2d_impl(xp, x, **attrs):
    total = xp.sum(_pool_windows(xp, x, attrs), axis=(2, 3))
    count = _avg_count(x.shape, attrs)
    if count is None:
        count = attrs["pool_size"][0] * attrs["pool_size"][1]
    return as_array(xp, total / xp.asarray(count, dtype=x.dtype), dtype=x.dtype)


register_op("nn.avg_pool2d", 1, attrs={**_POOL_ATTRS, "count_include_pad": False},
            type_rule=pool_rule("nn.avg_pool2d", FLOAT_DTYPES, "floating-point"),
            impl=avg_pool2d_impl,
            normalize_attrs=normalizer("nn.avg_pool2d", count_include_pad=canon_bool,
                                       **_pool_kinds),
            linear_in=(0,),
            doc="nn.avg_pool2d(data NCHW, pool_size, strides, dilation, padding, "
                "count_include_pad=False)")


@register_gradient("nn.avg_pool2d")
def avg_pool2d_grad(orig, g):
    x = orig.args[0]
    tx = need_type(x, "nn.avg_pool2d gradient")
    count = _avg_count(tx.shape, orig.attrs)
    kh, kw = orig.attrs["pool_size"]
    scaled = g / (const(float(kh * kw), dtype=tx.dtype) if count is None
                  else const(count.astype(tx.dtype)))
    n, c, ho, wo = need_type(orig, "nn.avg_pool2d gradient").shape
    spread = api.broadcast_to(api.expand_dims(scaled, (2, 3)), (n, c, kh, kw, ho, wo))
    return [col2im(spread, x, (kh, kw), orig.attrs)]


linear_tangent("nn.avg_pool2d")


def global_pool_rule(types, attrs):
    op = "nn.global_avg_pool2d"
    x = tensor_arg(op, types, 0)
    require_dtype(op, x, FLOAT_DTYPES, "floating-point")
    _check_layout(op, attrs, layout="NCHW", out_layout="NCHW")
    _four_d(op, x, "the data")
    return TensorType(x.shape[:2] + (1, 1), x.dtype)


register_op("nn.global_avg_pool2d", 1, attrs={"layout": "NCHW", "out_layout": ""},
            type_rule=global_pool_rule,
            impl=lambda xp, x, **_: as_array(xp, xp.mean(x, axis=(2, 3), keepdims=True),
                                             dtype=x.dtype),
            normalize_attrs=normalizer("nn.global_avg_pool2d", layout=canon_str,
                                       out_layout=canon_str),
            linear_in=(0,),
            doc="nn.global_avg_pool2d(data NCHW) -> (N, C, 1, 1)")


@register_gradient("nn.global_avg_pool2d")
def global_avg_pool2d_grad(orig, g):
    x = orig.args[0]
    t = need_type(x, "nn.global_avg_pool2d gradient")
    return [api.broadcast_to_like(g, x) / const(float(t.shape[2] * t.shape[3]), dtype=t.dtype)]


linear_tangent("nn.global_avg_pool2d")


# ---- nn.dense, nn.bias_add, nn.batch_flatten --------------------------------------------------

def dense_rule(types, attrs):
    op = "nn.dense"
    x = tensor_arg(op, types, 0, "the data")
    w = tensor_arg(op, types, 1, "the weight")
    dtype = same_dtype(op, x, w)
    require_dtype(op, x, NUMERIC, "numeric")
    _check_out_dtype(op, attrs, dtype)
    if x.ndim < 1 or w.ndim != 2:
        raise TypeCheckError(f"{op}: needs data of rank >= 1 and a 2-D weight (units, "
                             f"in_features), got {x} and {w}")
    if x.shape[-1] != w.shape[1]:
        raise TypeCheckError(f"{op}: the data's last axis ({x.shape[-1]}) must match the "
                             f"weight's second axis ({w.shape[1]}): weights are (units, "
                             f"in_features), got {x} and {w}")
    if attrs["units"] is not None and attrs["units"] != w.shape[0]:
        raise TypeCheckError(f"{op}: units={attrs['units']} but the weight {w} has "
                             f"{w.shape[0]} rows")
    return TensorType(x.shape[:-1] + (w.shape[0],), dtype)


register_op("nn.dense", 2, attrs={"units": None, "out_dtype": ""}, type_rule=dense_rule,
            impl=lambda xp, x, w, **_: as_array(xp, xp.matmul(x, xp.transpose(w))),
            normalize_attrs=normalizer("nn.dense", units=canon_opt_int, out_dtype=canon_str),
            bilinear=True,
            doc="nn.dense(x, w): x @ w^T, w of shape (units, in_features)")


@register_gradient("nn.dense")
def dense_grad(orig, g):
    x, w = orig.args
    tx, tw = need_type(x, "nn.dense gradient"), need_type(w, "nn.dense gradient")
    dx = api.matmul(g, w)
    if tx.ndim == 1:
        dw = api.expand_dims(g, -1) * x
    else:
        g2 = g if tx.ndim == 2 else api.reshape(g, (-1, tw.shape[0]))
        x2 = x if tx.ndim == 2 else api.reshape(x, (-1, tw.shape[1]))
        dw = api.matmul(api.transpose(g2), x2)
    return [dx, dw]


bilinear_tangent("nn.dense")


def bias_add_rule(types, attrs):
    op = "nn.bias_add"
    x = tensor_arg(op, types, 0, "the data")
    b = tensor_arg(op, types, 1, "the bias")
    same_dtype(op, x, b)
    require_dtype(op, x, NUMERIC, "numeric")
    if x.ndim == 0:
        raise TypeCheckError(f"{op}: the data must have at least one axis, got {x}")
    axis = norm_axis(op, attrs["axis"], x.ndim)
    if b.shape != (x.shape[axis],):
        raise TypeCheckError(f"{op}: the bias must be 1-D with the size of axis {attrs['axis']} "
                             f"of the data ({x.shape[axis]}), got {b} for {x}")
    return x


def _bias_shape(ndim, axis, size):
    return tuple(size if k == axis else 1 for k in range(ndim))


def bias_add_impl(xp, x, b, axis):
    axis %= x.ndim
    return as_array(xp, x + xp.reshape(b, _bias_shape(x.ndim, axis, b.shape[0])))


register_op("nn.bias_add", 2, attrs={"axis": 1}, type_rule=bias_add_rule, impl=bias_add_impl,
            normalize_attrs=normalizer("nn.bias_add", axis=canon_int),
            linear_in=(0, 1),
            doc="nn.bias_add(x, b, axis=1): add the 1-D b along axis")


@register_gradient("nn.bias_add")
def bias_add_grad(orig, g):
    t = need_type(orig.args[0], "nn.bias_add gradient")
    axis = orig.attrs["axis"] % t.ndim
    others = tuple(k for k in range(t.ndim) if k != axis)
    return [g, api.sum(g, axis=others) if others else g]


linear_tangent("nn.bias_add")


def batch_flatten_rule(types, attrs):
    x = tensor_arg("nn.batch_flatten", types, 0)
    if x.ndim == 0:
        raise TypeCheckError(f"nn.batch_flatten: needs a batch axis, got the scalar type {x}")
    return TensorType((x.shape[0], int(np.prod(x.shape[1:], dtype=np.int64))), x.dtype)


register_op("nn.batch_flatten", 1, type_rule=batch_flatten_rule,
            impl=lambda xp, x: as_array(xp, xp.reshape(x, (x.shape[0], -1))
                                        if x.shape[0] else xp.reshape(
                                            x, (0, int(np.prod(x.shape[1:], dtype=np.int64))))),
            linear_in=(0,),
            doc="nn.batch_flatten(x): (N, d1, d2, ...) -> (N, d1*d2*...)")


@register_gradient("nn.batch_flatten")
def batch_flatten_grad(orig, g):
    return [api.reshape_like(g, orig.args[0])]


linear_tangent("nn.batch_flatten")


# ---- nn.batch_matmul --------------------------------------------------------------------------

def batch_matmul_rule(types, attrs):
    op = "nn.batch_matmul"
    x = tensor_arg(op, types, 0)
    y = tensor_arg(op, types, 1)
    dtype = same_dtype(op, x, y)
    require_dtype(op, x, NUMERIC, "numeric")
    _check_out_dtype(op, attrs, dtype)
    if x.ndim != 3 or y.ndim != 3:
        raise TypeCheckError(f"{op}: both operands must be 3-D (batch, rows, columns), got {x} "
                             f"and {y}")
    m, k = (x.shape[2], x.shape[1]) if attrs["transpose_a"] else x.shape[1:]
    k2, n = (y.shape[2], y.shape[1]) if attrs["transpose_b"] else y.shape[1:]
    if k != k2:
        flags = f"transpose_a={attrs['transpose_a']}, transpose_b={attrs['transpose_b']}"
        raise TypeCheckError(f"{op}: inner dimensions differ ({k} != {k2}) for {x} and {y} "
                             f"with {flags}")
    bx, by = x.shape[0], y.shape[0]
    if bx != by and 1 not in (bx, by):
        raise TypeCheckError(f"{op}: batch sizes {bx} and {by} differ (one may be 1)")
    return TensorType((max(bx, by) if 0 not in (bx, by) else 0, m, n), dtype)


def _swap(xp, a):
    return xp.swapaxes(a, 1, 2)


def batch_matmul_impl(xp, x, y, transpose_a, transpose_b, out_dtype):
    a = _swap(xp, x) if transpose_a else x
    b = _swap(xp, y) if transpose_b else y
    return as_array(xp, xp.matmul(a, b))


register_op("nn.batch_matmul", 2,
            attrs={"out_dtype": "", "transpose_a": False, "transpose_b": True},
            type_rule=batch_matmul_rule, impl=batch_matmul_impl,
            normalize_attrs=normalizer("nn.batch_matmul", out_dtype=canon_str,
                                       transpose_a=canon_bool, transpose_b=canon_bool),
            bilinear=True,
            doc="nn.batch_matmul(x, y): x @ y^T per batch (transpose_b=True by default, as Relay)")


def _t(e):
    return api.transpose(e, (0, 2, 1))


@register_gradient("nn.batch_matmul")
def batch_matmul_grad(orig, g):
    x, y = orig.args
    ta, tb = orig.attrs["transpose_a"], orig.attrs["transpose_b"]
    a = _t(x) if ta else x
    b = _t(y) if tb else y
    da, db = api.matmul(g, _t(b)), api.matmul(_t(a), g)
    dx, dy = (_t(da) if ta else da), (_t(db) if tb else db)
    bx = need_type(x, "nn.batch_matmul gradient").shape[0]
    by = need_type(y, "nn.batch_matmul gradient").shape[0]
    if bx != by:                  # a batch of 1 was broadcast: sum its cotangent back
        dx = api.collapse_sum_like(dx, x) if bx == 1 else dx
        dy = api.collapse_sum_like(dy, y) if by == 1 else dy
    return [dx, dy]


bilinear_tangent("nn.batch_matmul")


# ---- nn.layer_norm ----------------------------------------------------------------------------

def layer_norm_rule(types, attrs):
    op = "nn.layer_norm"
    x = tensor_arg(op, types, 0, "the data")
    gamma = tensor_arg(op, types, 1, "gamma")
    beta = tensor_arg(op, types, 2, "beta")
    same_dtype(op, x, gamma, beta)
    require_dtype(op, x, FLOAT_DTYPES, "floating-point")
    if x.ndim == 0:
        raise TypeCheckError(f"{op}: the data must have at least one axis, got {x}")
    axis = norm_axis(op, attrs["axis"], x.ndim)
    for what, t in (("gamma", gamma), ("beta", beta)):
        if t.shape != (x.shape[axis],):
            raise TypeCheckError(f"{op}: {what} must be 1-D with the size of axis "
                                 f"{attrs['axis']} of the data ({x.shape[axis]}), got {t}")
    if not attrs["epsilon"] >= 0:
        raise TypeCheckError(f"{op}: epsilon must be >= 0, got {attrs['epsilon']}")
    return x


def layer_norm_impl(xp, x, gamma, beta, axis, epsilon, center, scale):
    axis %= x.ndim
    shape = _bias_shape(x.ndim, axis, x.shape[axis])
    mu = xp.mean(x, axis=axis, keepdims=True)
    xc = x - mu
    var = xp.mean(xc * xc, axis=axis, keepdims=True)
    out = xc / xp.sqrt(var + xp.asarray(epsilon, dtype=x.dtype))
    if scale:
        out = out * xp.reshape(gamma, shape)
    if center:
        out = out + xp.reshape(beta, shape)
    return as_array(xp, out, dtype=x.dtype)


register_op("nn.layer_norm", 3,
            attrs={"axis": -1, "epsilon": 1e-5, "center": True, "scale": True},
            type_rule=layer_norm_rule, impl=layer_norm_impl,
            normalize_attrs=normalizer("nn.layer_norm", axis=canon_int, epsilon=canon_float,
                                       center=canon_bool, scale=canon_bool),
            doc="nn.layer_norm(x, gamma, beta, axis=-1, epsilon=1e-5, center=True, scale=True)")


def _layer_norm_parts(orig):
    """The normalized data xhat, 1/std, the axis, and gamma reshaped to broadcast along it."""
    x, gamma, _ = orig.args
    t = need_type(x, "nn.layer_norm rule")
    axis = orig.attrs["axis"] % t.ndim
    xc = x - api.mean(x, axis=axis, keepdims=True)
    var = api.mean(xc * xc, axis=axis, keepdims=True)
    rstd = const(1.0, dtype=t.dtype) / api.sqrt(var + const(orig.attrs["epsilon"], dtype=t.dtype))
    shape = _bias_shape(t.ndim, axis, t.shape[axis])
    return xc * rstd, rstd, axis, t.ndim, shape


def _normalize_tangent(v, xhat, rstd, axis):
    """d xhat along v (also its transpose: the map is self-adjoint)."""
    return rstd * (v - api.mean(v, axis=axis, keepdims=True)
                   - xhat * api.mean(v * xhat, axis=axis, keepdims=True))


@register_gradient("nn.layer_norm")
def layer_norm_grad(orig, g):
    x, gamma, beta = orig.args
    xhat, rstd, axis, ndim, shape = _layer_norm_parts(orig)
    others = tuple(k for k in range(ndim) if k != axis)
    dxhat = g * api.reshape(gamma, shape) if orig.attrs["scale"] else g
    dgamma = (api.reshape(api.sum(g * xhat, axis=others, keepdims=True), (shape[axis],))
              if orig.attrs["scale"] else api.zeros_like(gamma))
    dbeta = (api.reshape(api.sum(g, axis=others, keepdims=True), (shape[axis],))
             if orig.attrs["center"] else api.zeros_like(beta))
    return [_normalize_tangent(dxhat, xhat, rstd, axis), dgamma, dbeta]


@register_tangent("nn.layer_norm")
def layer_norm_tangent(orig, ts):
    xhat, rstd, axis, _, shape = _layer_norm_parts(orig)
    _, gamma, _ = orig.args
    dxhat = _normalize_tangent(ts[0], xhat, rstd, axis)
    out = dxhat
    if orig.attrs["scale"]:
        out = dxhat * api.reshape(gamma, shape) + xhat * api.reshape(ts[1], shape)
    if orig.attrs["center"]:
        out = out + api.reshape(ts[2], shape)
    return out


# ---- nn.dropout (inference form) --------------------------------------------------------------

def dropout_rule(types, attrs):
    x = tensor_arg("nn.dropout", types, 0)
    require_dtype("nn.dropout", x, FLOAT_DTYPES, "floating-point")
    if not 0.0 <= attrs["rate"] < 1.0:
        raise TypeCheckError(f"nn.dropout: rate must be in [0, 1), got {attrs['rate']}")
    return TupleType([x, x])


register_op("nn.dropout", 1, attrs={"rate": 0.5}, type_rule=dropout_rule,
            impl=lambda xp, x, rate: (x, xp.ones_like(x)),
            normalize_attrs=normalizer("nn.dropout", rate=canon_float),
            doc="nn.dropout(x, rate=0.5): inference form, (x, ones mask) as Relay's tuple")


@register_gradient("nn.dropout")
def dropout_grad(orig, g):
    return [TupleGetItem(g, 0)]


@register_tangent("nn.dropout")
def dropout_tangent(orig, ts):
    return Tuple([ts[0], api.zeros_like(ts[0])])
