"""The backward loop's deferred weight gradients (dynamic_defer.settle, dynamic_rows): each
hit's rows are written densely (a counter per hit, advanced only by the steps that make it),
and the sum after the loop is ONE matrix product over the first n rows, n the smallest of
`settle_sizes` holding the hits. Checked against the interpreter on trees whose leaf and node
counts fall on both sides of the sizes' steps, one trace for all of them."""
import os
import sys

import numpy as np
import pytest

import relayish as rl
from relayish.backend.jax.dynamic_defer import SETTLE_CHUNK, settle_sizes

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "examples"))
from treelstm import init_params, random_tree, to_value, treelstm_module  # noqa: E402


@pytest.mark.parametrize("rows", [1, 5, SETTLE_CHUNK, SETTLE_CHUNK + 1, 64, 100, 128, 129,
                                  1024, 100_000])
def test_settle_sizes_cover_every_count_with_at_most_half_again_padding(rows):
    sizes = settle_sizes(rows)
    assert sizes[-1] == rows
    assert sizes == sorted(set(sizes))
    for small, big in zip(sizes, sizes[1:]):
        # a count just past `small` runs a product of `big` rows
        assert big - small <= max(SETTLE_CHUNK, small // 2 + SETTLE_CHUNK)
    assert len(sizes) <= 16 + 30          # a switch of a few dozen products at most


def test_dense_hit_rows_give_the_interpreters_gradient_for_every_tree_size():
    dims = dict(vocab=20, embed=6, hidden=4, classes=3)
    mod = treelstm_module(**dims)
    params = init_params(np.random.default_rng(0), **dims)
    vg = rl.value_and_grad(mod, argnums=tuple(range(7)))
    run = rl.compile(vg, backend="jax", capacity={"nodes": 64})
    rng = np.random.default_rng(2)
    # leaves (the leaf matmul's hits) and leaves - 1 nodes (the node matmul's) on both sides
    # of 8, 16 and 24 rows
    same_as_the_interpreter(run, vg, mod, params, rng, (1, 2, 8, 9, 16, 17, 25, 32),
                            dims["vocab"])
    assert run.trace_count == 1


def same_as_the_interpreter(run, vg, mod, params, rng, sizes, vocab, label=2):
    """The compiled TreeLSTM value and gradients `run` gives on random trees of `sizes` leaves
    agree with the interpreter's run of `vg`."""
    for leaves in sizes:
        tree = to_value(mod, random_tree(rng, leaves, vocab))
        value, grads = run(*params, tree, np.int32(label))
        value_i, grads_i = rl.evaluate(vg, *params, tree, np.int32(label))
        np.testing.assert_allclose(value, value_i, rtol=1e-5)
        for g, gi in zip(grads, grads_i):
            np.testing.assert_allclose(g, gi, rtol=1e-4, atol=1e-6)


# An embedding's gradient through a matmul, `take_backward(matmul(g, W), i, E)`: with W the same
# for every row the loop stores g and settle multiplies once ("scatter_mm"); with W computed in
# the row (here scaled by the leaf's own number) the product stays in the step.
EMBED = """
type T {{ Leaf(int32, float64), Node(T, T) }}

def @f(%E: Tensor[(6, 3), float64], %W: Tensor[(2, 3), float64], %t: T) -> Tensor[(2), float64] {{
  match (%t) {{
    Leaf(%i, %s) => tanh(matmul({weight}, take(%E, %i, axis=0))),
    Node(%l, %r) => {{ let %a = @f(%E, %W, %l); let %b = @f(%E, %W, %r); %a * %b + %a }}
  }}
}}

def @main(%E: Tensor[(6, 3), float64], %W: Tensor[(2, 3), float64], %t: T) -> float64 {{
  sum(@f(%E, %W, %t))
}}
"""


def _tree(mod, rng, leaves):
    leaf, node = mod.get_constructor("Leaf"), mod.get_constructor("Node")
    trees = [rl.ConstructorValue(leaf, [np.int32(rng.integers(6)), np.float64(rng.normal())])
             for _ in range(leaves)]
    while len(trees) > 1:
        k = int(rng.integers(len(trees) - 1))
        trees[k:k + 2] = [rl.ConstructorValue(node, trees[k:k + 2])]
    return trees[0]


@pytest.mark.parametrize("weight", ["%W", "%W * %s"])
def test_an_embeddings_gradient_through_a_matmul(weight):
    from relayish.backend.jax.dynamic_defer import accumulations
    mod = rl.infer_type(rl.parse(EMBED.format(weight=weight)))
    vg = rl.value_and_grad(mod, argnums=(0, 1))
    assert "scatter_mm" in {a.kind for a in accumulations(vg).values() if hasattr(a, "kind")}
    run = rl.compile(vg, backend="jax", capacity={"nodes": 32})
    rng = np.random.default_rng(5)
    E, W = rng.normal(size=(6, 3)), rng.normal(size=(2, 3))
    for leaves in (1, 2, 7, 16):
        tree = _tree(mod, rng, leaves)
        value, grads = run(E, W, tree)
        value_i, grads_i = rl.evaluate(vg, E, W, tree)
        np.testing.assert_allclose(value, value_i, rtol=1e-12)
        for g, gi in zip(grads, grads_i):
            np.testing.assert_allclose(g, gi, rtol=1e-10, atol=1e-12)
    assert run.trace_count == 1
