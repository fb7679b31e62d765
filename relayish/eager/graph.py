"""The recorded graph: nodes, the recorder's state, and recording one binding.

Contract. Every operation on recorded tensors appends one `Node` (an SSA binding) whose
arguments are earlier nodes, so creation order (`serial`) is a topological order. A node is

* a leaf: `value` set, `args` None (an input array, a Python scalar, a computed result whose
  derivation was dropped);
* pending: `value` None, `args` set (recorded, not yet run);
* kept: `value` maybe set and `args` set: a result recorded with gradients kept
  (`requires_grad`), whose derivation `re.grad` may still walk.

Kinds: "leaf", "op" (`op` an Op, `attrs` its canonical attributes), "call" (`op` a relayish
Function), "tuple", "proj" (`attrs` the field index). Types are checked here, at record time,
with the op's type rule, so a shape mismatch is an error naming the user's Python line.

User handles (`Tensor`, tensor.py) point at nodes; nodes never point at handles. The recorder
keeps a weak set of handles: a node none of whose handles is alive is not an output of the
pending program, so bindings only it needed are never computed (runner.py).
"""
from __future__ import annotations

import contextlib
import itertools
import linecache
import os
import sys
import weakref

from relayish.errors import RelayishError, TypeCheckError
from relayish.ir.expr import Var
from relayish.ir.types import TensorType, TupleType, type_text as type_str

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # relayish/

# A pending program longer than this runs at the next record even when nothing is inspected,
# so a loop that never looks at a value still keeps a bounded graph.
AUTO_RUN_BINDINGS = 10_000


class Node:
    """One binding of the recorded program (see the module docstring)."""
    __slots__ = ("kind", "op", "attrs", "args", "type", "value", "requires_grad", "serial",
                 "shape_key", "mark", "num", "_var", "__weakref__")

    _serials = itertools.count()

    def __init__(self, kind, type_, *, op=None, attrs=None, args=None, value=None,
                 requires_grad=False, frozen_attrs=None):
        self.kind = kind
        self.op = op
        self.attrs = attrs
        self.args = args
        self.type = type_
        self.value = value
        self.requires_grad = requires_grad
        self.serial = next(Node._serials)
        # this binding's part of a program's key
        self.shape_key = (kind, op, frozen(attrs) if frozen_attrs is None else frozen_attrs)
        self.mark = 0        # the last walk (runner.collect) that reached this node
        self.num = 0         # its number in the program being keyed (runner.Program)
        self._var = None

    @property
    def var(self):
        """A Var annotated with this node's type: what an op's api function is traced with."""
        if self._var is None:
            self._var = Var("t", self.type)
        return self._var

    @property
    def pending(self) -> bool:
        return self.value is None


class _State:
    """The recorder's global state (one recorder per process; not thread-safe)."""

    def __init__(self):
        self.grad_enabled = True
        self.handles = weakref.WeakSet()     # every live Tensor
        self.recorded_since_run = 0
        self.auto_run = None                 # runner.run_pending, set by runner.py on import


STATE = _State()


@contextlib.contextmanager
def no_grad():
    """`with re.no_grad(): ...`: results recorded here never need gradients, so once run
    nothing of their derivation is kept (the SGD update of a training loop)."""
    before = STATE.grad_enabled
    STATE.grad_enabled = False
    try:
        yield
    finally:
        STATE.grad_enabled = before


def user_location() -> str:
    """`file:line: source` of the innermost caller outside relayish (the line that recorded)."""
    frame = sys._getframe(1)
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE_DIR):
        frame = frame.f_back
    if frame is None:
        return "<unknown line>"
    filename, line = frame.f_code.co_filename, frame.f_lineno
    source = linecache.getline(filename, line).strip()
    return f"{filename}:{line}: {source}" if source else f"{filename}:{line}"


def record_error(message, cls=TypeCheckError):
    """An error for the binding being recorded, naming the user's Python line."""
    return cls(f"{message}\n  recorded at {user_location()}")


def _after_record():
    STATE.recorded_since_run += 1
    if STATE.recorded_since_run > AUTO_RUN_BINDINGS and STATE.auto_run is not None:
        STATE.auto_run()


def _requires_grad(args) -> bool:
    return STATE.grad_enabled and any(a.requires_grad for a in args)


def frozen(attrs):
    """A hashable form of canonical attributes (lists become tuples, dicts sorted items)."""
    if isinstance(attrs, dict):
        return tuple(sorted((k, frozen(v)) for k, v in attrs.items()))
    if isinstance(attrs, list):
        return tuple(frozen(v) for v in attrs)
    return attrs


# (op, argument types, frozen attrs) -> result type: a training loop records the same few
# calls over and over, and a rule builds shapes and types each time (~5 us); bounded.
_RULE_MEMO: dict = {}
_RULE_MEMO_SIZE = 4096


def record_op(op, args, attrs) -> Node:
    """Record `op(args, **attrs)` (attrs canonical), its type from the op's type rule."""
    arg_types = [a.type for a in args]
    fa = frozen(attrs) if attrs else ()
    try:
        memo_key = (op, *arg_types, fa)
        out = _RULE_MEMO.get(memo_key)
    except TypeError:            # an unhashable attribute: no memo for this call
        memo_key, out = None, None
    if out is None:
        out = _apply_rule(op, arg_types, attrs)
        if memo_key is not None:
            if len(_RULE_MEMO) >= _RULE_MEMO_SIZE:
                _RULE_MEMO.clear()
            _RULE_MEMO[memo_key] = out
    node = Node("op", out, op=op, attrs=attrs, args=list(args),
                requires_grad=_requires_grad(args), frozen_attrs=fa)
    _after_record()
    return node


def _apply_rule(op, arg_types, attrs):
    if op.type_rule is None:
        raise record_error(f"operator '{op.name}' has no type rule")
    try:
        out = op.type_rule(arg_types, dict(attrs))
    except RelayishError as e:
        raise record_error(f"{e}") from None
    except Exception as e:  # noqa: BLE001 - a rule that breaks on odd input is a type error
        shown = ", ".join(type_str(t) for t in arg_types)
        raise record_error(f"operator '{op.name}' cannot take arguments of types ({shown}) "
                           f"({type(e).__name__}: {e})") from None
    if not isinstance(out, (TensorType, TupleType)):
        raise record_error(f"the type rule of operator '{op.name}' returned {out!r}, not a "
                           f"tensor or tuple type")
    return out


def record_tuple(args) -> Node:
    node = Node("tuple", TupleType([a.type for a in args]), args=list(args),
                requires_grad=_requires_grad(args))
    _after_record()
    return node


def record_proj(arg, index) -> Node:
    if not isinstance(arg.type, TupleType) or not 0 <= index < len(arg.type.fields):
        raise record_error(f"field {index} of a value of type {type_str(arg.type)}")
    node = Node("proj", arg.type.fields[index], attrs=index, args=[arg],
                requires_grad=_requires_grad([arg]))
    _after_record()
    return node


def record_call(func, ret_type, args) -> Node:
    """Record a call of the relayish Function `func` (already type-checked: `ret_type`)."""
    node = Node("call", ret_type, op=func, args=list(args), requires_grad=_requires_grad(args))
    _after_record()
    return node


def leaf(value, type_, requires_grad=False) -> Node:
    if not isinstance(type_, TensorType):
        raise RelayishError(f"a recorded leaf is a tensor, not {type_str(type_)}")
    return Node("leaf", type_, value=value, requires_grad=requires_grad)
