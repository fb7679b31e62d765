"""Relay's tensor operators beyond numpy's basics: clip, split, squeeze, full, one_hot,
argmax/argmin, erf, cumsum, cumprod, gather and scatter_add (attribute names and meanings as
Relay's).

gather(data, indices, axis) is Relay's (= numpy.take_along_axis with indices no larger than the
data off the axis); scatter_add(data, indices, updates, axis) adds updates into a copy of data at
the same positions. They are each other's gradient. argmax/argmin return int32 and have zero
gradients (differentiable=False, zero rules), like the comparisons.
"""
from __future__ import annotations

import math

import numpy as np

from relayish.errors import TypeCheckError
from relayish.ir.expr import const
from relayish.ir.op import FAIL, attr_dtype, fixed_dtype, register_gradient, register_op, register_tangent
from relayish.ir.types import FLOAT_DTYPES, INT_DTYPES, TensorType, TupleType
from relayish.ops import api
from relayish.ops._common import (NUMERIC, as_array, axis_range, canon_axis, canon_bool,
                                  canon_dtype,
                                  canon_float, canon_int, canon_ints, check_indices, libm_impl,
                                  linear_tangent, need_type, norm_axes, norm_axis, normalizer,
                                  require_dtype, tensor_arg)
from relayish.ops.compare import zero_grads, zero_tangent
from relayish.ops.elementwise import cast_impl, elementwise_derivative, unary_rule


def _opt(canon):
    return lambda op, name, v: None if v is None else canon(op, name, v)


# ---- clip -------------------------------------------------------------------------------------

def clip_rule(types, attrs):
    x = tensor_arg("clip", types, 0)
    require_dtype("clip", x, NUMERIC, "numeric")
    lo, hi = attrs["a_min"], attrs["a_max"]
    if math.isnan(lo) or math.isnan(hi) or lo > hi:
        raise TypeCheckError(f"clip: needs a_min <= a_max, got a_min={lo}, a_max={hi}")
    return x


def _bound(x, value, up):
    """The clip bound `value` in x's dtype (integers: rounded inward, kept in range)."""
    if x.dtype.kind not in "iu":
        return np.asarray(value, dtype=x.dtype)
    info = np.iinfo(x.dtype)
    v = math.ceil(value) if up and math.isfinite(value) else (
        math.floor(value) if math.isfinite(value) else value)
    return np.asarray(min(max(v, info.min), info.max), dtype=x.dtype)


def clip_impl(xp, x, a_min, a_max):
    lo, hi = _bound(x, a_min, True), _bound(x, a_max, False)
    return as_array(xp, xp.minimum(xp.maximum(x, xp.asarray(lo)), xp.asarray(hi)))


register_op("clip", 1, attrs={"a_min": -np.inf, "a_max": np.inf}, type_rule=clip_rule,
            impl=clip_impl, normalize_attrs=normalizer("clip", a_min=canon_float, a_max=canon_float),
            doc="clip(x, a_min, a_max)")


def _inside(orig):
    x = orig.args[0]
    return api.logical_and(
        api.greater_equal(x, api.full_like(x, fill_value=orig.attrs["a_min"])),
        api.less_equal(x, api.full_like(x, fill_value=orig.attrs["a_max"])))


@register_gradient("clip")
def clip_grad(orig, g):
    """Relay's rule: the gradient passes where a_min <= x <= a_max (bounds included)."""
    return [api.where(_inside(orig), g, api.zeros_like(g))]


@register_tangent("clip")
def clip_tangent(orig, ts):
    return api.where(_inside(orig), ts[0], api.zeros_like(ts[0]))


# ---- split ------------------------------------------------------------------------------------

def _canon_sections(op, name, v):
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        return int(v)
    return canon_ints(op, name, v, allow_negative=True)


def split_points(op, size, sections):
    """The split points along an axis of `size` (numpy.split's meaning)."""
    if isinstance(sections, int):
        if sections < 1 or size % sections:
            raise TypeCheckError(f"{op}: cannot split an axis of size {size} into {sections} "
                                 "equal parts")
        step = size // sections
        return [step * k for k in range(1, sections)]
    points = [p + size if p < 0 else p for p in sections]
    if any(not 0 <= p <= size for p in points) or points != sorted(points):
        raise TypeCheckError(f"{op}: indices {list(sections)} must be increasing positions "
                             f"within an axis of size {size}")
    return points


def split_rule(types, attrs):
    x = tensor_arg("split", types, 0)
    if x.ndim == 0:
        raise TypeCheckError(f"split: cannot split the scalar type {x}")
    axis = norm_axis("split", attrs["axis"], x.ndim)
    points = split_points("split", x.shape[axis], attrs["indices_or_sections"])
    bounds = [0] + points + [x.shape[axis]]
    return TupleType([TensorType(x.shape[:axis] + (e - b,) + x.shape[axis + 1:], x.dtype)
                      for b, e in zip(bounds, bounds[1:])])


def split_impl(xp, x, indices_or_sections, axis):
    points = split_points("split", x.shape[axis], indices_or_sections)
    return tuple(as_array(xp, p) for p in xp.split(x, points, axis=axis))


def _split_fast(attrs, out_type):
    """The fast path of split: the pieces as basic slices (views, as numpy.split gives), without
    numpy.split's Python-level array_split and a swapaxes per piece (12 us against 1 us for
    five pieces of a 750-vector, the TreeLSTM's gate split)."""
    sections, axis = attrs["indices_or_sections"], attrs["axis"]
    if isinstance(sections, int) and axis == 0:
        def split(x):
            n = len(x) // sections
            if n == 0:
                return split_impl(np, x, sections, axis)
            return tuple([x[k:k + n] for k in range(0, n * sections, n)])
        return split

    def split(x):
        size = x.shape[axis]
        points = split_points("split", size, sections)
        pre = (slice(None),) * (axis % x.ndim)
        return tuple([x[pre + (slice(b, e),)] for b, e in zip([0] + points, points + [size])])
    return split


register_op("split", 1, attrs={"indices_or_sections": 1, "axis": 0}, type_rule=split_rule,
            impl=split_impl, fast_impl=_split_fast,
            normalize_attrs=normalizer("split", indices_or_sections=_canon_sections,
                                       axis=canon_int),
            linear_in=(0,),
            doc="split(x, indices_or_sections, axis=0): a tuple of pieces (numpy.split)")


@register_gradient("split")
def split_grad(orig, g):
    return [api.concatenate(g, axis=orig.attrs["axis"])]


linear_tangent("split")


# ---- squeeze ----------------------------------------------------------------------------------

def squeeze_rule(types, attrs):
    x = tensor_arg("squeeze", types, 0)
    axis = attrs["axis"]
    if axis is None:
        return TensorType(tuple(d for d in x.shape if d != 1), x.dtype)
    axes = norm_axes("squeeze", axis, x.ndim)
    for a in axes:
        if x.shape[a] != 1:
            raise TypeCheckError(f"squeeze: axis {a} of {x} has size {x.shape[a]}, not 1")
    return TensorType(tuple(d for k, d in enumerate(x.shape) if k not in axes), x.dtype)


def squeeze_impl(xp, x, axis):
    if axis is None:
        axis = tuple(k for k, d in enumerate(x.shape) if d == 1)
    return as_array(xp, xp.squeeze(x, axis=axis))


register_op("squeeze", 1, attrs={"axis": None}, type_rule=squeeze_rule, impl=squeeze_impl,
            normalize_attrs=normalizer("squeeze", axis=lambda o, k, v: canon_ints(
                o, k, v, allow_none=True, allow_negative=True)),
            linear_in=(0,),
            doc="squeeze(x, axis=None): drop size-1 axes (all of them for None)")


@register_gradient("squeeze")
def squeeze_grad(orig, g):
    return [api.reshape_like(g, orig.args[0])]


linear_tangent("squeeze")


# ---- full -------------------------------------------------------------------------------------

def full_rule(types, attrs):
    fill = tensor_arg("full", types, 0, "the fill value")
    if fill.ndim:
        raise TypeCheckError(f"full: the fill value must be a scalar, got {fill}")
    return TensorType(attrs["shape"], attrs["dtype"] or fill.dtype)


def full_impl(xp, fill, shape, dtype):
    value = cast_impl(xp, fill, dtype) if dtype else xp.asarray(fill)
    out = xp.broadcast_to(value, shape)
    return np.array(out) if xp is np else out


register_op("full", 1, attrs={"shape": (), "dtype": None}, type_rule=full_rule, impl=full_impl,
            normalize_attrs=normalizer("full", shape=canon_ints, dtype=_opt(canon_dtype)),
            result_dtype=attr_dtype("dtype", otherwise=0), linear_in=(0,),
            doc="full(fill_value, shape, dtype=None): fill_value (a scalar tensor) everywhere; "
                "dtype None keeps the fill value's")


@register_gradient("full")
def full_grad(orig, g):
    fill = orig.args[0]
    if need_type(orig, "full gradient").dtype not in FLOAT_DTYPES:
        return [api.zeros_like(fill)]
    return [api.cast_like(api.sum(g), fill)]


linear_tangent("full")


# ---- one_hot ----------------------------------------------------------------------------------

def one_hot_rule(types, attrs):
    op = "one_hot"
    idx = tensor_arg(op, types, 0, "the indices")
    on = tensor_arg(op, types, 1, "on_value")
    off = tensor_arg(op, types, 2, "off_value")
    if idx.dtype not in INT_DTYPES:
        raise TypeCheckError(f"{op}: indices must be an integer tensor, got {idx}")
    if on.ndim or off.ndim:
        raise TypeCheckError(f"{op}: on_value and off_value must be scalars, got {on} and {off}")
    if attrs["depth"] < 0:
        raise TypeCheckError(f"{op}: depth must be >= 0, got {attrs['depth']}")
    axis = norm_axis(op, attrs["axis"], idx.ndim + 1)
    shape = idx.shape[:axis] + (attrs["depth"],) + idx.shape[axis:]
    return TensorType(shape, attrs["dtype"])


def one_hot_impl(xp, indices, on_value, off_value, depth, axis, dtype):
    axis %= indices.ndim + 1
    positions = xp.reshape(xp.arange(depth), (depth,) + (1,) * (indices.ndim - axis))
    hit = xp.expand_dims(indices, axis) == positions
    on, off = cast_impl(xp, on_value, dtype), cast_impl(xp, off_value, dtype)
    return as_array(xp, xp.where(hit, on, off), dtype=dtype)


register_op("one_hot", 3, attrs={"depth": 1, "axis": -1, "dtype": "float32"},
            type_rule=one_hot_rule, impl=one_hot_impl,
            normalize_attrs=normalizer("one_hot", depth=canon_int, axis=canon_int,
                                       dtype=canon_dtype),
            result_dtype=attr_dtype("dtype"), linear_in=(1, 2),
            doc="one_hot(indices, on_value, off_value, depth, axis=-1, dtype=float32)")


def _hot_mask(orig):
    idx = orig.args[0]
    dtype = orig.attrs["dtype"]
    return api._call("one_hot", idx, const(1, dtype=dtype), const(0, dtype=dtype), **orig.attrs)


@register_gradient("one_hot")
def one_hot_grad(orig, g):
    idx, on, off = orig.args
    if orig.attrs["dtype"] not in FLOAT_DTYPES:
        return [api.zeros_like(idx), api.zeros_like(on), api.zeros_like(off)]
    mask = _hot_mask(orig)
    return [api.zeros_like(idx), api.cast_like(api.sum(g * mask), on),
            api.cast_like(api.sum(g - g * mask), off)]


linear_tangent("one_hot")


# ---- argmax / argmin --------------------------------------------------------------------------

def arg_rule(op):
    def rule(types, attrs):
        x = tensor_arg(op, types, 0)
        require_dtype(op, x, NUMERIC, "numeric")
        if attrs["exclude"]:
            raise TypeCheckError(f"{op}: exclude=True is not supported; name the axis to reduce")
        axis = attrs["axis"]
        if axis is not None and not isinstance(axis, int):
            if len(axis) != 1:
                raise TypeCheckError(f"{op}: reduces one axis or all of them, got axis={axis}")
            axis = axis[0]
        axes = norm_axes(op, axis, x.ndim)
        if any(x.shape[a] == 0 for a in axes) or (axis is None and 0 in x.shape):
            raise TypeCheckError(f"{op}: reduces an empty axis of {x}")
        if attrs["keepdims"]:
            shape = tuple(1 if k in axes else d for k, d in enumerate(x.shape))
        else:
            shape = tuple(d for k, d in enumerate(x.shape) if k not in axes)
        return TensorType(shape, "int32")
    return rule


def arg_impl(find):
    def impl(xp, x, axis, keepdims, exclude, select_last_index):
        if axis is not None and not isinstance(axis, int):
            axis = axis[0]
        if select_last_index:        # the last extremum: the first one of the reversed axis
            n = x.size if axis is None else x.shape[axis]
            flipped = xp.reshape(x, (-1,))[::-1] if axis is None else xp.flip(x, axis=axis)
            found = n - 1 - getattr(xp, find)(flipped, axis=0 if axis is None else axis)
            if keepdims:
                found = (xp.reshape(found, (1,) * x.ndim) if axis is None
                         else xp.expand_dims(found, axis))
        else:
            found = getattr(xp, find)(x, axis=axis, keepdims=keepdims)
        return as_array(xp, xp.asarray(found).astype("int32"))
    return impl


for _name in ("argmax", "argmin"):
    register_op(_name, 1, attrs={"axis": None, "keepdims": False, "exclude": False,
                                 "select_last_index": False},
                type_rule=arg_rule(_name), impl=arg_impl(_name), differentiable=False,
                result_dtype=fixed_dtype("int32"),
                normalize_attrs=normalizer(_name, axis=canon_axis, keepdims=canon_bool,
                                           exclude=canon_bool, select_last_index=canon_bool),
                doc=f"{_name}(x, axis=None, keepdims=False): int32 positions; zero gradient")
    register_gradient(_name)(zero_grads)
    register_tangent(_name)(zero_tangent)


# ---- erf --------------------------------------------------------------------------------------

# numpy has no erf: libm's (math.erf) elementwise; jax.scipy.special's under jax
register_op("erf", 1, type_rule=unary_rule("erf"), impl=libm_impl(math.erf, "erf"),
            doc="the error function")


@elementwise_derivative("erf")
def erf_grad(orig, v):
    x = orig.args[0]
    two_over_root_pi = api.full_like(x, fill_value=2.0 / math.sqrt(math.pi))
    return v * two_over_root_pi * api.exp(api.negative(x * x))


# ---- cumsum, cumprod ---------------------------------------------------------------------------

def scan_rule(op):
    def rule(types, attrs):
        x = tensor_arg(op, types, 0)
        require_dtype(op, x, NUMERIC, "numeric")
        dtype = attrs["dtype"] or x.dtype
        if attrs["axis"] is None:
            return TensorType((int(np.prod(x.shape, dtype=np.int64)),), dtype)
        norm_axis(op, attrs["axis"], x.ndim)
        return TensorType(x.shape, dtype)
    return rule


def scan_impl(scan, identity):
    """cumsum / cumprod (`scan` names the numpy function); exclusive shifts `identity` in."""
    def impl(xp, x, axis, dtype, exclusive):
        if dtype:
            x = cast_impl(xp, x, dtype)
        if axis is None:
            x, axis = xp.reshape(x, (-1,)), 0
        axis %= x.ndim
        with np.errstate(over="ignore"):          # integer sums and products wrap, as in XLA
            out = getattr(xp, scan)(x, axis=axis, dtype=x.dtype)
        if exclusive:        # shift by one along the axis, the identity first (nothing undone)
            first = xp.full(x.shape[:axis] + (min(1, x.shape[axis]),) + x.shape[axis + 1:],
                            identity, dtype=x.dtype)
            rest = out[(slice(None),) * axis + (slice(0, max(0, x.shape[axis] - 1)),)]
            out = xp.concatenate([first, rest], axis=axis)
        return as_array(xp, out)
    return impl


_SCAN_ATTRS = {"axis": None, "dtype": None, "exclusive": False}


def _scan_normalizer(op):
    return normalizer(op, axis=_opt(canon_int), dtype=_opt(canon_dtype), exclusive=canon_bool)


register_op("cumsum", 1, attrs=_SCAN_ATTRS, type_rule=scan_rule("cumsum"),
            impl=scan_impl("cumsum", 0), normalize_attrs=_scan_normalizer("cumsum"),
            result_dtype=attr_dtype("dtype", otherwise=0), linear_in=(0,),
            doc="cumsum(x, axis=None, dtype=None, exclusive=False); axis None: of the flattened x")


@register_gradient("cumsum")
def cumsum_grad(orig, g):
    """A reversed cumulative sum, without a flip: total - cumsum(g) (+ g when inclusive)."""
    x = orig.args[0]
    if need_type(orig, "cumsum gradient").dtype not in FLOAT_DTYPES:
        return [api.zeros_like(x)]
    axis = 0 if orig.attrs["axis"] is None else orig.attrs["axis"]
    rev = api.sum(g, axis=axis, keepdims=True) - api._call("cumsum", g, axis=axis)
    if not orig.attrs["exclusive"]:
        rev = rev + g
    rev = api.reshape_like(rev, x) if orig.attrs["axis"] is None else rev
    return [api.cast_like(rev, x) if orig.attrs["dtype"] else rev]


linear_tangent("cumsum")


register_op("cumprod", 1, attrs=_SCAN_ATTRS, type_rule=scan_rule("cumprod"),
            impl=scan_impl("cumprod", 1), normalize_attrs=_scan_normalizer("cumprod"),
            result_dtype=attr_dtype("dtype", otherwise=0),
            doc="cumprod(x, axis=None, dtype=None, exclusive=False); axis None: of the "
                "flattened x")


def _cumprod_partials(orig):
    """(x as scanned, its axis, D): D[.., k, i, ..] = d out[i] / d x[k] along the axis, the
    product of the x[j] that out[i] multiplies except x[k] (0 where out[i] has no x[k]).

    Built as a cumprod of n copies of x, copy k with x[k] replaced by 1: O(n^2) along the
    axis, but exact where x has zeros (dividing out by x would give nan there)."""
    x, attrs = orig.args[0], orig.attrs
    xt = need_type(x, "cumprod gradient")
    if attrs["dtype"]:
        x = api.cast(x, attrs["dtype"])
    axis = attrs["axis"]
    if axis is None:
        x, axis, shape = api.reshape(x, (-1,)), 0, (int(np.prod(xt.shape, dtype=np.int64)),)
    else:
        axis, shape = axis % xt.ndim, xt.shape
    n, rest = shape[axis], (1,) * (len(shape) - axis - 1)
    k, i = np.arange(n)[:, None], np.arange(n)[None, :]
    dtype = attrs["dtype"] or xt.dtype
    eye = const((k == i).reshape((n, n) + rest))
    reached = (k < i) if attrs["exclusive"] else (k <= i)
    copies = api.where(eye, const(1.0, dtype=dtype), api.expand_dims(x, axis))
    scanned = api._call("cumprod", copies, axis=axis + 1, exclusive=attrs["exclusive"])
    return x, axis, scanned * const(reached.reshape((n, n) + rest).astype(dtype))


def _back_to_input(d, orig):
    """A derivative for the scanned x, back in the input's shape and dtype."""
    x = orig.args[0]
    if orig.attrs["axis"] is None:
        d = api.reshape_like(d, x)
    return api.cast_like(d, x) if orig.attrs["dtype"] else d


@register_gradient("cumprod")
def cumprod_grad(orig, g):
    x = orig.args[0]
    if need_type(orig, "cumprod gradient").dtype not in FLOAT_DTYPES:
        return [api.zeros_like(x)]
    _, axis, partials = _cumprod_partials(orig)
    return [_back_to_input(api.sum(partials * api.expand_dims(g, axis), axis=axis + 1), orig)]


@register_tangent("cumprod")
def cumprod_tangent(orig, ts):
    if need_type(orig, "cumprod tangent").dtype not in FLOAT_DTYPES:
        return api.zeros_like(orig)
    t = ts[0]
    if orig.attrs["dtype"]:
        t = api.cast(t, orig.attrs["dtype"])
    if orig.attrs["axis"] is None:
        t = api.reshape(t, (-1,))
    _, axis, partials = _cumprod_partials(orig)
    return api.sum(partials * api.expand_dims(t, axis + 1), axis=axis)


# ---- gather / scatter_add ---------------------------------------------------------------------

def _check_index_shape(op, data, idx, axis, what="indices"):
    if idx.dtype not in INT_DTYPES:
        raise TypeCheckError(f"{op}: {what} must be an integer tensor, got {idx}")
    if idx.ndim != data.ndim:
        raise TypeCheckError(f"{op}: {what} must have the rank of the data ({data.ndim}), "
                             f"got {idx}")
    a = norm_axis(op, axis, data.ndim)
    for k, (i, d) in enumerate(zip(idx.shape, data.shape)):
        if k != a and i > d:
            raise TypeCheckError(f"{op}: {what} {idx} is larger than the data {data} along "
                                 f"axis {k}")
    return a


def gather_rule(types, attrs):
    data = tensor_arg("gather", types, 0, "the data")
    idx = tensor_arg("gather", types, 1, "the indices")
    _check_index_shape("gather", data, idx, attrs["axis"])
    return TensorType(idx.shape, data.dtype)


def _positions(xp, op, indices, axis, n):
    """The full index tuple for take-along-axis: indices on `axis`, aranges elsewhere.
    Negative indices count from the end; out of range is an EvaluationError under numpy
    (jax cannot raise: it clips for gather and drops for scatter_add)."""
    check_indices(xp, op, indices, n)
    indices = xp.where(indices < 0, indices + n, indices)
    grids = [xp.reshape(xp.arange(s), tuple(s if j == k else 1 for j in range(indices.ndim)))
             for k, s in enumerate(indices.shape)]
    grids[axis] = indices
    return tuple(grids)


def gather_impl(xp, data, indices, axis):
    axis %= data.ndim
    return as_array(xp, data[_positions(xp, "gather", indices, axis, data.shape[axis])])


register_op("gather", 2, attrs={"axis": 0}, type_rule=gather_rule, impl=gather_impl,
            normalize_attrs=normalizer("gather", axis=canon_int),
            effects={FAIL},     # an index out of range (the numpy impl checks)
            index_range=axis_range(1, 0), linear_in=(0,),
            doc="gather(data, indices, axis=0): out[..i..] = data[..indices[..i..]..] along "
                "axis (numpy.take_along_axis)")


@register_gradient("gather")
def gather_grad(orig, g):
    data, idx = orig.args
    return [api._call("scatter_add", api.zeros_like(data), idx, g, axis=orig.attrs["axis"]),
            api.zeros_like(idx)]


linear_tangent("gather")


def scatter_add_rule(types, attrs):
    data = tensor_arg("scatter_add", types, 0, "the data")
    idx = tensor_arg("scatter_add", types, 1, "the indices")
    upd = tensor_arg("scatter_add", types, 2, "the updates")
    if upd.dtype != data.dtype:
        raise TypeCheckError(f"scatter_add: the updates {upd} must have the data's dtype "
                             f"({data.dtype})")
    if upd.shape != idx.shape:
        raise TypeCheckError(f"scatter_add: the updates {upd} must have the shape of the "
                             f"indices {idx}")
    _check_index_shape("scatter_add", data, idx, attrs["axis"])
    return data


def scatter_add_impl(xp, data, indices, updates, axis):
    axis %= data.ndim
    where = _positions(xp, "scatter_add", indices, axis, data.shape[axis])
    if xp is np:
        out = np.array(data)
        np.add.at(out, where, updates)
        return as_array(xp, out)
    # data may be a numpy array under jax too (a constant, or a zero the backend folded)
    return xp.asarray(data).at[where].add(updates, mode="drop")


register_op("scatter_add", 3, attrs={"axis": 0}, type_rule=scatter_add_rule,
            impl=scatter_add_impl, normalize_attrs=normalizer("scatter_add", axis=canon_int),
            effects={FAIL},     # an index out of range
            index_range=axis_range(1, 0), linear_in=(0, 2),
            doc="scatter_add(data, indices, updates, axis=0): data with updates added at the "
                "positions gather would read")


@register_gradient("scatter_add")
def scatter_add_grad(orig, g):
    _, idx, _ = orig.args
    return [g, api.zeros_like(idx), api._call("gather", g, idx, axis=orig.attrs["axis"])]


linear_tangent("scatter_add")
