"""The step builders: each returns a Python closure `step(slots)` doing one thing with its slot
indices (and the op's impl) bound in, e.g. `slots[7] = impl(numpy, slots[3], slots[5])`.

    op_step                an op call (the op's numpy fast path when it has one)
    tuple_step, getitem_step, move_step, constructor_step, closure_step
    ref_create_step, ref_read_step, ref_write_step
    accumulate_step        `r := !r + g` in one step, in place when the reference owns its array
                           (debug_alloc: a new sum, the released array poisoned with NaN)
    take_accumulate_step   `r := !r + take_backward(g, idx, like)`: a scatter-add in place
    outer_accumulate_step  `r := !r + expand_dims(g, axis=-1) * x`: deferred (deferred.py)
    shared_zeros           the read-only zero tensor `ref(zeros(..))` steps share

The compiler (compiler.py) chooses the builder; a step never dispatches at run time. A fault in
an op's impl is an EvaluationError naming the call's text; other steps fault only in ill-typed
programs (the compiler's type check rules those out) and are reported the same way.
Results are always arrays: numpy's 0-d results (numpy scalars) become 0-d arrays, checked only
where the inferred type is 0-d or unknown (numpy gives an ndarray for rank >= 1).
"""
from __future__ import annotations

import sys
from operator import itemgetter

import numpy as np

from relayish.errors import EvaluationError
from relayish.ir.types import TensorType
from relayish.backend.values import ConstructorValue, RefValue
from relayish.backend.runtime.describe import node_text, value_type_text
from relayish.backend.interp.run import InterpreterClosure
from relayish.backend.interp.deferred import OuterSum, defer_outer, settle

__all__ = ["op_step", "tuple_step", "getitem_step", "move_step", "ref_create_step",
           "shared_zeros", "ref_read_step", "ref_write_step", "accumulate_step",
           "take_accumulate_step", "outer_accumulate_step", "constructor_step", "closure_step"]

_ndarray = np.ndarray
_new_object = object.__new__


def _fix_scalar(r):
    """numpy turns 0-d results into numpy scalars; the runtime wants 0-d arrays."""
    return np.asarray(r) if isinstance(r, np.generic) else r


# ---- steps -----------------------------------------------------------------------------------

def _op_failure(node, exc):
    if isinstance(exc, EvaluationError):
        return exc
    return EvaluationError(f"operator '{node.op.name}' failed in {node_text(node)}: "
                           f"{type(exc).__name__}: {exc}")


def op_step(node, dst, srcs):
    op = node.op
    impl = op.impl
    if impl is None:
        def missing(s):
            raise EvaluationError(f"operator '{op.name}' has no implementation, in {node_text(node)}")
        return missing
    attrs = node.attrs
    xp = np
    t = getattr(node, "_checked_type", None)
    never_scalar = isinstance(t, TensorType) and len(t.shape) >= 1   # numpy gives an ndarray
    fast = op.numpy_fast(attrs, t if isinstance(t, TensorType) else None)
    if fast is not None:
        return _fast_op_step(node, fast, dst, srcs, never_scalar)
    if not attrs and len(srcs) == 2 and never_scalar:
        a, b = srcs

        def step(s):
            try:
                s[dst] = impl(xp, s[a], s[b])
            except Exception as exc:  # noqa: BLE001 - reported with the call's text
                raise _op_failure(node, exc) from exc
    elif not attrs and len(srcs) == 1 and never_scalar:
        a, = srcs

        def step(s):
            try:
                s[dst] = impl(xp, s[a])
            except Exception as exc:  # noqa: BLE001
                raise _op_failure(node, exc) from exc
    elif not attrs and len(srcs) == 2:
        a, b = srcs

        def step(s):
            try:
                r = impl(xp, s[a], s[b])
            except Exception as exc:  # noqa: BLE001 - reported with the call's text
                raise _op_failure(node, exc) from exc
            s[dst] = r if r.__class__ is _ndarray else _fix_scalar(r)
    elif not attrs and len(srcs) == 1:
        a, = srcs

        def step(s):
            try:
                r = impl(xp, s[a])
            except Exception as exc:  # noqa: BLE001
                raise _op_failure(node, exc) from exc
            s[dst] = r if r.__class__ is _ndarray else _fix_scalar(r)
    elif len(srcs) == 1:
        a, = srcs

        def step(s):
            try:
                r = impl(xp, s[a], **attrs)
            except Exception as exc:  # noqa: BLE001
                raise _op_failure(node, exc) from exc
            s[dst] = r if r.__class__ is _ndarray else _fix_scalar(r)
    else:
        gather = itemgetter(*srcs) if len(srcs) >= 2 else (lambda s: ())

        def step(s):
            try:
                r = impl(xp, *gather(s), **attrs)
            except Exception as exc:  # noqa: BLE001
                raise _op_failure(node, exc) from exc
            s[dst] = r if r.__class__ is _ndarray else _fix_scalar(r)
    return step


def _fast_op_step(node, fn, dst, srcs, never_scalar):
    """An op step calling the op's direct numpy function (its record's fast_impl):
    `s[dst] = fn(s[a], s[b])`, no impl wrapper, no attrs to pass."""
    n = len(srcs)
    if n == 2 and never_scalar:
        a, b = srcs

        def step(s):
            try:
                s[dst] = fn(s[a], s[b])
            except Exception as exc:  # noqa: BLE001 - reported with the call's text
                raise _op_failure(node, exc) from exc
    elif n == 1 and never_scalar:
        a, = srcs

        def step(s):
            try:
                s[dst] = fn(s[a])
            except Exception as exc:  # noqa: BLE001
                raise _op_failure(node, exc) from exc
    elif n == 0 and never_scalar:
        def step(s):
            s[dst] = fn()
    elif n == 2:
        a, b = srcs

        def step(s):
            try:
                r = fn(s[a], s[b])
            except Exception as exc:  # noqa: BLE001
                raise _op_failure(node, exc) from exc
            s[dst] = r if r.__class__ is _ndarray else _fix_scalar(r)
    elif n == 1:
        a, = srcs

        def step(s):
            try:
                r = fn(s[a])
            except Exception as exc:  # noqa: BLE001
                raise _op_failure(node, exc) from exc
            s[dst] = r if r.__class__ is _ndarray else _fix_scalar(r)
    else:
        gather = itemgetter(*srcs) if n >= 2 else (lambda s: ())
        multi = n >= 2

        def step(s):
            try:
                r = fn(*gather(s)) if multi else fn()
            except Exception as exc:  # noqa: BLE001
                raise _op_failure(node, exc) from exc
            s[dst] = r if r.__class__ is _ndarray else _fix_scalar(r)
    return step


def _guard(node, what):
    """An EvaluationError for a fault of a non-op step (only ill-typed programs get here)."""
    def fail(exc):
        return EvaluationError(f"{what} failed in {node_text(node)}: {type(exc).__name__}: {exc}")
    return fail


def tuple_step(node, dst, srcs):
    if len(srcs) == 1:
        a, = srcs

        def step(s):
            s[dst] = (s[a],)
    else:
        gather = itemgetter(*srcs)         # a tuple of the slots' values, in C

        def step(s):
            s[dst] = gather(s)
    return step


def getitem_step(node, dst, src, index):
    fail = _guard(node, "tuple projection")

    def step(s):
        try:
            s[dst] = s[src][index]
        except Exception as exc:  # noqa: BLE001
            raise fail(exc) from exc
    return step


def move_step(dst, src):
    def step(s):
        s[dst] = s[src]
    return step


def ref_create_step(dst, src):
    # object.__new__ plus one attribute store skips the Python-level __init__ call
    def step(s):
        r = _new_object(RefValue)
        r.value = s[src]
        s[dst] = r
    return step


# Shared zero tensors stored by `ref(zeros(shape, dtype))` steps, one per (shape, dtype), made
# read-only. Reading such a reference gives a fresh copy, so the shared array never reaches a
# program's results; an accumulation `r := !r + g` into it (g of the result's type) stores g.
_SHARED_ZEROS = {}
_SHARED_ZERO_IDS = set()


def shared_zeros(shape, dtype):
    key = (tuple(shape), str(dtype))
    z = _SHARED_ZEROS.get(key)
    if z is None:
        z = np.zeros(key[0], dtype=key[1])
        z.flags.writeable = False
        _SHARED_ZEROS[key] = z
        _SHARED_ZERO_IDS.add(id(z))
    return z


def ref_read_step(node, dst, src):
    fail = _guard(node, "reading a reference")
    shared = _SHARED_ZERO_IDS

    def step(s):
        try:
            v = s[src].value
        except Exception as exc:  # noqa: BLE001
            raise fail(exc) from exc
        if v.__class__ is OuterSum:
            v = settle(s[src])
        s[dst] = v.copy() if id(v) in shared else v
    return step


def ref_write_step(node, dst, ref, src):
    fail = _guard(node, "writing a reference")

    def step(s):
        r = s[ref]
        if r.__class__ is not RefValue:
            raise fail(TypeError(f"{value_type_text(r)} is not a reference"))
        r.value = s[src]
        s[dst] = ()
    return step


# sys.getrefcount of an array held only by a reference's `.value` and one local variable
# (the call's argument is the third). Such an array is the reference's own: nothing else can
# see it, so adding into it in place is the same as storing a new sum (CPython's refcount is
# the proof, as numpy's own elision of temporaries relies on). An array that any frame slot,
# tuple, view or earlier `!r` still holds has a higher count and is never mutated.
_REF_OWNED = 3


def _ref_owns(cur, shape, dtype):
    """Whether the reference's value `cur` (the caller's local) is its own array of this shape
    and dtype (this function's parameter is one more reference to it)."""
    return (cur.__class__ is _ndarray and sys.getrefcount(cur) == _REF_OWNED + 1
            and cur.base is None and cur.flags.writeable and cur.flags.c_contiguous
            and cur.shape == shape and cur.dtype == dtype)


# Adding in place pays only for large arrays. `r := !r + g` on float64 vectors, one thread, on
# the shared VM: in place (the ownership check, then np.add(.., out=)) 1.33 us at 8 elements,
# 1.66 us at 1,024, 6.7 us at 16,384, 25.0 us at 65,536; a new sum 0.33, 0.97, 5.8 and 25.1 us
# (numpy's small-block cache makes a small allocation almost free, and the check costs more
# than the add). Below this size accumulate_step stores a new sum; take_accumulate_step still
# scatters in place at any size (its alternative copies the whole array).
IN_PLACE_MIN_SIZE = 1 << 16


def accumulate_step(node, add_node, dst, ref, src, add, never_scalar, overwrite, poison=False):
    """`overwrite`: g has the type of the sum, so adding it to a shared zero tensor is g.
    With `overwrite`, a value of at least IN_PLACE_MIN_SIZE elements that the reference owns
    is added to in place (_ref_owns): a large parameter's gradient reference allocates once
    per program run, not once per use.
    `poison` (debug_alloc): where it would add in place, store a new sum instead and fill the
    released array with NaN (poison_released), so that a wrong ownership check shows up as NaN
    in whatever still held the array instead of as a plausible wrong number."""
    fail = _guard(node, "writing a reference")
    shared = _SHARED_ZERO_IDS

    def step(s):
        r = s[ref]
        if r.__class__ is not RefValue:
            raise fail(TypeError(f"{value_type_text(r)} is not a reference"))
        cur = r.value
        if cur.__class__ is OuterSum:
            cur = settle(r)
        if overwrite:
            if id(cur) in shared:
                r.value = s[src]
                s[dst] = ()
                return
            g = s[src]
            if (g.__class__ is _ndarray and g.size >= IN_PLACE_MIN_SIZE
                    and _ref_owns(cur, g.shape, g.dtype)):
                if poison:
                    r.value = cur + g
                    poison_released(cur)
                else:
                    np.add(cur, g, cur)
                s[dst] = ()
                return
        try:
            v = add(cur, s[src])
        except Exception as exc:  # noqa: BLE001 - reported with the call's text
            raise _op_failure(add_node, exc) from exc
        r.value = v if never_scalar or v.__class__ is _ndarray else _fix_scalar(v)
        s[dst] = ()
    return step


def take_accumulate_step(node, dst, ref, gs, ids, axis, poison=False):
    """`r := !r + take_backward(g, idx, like, axis)`: the rows of g are added into the
    reference's value in place when it owns it (_ref_owns), else into a fresh copy (a fresh
    zeros for the shared zero tensor), which the reference then owns: no dense |V| x D gradient
    per embedding lookup, no new sum per accumulation. `poison` (debug_alloc): always into a
    fresh copy, the array the reference owned filled with NaN (see accumulate_step)."""
    fail = _guard(node, "writing a reference")
    shared = _SHARED_ZERO_IDS

    def step(s):
        r = s[ref]
        if r.__class__ is not RefValue:
            raise fail(TypeError(f"{value_type_text(r)} is not a reference"))
        cur, g, idx = r.value, s[gs], s[ids]
        if cur.__class__ is OuterSum:
            cur = settle(r)
        try:
            if poison:
                owned = _ref_owns(cur, cur.shape, cur.dtype)
                old, cur = cur, np.array(cur, dtype=cur.dtype, order="C")
                if owned:
                    poison_released(old)
            elif not _ref_owns(cur, cur.shape, cur.dtype):
                cur = (np.zeros(cur.shape, dtype=cur.dtype) if id(cur) in shared
                       else np.array(cur, dtype=cur.dtype, order="C"))
            if axis is None:
                flat = cur.reshape(-1)
                if idx.ndim == 0:
                    flat[idx] += g
                else:
                    np.add.at(flat, idx.reshape(-1), g.reshape(-1))
            elif axis == 0 and idx.ndim == 0:      # an embedding row: no axis moves
                cur[idx] += g
            else:
                k = idx.ndim
                target = np.moveaxis(cur, axis, 0)
                vals = np.moveaxis(g, tuple(range(axis, axis + k)), tuple(range(k)))
                if k == 0:
                    target[idx] += vals
                else:
                    np.add.at(target, idx, vals)
        except Exception as exc:  # noqa: BLE001 - reported with the accumulation's text
            raise _op_failure(node, exc) from exc
        r.value = cur
        s[dst] = ()
    return step


def poison_released(a):
    """Fill an array nothing should hold any more with NaN (debug_alloc): a floating array
    only; an integer one is left as it is (no NaN to mark it)."""
    if a.dtype.kind in "fc":
        a.fill(np.nan)


def outer_accumulate_step(node, dst, ref, gs, xs):
    """`r := !r + expand_dims(g, axis=-1) * x` (a weight's gradient from one use of a matmul)
    with g, x vectors and the sum of r's type: g and x are recorded on r (deferred.py) and the
    sum of all such terms is one matrix product when r is read. The vectors are held, never
    copied: arrays are values, and the held ones fail _ref_owns, so nothing mutates them."""
    fail = _guard(node, "writing a reference")
    shared = _SHARED_ZERO_IDS

    def step(s):
        r = s[ref]
        if r.__class__ is not RefValue:
            raise fail(TypeError(f"{value_type_text(r)} is not a reference"))
        cur = r.value
        if cur.__class__ is OuterSum:
            cur.gs.append(s[gs])
            cur.xs.append(s[xs])
        else:
            # (computed before the call: an argument list holding cur would raise its count)
            owned = None if id(cur) in shared else _ref_owns(cur, cur.shape, cur.dtype)
            defer_outer(r, cur, s[gs], s[xs], owned)
        s[dst] = ()
    return step


# ConstructorValue's slots, written past its attrs __init__ and setattr hook (the `fields`
# converter copies into a list): the steps build the list themselves. About 1.6 us -> 0.35 us
# a constructor value, and @ad_lift_Tree makes one per tree node.
_set_constructor = ConstructorValue.__dict__["constructor"].__set__
_set_fields = ConstructorValue.__dict__["fields"].__set__


def constructor_step(ctor, dst, srcs):
    if len(srcs) == 2:
        a, b = srcs

        def step(s):
            v = _new_object(ConstructorValue)
            _set_constructor(v, ctor)
            _set_fields(v, [s[a], s[b]])
            s[dst] = v
    elif len(srcs) == 1:
        a, = srcs

        def step(s):
            v = _new_object(ConstructorValue)
            _set_constructor(v, ctor)
            _set_fields(v, [s[a]])
            s[dst] = v
    else:
        def step(s):
            v = _new_object(ConstructorValue)
            _set_constructor(v, ctor)
            _set_fields(v, [s[i] for i in srcs])
            s[dst] = v
    return step


def closure_step(code, dst, srcs):
    if dst in srcs:
        # letrec: `let %f = fn(..) { .. %f(..) .. }` captures itself, so the closure must be in
        # its slot before its environment is read.
        def step(s):
            c = _new_object(InterpreterClosure)
            c.code = code
            s[dst] = c
            c.env = tuple([s[i] for i in srcs])
    elif len(srcs) == 1:
        a, = srcs

        def step(s):
            c = _new_object(InterpreterClosure)
            c.code = code
            c.env = (s[a],)
            s[dst] = c
    elif not srcs:
        def step(s):
            c = _new_object(InterpreterClosure)
            c.code = code
            c.env = ()
            s[dst] = c
    else:
        gather = itemgetter(*srcs)

        def step(s):
            c = _new_object(InterpreterClosure)
            c.code = code
            c.env = gather(s)
            s[dst] = c
    return step
