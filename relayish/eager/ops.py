"""`re.<op>` for every op of the registry, built from it (nothing listed here).

Each registered op gets a function of the same name (`nn.dense` as `re.nn.dense`). Where
relayish.ops.api has a Python function for the op (`rl.sum(x, axis=None, keepdims=False)`,
`rl.concatenate([a, b], axis=0)`, `rl.take(x, [0, 2])`), the recorded function *traces* it:
the recorded tensors are passed in as Vars, and the expression it returns (op calls, tuples,
constants, projections) is recorded binding by binding. So argument conventions (lists of
tensors, Python index lists, defaults) are the api's, written once. An op without an api
function is called as `re.name(*tensors, **attrs)`.
"""
from __future__ import annotations

import functools
import sys

from relayish.errors import RelayishError
from relayish.eager import graph
from relayish.eager.graph import record_op
from relayish.eager.tensor import Tensor, _attrs, as_node, wrap
from relayish.ir.expr import Call, Constant, Expr, Tuple, TupleGetItem, Var
from relayish.ir.op import Op, get_op, list_ops
from relayish.ir.types import TensorType, normalize_dtype
from relayish.ops import api


def _traced(api_fn, public_name):
    # (number of tensor arguments, keyword arguments) -> (op, attrs, frozen attrs) where
    # tracing showed the api function to be one call of one op on exactly the given tensors,
    # in order: later calls record that op at once (the attributes depend only on the
    # keywords, so the shortcut records what tracing would)
    direct = {}

    @functools.wraps(api_fn)
    def recorded(*args, **kwargs):
        if len(args) == 1 and not kwargs:         # `re.tanh(t)`, `t.mean()`: the usual call
            t = args[0]
            if t.__class__ is Tensor:
                shortcut = direct.get(1)
                if shortcut is not None:
                    node = record_op(shortcut[0], [t.node], shortcut[1], shortcut[2])
                    if node.type.__class__ is not TensorType:
                        return wrap(node)
                    handle = _new_object(Tensor)   # Tensor(node), written out
                    handle.node = node
                    node.handles += 1
                    return handle
        for a in args:
            if a.__class__ is not Tensor:
                shortcut_key = None
                break
        else:
            try:
                shortcut_key = (len(args), tuple(sorted(kwargs.items()))) if kwargs \
                    else len(args)
                shortcut = direct.get(shortcut_key)
            except TypeError:        # an unhashable keyword value: trace
                shortcut_key = shortcut = None
            if shortcut is not None:
                op, attrs, fa = shortcut
                node = graph.record_op(op, [a.node for a in args], attrs, fa)
                return Tensor(node) if node.type.__class__ is TensorType else wrap(node)
        nodes = {}

        def as_input(a):
            if isinstance(a, Tensor):
                nodes[id(a.node.var)] = a.node
                return a.node.var
            if isinstance(a, (list, tuple)) and any(isinstance(x, Tensor) for x in a):
                return [as_input(x) for x in a]
            return a

        try:
            expr = api_fn(*[as_input(a) for a in args],
                          **{k: as_input(v) for k, v in kwargs.items()})
        except RelayishError as e:
            raise graph.record_error(f"re.{public_name}: {e}", type(e)) from None
        node = _record_expr(expr, nodes, public_name)
        if shortcut_key is not None and node.kind == "op" and \
                [a.node for a in args] == [n for n in node.args] and len(direct) < 256:
            direct[shortcut_key] = (node.op, node.attrs, node.shape_key[2])
        return wrap(node)
    recorded.__qualname__ = recorded.__name__ = public_name
    return recorded


def _record_expr(expr, nodes, name):
    """Record the small expression an api function built (its leaves: the traced Vars)."""
    done = {}
    stack = [(expr, False)]
    while stack:       # post-order with an explicit stack
        e, ready = stack.pop()
        if id(e) in done:
            continue
        children = _children(e, nodes, name)
        if not ready:
            stack.append((e, True))
            stack.extend((c, False) for c in children if id(c) not in done)
            continue
        args = [done[id(c)] for c in children]
        if isinstance(e, Var):
            done[id(e)] = nodes[id(e)]
        elif isinstance(e, Constant):
            done[id(e)] = graph.leaf(e.data, TensorType(e.data.shape, normalize_dtype(e.data.dtype)))
        elif isinstance(e, Tuple):
            done[id(e)] = graph.record_tuple(args)
        elif isinstance(e, TupleGetItem):
            done[id(e)] = graph.record_proj(args[0], e.index)
        else:
            done[id(e)] = graph.record_op(e.op, args, dict(e.attrs))
    return done[id(expr)]


def _children(e, nodes, name):
    if isinstance(e, Var):
        if id(e) not in nodes:
            raise graph.record_error(f"re.{name}: internal: an unrecorded variable", RelayishError)
        return []
    if isinstance(e, Constant):
        return []
    if isinstance(e, Tuple):
        return list(e.fields)
    if isinstance(e, TupleGetItem):
        return [e.tuple_value]
    if isinstance(e, Call) and isinstance(e.op, Op):
        return list(e.args)
    raise graph.record_error(f"re.{name}: cannot record {type(e).__name__}", RelayishError)


def _generic(op):
    def recorded(*args, **attrs):
        like = next((a.node for a in args if isinstance(a, Tensor)), None)
        if op.num_inputs >= 0 and len(args) != op.num_inputs:
            raise graph.record_error(f"operator '{op.name}' takes {op.num_inputs} argument(s), "
                                     f"got {len(args)}", RelayishError)
        unknown = sorted(set(attrs) - set(op.attr_defaults))
        if unknown:
            raise graph.record_error(f"operator '{op.name}' has no attribute(s) "
                                     f"{', '.join(unknown)}", RelayishError)
        nodes = [as_node(a, like=like) for a in args]
        return wrap(graph.record_op(op, nodes, _attrs(op, attrs)))
    recorded.__name__ = recorded.__qualname__ = op.name.split(".")[-1]
    recorded.__doc__ = op.doc
    return recorded


_new_object = object.__new__


class _Namespace:
    """`re.nn`: the `nn.` ops under their short names."""


nn = _Namespace()


def _install():
    module = sys.modules[__name__]
    for name in list_ops():
        op = get_op(name)
        space, short = (api.nn, name[3:]) if name.startswith("nn.") else (api, name)
        api_fn = getattr(space, short, None)
        fn = _traced(api_fn, short) if callable(api_fn) and not isinstance(api_fn, Expr) \
            else _generic(op)
        if name.startswith("nn."):
            setattr(nn, short, fn)
        elif "." not in name:
            setattr(module, name, fn)
    # api functions over several ops that are no op themselves (rl.nn.dropout is a projection)
    for short in [n for n in vars(type(api.nn)) if not n.startswith("_")]:
        if not hasattr(nn, short):
            setattr(nn, short, _traced(getattr(api.nn, short), short))


def _method(name):
    """`re.<name>` as a method: the function itself (a plain function binds `self` as its
    first argument; no wrapper's frame on every `t.mean()`)."""
    return getattr(sys.modules[__name__], name)


def _install_methods():
    """Every op as a method of Tensor (`t.exp()`, `t.sum(axis=0)`), and numpy's spellings."""
    for name in list_ops():
        if "." not in name and not hasattr(Tensor, name):
            setattr(Tensor, name, _method(name))
    Tensor.__abs__ = _method("abs")
    Tensor.astype = _method("cast")
    Tensor.T = property(_method("transpose"))
    reshape = _method("reshape")

    def reshape_method(self, *shape):
        """`t.reshape(2, -1)` or `t.reshape((2, -1))`."""
        one = len(shape) == 1 and isinstance(shape[0], (tuple, list))
        return reshape(self, tuple(shape[0] if one else shape))
    Tensor.reshape = reshape_method


def __getattr__(name):
    """An op registered after this module was imported (`re.my_op`), built on first use."""
    try:
        op = get_op(name)
    except RelayishError:
        op = None
    if op is None or "." in name or name.startswith("__"):
        raise AttributeError(f"module 'relayish.eager' has no attribute {name!r}")
    fn = _generic(op)
    setattr(sys.modules[__name__], name, fn)
    return fn


def _op_method(self, name):
    """Tensor.__getattr__: `t.my_op()` for an op registered after import."""
    if name.startswith("_") or "." in name:
        raise AttributeError(f"'Tensor' object has no attribute {name!r}")
    try:
        fn = __getattr__(name)
    except AttributeError:
        raise AttributeError(f"'Tensor' object has no attribute {name!r}") from None
    return functools.partial(fn, self)


_install()
_install_methods()
Tensor.__getattr__ = _op_method
__all__ = [n for n in list_ops() if "." not in n] + ["nn"]
