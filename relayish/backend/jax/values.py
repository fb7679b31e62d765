"""Trace-time values of the jax backend: what a relayish value is while the program is traced.

    Tensor        -> a jax tracer | a numpy array (a trace-time constant)
    (a, b)        -> Python tuple
    Cons(h, t)    -> JAdt (a ConstructorValue) of trace-time values
    fn (...) {..} -> JClosure(function, captured free variables)
    Some (a value) -> JConstructorFn(constructor)
    ref(v)        -> JRef (a mutable Python cell)
    join          -> JUnion(index tracer, alternatives)  (joins.py)

and TailCall, a call in tail position handed back to the caller's trampoline. Every object made
during a trace takes a `serial` from one counter (`next_serial`): a join compares serials to tell
the values built before it (unchanged by it) from those its alternatives built. `Frame` logs the
references one alternative (or one batched call) writes, with their earlier contents, so the next
alternative starts from the same state. `POISON` is the content batching leaves in a reference
it did not compute; reading it raises `Restart` (trace again without batching).

Nothing here imports jax at module import time (`load_jax` does, on first use): importing
relayish must not pay for jax.
"""
from __future__ import annotations

import itertools
import threading

import numpy as np

from relayish.backend.values import ConstructorValue
from relayish.backend.runtime.describe import node_text


def load_jax():
    import jax
    import jax.extend.core  # noqa: F401  jaxpr_as_fun
    return jax


_serials = itertools.count()
_serial_lock = threading.Lock()


def next_serial():
    with _serial_lock:
        return next(_serials)


class JClosure:
    """A function value at trace time: the Function and the values of its free variables."""
    __slots__ = ("func", "env", "name", "serial")

    def __init__(self, func, env, name, serial):
        self.func, self.env, self.name, self.serial = func, env, name, serial


class JConstructorFn:
    """A constructor used as a function value (`map(Some, l)`). (Ops are not values: the type
    checker rejects a bare op, so no trace meets one.)"""
    __slots__ = ("constructor", "serial")

    def __init__(self, constructor):
        self.constructor, self.serial = constructor, -1


class JRef:
    """A reference at trace time: a Python cell holding a trace-time value."""
    __slots__ = ("value", "serial")

    def __init__(self, value, serial):
        self.value, self.serial = value, serial


class JAdt(ConstructorValue):
    """An ADT value at trace time; `serial` tells values built before a join from new ones."""

    def __init__(self, constructor, fields, serial):
        super().__init__(constructor, fields)
        self.serial = serial


class JUnion:
    """One of `alts`, chosen by the traced int32 `index`: the join of values of different shapes.

    `start` is the serial at which the join that made it began: calling a joined closure in tail
    position runs each alternative until it reaches a function older than that, so chains that
    were split by the join meet again.
    """
    __slots__ = ("index", "alts", "start", "serial")

    def __init__(self, index, alts, start, serial):
        self.index, self.alts, self.start, self.serial = index, alts, start, serial


class Indexed:
    """A trace-time value made of a fixed part and tensors: a reference or closure that lives
    in a row of a table inside a loop over dynamic structure (dynamic_loops.py). A join joins
    the `parts()` of values with equal `join_key()` and rebuilds one with `with_parts(parts)`.
    Its serial is -1 (old): a pending tail call of one stops at every join, so the loop that
    owns it continues it."""
    __slots__ = ()
    serial = -1

    def join_key(self):
        raise NotImplementedError

    def parts(self):
        raise NotImplementedError

    def with_parts(self, parts):
        raise NotImplementedError


class TailCall:
    """A call in tail position, returned to the caller's trampoline instead of being made."""
    __slots__ = ("callee", "args")

    def __init__(self, callee, args):
        self.callee, self.args = callee, args


def is_tensor(v):
    return isinstance(v, np.ndarray) or is_jax_value(v)


def is_jax_value(v):
    jax = load_jax()
    return isinstance(v, (jax.Array, jax.core.Tracer))


_ARRAY_CLASS = []


def jax_array_class():
    if not _ARRAY_CLASS:
        _ARRAY_CLASS.append(type(load_jax().numpy.zeros(())))
    return _ARRAY_CLASS[0]


def is_traced(v):
    return isinstance(v, load_jax().core.Tracer)


def serial_of(v):
    return getattr(v, "serial", -1)


def describe(v):
    if isinstance(v, JClosure):
        return f"function {closure_name(v)}"
    if isinstance(v, ConstructorValue):
        return f"constructor {v.constructor.name_hint}"
    if isinstance(v, JRef):
        return "reference"
    if isinstance(v, tuple):
        return f"tuple of {len(v)}"
    if is_tensor(v):
        return f"tensor {tuple(v.shape)} {np.dtype(v.dtype).name}"
    return type(v).__name__


class Frame:
    """The references written inside one alternative of a join, with their earlier contents."""
    __slots__ = ("start", "log", "reads", "finals")

    def __init__(self, start, track_reads=False):
        self.start, self.log = start, {}
        self.reads = set() if track_reads else None
        self.finals = None


def closure_name(closure):
    if closure.name is None:
        closure.name = node_text(closure.func, 60)
    return closure.name


class Restart(Exception):
    """A batched call's accumulated reference was read later: trace again without batching."""


class _Poison:
    """The content of a reference whose value batching did not compute (see batching.py)."""

    def __repr__(self):
        return "<not computed>"


POISON = _Poison()


def is_tensor_tree(v):
    if isinstance(v, tuple):
        return all(is_tensor_tree(x) for x in v)
    return is_tensor(v)


def same_tree_type(a, b):
    if isinstance(a, tuple):
        return isinstance(b, tuple) and len(a) == len(b) and \
            all(same_tree_type(x, y) for x, y in zip(a, b))
    return is_tensor(a) and is_tensor(b) and tuple(np.shape(a)) == tuple(np.shape(b)) and \
        np.dtype(a.dtype) == np.dtype(b.dtype)
