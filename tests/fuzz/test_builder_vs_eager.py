"""Differential fuzzing (issue 25): one random computation written twice, with the Python builder
(rl.var, operators, rl.<op>) and recorded by relayish.eager (re.tensor, the same operators and
re.<op>), gives the same value and the same gradients.

A drawn computation is a tree over three float64 inputs of shapes (2, 3), (3,) and () (so the
binary ops broadcast): elementwise ops (+ - * maximum minimum, a guarded division), bounded unary
ops (tanh sin sigmoid negative square), sum over the leading axis, and `call` nodes whose
subtree is a relayish Function that eager embeds with re.call (its gradient flows through the
embedded program). The builder's program runs on the interpreter (rl.evaluate of rl.grad), the
eager one through its recorder. Counts: fuzzing.EXAMPLES["builder_vs_eager"].
"""
import numpy as np
import pytest
from hypothesis import find, given, settings, strategies as st

import relayish as rl
from relayish import eager as re
from fuzzing import fuzz_settings

SHAPES = {"a": (2, 3), "b": (3,), "c": ()}
BINARY = ("add", "subtract", "multiply", "maximum", "minimum", "guarded_divide")
UNARY = ("tanh", "sin", "sigmoid", "negative", "square", "sum0")


def _broadcast(s, t):
    return s if len(s) >= len(t) else t


def _shape(tree):
    """The shape of a tree's value (a loop: trees nest)."""
    kind = tree[0]
    if kind == "leaf":
        return SHAPES[tree[1]]
    if kind in BINARY:
        return _broadcast(_shape(tree[1]), _shape(tree[2]))
    if kind == "sum0":
        return _shape(tree[1])[1:]
    return _shape(tree[1])


def trees():
    leaves = st.sampled_from(sorted(SHAPES)).map(lambda n: ("leaf", n))

    def extend(children):
        return st.one_of(
            st.tuples(st.sampled_from(BINARY), children, children),
            st.tuples(st.sampled_from(UNARY), children),
            st.tuples(st.just("call"), children))
    return st.recursive(leaves, extend, max_leaves=8).filter(
        lambda t: all(_shape(s) != () or k != "sum0" for k, s in _subtrees(t)))


def _subtrees(tree):
    stack = [tree]
    while stack:
        t = stack.pop()
        if t[0] != "leaf":
            for child in t[1:]:
                yield t[0], child
                stack.append(child)


# ---- the two writings of one tree ---------------------------------------------------------------

def _apply(kind, args, lib):
    """One node on builder expressions (lib = rl) or eager tensors (lib = re)."""
    if kind in ("add", "subtract", "multiply"):
        x, y = args
        return {"add": lambda: x + y, "subtract": lambda: x - y, "multiply": lambda: x * y}[kind]()
    if kind in ("maximum", "minimum"):
        return getattr(lib, kind)(*args)
    if kind == "guarded_divide":           # x / (1 + y^2): defined everywhere
        x, y = args
        return x / (y * y + 1.0)
    (x,) = args
    if kind == "negative":
        return -x
    if kind == "square":
        return x * x
    if kind == "sum0":
        return lib.sum(x, axis=0) if lib is rl else x.sum(axis=0)
    return getattr(lib, kind)(x)


def builder(tree, env):
    """The tree as a builder expression over env's Vars."""
    if tree[0] == "leaf":
        return env[tree[1]]
    if tree[0] == "call":
        params = [rl.var(n, shape=SHAPES[n], dtype="float64") for n in sorted(SHAPES)]
        inner = rl.Function(params, builder(tree[1], dict(zip(sorted(SHAPES), params))))
        return inner(*[env[n] for n in sorted(SHAPES)])
    return _apply(tree[0], [builder(c, env) for c in tree[1:]], rl)


def recorded(tree, tensors):
    """The tree recorded by relayish.eager over `tensors`; a `call` embeds the builder's
    Function of its subtree with re.call."""
    if tree[0] == "leaf":
        return tensors[tree[1]]
    if tree[0] == "call":
        params = [rl.var(n, shape=SHAPES[n], dtype="float64") for n in sorted(SHAPES)]
        inner = rl.Function(params, builder(tree[1], dict(zip(sorted(SHAPES), params))))
        return re.call(inner, *[tensors[n] for n in sorted(SHAPES)])
    return _apply(tree[0], [recorded(c, tensors) for c in tree[1:]], re)


def _inputs(seed):
    rng = np.random.default_rng(seed)
    return {n: rng.normal(size=s) for n, s in SHAPES.items()}


def _total(value, lib):
    """The scalar a tree's value is reduced to (its sum; a scalar stays)."""
    return value if lib is None else (rl.sum(value) if lib is rl else value.sum())


@fuzz_settings("builder_vs_eager")
@given(tree=trees(), seed=st.integers(0, 2**16))
def test_builder_program_and_eager_recording_agree(tree, seed):
    data = _inputs(seed)
    names = sorted(SHAPES)
    env = {n: rl.var(n, shape=SHAPES[n], dtype="float64") for n in names}
    f = rl.Function([env[n] for n in names], _total(builder(tree, env), rl))
    args = [data[n] for n in names]
    value = rl.evaluate(f, *args)
    grads = rl.evaluate(rl.grad(f, argnums=(0, 1, 2)), *args)

    tensors = {n: re.tensor(data[n], requires_grad=True) for n in names}
    y = _total(recorded(tree, tensors), re)
    np.testing.assert_allclose(float(y), float(value), rtol=1e-10, atol=1e-12)
    eager_grads = re.grad(y, wrt=[tensors[n] for n in names])
    for n, want, got in zip(names, grads, eager_grads):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-9, atol=1e-12,
                                   err_msg=f"d/d{n} of {tree}")


@pytest.mark.parametrize("kind", BINARY + UNARY + ("call",))
def test_the_generator_draws_every_kind(kind):
    # the strategy reaches each op (broadcasting: every binary op meets mixed shapes) and
    # embedded calls
    found = find(trees(), lambda t: any(k == kind for k, _ in _subtrees(t)),
                 settings=settings(database=None, max_examples=2000))
    assert any(k == kind for k, _ in _subtrees(found))


@pytest.mark.parametrize("tree", [
    ("maximum", ("leaf", "a"), ("leaf", "b")),
    ("call", ("guarded_divide", ("sum0", ("leaf", "a")), ("tanh", ("leaf", "c")))),
    ("multiply", ("call", ("sin", ("leaf", "b"))), ("square", ("leaf", "a"))),
])
def test_chosen_programs_agree(tree):
    test_builder_program_and_eager_recording_agree.hypothesis.inner_test(tree=tree, seed=3)
