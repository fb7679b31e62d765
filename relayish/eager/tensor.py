"""The recorded tensor: a handle on a node of the recorded program.

Operators and methods record bindings (graph.py); inspecting (`float(t)`, `np.asarray(t)`,
`bool(t)`, `t.item()`, `print(t)`) runs the pending program first (runner.py). The infix and
prefix operators come from the op records' `infix`/`prefix` symbols; Python's `@` and `**`
have no symbol in the text format, so they are the two named here. The methods (`t.exp()`,
`t.sum(axis=0)`, `t.T`, `t.reshape(2, -1)`, `abs(t)`) are installed by ops.py and indexing
(`t[1:, 0]`) by indexing.py, which build on `re.<op>`.

    w = re.tensor(np.ones((3, 2)), requires_grad=True)
    y = re.tanh(re.tensor(np.arange(3.0)) @ w).sum()
    float(y)
"""
from __future__ import annotations

import numpy as np

from relayish.errors import RelayishError
from relayish.eager import graph
from relayish.eager.graph import frozen, leaf, record_error, record_op
from relayish.eager.runner import run_node
from relayish.ir.expr import as_expr, describe
from relayish.ir.op import get_op, list_ops
from relayish.ir.types import TensorType, TupleType, normalize_dtype, type_text

# Python's binary-operator method names for the text format's infix symbols (the ops come
# from the records), and the three Python operators the text format writes as calls.
_PYTHON_BINARY = {"+": "add", "-": "sub", "*": "mul", "/": "truediv", "<": "lt", ">": "gt",
                  "<=": "le", ">=": "ge", "==": "eq", "!=": "ne"}
_REFLECTED = {"<": ">", ">": "<", "<=": ">=", ">=": "<=", "==": "==", "!=": "!="}
_PYTHON_ONLY = {"matmul": "matmul", "pow": "power"}


_new_object = object.__new__


class Tensor:
    """A recorded value: its `shape`/`dtype` are known at once, its data when inspected."""
    __slots__ = ("node", "__weakref__")
    __array_ufunc__ = None        # `np_array * t` records (t.__rmul__), never loops in numpy

    def __init__(self, node):
        self.node = node
        node.handles += 1

    def __del__(self):
        # the node stops being an output of the pending program once no handle is left
        self.node.handles -= 1

    # ---- static facts ---------------------------------------------------------------------
    @property
    def type(self):
        return self.node.type

    @property
    def shape(self) -> tuple:
        return tuple(self._tensor_type().shape)

    @property
    def dtype(self) -> str:
        return self._tensor_type().dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def requires_grad(self) -> bool:
        return self.node.requires_grad

    @property
    def is_leaf(self) -> bool:
        """A leaf of gradients, as PyTorch's: made by re.tensor, updated in place under
        re.no_grad(), or not requiring gradients (by convention, whether or not it has run)."""
        return not self.node.requires_grad or graph.is_leaf(self.node)

    @property
    def grad(self):
        """What `backward()` accumulated for this leaf (a recorded tensor), or None."""
        return self.node.grad

    @grad.setter
    def grad(self, value):
        if value is not None and not isinstance(value, Tensor):
            raise record_error(f".grad takes a recorded tensor or None, not "
                               f"{type(value).__name__}", RelayishError)
        if value is not None and value.type != self.node.type:
            raise record_error(f".grad of type {type_text(value.type)} for a tensor of type "
                               f"{type_text(self.node.type)}", RelayishError)
        self.node.grad = value

    def _tensor_type(self) -> TensorType:
        t = self.node.type
        if not isinstance(t, TensorType):
            raise RelayishError(f"a recorded value of type {type_text(t)} is not a tensor")
        return t

    def __len__(self):
        if not self.shape:
            raise RelayishError("len() of a recorded scalar")
        return self.shape[0]

    __hash__ = object.__hash__    # `==` records an op, so identity hashing is said outright

    # ---- inspecting runs the pending program ------------------------------------------------
    def value(self):
        """The computed array (numpy or jax), running the pending program if needed."""
        if self.node.value is None:
            run_node(self.node)
        return self.node.value

    def numpy(self) -> np.ndarray:
        return np.asarray(self.value())

    def __array__(self, dtype=None, copy=None):
        arr = np.asarray(self.value())
        return arr if dtype is None else arr.astype(dtype)

    def item(self):
        value = self.node.value
        arr = np.asarray(value if value is not None else self.value())
        if arr.size != 1:
            raise record_error(f"item() of a tensor of shape {arr.shape}, not one element",
                               RelayishError)
        return arr.item()

    def __float__(self):
        # item(), written out: `float(loss)` is the one inspection of a training step
        value = self.node.value
        arr = np.asarray(value if value is not None else self.value())
        if arr.size != 1:
            return float(self.item())            # its error
        return float(arr.item())

    def __int__(self):
        return int(self.item())

    def __bool__(self):
        return bool(self.item())

    def __index__(self):
        if not self.dtype.startswith(("int", "uint")):
            raise record_error(f"a {self.dtype} tensor used as an index", RelayishError)
        return int(self.item())

    def __repr__(self):
        return f"re.tensor({np.array2string(self.numpy(), separator=', ')}, dtype={self.dtype})"

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    def detach(self):
        """The same value, as a leaf with no derivation (runs the pending program)."""
        return Tensor(leaf(self.value(), self.node.type))

    def requires_grad_(self, flag=True):
        """Mark a leaf as needing gradients (its results then keep their derivation)."""
        if self.node.args is not None:
            raise record_error("requires_grad_() on a recorded result: call it on a leaf "
                               "(re.tensor(...) or t.detach())", RelayishError)
        node = self.node
        st = graph.STATE
        if node.pseg == st.seg_id:
            # the segment read it already: what its bindings require is no longer a function
            # of its key (the walk-free paths of autodiff.py are off for it)
            st.opaque = True
        node.requires_grad = bool(flag)
        return self


def wrap(node):
    """A handle on `node`; a tuple-typed node becomes a Python tuple of field handles."""
    if isinstance(node.type, TupleType):
        return tuple(wrap(graph.record_proj(node, i)) for i in range(len(node.type.fields)))
    return Tensor(node)


def handles(nodes) -> list:
    """`[Tensor(n) for n in nodes]` (the gradients of a re.grad), without a frame each."""
    out = []
    for node in nodes:
        t = _new_object(Tensor)
        t.node = node
        node.handles += 1
        out.append(t)
    return out


def tensor(data, dtype=None, requires_grad=False):
    """`re.tensor(np.ones(3))`, `re.tensor(2.0)` (float32, as rl.const), `re.tensor(jax_array)`:
    a leaf of the recorded program. A numpy array is copied, as `torch.tensor` copies: the
    program runs later, so writing into the array afterwards (a batch buffer refilled each
    step) must not change what was recorded. A jax array is immutable and kept as it is. A
    recorded tensor gives a detached leaf of its value."""
    if data.__class__ is np.ndarray and dtype is None:
        # an array of a (shape, dtype) seen before: its checks passed then (the data of a
        # loop's step, made every iteration); one type object per pair
        t = _ARRAY_TYPES.get((data.shape, data.dtype))
        if t is not None:
            return Tensor(leaf(data.copy(), t, bool(requires_grad)))
    if isinstance(data, Tensor):
        data = data.value()
    if type(data).__module__.startswith(("jax", "jaxlib")) and hasattr(data, "shape"):
        if dtype is not None:
            data = data.astype(normalize_dtype(dtype))
        value = data
    else:
        try:
            value = as_expr(data if dtype is None else np.asarray(data, dtype=dtype)).data
        except RelayishError as e:
            raise record_error(f"re.tensor: {e}", RelayishError) from None
        if isinstance(data, np.ndarray) and np.shares_memory(value, data):
            value = value.copy()
    t = TensorType(tuple(int(d) for d in value.shape), normalize_dtype(value.dtype))
    if data.__class__ is np.ndarray and dtype is None and value.dtype == data.dtype \
            and value.shape == data.shape:
        if len(_ARRAY_TYPES) >= 1024:
            _ARRAY_TYPES.clear()
        _ARRAY_TYPES[data.shape, data.dtype] = t
    return Tensor(leaf(value, t, requires_grad=bool(requires_grad)))


_ARRAY_TYPES: dict = {}      # (shape, numpy dtype) -> TensorType, for re.tensor(array)


def as_node(value, like=None):
    """A recorded tensor's node, or a leaf for a Python number/array (a Python number takes
    the dtype of `like`, as in `x * 2.0`)."""
    if isinstance(value, Tensor):
        return value.node
    if isinstance(value, (int, float, bool)):
        # a Python number's leaf depends only on it and the dtype it takes: made once, so
        # `lr` read by every parameter's update is one argument of the compiled program
        key = (type(value), value, like.type.dtype if like is not None else None)
        if value == 0 and type(value) is float:
            key += (str(value),)             # -0.0 == 0.0, but x * -0.0 is not x * 0.0
        node = _NUMBERS.get(key)
        if node is None:
            if len(_NUMBERS) >= 1024:
                _NUMBERS.clear()
            node = _NUMBERS[key] = leaf(*_as_leaf_data(value, like))
        return node
    if isinstance(value, np.generic):
        # a numpy scalar keeps its own dtype: one leaf per (type, value), as Python numbers
        key = (type(value), value, None)
        node = _NUMBERS.get(key) if value == value and value != 0 else None
        if node is None:
            node = leaf(*_as_leaf_data(value, like))
            if value == value and value != 0:
                if len(_NUMBERS) >= 1024:
                    _NUMBERS.clear()
                _NUMBERS[key] = node
        return node
    if isinstance(value, np.ndarray):
        # the caller's array, read when the program runs (later): a copy, as re.tensor's
        return leaf(*_as_leaf_data(value.copy(), like))
    if isinstance(value, list):
        return leaf(*_as_leaf_data(value, like))
    raise record_error(f"{describe(value)} is not a tensor, a number or an array",
                       RelayishError)


_NUMBERS: dict = {}      # (type, number, dtype taken) -> its leaf


def _as_leaf_data(value, like):
    try:
        data = as_expr(value, like=like.var if like is not None else None).data
    except RelayishError as e:
        raise record_error(f"{e}", RelayishError) from None
    data.flags.writeable = False        # shared between leaves: nobody writes into it
    return data, TensorType(data.shape, normalize_dtype(data.dtype))


def binary(op, a, b, attrs=None, fa=None):
    """Record `op(a, b)` with either side a Python number or array (`attrs`/`fa`: the op's
    default attributes and their frozen form, when the caller made them once)."""
    x = a.node if a.__class__ is Tensor else None
    y = b.node if b.__class__ is Tensor else None
    if x is None:
        x = _operand(a, y)
    if y is None:
        y = _operand(b, x)
    if attrs is None:
        attrs = _attrs(op)
        fa = frozen(attrs)
    return Tensor(record_op(op, [x, y], attrs, fa))


def _operand(value, like):
    """The node of a binary operator's other operand (`like`: the tensor side's node): a
    nonzero Python float or int already seen with that dtype is one lookup (`lr * g`, `d ** 2`
    every step)."""
    cls = value.__class__
    if (cls is float or cls is int) and value and like is not None:
        node = _NUMBERS.get((cls, value, like.type.dtype))
        if node is not None:
            return node
    return as_node(value, like=like)


def _attrs(op, given=None):
    full = {**op.attr_defaults, **(given or {})}
    return op.normalize_attrs(full) if op.normalize_attrs is not None else full


def _binary_methods(op_name, py_name, reflected_name):
    op = get_op(op_name)
    attrs = _attrs(op)          # the same canonical attributes at every call: made once
    fa = frozen(attrs)

    # written out, not a call of binary(): an operator is the most frequent record of a
    # training step, and a Python call is a good part of its cost
    def forward(self, other):
        x = self.node
        y = other.node if other.__class__ is Tensor else _operand(other, x)
        node = record_op(op, [x, y], attrs, fa)
        t = _new_object(Tensor)         # Tensor(node), written out (no __init__ frame)
        t.node = node
        node.handles += 1
        return t

    def reflected(self, other):
        y = self.node
        x = other.node if other.__class__ is Tensor else _operand(other, y)
        node = record_op(op, [x, y], attrs, fa)
        t = _new_object(Tensor)
        t.node = node
        node.handles += 1
        return t
    forward.__name__ = f"__{py_name}__"
    setattr(Tensor, forward.__name__, forward)
    _BINARY[py_name] = (op, attrs, fa)
    if reflected_name is not None:
        reflected.__name__ = f"__{reflected_name}__"
        setattr(Tensor, reflected.__name__, reflected)


_BINARY: dict = {}      # Python's name of a binary operator -> (op, attrs, frozen attrs)


def _install_operators():
    for name in list_ops():
        op = get_op(name)
        if op.infix is not None and op.infix.symbol in _PYTHON_BINARY:
            py = _PYTHON_BINARY[op.infix.symbol]
            mirrored = _REFLECTED.get(op.infix.symbol)
            # a comparison's reflection is the mirrored comparison (5 < t is t > 5), which
            # Python itself calls; arithmetic gets its __r*__ method
            _binary_methods(name, py, None if mirrored else "r" + py)
        if op.prefix == "-":
            Tensor.__neg__ = lambda self, _op=op: Tensor(record_op(_op, [self.node], _attrs(_op)))
    for py, name in _PYTHON_ONLY.items():
        _binary_methods(name, py, "r" + py)


def _inplace(py_name):
    """`t -= x` (and +=, *=, /=): records `t - x` and points the handle `t` at the result, so
    every reference to this Tensor object sees the new value (there are no views to update).
    On a leaf that requires gradients it is allowed under re.no_grad() only, as in PyTorch,
    and the result stays such a leaf (graph.mark_leaf), keeping `.grad`."""
    op, attrs, fa = _BINARY[py_name]
    state = graph.STATE

    def method(self, other):
        node = self.node
        grad_leaf = node.requires_grad and (node.args is None or node.leaf)   # is_leaf
        if grad_leaf and state.grad_enabled:
            raise record_error(f"an in-place __i{py_name}__ on a leaf that requires gradients: "
                               f"update parameters inside `with re.no_grad():`", RelayishError)
        # the operator's record, written out: no handle made for the result only to drop it
        y = other.node if other.__class__ is Tensor else _operand(other, node)
        new = record_op(op, [node, y], attrs, fa)
        if new.type is not node.type and new.type != node.type and \
                new.type.__class__ is TensorType and new.type.shape == node.type.shape and \
                graph.category(new.type.dtype) <= graph.category(node.type.dtype):
            # PyTorch keeps an in-place result in the tensor's dtype where the promoted
            # one is not of a higher category (`w32 -= g64`)
            new = graph.record_cast(new, node.type.dtype)
        if new.type is not node.type and new.type != node.type:
            raise record_error(f"an in-place __i{py_name}__ would change the tensor's type from "
                               f"{type_text(node.type)} to {type_text(new.type)}",
                               RelayishError)
        new.grad = node.grad         # .grad is the tensor's (a leaf's), whatever its flag
        if grad_leaf:
            graph.mark_leaf(new)
            # what was recorded from the old value still sends its gradient to this tensor
            # (PyTorch: one tensor, one .grad, whichever version a use read)
            node.successor = new
        new.handles += 1
        node.handles -= 1
        self.node = new
        return self
    method.__name__ = f"__i{py_name}__"
    return method


_install_operators()
for _name in ("add", "sub", "mul", "truediv", "matmul"):
    setattr(Tensor, f"__i{_name}__", _inplace(_name))
