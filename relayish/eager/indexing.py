"""`t[index]` on recorded tensors, as relayish ops.

Basic indexing (ints, step-1 slices, `...`, `None` is not supported) becomes one
`strided_slice` and, when ints drop axes or nothing is cut, a `reshape`; an integer array or
list, or a recorded integer tensor, as the only index is `take(t, index, axis=0)`. Anything
else (steps, boolean masks, several arrays) is a RelayishError naming the line.
"""
from __future__ import annotations

import numpy as np

from relayish.errors import RelayishError
from relayish.eager import graph, ops
from relayish.eager.tensor import Tensor


def getitem(t, index):
    """`t[index]` (see the module docstring)."""
    if isinstance(index, (list, np.ndarray)) or (isinstance(index, Tensor) and t.ndim):
        return ops.take(t, index, axis=0)
    items = list(index) if isinstance(index, tuple) else [index]
    if any(i is Ellipsis for i in items):
        at = items.index(Ellipsis)
        fill = t.ndim - (len(items) - 1)
        items[at:at + 1] = [slice(None)] * fill
    if len(items) > t.ndim:
        raise graph.record_error(f"index {index!r} has {len(items)} entries for a tensor of "
                                 f"rank {t.ndim}", RelayishError)
    items += [slice(None)] * (t.ndim - len(items))
    begin, end, keep = [], [], []
    for axis, (item, size) in enumerate(zip(items, t.shape)):
        if isinstance(item, slice):
            start, stop, step = item.indices(size)
            if step != 1:
                raise graph.record_error(f"index {index!r}: only step-1 slices are recorded",
                                         RelayishError)
            begin.append(start)
            end.append(max(start, stop))
            keep.append(max(0, stop - start))
        elif isinstance(item, (int, np.integer)) and not isinstance(item, bool):
            k = int(item)
            if not -size <= k < size:
                raise graph.record_error(f"index {k} is out of range for axis {axis} of size "
                                         f"{size}", RelayishError)
            k %= size
            begin.append(k)
            end.append(k + 1)
        else:
            raise graph.record_error(f"index {index!r}: only ints, step-1 slices and one "
                                     f"integer array are recorded", RelayishError)
    out = t
    if tuple(begin) != (0,) * t.ndim or tuple(end) != t.shape:
        out = ops.strided_slice(t, tuple(begin), tuple(end))
    if tuple(keep) != out.shape:
        out = ops.reshape(out, tuple(keep))
    return out


Tensor.__getitem__ = getitem
