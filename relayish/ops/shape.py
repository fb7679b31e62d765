"""Shape operators: transpose, reshape, broadcast_to, concatenate, stack, take, and the internal
ops their gradients need (each a normal registered op with its own gradient):

    collapse_sum_like(x, like)   sum x back to like's shape     <->  broadcast_to_like(x, like)
    reshape_like(x, like)        reshape x to like's shape          (gradient of reshape)
    expand_dims(x, axis)         insert size-1 axes                 (gradient of reductions)
    strided_slice(x, begin, end) <-> slice_scatter(g, like, begin, end)   (concatenate)
    take(x, i, axis)             <-> take_backward(g, i, like, axis)      (scatter-add)
"""
from __future__ import annotations

import numpy as np

from relayish.errors import EvaluationError, TypeCheckError
from relayish.ir.expr import Tuple, const
from relayish.ir.op import FAIL, register_gradient, register_op, register_tangent
from relayish.ir.types import INT_DTYPES, TensorType
from relayish.ops import api
from relayish.ops._common import (as_array, can_broadcast_to, canon_axis, canon_int, canon_ints,
                                  need_type, norm_axis, normalizer, reshape_fast, same_dtype,
                                  tensor_arg, tuple_of_tensors, tuple_size)


def _size(shape):
    return int(np.prod(shape, dtype=np.int64))


def _materialize(xp, a):
    """numpy's broadcast_to is a read-only view; the runtime hands out ordinary arrays."""
    return np.array(a) if xp is np else a


def _zero_for(arg):
    return api.zeros_like(arg)


# ---- transpose ------------------------------------------------------------------------------

def transpose_rule(types, attrs):
    x = tensor_arg("transpose", types, 0)
    axes = attrs["axes"]
    if axes is None:
        return TensorType(x.shape[::-1], x.dtype)
    norm = [a % x.ndim if -x.ndim <= a < x.ndim else None for a in axes] if x.ndim else [None]
    if len(axes) != x.ndim or None in norm or sorted(norm) != list(range(x.ndim)):
        raise TypeCheckError(f"transpose: axes {axes} is not a permutation of the {x.ndim} axes "
                             f"of {x}")
    return TensorType(tuple(x.shape[a] for a in norm), x.dtype)


def _transpose_fast(attrs, out_type):
    axes = attrs["axes"]
    return (lambda x: x.transpose()) if axes is None else (lambda x: x.transpose(axes))


register_op("transpose", 1, attrs={"axes": None}, type_rule=transpose_rule,
            impl=lambda xp, x, axes: as_array(xp, xp.transpose(x, axes)),
            normalize_attrs=normalizer("transpose", axes=lambda o, k, v: canon_ints(
                o, k, v, allow_none=True, allow_negative=True)),
            fast_impl=_transpose_fast, linear_in=(0,),
            doc="transpose(x, axes=None): permute axes (None reverses them)")


@register_gradient("transpose")
def transpose_grad(orig, g):
    axes = orig.attrs["axes"]
    if axes is None:
        return [api.transpose(g)]
    n = len(axes)
    return [api.transpose(g, tuple(int(i) for i in np.argsort([a % n for a in axes])))]


@register_tangent("transpose")
def transpose_tangent(orig, ts):
    return api.transpose(ts[0], orig.attrs["axes"])


# ---- reshape --------------------------------------------------------------------------------

def reshape_rule(types, attrs):
    x = tensor_arg("reshape", types, 0)
    new = list(attrs["newshape"])
    if new.count(-1) > 1 or any(d < -1 for d in new):
        raise TypeCheckError(f"reshape: newshape {tuple(new)} may hold one -1 and otherwise "
                             "non-negative sizes")
    known = _size([d for d in new if d != -1])
    size = _size(x.shape)
    if -1 in new:
        if known == 0 or size % known:
            raise TypeCheckError(f"reshape: cannot reshape {x} (size {size}) to {tuple(new)}")
        new[new.index(-1)] = size // known
    elif known != size:
        raise TypeCheckError(f"reshape: cannot reshape {x} (size {size}) to {tuple(new)} "
                             f"(size {known})")
    return TensorType(tuple(new), x.dtype)


register_op("reshape", 1, attrs={"newshape": ()}, type_rule=reshape_rule,
            impl=lambda xp, x, newshape: as_array(xp, xp.reshape(x, newshape)),
            normalize_attrs=normalizer("reshape", newshape=lambda o, k, v: canon_ints(
                o, k, v, allow_negative=True)),
            fast_impl=reshape_fast, linear_in=(0,),
            doc="reshape(x, newshape): one -1 entry is inferred")


@register_gradient("reshape")
def reshape_grad(orig, g):
    return [api.reshape_like(g, orig.args[0])]


@register_tangent("reshape")
def reshape_tangent(orig, ts):
    return api.reshape(ts[0], orig.attrs["newshape"])


def reshape_like_rule(types, attrs):
    x = tensor_arg("reshape_like", types, 0)
    like = tensor_arg("reshape_like", types, 1)
    if _size(x.shape) != _size(like.shape):
        raise TypeCheckError(f"reshape_like: cannot reshape {x} to the shape of {like}")
    return TensorType(like.shape, x.dtype)


register_op("reshape_like", 2, type_rule=reshape_like_rule,
            impl=lambda xp, x, like: as_array(xp, xp.reshape(x, like.shape)),
            fast_impl=reshape_fast, linear_in=(0,), shape_only_in=(1,),
            doc="internal: reshape x to the shape of like")


@register_gradient("reshape_like")
def reshape_like_grad(orig, g):
    x, like = orig.args
    return [api.reshape_like(g, x), _zero_for(like)]


@register_tangent("reshape_like")
def reshape_like_tangent(orig, ts):
    return api.reshape_like(ts[0], orig.args[1])


# ---- expand_dims ----------------------------------------------------------------------------

def _new_axes(op, axis, num_newaxis):
    """The inserted axes as numpy.expand_dims takes them; Relay's `num_newaxis=k` inserts k
    axes at the int `axis` (negative: counted from the end of the result, as for k = 1)."""
    if num_newaxis == 1:
        return axis
    if not isinstance(axis, int) or num_newaxis < 0:
        raise TypeCheckError(f"{op}: num_newaxis={num_newaxis} needs one int axis and a count "
                             f">= 0, got axis={axis}")
    return tuple(range(axis, axis + num_newaxis) if axis >= 0
                 else range(axis - num_newaxis + 1, axis + 1))


def expand_dims_rule(types, attrs):
    x = tensor_arg("expand_dims", types, 0)
    axis = _new_axes("expand_dims", attrs["axis"], attrs["num_newaxis"])
    if not isinstance(axis, int) and not axis:
        return x
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    out_ndim = x.ndim + len(axes)
    norm = sorted(norm_axis("expand_dims", a, out_ndim) for a in axes)
    if len(set(norm)) != len(norm):
        raise TypeCheckError(f"expand_dims: axis {axis} names an axis twice")
    dims = iter(x.shape)
    return TensorType(tuple(1 if k in norm else next(dims) for k in range(out_ndim)), x.dtype)


def expand_dims_impl(xp, x, axis, num_newaxis):
    axis = _new_axes("expand_dims", axis, num_newaxis)
    return as_array(xp, xp.expand_dims(x, axis) if axis != () else x)


register_op("expand_dims", 1, attrs={"axis": 0, "num_newaxis": 1}, type_rule=expand_dims_rule,
            impl=expand_dims_impl,
            normalize_attrs=normalizer("expand_dims", axis=canon_axis, num_newaxis=canon_int),
            fast_impl=reshape_fast, linear_in=(0,),
            doc="expand_dims(x, axis, num_newaxis=1): insert size-1 axes at `axis` "
                "(numpy.expand_dims for a tuple axis; Relay's num_newaxis axes at an int axis)")


@register_gradient("expand_dims")
def expand_dims_grad(orig, g):
    return [api.reshape_like(g, orig.args[0])]


@register_tangent("expand_dims")
def expand_dims_tangent(orig, ts):
    return api.expand_dims(ts[0], orig.attrs["axis"], orig.attrs["num_newaxis"])


# ---- broadcasting ---------------------------------------------------------------------------

def broadcast_to_rule(types, attrs):
    x = tensor_arg("broadcast_to", types, 0)
    if not can_broadcast_to(x.shape, attrs["shape"]):
        raise TypeCheckError(f"broadcast_to: cannot broadcast {x} to shape {attrs['shape']}")
    return TensorType(attrs["shape"], x.dtype)


register_op("broadcast_to", 1, attrs={"shape": ()}, type_rule=broadcast_to_rule,
            impl=lambda xp, x, shape: _materialize(xp, xp.broadcast_to(x, shape)),
            normalize_attrs=normalizer("broadcast_to", shape=canon_ints),
            linear_in=(0,),
            doc="broadcast_to(x, shape)")


@register_gradient("broadcast_to")
def broadcast_to_grad(orig, g):
    return [api.collapse_sum_like(g, orig.args[0])]


@register_tangent("broadcast_to")
def broadcast_to_tangent(orig, ts):
    return api.broadcast_to(ts[0], orig.attrs["shape"])


def broadcast_to_like_rule(types, attrs):
    x = tensor_arg("broadcast_to_like", types, 0)
    like = tensor_arg("broadcast_to_like", types, 1)
    if not can_broadcast_to(x.shape, like.shape):
        raise TypeCheckError(f"broadcast_to_like: cannot broadcast {x} to the shape of {like}")
    return TensorType(like.shape, x.dtype)


def _broadcast_to_like_fast(attrs, out_type):
    if not isinstance(out_type, TensorType):
        return None
    shape = out_type.shape
    return lambda x, like: np.broadcast_to(x, shape).copy()   # writable, as the impl makes


register_op("broadcast_to_like", 2, type_rule=broadcast_to_like_rule,
            impl=lambda xp, x, like: _materialize(xp, xp.broadcast_to(x, like.shape)),
            fast_impl=_broadcast_to_like_fast, linear_in=(0,), shape_only_in=(1,),
            doc="internal: broadcast x to the shape of like")


@register_gradient("broadcast_to_like")
def broadcast_to_like_grad(orig, g):
    x, like = orig.args
    return [api.collapse_sum_like(g, x), _zero_for(like)]


@register_tangent("broadcast_to_like")
def broadcast_to_like_tangent(orig, ts):
    return api.broadcast_to_like(ts[0], orig.args[1])


def collapse_sum_like_rule(types, attrs):
    x = tensor_arg("collapse_sum_like", types, 0)
    like = tensor_arg("collapse_sum_like", types, 1)
    if not can_broadcast_to(like.shape, x.shape):
        raise TypeCheckError(f"collapse_sum_like: the shape of {like} does not broadcast to the "
                             f"shape of {x}, so x cannot be summed back to it")
    return TensorType(like.shape, x.dtype)


def collapse_sum_impl(xp, x, shape):
    lead = x.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(lead + k for k, d in enumerate(shape)
                                      if d == 1 and x.shape[lead + k] != 1)
    if axes:
        x = xp.sum(x, axis=axes, keepdims=True, dtype=x.dtype)
    return as_array(xp, xp.reshape(x, shape))


register_op("collapse_sum_like", 2, type_rule=collapse_sum_like_rule,
            impl=lambda xp, x, like: collapse_sum_impl(xp, x, like.shape),
            linear_in=(0,), shape_only_in=(1,),
            doc="internal: sum x over broadcast axes back to the shape of like")


@register_gradient("collapse_sum_like")
def collapse_sum_like_grad(orig, g):
    x, like = orig.args
    return [api.broadcast_to_like(g, x), _zero_for(like)]


@register_tangent("collapse_sum_like")
def collapse_sum_like_tangent(orig, ts):
    return api.collapse_sum_like(ts[0], orig.args[1])


# ---- concatenate / stack and slicing --------------------------------------------------------

def concatenate_rule(types, attrs):
    fields = tuple_of_tensors("concatenate", types)
    dtype = same_dtype("concatenate", *fields)
    first = fields[0]
    if first.ndim == 0:
        raise TypeCheckError("concatenate: cannot concatenate scalars (use stack)")
    axis = norm_axis("concatenate", attrs["axis"], first.ndim)
    for f in fields[1:]:
        if f.ndim != first.ndim or any(a != b for k, (a, b) in enumerate(zip(f.shape, first.shape))
                                       if k != axis):
            raise TypeCheckError(f"concatenate: {f} does not match {first} except along axis "
                                 f"{attrs['axis']}")
    shape = list(first.shape)
    shape[axis] = sum(f.shape[axis] for f in fields)
    return TensorType(tuple(shape), dtype)


def _concatenate_fast(attrs, out_type):
    axis, cat = attrs["axis"], np.concatenate
    return lambda fields: cat(fields, axis)


register_op("concatenate", 1, attrs={"axis": 0}, type_rule=concatenate_rule,
            impl=lambda xp, fields, axis: as_array(xp, xp.concatenate(list(fields), axis=axis)),
            normalize_attrs=normalizer("concatenate", axis=canon_int),
            fast_impl=_concatenate_fast, linear_in=(0,),
            doc="concatenate((a, b, ...), axis=0): one argument of tuple type")


@register_gradient("concatenate")
def concatenate_grad(orig, g):
    fields = need_type(orig.args[0], "concatenate gradient").fields
    ndim = len(fields[0].shape)
    axis = orig.attrs["axis"] % ndim
    pieces, start = [], 0
    for f in fields:
        begin = tuple(start if k == axis else 0 for k in range(ndim))
        end = tuple(start + f.shape[axis] if k == axis else d for k, d in enumerate(f.shape))
        pieces.append(api.strided_slice(g, begin, end))
        start += f.shape[axis]
    return [Tuple(pieces)]


@register_tangent("concatenate")
def concatenate_tangent(orig, ts):
    return api.concatenate(ts[0], axis=orig.attrs["axis"])


def stack_rule(types, attrs):
    fields = tuple_of_tensors("stack", types)
    dtype = same_dtype("stack", *fields)
    for f in fields[1:]:
        if f.shape != fields[0].shape:
            raise TypeCheckError(f"stack: all tensors must have one shape, got {fields[0]} and {f}")
    axis = norm_axis("stack", attrs["axis"], fields[0].ndim + 1)
    shape = list(fields[0].shape)
    shape.insert(axis, len(fields))
    return TensorType(tuple(shape), dtype)


register_op("stack", 1, attrs={"axis": 0}, type_rule=stack_rule,
            impl=lambda xp, fields, axis: as_array(xp, xp.stack(list(fields), axis=axis)),
            normalize_attrs=normalizer("stack", axis=canon_int),
            doc="stack((a, b, ...), axis=0): join along a new axis; one argument of tuple type")


@register_gradient("stack")
def stack_grad(orig, g):
    n = tuple_size(orig.args[0], "stack gradient")
    axis = orig.attrs["axis"]
    return [Tuple([api.take(g, const(i, dtype="int32"), axis=axis) for i in range(n)])]


@register_tangent("stack")
def stack_tangent(orig, ts):
    return api.stack(ts[0], axis=orig.attrs["axis"])


def _check_slice(op, x, begin, end):
    if len(begin) != x.ndim or len(end) != x.ndim:
        raise TypeCheckError(f"{op}: begin {begin} and end {end} need one entry per axis of {x}")
    for b, e, d in zip(begin, end, x.shape):
        if not 0 <= b <= e <= d:
            raise TypeCheckError(f"{op}: the range {begin}..{end} does not fit in {x}")
    return tuple(e - b for b, e in zip(begin, end))


def strided_slice_rule(types, attrs):
    x = tensor_arg("strided_slice", types, 0)
    return TensorType(_check_slice("strided_slice", x, attrs["begin"], attrs["end"]), x.dtype)


def _strided_slice_fast(attrs, out_type):
    index = tuple(slice(b, e) for b, e in zip(attrs["begin"], attrs["end"]))   # built once
    return lambda x: x[index]


_slice_attrs = normalizer("strided_slice", begin=canon_ints, end=canon_ints)
register_op("strided_slice", 1, attrs={"begin": (), "end": ()}, type_rule=strided_slice_rule,
            impl=lambda xp, x, begin, end: as_array(
                xp, x[tuple(slice(b, e) for b, e in zip(begin, end))]),
            normalize_attrs=_slice_attrs,
            fast_impl=_strided_slice_fast, linear_in=(0,),
            doc="internal: x[begin:end] per axis, step 1 (the gradient of concatenate)")


@register_gradient("strided_slice")
def strided_slice_grad(orig, g):
    return [api.slice_scatter(g, orig.args[0], orig.attrs["begin"], orig.attrs["end"])]


@register_tangent("strided_slice")
def strided_slice_tangent(orig, ts):
    return api.strided_slice(ts[0], orig.attrs["begin"], orig.attrs["end"])


def slice_scatter_rule(types, attrs):
    g = tensor_arg("slice_scatter", types, 0)
    like = tensor_arg("slice_scatter", types, 1)
    shape = _check_slice("slice_scatter", like, attrs["begin"], attrs["end"])
    if g.shape != shape:
        raise TypeCheckError(f"slice_scatter: {g} does not fill the range {attrs['begin']}.."
                             f"{attrs['end']} of {like}")
    return TensorType(like.shape, g.dtype)


def _slice_scatter_fast(attrs, out_type):
    # zeros and one slice assignment: np.pad (the impl) costs ~12 us of Python per call, which
    # the gradient of every strided_slice pays (merge_matmul's slices: notes/treelstm.md)
    index = tuple(slice(b, e) for b, e in zip(attrs["begin"], attrs["end"]))   # built once

    def scatter(g, like):
        out = np.zeros(like.shape, dtype=g.dtype)
        out[index] = g
        return out
    return scatter


register_op("slice_scatter", 2, attrs={"begin": (), "end": ()}, type_rule=slice_scatter_rule,
            impl=lambda xp, g, like, begin, end: as_array(xp, xp.pad(
                g, [(b, d - e) for b, e, d in zip(begin, end, like.shape)])),
            normalize_attrs=_slice_attrs, fast_impl=_slice_scatter_fast,
            doc="internal: zeros shaped like `like` with g at [begin:end]")


@register_gradient("slice_scatter")
def slice_scatter_grad(orig, g):
    return [api.strided_slice(g, orig.attrs["begin"], orig.attrs["end"]),
            _zero_for(orig.args[1])]


@register_tangent("slice_scatter")
def slice_scatter_tangent(orig, ts):
    return api.slice_scatter(ts[0], orig.args[1], orig.attrs["begin"], orig.attrs["end"])


# ---- take -----------------------------------------------------------------------------------

def _take_shape(op, x, idx, axis):
    if idx.dtype not in INT_DTYPES:
        raise TypeCheckError(f"{op}: indices must be an integer tensor, got {idx}")
    if axis is None:
        if _size(x.shape) == 0:
            raise TypeCheckError(f"{op}: cannot take from the empty tensor {x}")
        return idx.shape
    if x.ndim == 0:
        raise TypeCheckError(f"{op}: cannot take along an axis of a scalar; use axis=None")
    a = norm_axis(op, axis, x.ndim)
    return x.shape[:a] + idx.shape + x.shape[a + 1:]


def take_rule(types, attrs):
    x = tensor_arg("take", types, 0)
    idx = tensor_arg("take", types, 1, "the indices")
    return TensorType(_take_shape("take", x, idx, attrs["axis"]), x.dtype)


def take_impl(xp, x, indices, axis):
    n = x.size if axis is None else x.shape[axis]
    if xp is np:
        if indices.size and (indices.min() < -n or indices.max() >= n):
            bad = indices[(indices < -n) | (indices >= n)].flat[0]
            raise EvaluationError(f"take: index {bad} is out of range for an axis of size {n}")
        return as_array(xp, np.take(x, indices, axis=axis))
    indices = xp.where(indices < 0, indices + n, indices)
    return as_array(xp, xp.take(x, indices, axis=axis, mode="clip"))


register_op("take", 2, attrs={"axis": None}, type_rule=take_rule, impl=take_impl,
            normalize_attrs=normalizer("take", axis=lambda o, k, v: None if v is None
                                       else canon_int(o, k, v)),
            effects={FAIL},     # an index out of range (the numpy impl checks)
            doc="take(x, indices, axis=None): numpy.take; axis=None indexes the flattened x")


@register_gradient("take")
def take_grad(orig, g):
    x, idx = orig.args
    return [api.take_backward(g, idx, x, axis=orig.attrs["axis"]), _zero_for(idx)]


@register_tangent("take")
def take_tangent(orig, ts):
    return api.take(ts[0], orig.args[1], axis=orig.attrs["axis"])


def take_backward_rule(types, attrs):
    g = tensor_arg("take_backward", types, 0)
    idx = tensor_arg("take_backward", types, 1, "the indices")
    like = tensor_arg("take_backward", types, 2)
    shape = _take_shape("take_backward", like, idx, attrs["axis"])
    if g.shape != shape:
        raise TypeCheckError(f"take_backward: {g} is not the shape {shape} that take gives")
    return TensorType(like.shape, g.dtype)


def take_backward_impl(xp, g, indices, like, axis):
    if axis is None:
        flat = xp.zeros((like.size,), dtype=g.dtype)
        idx, vals = xp.reshape(indices, (-1,)), xp.reshape(g, (-1,))
        out = _scatter_add(xp, flat, idx, vals)
        return as_array(xp, xp.reshape(out, like.shape))
    axis = axis % like.ndim
    k = indices.ndim
    rest = like.shape[:axis] + like.shape[axis + 1:]
    base = xp.zeros((like.shape[axis],) + rest, dtype=g.dtype)
    vals = xp.moveaxis(g, tuple(range(axis, axis + k)), tuple(range(k)))
    out = _scatter_add(xp, base, indices, vals)
    return as_array(xp, xp.moveaxis(out, 0, axis))


def _scatter_add(xp, base, idx, vals):
    if xp is np:
        np.add.at(base, idx, vals)
        return base
    return base.at[idx].add(vals)


register_op("take_backward", 3, attrs={"axis": None}, type_rule=take_backward_rule,
            impl=take_backward_impl,
            normalize_attrs=normalizer("take_backward", axis=lambda o, k, v: None if v is None
                                       else canon_int(o, k, v)),
            effects={FAIL},     # an index out of range
            scatters_rows=True, shape_only_in=(2,),
            doc="internal: scatter-add g into zeros shaped like `like` (the gradient of take)")


@register_gradient("take_backward")
def take_backward_grad(orig, g):
    _, idx, like = orig.args
    return [api.take(g, idx, axis=orig.attrs["axis"]), _zero_for(idx), _zero_for(like)]


@register_tangent("take_backward")
def take_backward_tangent(orig, ts):
    _, idx, like = orig.args
    return api.take_backward(ts[0], idx, like, axis=orig.attrs["axis"])

