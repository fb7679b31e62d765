"""Long ADT values through the jax backend: arguments, results and gradients of 10^3-10^5
element lists are walked by loops (a List of n elements is n levels deep), never by Python
recursion (before: a bare RecursionError from about 500 elements on)."""
import numpy as np

import relayish as rl
from relayish.backend.jax.arguments import build_arg, decode, encode, flatten_arg
from relayish.backend.jax.values import JRef
from relayish.backend.values import ConstructorValue, RefValue


def list_module():
    mod = rl.Module()
    p = rl.Prelude(mod)
    return mod, p, rl.TypeCall(p.List, [rl.TensorType((), "float32")])


def test_codec_of_a_long_list_is_iterative():
    # encode (trace-time result -> descriptor), decode (descriptor -> host value) and the
    # argument rebuild at 3 x 10^4 levels, in the caller's thread (no run_deep stack)
    mod, _, _ = list_module()
    n = 30_000
    items = [np.asarray(i, "float32") for i in range(n)]
    value = rl.list_value(mod, items)
    ref = RefValue((np.asarray(1, "float32"), value))
    leaves = []
    desc = encode((value, JRef(ref.value, -1)), leaves, {})
    assert len(leaves) == 2 * n + 1
    out = decode(desc, leaves, [], None)
    assert isinstance(out, tuple) and isinstance(out[1], RefValue)
    assert [float(v) for v in rl.from_list_value(out[0])] == [float(v) for v in items]
    assert rl.from_list_value(out[1].value[1])[-1] == n - 1

    arg_leaves, key, refs = [], [], []
    tree = flatten_arg(value, arg_leaves, key, refs, {})
    rebuilt = build_arg(tree, arg_leaves, refs)
    assert isinstance(rebuilt, ConstructorValue)
    assert len(rl.from_list_value(rebuilt)) == n


def test_compiled_program_returns_a_long_list():
    mod, p, lt = list_module()
    lst = rl.var("l", type=lt)
    x = rl.var("x", shape=(), dtype="float32")
    mod["main"] = rl.Function([lst, x], p.Cons(x * rl.const(2.0), lst))
    run = rl.compile(mod)
    n = 2000          # 10^4 works too (about 8 s of CPU, mostly XLA with 10^4 parameters)
    out = run(rl.list_value(mod, [np.float32(i) for i in range(n)]), np.float32(3))
    items = rl.from_list_value(out)
    assert len(items) == n + 1
    assert float(items[0]) == 6.0 and float(items[-1]) == n - 1


def test_gradient_with_a_long_list_argument():
    mod, p, lt = list_module()
    lst = rl.var("l", type=lt)
    acc = rl.var("acc", shape=(), dtype="float32")
    h = rl.var("h", shape=(), dtype="float32")
    add = rl.Function([acc, h], acc + h * h)
    mod["main"] = rl.Function([lst], rl.Call(p.foldl, [add, rl.const(0.0), lst]))
    grad = rl.gradient(rl.infer_type(mod))
    n = 600
    items = [np.float32(i % 7) for i in range(n)]
    value, (g,) = rl.compile(grad)(rl.list_value(grad, items))
    assert float(value) == sum(float(v) ** 2 for v in items)
    assert [float(v) for v in rl.from_list_value(g)] == [2 * float(v) for v in items]
