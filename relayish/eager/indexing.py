"""`t[index]` on recorded tensors, as relayish ops.

Basic indexing -- ints, slices with any step, `...` and `None` (a new axis of length 1) --
becomes at most one `strided_slice` (the step-1 slices and the ints), one `take` of constant
indices per axis sliced with another step (`t[::2]`, `t[::-1]`: a gather, whose gradient is
take's scatter-add), and a `reshape` when ints drop axes or `None` adds them. An integer array
or list, or a recorded integer tensor, as the only index is `take(t, index, axis=0)`. Boolean
masks (a result whose shape depends on the data, which a typed program cannot have) and
several arrays are a RelayishError naming the line.
"""
from __future__ import annotations

import numpy as np

from relayish.errors import RelayishError
from relayish.eager import graph, ops
from relayish.eager.tensor import Tensor


def getitem(t, index):
    """`t[index]` (see the module docstring)."""
    if _is_mask(index):
        raise graph.record_error(
            f"index {_short(index)}: a boolean mask selects a data-dependent number of elements, "
            "which a typed program cannot hold; use re.where(mask, t, 0.0) (same shape) or the "
            "integer positions (np.nonzero(mask)[0]) as an index", RelayishError)
    if isinstance(index, (list, np.ndarray)) or (isinstance(index, Tensor) and t.ndim):
        return ops.take(t, index, axis=0)
    items = list(index) if isinstance(index, tuple) else [index]
    if any(_is_mask(i) for i in items):
        raise graph.record_error(f"index {_short(index)}: boolean masks are not recorded (their "
                                 "result's shape depends on the data); use re.where",
                                 RelayishError)
    axes = [i for i in items if i is not None]
    if any(i is Ellipsis for i in axes):
        at = items.index(Ellipsis)
        items[at:at + 1] = [slice(None)] * (t.ndim - (len(axes) - 1))
        axes = [i for i in items if i is not None]
    if len(axes) > t.ndim:
        raise graph.record_error(f"index {_short(index)} has {len(axes)} entries for a tensor "
                                 f"of rank {t.ndim}", RelayishError)
    items += [slice(None)] * (t.ndim - len(axes))
    begin, end, gathers, shape = [], [], [], []   # shape: the result's, `None` axes included
    axis = 0
    for item in items:
        if item is None:
            shape.append(1)
            continue
        size = t.shape[axis]
        if isinstance(item, slice):
            start, stop, step = item.indices(size)
            if step == 1:
                begin.append(start)
                end.append(max(start, stop))
                shape.append(max(0, stop - start))
            else:                     # the whole axis here, then the positions taken
                begin.append(0)
                end.append(size)
                positions = np.arange(start, stop, step, dtype=np.int32)
                gathers.append((axis, positions))
                shape.append(len(positions))
        elif isinstance(item, (int, np.integer)) and not isinstance(item, bool):
            k = int(item)
            if not -size <= k < size:
                raise graph.record_error(f"index {k} is out of range for axis {axis} of size "
                                         f"{size}", RelayishError)
            k %= size
            begin.append(k)
            end.append(k + 1)
        else:
            raise graph.record_error(f"index {_short(index)}: only ints, slices, ..., None and "
                                     "one integer array are recorded", RelayishError)
        axis += 1
    out = t
    if tuple(begin) != (0,) * t.ndim or tuple(end) != t.shape:
        out = ops.strided_slice(t, tuple(begin), tuple(end))
    for ax, positions in gathers:
        out = ops.take(out, positions, axis=ax)
    if tuple(shape) != out.shape:
        out = ops.reshape(out, tuple(shape))
    return out


def _is_mask(index) -> bool:
    if isinstance(index, Tensor):
        return index.dtype == "bool"
    if isinstance(index, np.ndarray):
        return index.dtype == np.bool_
    return isinstance(index, list) and bool(index) and all(isinstance(i, bool) for i in index)


def _short(index) -> str:
    """The index for a message, short, and without running a recorded tensor to print it."""
    if isinstance(index, Tensor):
        return f"(a recorded {index.dtype} tensor of shape {index.shape})"
    if isinstance(index, tuple):
        return "(" + ", ".join(_short(i) if isinstance(i, Tensor) else repr(i)
                               for i in index) + ")"
    text = repr(index)
    return text if len(text) <= 60 else text[:57] + "..."


Tensor.__getitem__ = getitem
