"""Fold shapes users write, each ONE compiled loop for every input on the jax backend (issue 17,
brief B): a fold whose base case writes no backpropagator (the row keeps the family's pointer,
dynamic_loops._kept), folds over lists of float vectors under reverse AD (the lifted list),
and left folds (tail recursion with an accumulator). Values and gradients equal the
interpreter's and jax's on a Python twin; trace_count == 1 over inputs of several sizes.
(tests/backend/test_jax_dynamic_rnn.py has the RNN versions of the same shapes.)"""
import jax
import numpy as np

import relayish as rl


def _close(got, expected, rtol=1e-9):
    got, expected = jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(expected)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert np.shape(g) == np.shape(e)
        np.testing.assert_allclose(np.asarray(g), np.asarray(e), rtol=rtol, atol=1e-12)


# ---- 1. base cases that write no backpropagator ---------------------------------------------

# three constructors: Leaf writes no backpropagator, One and Two each write one, so the
# family's content after an iteration is a union of the previous row and two closures (the
# fields are word indices: a tree of tensors is lifted by reverse AD, section 2)
TREE = """
type T { Leaf, One(int32, T), Two(int32, T, T) }
def @f(%E: Tensor[(5, 3), float64], %W: Tensor[(3, 3), float64], %t: T) -> Tensor[(3), float64] {
  match (%t) {
    Leaf => zeros(shape=[3], dtype="float64"),
    One(%w, %c) => { let %a = @f(%E, %W, %c); let %x = take(%E, %w, axis=0); sin(%a) * %x + %x },
    Two(%w, %l, %r) => {
      let %a = @f(%E, %W, %l);
      let %b = @f(%E, %W, %r);
      tanh(matmul(%W, %a + %b * 0.5f64) + take(%E, %w, axis=0))
    }
  }
}
def @main(%E: Tensor[(5, 3), float64], %W: Tensor[(3, 3), float64], %t: T) -> float64 {
  let %h = @f(%E, %W, %t); sum(%h * %h)
}
"""


def _random_tree(rng, n):
    """A nested tuple tree of n inner nodes: ("one", x, c) / ("two", x, l, r) / None (Leaf)."""
    if n == 0:
        return None
    x = int(rng.integers(5))
    if n == 1 or rng.random() < 0.3:
        return ("one", x, _random_tree(rng, n - 1))
    k = int(rng.integers(0, n))
    return ("two", x, _random_tree(rng, k), _random_tree(rng, n - 1 - k))


def _tree_value(mod, tree):
    leaf, one, two = (mod.get_constructor(c) for c in ("Leaf", "One", "Two"))
    if tree is None:
        return rl.ConstructorValue(leaf, [])
    if tree[0] == "one":
        return rl.ConstructorValue(one, [np.int32(tree[1]), _tree_value(mod, tree[2])])
    return rl.ConstructorValue(two, [np.int32(tree[1]), _tree_value(mod, tree[2]),
                                     _tree_value(mod, tree[3])])


def _tree_jax(E, W, tree):
    import jax.numpy as jnp

    def f(t):
        if t is None:
            return jnp.zeros(3)
        if t[0] == "one":
            return jnp.sin(f(t[2])) * E[t[1]] + E[t[1]]
        return jnp.tanh(W @ (f(t[2]) + f(t[3]) * 0.5) + E[t[1]])
    h = f(tree)
    return jnp.sum(h * h)


def test_leaves_that_write_no_backpropagator_are_skipped_by_the_backward_loop():
    # Leaf rows sit between the rows of One/Two nodes: their kept pointer is an earlier row,
    # not -1, and the union of two closures is stored with its index renumbered
    mod = rl.infer_type(rl.parse(TREE))
    rng = np.random.default_rng(11)
    E, W = rng.normal(size=(5, 3)), rng.normal(size=(3, 3)) * 0.5
    vg = rl.value_and_grad(mod, argnums=(0, 1))
    run = rl.compile(vg, backend="jax", capacity={"nodes": 64})
    for n in (0, 1, 4, 12, 25):
        tree = _random_tree(rng, n)
        t = _tree_value(mod, tree)
        got = run(E, W, t)
        _close(got, rl.evaluate(vg, E, W, t))
        with jax.enable_x64(True):
            _close(got, jax.value_and_grad(_tree_jax, argnums=(0, 1))(E, W, tree))
    assert run.trace_count == 1
