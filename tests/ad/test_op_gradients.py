"""Every differentiable operator's gradient rule, through rl.gradient, against finite differences
(first order), and the gradient of its gradient (second order: the rules are differentiable)."""
import numpy as np
import pytest

import relayish as rl
from relayish.ir.op import get_op, list_ops
from relayish.ops.layers import col2im, im2col
from adcheck import check_fd

F = "float64"
rng = np.random.default_rng(42)


def u(*shape, lo=-1.0, hi=1.0):
    return rng.uniform(lo, hi, size=shape)


def distinct(*shape):
    """Values far from each other and from 0 (no ties for max/min/abs/relu kinks)."""
    n = int(np.prod(shape)) if shape else 1
    vals = (np.arange(n) + 1.0) * 0.37 * rng.choice([-1.0, 1.0], size=n)
    return rng.permutation(vals).reshape(shape)


WINDOW = dict(strides=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1))


def idx(*v):
    return rl.const(np.array(v, dtype="int32"))


# name -> list of (label, builder(*vars) -> Expr, [input arrays])
SPECS = {
    "abs": [("", lambda x: rl.abs(x), [distinct(3, 4)])],
    "exp": [("", lambda x: rl.exp(x), [u(3, 4)])],
    "log": [("", lambda x: rl.log(x), [u(3, 4, lo=0.5, hi=2.0)])],
    "sin": [("", lambda x: rl.sin(x), [u(3, 4)])],
    "cos": [("", lambda x: rl.cos(x), [u(3, 4)])],
    "tan": [("", lambda x: rl.tan(x), [u(3, 4)])],
    "tanh": [("", lambda x: rl.tanh(x), [u(3, 4)])],
    "sigmoid": [("", lambda x: rl.sigmoid(x), [u(3, 4)])],
    "sqrt": [("", lambda x: rl.sqrt(x), [u(3, 4, lo=0.5, hi=2.0)])],
    "relu": [("", lambda x: rl.relu(x), [distinct(3, 4)])],
    "negative": [("", lambda x: -x, [u(3, 4)])],
    "add": [("bcast", lambda x, y: x + y, [u(3, 4), u(4)])],
    "subtract": [("bcast", lambda x, y: x - y, [u(3, 1), u(1, 4)])],
    "multiply": [("bcast", lambda x, y: x * y, [u(3, 4), u(3, 1)]),
                 ("scalar", lambda x, y: x * y, [u(3, 4), u()])],
    "divide": [("bcast", lambda x, y: x / y, [u(3, 4), u(4, lo=1.0, hi=2.0)])],
    "power": [("", lambda x, y: x ** y, [u(3, 4, lo=0.5, hi=2.0), u(3, 4)])],
    "maximum": [("", lambda x, y: rl.maximum(x, y), [distinct(3, 4), distinct(3, 4) + 0.1])],
    "minimum": [("", lambda x, y: rl.minimum(x, y), [distinct(3, 4), distinct(3, 4) + 0.1])],
    "where": [("", lambda x, y: rl.where(rl.const(np.array([True, False, True, False])), x, y),
               [u(3, 4), u(4)])],
    "sum": [("all", lambda x: rl.sum(x), [u(3, 4)]),
            ("axis", lambda x: rl.sum(x, axis=1), [u(3, 4)]),
            ("keepdims", lambda x: rl.sum(x, axis=0, keepdims=True), [u(3, 4)])],
    "mean": [("all", lambda x: rl.mean(x), [u(3, 4)]),
             ("axis", lambda x: rl.mean(x, axis=-1, keepdims=True), [u(3, 4)])],
    "max": [("all", lambda x: rl.max(x), [distinct(3, 4)]),
            ("axis", lambda x: rl.max(x, axis=1), [distinct(3, 4)])],
    "min": [("all", lambda x: rl.min(x), [distinct(3, 4)]),
            ("axis", lambda x: rl.min(x, axis=0, keepdims=True), [distinct(3, 4)])],
    "matmul": [("2d", lambda x, y: rl.matmul(x, y), [u(3, 4), u(4, 2)]),
               ("1d", lambda x, y: rl.matmul(x, y), [u(4), u(4, 2)]),
               ("batched", lambda x, y: rl.matmul(x, y), [u(2, 3, 4), u(4, 2)]),
               ("mv", lambda x, y: rl.matmul(x, y), [u(3, 4), u(4)]),
               ("dot", lambda x, y: rl.matmul(x, y), [u(4), u(4)])],
    "transpose": [("", lambda x: rl.transpose(x), [u(3, 4)]),
                  ("axes", lambda x: rl.transpose(x, axes=(1, 0, 2)), [u(2, 3, 4)])],
    "reshape": [("", lambda x: rl.reshape(x, (4, 3)), [u(3, 4)]),
                ("minus1", lambda x: rl.reshape(x, (-1,)), [u(3, 4)])],
    "broadcast_to": [("", lambda x: rl.broadcast_to(x, (3, 4)), [u(4)])],
    "zeros_like": [("", lambda x: rl.zeros_like(x) + x * x, [u(3)])],
    "ones_like": [("", lambda x: rl.ones_like(x) * x, [u(3)])],
    "full_like": [("", lambda x: rl.op.full_like(x, 2.0) * x, [u(3)])],
    "zeros": [("", lambda x: rl.zeros((3,), F) + x, [u(3)])],
    "zero_adjoint": [("", lambda x: rl.get_op("zero_adjoint")(shape=(3,), dtype=F) + x, [u(3)])],
    "ones": [("", lambda x: rl.ones((3,), F) * x, [u(3)])],
    "cast": [("f64", lambda x: rl.cast(x, F) * x, [u(3)]),
             ("int", lambda x: rl.cast(rl.cast(x * rl.const(3.0, F), "int32"), F) * x, [u(3)])],
    "cast_like": [("", lambda x, y: rl.op.cast_like(x, y) * y, [u(3), u(3)])],
    "concatenate": [("", lambda x, y: rl.concatenate([x, y * x], axis=1), [u(3, 2), u(3, 2)]),
                    ("axis0", lambda x, y: rl.concatenate([x, y], axis=0), [u(2, 3), u(1, 3)])],
    "stack": [("", lambda x, y: rl.stack([x, y], axis=0), [u(3), u(3)]),
              ("axis1", lambda x, y: rl.stack([x, x * y], axis=1), [u(2, 3), u(2, 3)])],
    "take": [("flat", lambda x: rl.take(x, idx(0, 5, 5, 2)), [u(2, 3)]),
             ("axis", lambda x: rl.take(x, idx(2, 0, 2), axis=1), [u(2, 3)]),
             ("scalar", lambda x: rl.take(x, rl.const(1)), [u(4)])],
    "softmax": [("", lambda x: rl.softmax(x), [u(3, 4)]),
                ("axis0", lambda x: rl.softmax(x, axis=0), [u(3, 4)])],
    "log_softmax": [("", lambda x: rl.log_softmax(x), [u(3, 4)])],
    "collapse_sum_like": [("", lambda x, y: rl.op.collapse_sum_like(x, y) * y,
                           [u(3, 4), u(4)])],
    "broadcast_to_like": [("", lambda x, y: rl.op.broadcast_to_like(x, y) * y, [u(4), u(3, 4)])],
    "reshape_like": [("", lambda x, y: rl.op.reshape_like(x, y) * y, [u(3, 4), u(4, 3)])],
    "expand_dims": [("", lambda x: rl.op.expand_dims(x, 1), [u(3, 4)])],
    "strided_slice": [("", lambda x: rl.op.strided_slice(x, (1, 0), (3, 2)), [u(3, 4)]),
                      ("strides", lambda x: rl.strided_slice(x, (0, 1), (3, 4), (2, 2)),
                       [u(3, 4)])],
    "slice_scatter": [("", lambda g, y: rl.op.slice_scatter(g, y, (1, 0), (3, 2)) * y,
                       [u(2, 2), u(3, 4)]),
                      ("strides", lambda g, y: rl.slice_scatter(g, y, (0, 1), (3, 4), (2, 2)) * y,
                       [u(2, 2), u(3, 4)])],
    "take_backward": [("", lambda g, y: rl.op.take_backward(g, idx(2, 0, 2), y, axis=1) * y,
                       [u(2, 3), u(2, 3)])],
    # Relay's operator set (relayish/ops/layers.py, tensor.py)
    "clip": [("", lambda x: rl.clip(x, -0.5, 0.6), [distinct(3, 4) / 3.0])],
    "cumsum": [("axis", lambda x: rl.cumsum(x, axis=1), [u(3, 4)]),
               ("flat-exclusive", lambda x: rl.cumsum(x, exclusive=True), [u(3, 4)])],
    "erf": [("", lambda x: rl.erf(x), [u(3, 4)])],
    "full": [("", lambda x: rl.full(x, (2, 3)), [u()])],
    "gather": [("", lambda x: rl.gather(x, 1, rl.const(np.array([[2, 0], [1, 1]], "int32"))),
                [u(2, 3)])],
    "scatter_add": [("", lambda x, y: rl.scatter_add(x, rl.const(np.array([[2, 0], [2, 2]], "int32")),
                                                     y * y, axis=1), [u(2, 3), u(2, 2)])],
    "one_hot": [("", lambda on, off: rl.one_hot(idx(2, 0, 1), on, off, 3, dtype=F), [u(), u()])],
    "split": [("", lambda x: rl.split(x, 3, axis=1)[2] * rl.split(x, [1], axis=1)[0], [u(2, 3)])],
    "squeeze": [("", lambda x: rl.squeeze(x, axis=[1]), [u(3, 1, 2)])],
    # issue 29's operators (ops/elementwise.py, special.py, ...)
    "log1p": [("", lambda x: rl.log1p(x), [u(3, 4, lo=-0.5, hi=2.0)])],
    "expm1": [("", lambda x: rl.expm1(x), [u(3, 4)])],
    "softplus": [("", lambda x: rl.softplus(x), [u(3, 4, lo=-3.0, hi=3.0)])],
    "logaddexp": [("bcast", lambda x, y: rl.logaddexp(x, y), [u(3, 4), u(4)])],
    "lgamma": [("", lambda x: rl.lgamma(x), [u(3, 4, lo=0.3, hi=4.0)])],
    "digamma": [("", lambda x: rl.digamma(x), [u(3, 4, lo=0.3, hi=4.0)])],
    "polygamma": [("", lambda x: rl.polygamma(2, x), [u(3, 4, lo=0.5, hi=4.0)])],
    "multigammaln": [("", lambda x: rl.multigammaln(x, 3), [u(3, 4, lo=1.5, hi=4.0)])],
    "logsumexp": [("all", lambda x: rl.logsumexp(x), [u(3, 4)]),
                  ("axis", lambda x: rl.logsumexp(x, axis=1, keepdims=True), [u(3, 4)])],
    "cumprod": [("axis", lambda x: rl.cumprod(x, axis=1), [u(3, 4)]),
                ("flat-exclusive", lambda x: rl.cumprod(x, exclusive=True), [u(2, 3)])],
    "roll": [("", lambda x: rl.roll(x, (1, -2), axis=(0, 1)), [u(3, 4)])],
    "einsum": [("", lambda x, y, z: rl.einsum("ij,jk,ik->k", x, y, z), [u(2, 3), u(3, 4), u(2, 4)]),
               ("summed-alone", lambda x, y: rl.einsum("ij,k->ik", x, y), [u(2, 3), u(4)])],
    "index_update": [("repeated", lambda x, v: rl.index_update(x, idx(2, 0, 2), v * v, axis=1),
                      [u(2, 3), u(2, 3)]),
                     ("bcast", lambda x, v: rl.index_update(x, idx(1), v), [u(3, 2), u(2)])],
    "index_add": [("repeated", lambda x, v: rl.index_add(x, idx(2, 0, 2), v * v, axis=1),
                   [u(2, 3), u(2, 3)])],
    "nn.dense": [("", lambda x, w: rl.nn.dense(x, w), [u(2, 3), u(4, 3)])],
    "nn.bias_add": [("", lambda x, b: rl.nn.bias_add(x, b, axis=1), [u(2, 3, 2), u(3)])],
    "nn.batch_flatten": [("", lambda x: rl.nn.batch_flatten(x) * rl.nn.batch_flatten(x),
                          [u(2, 3, 2)])],
    "nn.conv2d": [("", lambda x, w: rl.nn.conv2d(x, w, strides=(1, 2), padding=(1, 0)),
                   [u(1, 2, 4, 5), u(3, 2, 2, 2)]),
                  ("groups", lambda x, w: rl.nn.conv2d(x, w, groups=2, dilation=(2, 1)),
                   [u(1, 2, 5, 4), u(2, 1, 2, 2)])],
    "nn.max_pool2d": [("", lambda x: rl.nn.max_pool2d(x, pool_size=(2, 2), strides=(2, 1)),
                       [distinct(1, 2, 4, 3)])],
    "nn.avg_pool2d": [("", lambda x: rl.nn.avg_pool2d(x, pool_size=(2, 2), padding=(1, 1)),
                       [u(1, 2, 3, 3)])],
    "nn.global_avg_pool2d": [("", lambda x: rl.nn.global_avg_pool2d(x) * rl.nn.global_avg_pool2d(x),
                              [u(2, 3, 2, 2)])],
    "nn.layer_norm": [("", lambda x, g, b: rl.nn.layer_norm(x, g, b, axis=-1),
                       [u(2, 4), u(4), u(4)])],
    "nn.batch_matmul": [("", lambda x, y: rl.nn.batch_matmul(x, y), [u(2, 3, 4), u(2, 5, 4)])],
    "nn.dropout": [("", lambda x: rl.nn.dropout(x, rate=0.25) * x, [u(2, 3)])],
    "nn.im2col": [("", lambda x: im2col(x, (2, 2), WINDOW), [u(1, 2, 3, 4)])],
    "nn.col2im": [("", lambda c, y: col2im(c, y, (2, 2), WINDOW) * y, [u(1, 2, 2, 2, 2, 3), u(1, 2, 3, 4)])],
}


def program(builder, inputs, weighted=True):
    """fn(x1..xn) { sum(builder(x1..xn) * c) } with a random constant weight c."""
    xs = [rl.var(f"x{i}", shape=a.shape, dtype=F) for i, a in enumerate(inputs)]
    out = builder(*xs)
    shape = rl.evaluate(rl.Function(xs, out), *inputs).shape
    c = rl.const(np.random.default_rng(7).uniform(0.5, 1.5, size=shape))
    return rl.Function(xs, rl.sum(out * c) if weighted else rl.sum(out))


CASES = [pytest.param(name, b, inputs, id=f"{name}-{label}" if label else name)
         for name, specs in SPECS.items() for label, b, inputs in specs]


# the registry as relayish fills it (snapshot at collection, before tests register their own ops);
# an alias (nn.relu for relu) is checked under the op's own name
BUILTIN_OPS = [n for n in list_ops() if get_op(n).differentiable and get_op(n).name == n]


def test_every_differentiable_op_is_covered():
    ops = BUILTIN_OPS
    missing = sorted(set(ops) - set(SPECS))
    assert not missing, f"differentiable ops without a gradient check: {missing}"


@pytest.mark.parametrize("name, builder, inputs", CASES)
def test_first_order(name, builder, inputs):
    check_fd(program(builder, inputs), inputs, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("name, builder, inputs", CASES)
def test_second_order(name, builder, inputs):
    """x -> <grad f(x), d>, differentiated again: every rule's output is differentiable."""
    f = program(builder, inputs)
    xs = [rl.var(f"y{i}", shape=a.shape, dtype=F) for i, a in enumerate(inputs)]
    grads = rl.Call(rl.gradient(f), xs)[1]
    d = np.random.default_rng(11)
    total = None
    for i, a in enumerate(inputs):
        term = rl.sum(grads[i] * rl.const(d.normal(size=a.shape)))
        total = term if total is None else total + term
    check_fd(rl.Function(xs, total), inputs, rtol=1e-5, atol=1e-7)
