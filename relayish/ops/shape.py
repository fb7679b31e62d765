"""Shape operators: transpose, reshape, broadcast_to, concatenate, stack, take, and the internal
ops their gradients need (each a normal registered op with its own gradient):

    collapse_sum_like(x, like)   sum x back to like's shape     <->  broadcast_to_like(x, like)
    reshape_like(x, like)        reshape x to like's shape          (gradient of reshape)
    expand_dims(x, axis)         insert size-1 axes                 (gradient of reductions)
    strided_slice(x, begin, end, strides) <-> slice_scatter(g, like, begin, end, strides)
    take(x, i, axis)             <-> take_backward(g, i, like, axis)      (scatter-add)

and roll (numpy.roll; its gradient rolls back), index_update / index_add (x.at[i].set(v) and
.add(v) along an axis, at take's positions).
"""
from __future__ import annotations

import numpy as np

from relayish.errors import TypeCheckError
from relayish.ir.expr import Tuple, const
from relayish.ir.op import FAIL, register_gradient, register_op, register_tangent
from relayish.ir.types import INT_DTYPES, TensorType
from relayish.ops import api
from relayish.ops._common import (as_array, axis_range, can_broadcast_to, canon_axis, canon_int,
                                  canon_ints, check_indices, linear_tangent, need_type, norm_axis,
                                  normalizer, reshape_fast, same_dtype, tensor_arg,
                                  tuple_of_tensors, tuple_size)


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


def _check_slice(op, x, begin, end, strides):
    if len(begin) != x.ndim or len(end) != x.ndim:
        raise TypeCheckError(f"{op}: begin {begin} and end {end} need one entry per axis of {x}")
    for b, e, d in zip(begin, end, x.shape):
        if not 0 <= b <= e <= d:
            raise TypeCheckError(f"{op}: the range {begin}..{end} does not fit in {x}")
    if strides is None:
        return tuple(e - b for b, e in zip(begin, end))
    if len(strides) != x.ndim or min(strides, default=1) < 1:
        raise TypeCheckError(f"{op}: strides {strides} need one positive entry per axis of {x}")
    return tuple(-(-(e - b) // s) for b, e, s in zip(begin, end, strides))


def _slice_index(begin, end, strides):
    steps = strides or (None,) * len(begin)
    return tuple(slice(b, e, s) for b, e, s in zip(begin, end, steps))


def strided_slice_rule(types, attrs):
    x = tensor_arg("strided_slice", types, 0)
    return TensorType(_check_slice("strided_slice", x, attrs["begin"], attrs["end"],
                                   attrs["strides"]), x.dtype)


def _strided_slice_fast(attrs, out_type):
    index = _slice_index(attrs["begin"], attrs["end"], attrs["strides"])   # built once
    return lambda x: x[index]


_slice_attrs = normalizer("strided_slice", begin=canon_ints, end=canon_ints,
                          strides=lambda o, k, v: canon_ints(o, k, v, allow_none=True))
register_op("strided_slice", 1, attrs={"begin": (), "end": (), "strides": None},
            type_rule=strided_slice_rule,
            impl=lambda xp, x, begin, end, strides: as_array(
                xp, x[_slice_index(begin, end, strides)]),
            normalize_attrs=_slice_attrs,
            fast_impl=_strided_slice_fast, linear_in=(0,),
            doc="x[begin:end:strides] per axis (strides None: step 1); the gradient of "
                "concatenate")


def _slice_of(orig):
    return orig.attrs["begin"], orig.attrs["end"], orig.attrs["strides"]


@register_gradient("strided_slice")
def strided_slice_grad(orig, g):
    return [api.slice_scatter(g, orig.args[0], *_slice_of(orig))]


@register_tangent("strided_slice")
def strided_slice_tangent(orig, ts):
    return api.strided_slice(ts[0], *_slice_of(orig))


def slice_scatter_rule(types, attrs):
    g = tensor_arg("slice_scatter", types, 0)
    like = tensor_arg("slice_scatter", types, 1)
    shape = _check_slice("slice_scatter", like, attrs["begin"], attrs["end"], attrs["strides"])
    if g.shape != shape:
        raise TypeCheckError(f"slice_scatter: {g} does not fill the range {attrs['begin']}.."
                             f"{attrs['end']} of {like}")
    return TensorType(like.shape, g.dtype)


def _slice_scatter_fast(attrs, out_type):
    # zeros and one slice assignment: np.pad (the impl) costs ~12 us of Python per call, which
    # the gradient of every strided_slice pays (merge_matmul's slices: notes/treelstm.md)
    index = _slice_index(attrs["begin"], attrs["end"], attrs["strides"])   # built once

    def scatter(g, like):
        out = np.zeros(like.shape, dtype=g.dtype)
        out[index] = g
        return out
    return scatter


def slice_scatter_impl(xp, g, like, begin, end, strides):
    if strides is None or all(s == 1 for s in strides):
        return as_array(xp, xp.pad(g, [(b, d - e) for b, e, d in zip(begin, end, like.shape)]))
    index = _slice_index(begin, end, strides)
    if xp is np:
        out = np.zeros(like.shape, dtype=g.dtype)
        out[index] = g
        return out
    return xp.zeros(like.shape, dtype=g.dtype).at[index].set(g)


register_op("slice_scatter", 2, attrs={"begin": (), "end": (), "strides": None},
            type_rule=slice_scatter_rule, impl=slice_scatter_impl,
            normalize_attrs=_slice_attrs, fast_impl=_slice_scatter_fast,
            doc="zeros shaped like `like` with g at [begin:end:strides] (the gradient of "
                "strided_slice)")


@register_gradient("slice_scatter")
def slice_scatter_grad(orig, g):
    return [api.strided_slice(g, *_slice_of(orig)), _zero_for(orig.args[1])]


@register_tangent("slice_scatter")
def slice_scatter_tangent(orig, ts):
    return api.slice_scatter(ts[0], orig.args[1], *_slice_of(orig))


# ---- roll -----------------------------------------------------------------------------------

def roll_rule(types, attrs):
    x = tensor_arg("roll", types, 0)
    shift, axis = attrs["shift"], attrs["axis"]
    if axis is None:
        if len(shift) != 1:
            raise TypeCheckError(f"roll: axis=None rolls the flattened tensor by one shift, "
                                 f"got shift={shift}")
        return x
    axes = (axis,) if isinstance(axis, int) else axis
    if len(axes) != len(shift):
        raise TypeCheckError(f"roll: needs one shift per axis, got shift={shift} and "
                             f"axis={axis}")
    for a in axes:
        norm_axis("roll", a, x.ndim)
    return x


def roll_impl(xp, x, shift, axis):
    return as_array(xp, xp.roll(x, shift[0] if axis is None else shift, axis=axis))


register_op("roll", 1, attrs={"shift": (0,), "axis": None}, type_rule=roll_rule, impl=roll_impl,
            normalize_attrs=normalizer("roll", shift=lambda o, k, v: canon_ints(
                o, k, v, allow_negative=True), axis=canon_axis),
            linear_in=(0,),
            doc="roll(x, shift, axis=None): numpy.roll (elements shifted off one end come "
                "back at the other; axis None rolls the flattened x)")


@register_gradient("roll")
def roll_grad(orig, g):
    back = tuple(-s for s in orig.attrs["shift"])
    return [api.roll(g, back, axis=orig.attrs["axis"])]


linear_tangent("roll")


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
    check_indices(xp, "take", indices, n)
    if xp is np:
        return as_array(xp, np.take(x, indices, axis=axis))
    indices = xp.where(indices < 0, indices + n, indices)
    return as_array(xp, xp.take(x, indices, axis=axis, mode="clip"))


register_op("take", 2, attrs={"axis": None}, type_rule=take_rule, impl=take_impl,
            normalize_attrs=normalizer("take", axis=lambda o, k, v: None if v is None
                                       else canon_int(o, k, v)),
            effects={FAIL},     # an index out of range (the numpy impl checks)
            index_range=axis_range(1, 0),
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
            index_range=axis_range(1, 2),
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



# ---- index_update / index_add: x.at[indices].set(values) / .add(values) along an axis ----------

def index_rule(op):
    def rule(types, attrs):
        x = tensor_arg(op, types, 0)
        idx = tensor_arg(op, types, 1, "the indices")
        values = tensor_arg(op, types, 2, "the values")
        if x.dtype == "bool":
            raise TypeCheckError(f"{op}: expects a numeric tensor, got {x}")
        same_dtype(op, x, values)
        shape = _take_shape(op, x, idx, attrs["axis"])
        if not can_broadcast_to(values.shape, shape):
            raise TypeCheckError(f"{op}: the values {values} do not broadcast to the shape "
                                 f"{shape} that take(x, indices, axis={attrs['axis']}) has")
        return x
    return rule


def _index_positions(xp, op, x, indices, values, axis):
    """indices made non-negative (checked under numpy) and values broadcast to take's shape."""
    n = x.shape[axis]
    check_indices(xp, op, indices, n)
    shape = x.shape[:axis] + indices.shape + x.shape[axis + 1:]
    return xp.where(indices < 0, indices + n, indices), _materialize(xp, xp.broadcast_to(
        values, shape))


def index_add_impl(xp, x, indices, values, axis):
    axis %= x.ndim
    indices, values = _index_positions(xp, "index_add", x, indices, values, axis)
    return as_array(xp, x + take_backward_impl(xp, values, indices, x, axis))


def index_update_impl(xp, x, indices, values, axis):
    """Where an index repeats, the last of its values is written, on every backend (a scatter
    of the values' positions by max picks it; XLA leaves the order of repeated writes open)."""
    axis %= x.ndim
    indices, values = _index_positions(xp, "index_update", x, indices, values, axis)
    flat = xp.reshape(indices, (-1,))
    order = xp.arange(flat.shape[0])
    if xp is np:
        latest = np.full(x.shape[axis], -1)
        np.maximum.at(latest, flat, order)
    else:
        latest = xp.full(x.shape[axis], -1).at[flat].max(order, mode="drop")
    last = xp.reshape(latest[flat] == order, indices.shape)
    last = xp.reshape(last, (1,) * axis + indices.shape + (1,) * (x.ndim - axis - 1))
    kept = xp.where(last, values, xp.zeros_like(values))
    hit = take_backward_impl(xp, xp.ones_like(values), indices, x, axis) > 0
    return as_array(xp, xp.where(hit, xp.zeros_like(x), x)
                    + take_backward_impl(xp, kept, indices, x, axis))


_index_attrs = dict(attrs={"axis": 0}, effects={FAIL},      # an index out of range
                    linear_in=(0, 2))
register_op("index_add", 3, type_rule=index_rule("index_add"), impl=index_add_impl,
            normalize_attrs=normalizer("index_add", axis=canon_int), **_index_attrs,
            doc="index_add(x, indices, values, axis=0): x with values added at the positions "
                "take(x, indices, axis) reads (repeated indices add up); x.at[i].add(v)")
register_op("index_update", 3, type_rule=index_rule("index_update"), impl=index_update_impl,
            normalize_attrs=normalizer("index_update", axis=canon_int), **_index_attrs,
            doc="index_update(x, indices, values, axis=0): x with values written at the "
                "positions take(x, indices, axis) reads (a repeated index: its last value); "
                "x.at[i].set(v)")


@register_gradient("index_add")
def index_add_grad(orig, g):
    x, idx, values = orig.args
    d = api.take(g, idx, axis=orig.attrs["axis"])
    return [g, _zero_for(idx), api.collapse_sum_like(d, values)]


def _written(orig):
    """1 where a value of index_update's call is the one written (the last of a repeated
    index), else 0: index_update of each value's position, read back and compared."""
    x, idx, values = orig.args
    axis = orig.attrs["axis"]
    xt, it = need_type(x, "index_update gradient"), need_type(idx, "index_update gradient")
    a = axis % xt.ndim
    count = _size(it.shape)
    ids = np.arange(1, count + 1, dtype=xt.dtype).reshape(
        (1,) * a + it.shape + (1,) * (xt.ndim - a - 1))
    shape = xt.shape[:a] + it.shape + xt.shape[a + 1:]
    ids = const(np.broadcast_to(ids, shape).copy())
    back = api.take(api.index_update(api.zeros_like(x), idx, ids, axis=axis), idx, axis=axis)
    return api.where(api.equal(back, ids), api.ones_like(ids), api.zeros_like(ids))


@register_gradient("index_update")
def index_update_grad(orig, g):
    x, idx, values = orig.args
    axis = orig.attrs["axis"]
    dx = api.index_update(g, idx, api.zeros_like(values), axis=axis)
    dv = api.take(g, idx, axis=axis) * _written(orig)
    return [dx, _zero_for(idx), api.collapse_sum_like(dv, values)]


linear_tangent("index_add")
linear_tangent("index_update")
