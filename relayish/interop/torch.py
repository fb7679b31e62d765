"""rl.from_torch: a PyTorch module, read through torch.export, as a relayish Module.

    mod = rl.from_torch(module, example_inputs)    # @main(params..., inputs...)

torch.export traces `module(*example_inputs)` into a graph of ATen operators; each node is
let-bound (named after the graph's node) by one rule per operator in RULES. The module's
parameters become @main's leading parameters, in `module.named_parameters()` order (so
`rl.grad(mod, argnums=range(n))` gives their gradients), whatever order forward uses them
in; a parameter shared by several layers (tied weights) is one parameter, under its first
name, as named_parameters() lists it, and its gradient sums its uses; its buffers (batch norm's running
statistics) become constants; then come the example inputs. Batch norm and dropout read in
eval mode (a module in training mode is a CompileError: export it after `module.eval()`).
An operator with no rule is a CompileError naming it and the line of the module's source.
torch is an optional dependency: imported only here.
"""
from __future__ import annotations

import operator

import numpy as np

from relayish.errors import CompileError
from relayish.ir.expr import Constant, Function, Tuple, TupleGetItem, Var
from relayish.ir.module import Module
from relayish.ir.types import TensorType
from relayish.ir.typecheck import infer_type
from relayish.ops import api as rop
from relayish.interop.trees import LetChain, rule_registrar


def from_torch(module, example_inputs):
    """A relayish Module computing `module(*example_inputs)` (see the module docstring).

    >>> mod = rl.from_torch(torch.nn.Linear(3, 2), (torch.ones(4, 3),))
    >>> rl.astext(mod)        # def @main(%weight: Tensor[(2, 3), float32], %bias: ..., %x ...)
    """
    try:
        import torch
    except ImportError:
        raise CompileError("rl.from_torch needs PyTorch (pip install torch)") from None
    if not isinstance(module, torch.nn.Module):
        raise CompileError(f"rl.from_torch takes a torch.nn.Module, got {type(module).__name__}")
    if not isinstance(example_inputs, tuple):
        example_inputs = (example_inputs,)
    if module.training and any(isinstance(m, (torch.nn.modules.batchnorm._BatchNorm,
                                               torch.nn.Dropout)) for m in module.modules()):
        raise CompileError("rl.from_torch reads batch norm and dropout in eval mode: call "
                           "module.eval() first")
    try:
        exported = torch.export.export(module, example_inputs)
    except Exception as error:             # noqa: BLE001  torch's many export failures
        raise CompileError(f"torch.export could not trace the module: "
                           f"{type(error).__name__}: {error}") from None
    return _GraphReader(module, exported).module()


def _tensor_type(value) -> TensorType:
    return TensorType(tuple(int(d) for d in value.shape),
                      str(value.dtype).replace("torch.", ""))


def _numpy(tensor):
    return tensor.detach().cpu().numpy().copy()


class _GraphReader:
    def __init__(self, module, exported):
        self.module_ = module
        self.exported = exported
        self.env = {}

    def module(self):
        import torch
        sig = self.exported.graph_signature
        state = self.exported.state_dict
        constants = getattr(self.exported, "constants", {})
        # @main's parameters: named_parameters() (each parameter once, a tied one under its
        # first name); the graph's placeholder for any name a parameter has reads its Var
        params = [Var(name.replace(".", "_"), _tensor_type(value))
                  for name, value in self.module_.named_parameters()]
        by_identity = {id(value): v for (_, value), v in
                       zip(self.module_.named_parameters(), params)}
        inputs = []
        for spec in sig.input_specs:
            kind = spec.kind.name
            placeholder = spec.arg.name
            if kind == "PARAMETER":
                self.env[placeholder] = by_identity[id(self.module_.get_parameter(spec.target))]
            elif kind in ("BUFFER", "CONSTANT_TENSOR"):
                value = state.get(spec.target, constants.get(spec.target))
                self.env[placeholder] = Constant(_numpy(value))
            elif kind == "USER_INPUT":
                inputs.append(placeholder)
            else:
                raise CompileError(f"rl.from_torch: an exported input of kind {kind}")
        nodes = {n.name: n for n in self.exported.graph.nodes}
        for name in inputs:
            node = nodes[name]
            if not isinstance(node.meta.get("val"), torch.Tensor):
                raise CompileError(f"rl.from_torch: input {name} is not a tensor")
            v = Var(name, _tensor_type(node.meta["val"]))
            self.env[name] = v
            params.append(v)
        scope = LetChain()
        result = None
        for node in self.exported.graph.nodes:
            if node.op == "call_function":
                self.env[node.name] = scope.bind(node.name, self.call(scope, node))
            elif node.op == "output":
                outs = [self.read(a) for a in node.args[0]]
                result = outs[0] if len(outs) == 1 else Tuple(outs)
            elif node.op != "placeholder":
                raise CompileError(f"rl.from_torch: a graph node of kind {node.op}")
        mod = Module()
        mod["main"] = Function(params, scope.close(result))
        return infer_type(mod)

    def read(self, arg):
        import torch.fx
        if isinstance(arg, torch.fx.Node):
            return self.env[arg.name]
        if isinstance(arg, (list, tuple)):
            return [self.read(a) for a in arg]
        return arg

    def call(self, scope, node):
        if node.target is operator.getitem:
            value, k = node.args
            return TupleGetItem(self.read(value), k)
        name = getattr(getattr(node.target, "overloadpacket", None), "__name__", None)
        rule = RULES.get(name)
        if rule is None:
            raise CompileError(f"rl.from_torch: ATen operator '{node.target}' has no relayish "
                               f"rule yet (at {_source(node)})")
        try:
            return rule(_Node(node, self))
        except CompileError as error:
            raise CompileError(f"{error} (at {_source(node)})") from None


def _source(node) -> str:
    trace = node.meta.get("stack_trace") or ""
    lines = [line.strip() for line in trace.strip().splitlines() if line.strip()]
    frames = [line for line in lines if line.startswith("File ")]
    return frames[-1] if frames else f"node {node.name}"


class _Node:
    """What a rule reads of one graph node: its arguments (relayish expressions), Python
    options, and the shapes and dtypes torch recorded."""

    def __init__(self, node, reader):
        self.node = node
        self.args = [reader.read(a) for a in node.args]
        self.kwargs = {k: reader.read(v) for k, v in node.kwargs.items()}

    def arg(self, k, name, default=None):
        if k < len(self.args):
            return self.args[k]
        return self.kwargs.get(name, default)

    def shape(self, arg=None):
        val = (arg if arg is not None else self.node).meta["val"]
        return tuple(int(d) for d in val.shape)

    def in_shape(self, k=0):
        return self.shape(self.node.args[k])

    @property
    def dtype(self):
        return str(self.node.meta["val"].dtype).replace("torch.", "")

    def scalar(self, value):
        return Constant(np.asarray(value, dtype=self.dtype))

    def value(self, k, name=None, default=None):
        """A tensor argument, or a Python number as a constant of the result's dtype."""
        v = self.arg(k, name, default)
        return v if not isinstance(v, (int, float, bool)) else self.scalar(v)


RULES = {}
_rule = rule_registrar(RULES)


for _name, _fn in {"relu": rop.relu, "tanh": rop.tanh, "sigmoid": rop.sigmoid, "exp": rop.exp,
                   "log": rop.log, "sin": rop.sin, "cos": rop.cos, "sqrt": rop.sqrt,
                   "abs": rop.abs, "neg": rop.negative, "erf": rop.erf}.items():
    RULES[_name] = (lambda fn: lambda n: fn(n.args[0]))(_fn)


@_rule("add", "sub")
def _add(n):
    a, b = n.value(0), n.value(1)
    alpha = n.arg(2, "alpha", 1)
    if alpha != 1:
        b = rop.multiply(b, n.scalar(alpha))
    return rop.add(a, b) if n.node.target.overloadpacket.__name__ == "add" else rop.subtract(a, b)


@_rule("rsub")
def _rsub(n):
    return rop.subtract(n.value(1), n.value(0))


@_rule("mul")
def _mul(n):
    return rop.multiply(n.value(0), n.value(1))


@_rule("div")
def _div(n):
    if n.kwargs.get("rounding_mode"):
        raise CompileError("rl.from_torch: division with a rounding mode")
    return rop.divide(n.value(0), n.value(1))


@_rule("pow")
def _pow(n):
    exponent = n.arg(1, "exponent")
    if exponent == 2:
        return rop.multiply(n.args[0], n.args[0])
    return rop.power(n.value(0), n.value(1))


@_rule("gelu")
def _gelu(n):
    x = n.args[0]
    if n.kwargs.get("approximate", n.arg(1, "approximate", "none")) == "tanh":
        inner = rop.multiply(n.scalar(np.sqrt(2 / np.pi)),
                             rop.add(x, rop.multiply(n.scalar(0.044715),
                                                     rop.multiply(x, rop.multiply(x, x)))))
        return rop.multiply(rop.multiply(n.scalar(0.5), x), rop.add(n.scalar(1), rop.tanh(inner)))
    return rop.multiply(rop.multiply(n.scalar(0.5), x),
                        rop.add(n.scalar(1), rop.erf(rop.divide(x, n.scalar(np.sqrt(2.0))))))


@_rule("silu")
def _silu(n):
    return rop.multiply(n.args[0], rop.sigmoid(n.args[0]))


@_rule("softmax", "_softmax")
def _softmax(n):
    return rop.softmax(n.args[0], axis=int(n.args[1]))


@_rule("log_softmax", "_log_softmax")
def _log_softmax(n):
    return rop.log_softmax(n.args[0], axis=int(n.args[1]))


@_rule("linear")
def _linear(n):
    x, w = n.args[0], n.args[1]
    b = n.arg(2, "bias")
    y = rop.matmul(x, rop.transpose(w, (1, 0)))
    return y if b is None else rop.add(y, b)


@_rule("addmm")
def _addmm(n):
    return rop.add(n.args[0], rop.matmul(n.args[1], n.args[2]))


@_rule("matmul", "mm", "bmm")
def _matmul(n):
    return rop.matmul(n.args[0], n.args[1])


def _pair(v):
    return (int(v), int(v)) if isinstance(v, int) else tuple(int(a) for a in v) * (
        2 if len(v) == 1 else 1)


@_rule("conv2d")
def _conv2d(n):
    x, w = n.args[0], n.args[1]
    b = n.arg(2, "bias")
    strides = _pair(n.arg(3, "stride", 1))
    padding = n.arg(4, "padding", 0)
    if isinstance(padding, str):
        raise CompileError("rl.from_torch: conv2d with padding given as a string")
    y = rop.nn.conv2d(x, w, strides=strides, padding=_pair(padding),
                      dilation=_pair(n.arg(5, "dilation", 1)), groups=int(n.arg(6, "groups", 1)))
    if b is None:
        return y
    return rop.add(y, rop.reshape(b, (1, n.in_shape(1)[0], 1, 1)))


@_rule("max_pool2d")
def _max_pool2d(n):
    kernel = _pair(n.arg(1, "kernel_size"))
    stride = n.arg(2, "stride", None) or kernel
    return rop.nn.max_pool2d(n.args[0], pool_size=kernel, strides=_pair(stride),
                             padding=_pair(n.arg(3, "padding", 0)),
                             dilation=_pair(n.arg(4, "dilation", 1)),
                             ceil_mode=bool(n.arg(5, "ceil_mode", False)))


@_rule("avg_pool2d")
def _avg_pool2d(n):
    kernel = _pair(n.arg(1, "kernel_size"))
    stride = n.arg(2, "stride", None) or kernel
    return rop.nn.avg_pool2d(n.args[0], pool_size=kernel, strides=_pair(stride),
                             padding=_pair(n.arg(3, "padding", 0)),
                             ceil_mode=bool(n.arg(4, "ceil_mode", False)),
                             count_include_pad=bool(n.arg(5, "count_include_pad", True)))


@_rule("adaptive_avg_pool2d")
def _adaptive_avg_pool2d(n):
    if tuple(_pair(n.args[1])) != (1, 1):
        raise CompileError("rl.from_torch: adaptive_avg_pool2d to a size other than 1x1")
    return rop.nn.global_avg_pool2d(n.args[0])


@_rule("batch_norm", "_native_batch_norm_legit_no_training")
def _batch_norm(n):
    x, w, b, mean, var = n.args[:5]
    name = n.node.target.overloadpacket.__name__
    if name == "batch_norm" and n.args[5]:
        raise CompileError("rl.from_torch: batch norm in training mode (call module.eval())")
    eps = float(n.args[7] if name == "batch_norm" else n.args[6])
    rank = len(n.in_shape(0))
    c = n.in_shape(0)[1]
    shape = (1, c) + (1,) * (rank - 2)
    scale = rop.divide(n.scalar(1), rop.sqrt(rop.add(var, n.scalar(eps))))
    if w is not None:
        scale = rop.multiply(scale, w)
    y = rop.multiply(rop.subtract(x, rop.reshape(mean, shape)), rop.reshape(scale, shape))
    if b is not None:
        y = rop.add(y, rop.reshape(b, shape))
    return y if name == "batch_norm" else Tuple([y, mean, var])


@_rule("layer_norm")
def _layer_norm(n):
    x, normalized = n.args[0], n.args[1]
    w, b = n.arg(2, "weight"), n.arg(3, "bias")
    eps = float(n.arg(4, "eps", 1e-5))
    rank = len(n.in_shape(0))
    axes = tuple(range(rank - len(normalized), rank))
    mu = rop.mean(x, axis=axes, keepdims=True)
    centered = rop.subtract(x, mu)
    var = rop.mean(rop.multiply(centered, centered), axis=axes, keepdims=True)
    y = rop.divide(centered, rop.sqrt(rop.add(var, n.scalar(eps))))
    if w is not None:
        y = rop.multiply(y, w)
    return y if b is None else rop.add(y, b)


@_rule("embedding")
def _embedding(n):
    return rop.take(n.args[0], n.args[1], axis=0)


@_rule("lstm_cell")
def _lstm_cell(n):
    x, (h, c), w_ih, w_hh = n.args[0], n.args[1], n.args[2], n.args[3]
    b_ih, b_hh = n.arg(4, "b_ih"), n.arg(5, "b_hh")
    gates = rop.add(rop.matmul(x, rop.transpose(w_ih, (1, 0))),
                    rop.matmul(h, rop.transpose(w_hh, (1, 0))))
    for bias in (b_ih, b_hh):
        if bias is not None:
            gates = rop.add(gates, bias)
    i, f, g, o = (TupleGetItem(rop.split(gates, 4, axis=1), k) for k in range(4))
    c2 = rop.add(rop.multiply(rop.sigmoid(f), c), rop.multiply(rop.sigmoid(i), rop.tanh(g)))
    return Tuple([rop.multiply(rop.sigmoid(o), rop.tanh(c2)), c2])


def _reduction(fn, n):
    x = n.args[0]
    dims = n.arg(1, "dim", None)
    keepdim = bool(n.arg(2, "keepdim", False))
    if dims is None or dims == []:
        return fn(x)
    axes = (int(dims),) if isinstance(dims, int) else tuple(int(d) for d in dims)
    return fn(x, axis=axes, keepdims=keepdim)


for _name, _fn in {"sum": rop.sum, "mean": rop.mean, "amax": rop.max, "amin": rop.min}.items():
    RULES[_name] = (lambda fn: lambda n: _reduction(fn, n))(_fn)


@_rule("max", "min")
def _max(n):
    if len(n.args) > 1:
        raise CompileError("rl.from_torch: max/min along a dimension (values and indices); "
                           "use amax/amin")
    return (rop.max if n.node.target.overloadpacket.__name__ == "max" else rop.min)(n.args[0])


@_rule("view", "reshape", "_unsafe_view", "flatten", "unflatten", "squeeze", "unsqueeze",
       "expand_dims")
def _reshape(n):
    if n.in_shape(0) == n.shape():
        return n.args[0]
    return rop.reshape(n.args[0], n.shape())


@_rule("permute")
def _permute(n):
    return rop.transpose(n.args[0], tuple(int(d) for d in n.args[1]))


@_rule("t", "transpose", "numpy_T")
def _transpose(n):
    rank = len(n.in_shape(0))
    if rank < 2:
        return n.args[0]
    perm = list(range(rank))
    a, b = (n.args[1], n.args[2]) if len(n.args) > 2 else (0, 1)
    perm[int(a)], perm[int(b)] = perm[int(b)], perm[int(a)]
    return rop.transpose(n.args[0], tuple(perm))


@_rule("expand", "broadcast_to")
def _expand(n):
    return rop.broadcast_to(n.args[0], n.shape())


@_rule("contiguous", "clone", "alias", "detach", "lift_fresh_copy", "dropout", "_to_copy",
       "to")
def _identity(n):
    if n.node.target.overloadpacket.__name__ in ("_to_copy", "to"):
        source = str(n.node.args[0].meta["val"].dtype).replace("torch.", "")
        return n.args[0] if source == n.dtype else rop.cast(n.args[0], n.dtype)
    return n.args[0]


@_rule("cat", "concat")
def _cat(n):
    return rop.concatenate(Tuple(list(n.args[0])), axis=int(n.arg(1, "dim", 0)))


@_rule("stack")
def _stack(n):
    return rop.stack(Tuple(list(n.args[0])), axis=int(n.arg(1, "dim", 0)))


@_rule("slice")
def _slice(n):
    shape = n.in_shape(0)
    dim = int(n.arg(1, "dim", 0)) % len(shape)
    start = n.arg(2, "start", 0) or 0
    end = n.arg(3, "end", None)
    step = int(n.arg(4, "step", 1))
    start, end, _ = slice(start, end).indices(shape[dim])
    begin, stop = [0] * len(shape), list(shape)
    begin[dim], stop[dim] = start, max(start, end)
    x = rop.strided_slice(n.args[0], tuple(begin), tuple(stop))
    if step != 1:
        x = rop.take(x, Constant(np.arange(0, stop[dim] - start, step, dtype="int32")), axis=dim)
    return x


@_rule("select")
def _select(n):
    shape = n.in_shape(0)
    dim = int(n.args[1]) % len(shape)
    index = int(n.args[2]) % shape[dim]
    return rop.take(n.args[0], Constant(np.asarray(index, dtype="int32")), axis=dim)
