"""rl.vmap over trees on jax (issue 17): each example's tree is a node table, the tables of a
batch are padded to one capacity and stacked, and the fold's loop runs for every example at
once under jax.vmap; values and per-example gradients equal the interpreter's loop."""
import os
import sys

import jax
import numpy as np
import pytest

import relayish as rl
from relayish.errors import EvaluationError

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "examples"))
from treelstm import init_params, random_tree, to_value, treelstm_module  # noqa: E402

DIMS = dict(vocab=20, embed=6, hidden=4, classes=3)


@pytest.fixture(scope="module")
def model():
    mod = treelstm_module(**DIMS)
    params = init_params(np.random.default_rng(0), **DIMS)
    return mod, params


def batch(mod, seed, n, most):
    rng = np.random.default_rng(seed)
    trees = [to_value(mod, random_tree(rng, int(rng.integers(1, most + 1)), DIMS["vocab"]))
             for _ in range(n)]
    return trees, rng.integers(DIMS["classes"], size=n).astype(np.int32)


def close(got, expected, rtol):
    for g, e in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(expected)):
        assert np.shape(g) == np.shape(e)
        np.testing.assert_allclose(np.asarray(g), np.asarray(e), rtol=rtol, atol=1e-6)


def test_a_batch_of_trees_of_every_size_in_one_trace(model):
    mod, params = model
    vf = rl.vmap(mod, in_axes=(None,) * len(params) + (0, 0))
    run = rl.compile(vf)
    # 1 to 9 leaves: trees of 1 to 17 nodes, tables of 16 and 32 rows padded to 32
    trees, ys = batch(mod, 1, 7, 9)
    close(run(*params, trees, ys), rl.evaluate(vf, *params, trees, ys), 1e-5)
    trees, ys = batch(mod, 2, 3, 9)           # another batch size, same capacity: no new trace
    close(run(*params, trees, ys), rl.evaluate(vf, *params, trees, ys), 1e-5)
    assert run.trace_count == 1


def test_per_example_gradients_over_trees(model):
    mod, params = model
    vg = rl.vmap(rl.value_and_grad(mod, argnums=tuple(range(len(params)))),
                 in_axes=(None,) * len(params) + (0, 0))
    run = rl.compile(vg, capacity={"nodes": 16})
    trees, ys = batch(mod, 3, 5, 8)
    got = run(*params, trees, ys)
    assert got[1][0].shape == (5,) + params[0].shape          # one gradient per tree
    close(got, rl.evaluate(vg, *params, trees, ys), 1e-4)


def test_trees_encoded_ahead_give_the_same_result_and_stay_checked(model):
    # a data loader encodes a batch once (and may put it on the device); the call then skips
    # the host encoding, and tables of another capacity are refused, not misread
    mod, params = model
    vf = rl.vmap(mod, in_axes=(None,) * len(params) + (0, 0))
    run = rl.compile(vf, capacity={"nodes": 32})
    trees, ys = batch(mod, 4, 6, 9)
    args = run.encode_batch(*params, trees, ys)
    assert "6 examples, capacity 32" in repr(args[len(params)])
    args[len(params)].leaves[:] = [jax.device_put(x) for x in args[len(params)].leaves]
    close(run(*args), run(*params, trees, ys), 1e-6)
    other = rl.compile(vf, capacity={"nodes": 16}).encode_batch(*params, trees[:1], ys[:1])
    with pytest.raises(EvaluationError, match="capacity"):
        run(*params, other[len(params)], ys[:1])


def test_capacity_is_checked_per_example(model):
    mod, params = model
    vf = rl.vmap(mod, in_axes=(None,) * len(params) + (0, 0))
    run = rl.compile(vf, capacity={"nodes": 16})
    small = to_value(mod, random_tree(np.random.default_rng(0), 3, DIMS["vocab"]))
    big = to_value(mod, random_tree(np.random.default_rng(0), 9, DIMS["vocab"]))   # 17 nodes
    with pytest.raises(EvaluationError, match=r"example 1 of parameter %t of rl.vmap\(@main\) "
                                              r"has 17 nodes, more than the capacity of 16"):
        run(*params, [small, big], np.zeros(2, np.int32))
    with pytest.raises(EvaluationError, match=r"a batched WTree is a Python list of values"):
        run(*params, small, np.zeros(1, np.int32))


def test_one_tree_shared_by_the_batch(model):
    """An unbatched tree is one table given to every example (here the labels are batched)."""
    mod, params = model
    vf = rl.vmap(mod, in_axes=(None,) * len(params) + (None, 0))
    tree = to_value(mod, random_tree(np.random.default_rng(4), 5, DIMS["vocab"]))
    ys = np.arange(3, dtype=np.int32)
    close(rl.compile(vf)(*params, tree, ys), rl.evaluate(vf, *params, tree, ys), 1e-5)


HALVE = """
def @loop(%x: Tensor[(3), float32], %eps: float32) -> Tensor[(3), float32] {
  if (sum(%x * %x) > %eps) { @loop(%x * 0.5f, %eps) } else { %x }
}
def @main(%x: Tensor[(3), float32]) -> Tensor[(3), float32] { @loop(%x, 0.01f) }
"""


def test_a_traced_condition_loop_runs_until_every_example_is_done():
    vf = rl.vmap(rl.infer_type(rl.parse(HALVE)))
    xs = np.array([[0.001] * 3, [1.0] * 3, [10.0] * 3, [1e6] * 3], np.float32)   # 0-27 steps
    run = rl.compile(vf)
    np.testing.assert_allclose(run(xs), rl.evaluate(vf, xs), rtol=1e-6)
    assert run.trace_count == 1
    # a loop's step capacity is checked per example after the batched run
    run = rl.compile(vf, capacity={"steps": 5})
    np.testing.assert_allclose(run(xs[:1]), xs[:1])
    with pytest.raises(EvaluationError, match=r"^example 2 of rl.vmap\(@main\): @loop ran more "
                                              r"than 5 iterations"):
        run(np.array([[0.001] * 3, [0.1] * 3, [1e6] * 3], np.float32))
