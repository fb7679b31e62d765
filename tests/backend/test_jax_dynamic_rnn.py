"""Programs beyond trees on the jax backend's dynamic path (issue 17, "Measure"): an RNN over
variable-length sequences written as a fold over a list (of word indices embedded in the cell,
with and without an empty base case, and of float vectors, which reverse AD lifts), ONE
compilation; values and gradients equal the interpreter's and jax.grad's of a jax loop; the
same under rl.vmap with sequences of different lengths. (The traced-condition loop, `while |x|
> eps`, is tests/backend/test_jax_dynamic_tail.py; other fold shapes test_jax_dynamic_folds.py.)
(benchmarks/dynamic.py measures these programs; it defines the model so the two cannot drift.)"""
import os
import sys

import jax
import numpy as np
import pytest

import relayish as rl

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "benchmarks"))
from dynamic import rnn_loss_jax, rnn_module, rnn_params, to_seq  # noqa: E402

DIMS = dict(vocab=11, embed=3, hidden=5, classes=4)
N_PARAMS = 6


@pytest.fixture(scope="module")
def model():
    mod = rnn_module(**DIMS, dtype="float64")
    params = rnn_params(np.random.default_rng(0), **DIMS, dtype="float64")
    vg = rl.value_and_grad(mod, argnums=tuple(range(N_PARAMS)))
    return mod, params, vg


def _sequence(rng, n):
    return [int(w) for w in rng.integers(DIMS["vocab"], size=n)], np.int32(rng.integers(4))


def _close(got, expected, rtol=1e-9):
    got, expected = jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(expected)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert np.shape(g) == np.shape(e)
        np.testing.assert_allclose(np.asarray(g), np.asarray(e), rtol=rtol, atol=1e-12)


PAD = 256        # the longest sequence a test gives the jax reference


def _rnn_loss_padded(params, words, n, y):
    """rnn_loss_jax with the words padded to PAD and its Python loop a lax.scan whose steps past
    the n-th word keep the state: one compilation for every length (jax.grad of the unrolled
    Python loop compiles each of its primitives eagerly, jitted it compiles each length anew)."""
    import jax.numpy as jnp
    E, W, U, b, Wo, bo = params
    h = jnp.tanh(U @ E[words[n - 1]] + b)

    def step(h, k):                       # the words from the last but one to the first
        i = n - 2 - k
        new = jnp.tanh(W @ h + U @ E[words[jnp.maximum(i, 0)]] + b)
        return jnp.where(i >= 0, new, h), None
    h, _ = jax.lax.scan(step, h, jnp.arange(PAD - 1))
    logits = Wo @ h + bo
    return -(logits - jnp.log(jnp.sum(jnp.exp(logits - jnp.max(logits)))) - jnp.max(logits))[y]


_rnn_reference = jax.jit(jax.value_and_grad(_rnn_loss_padded))


def _jax_value_and_grad(params, words, y):
    padded = np.zeros(PAD, np.int32)
    padded[:len(words)] = words
    with jax.enable_x64(True):
        value, grads = _rnn_reference(params, padded, np.int32(len(words)), y)
        return np.asarray(value), tuple(np.asarray(g) for g in grads)


def test_the_padded_reference_is_rnn_loss_jax(model):
    # the padded loop's loss against the benchmark's own Python loop (its gradients meet the
    # interpreter's in the tests below)
    _, params, _ = model
    rng = np.random.default_rng(8)
    for n in (1, 5):
        words, y = _sequence(rng, n)
        with jax.enable_x64(True):
            expected = rnn_loss_jax(params, words, y)
        _close(_jax_value_and_grad(params, words, y)[0], expected)


# the default run takes four lengths across 1-200, -m slow every length (the oracles cost
# milliseconds a length: the jax reference is compiled once)
@pytest.mark.parametrize("lengths", [(1, 9, 64, 200),
                                     pytest.param(range(1, 201), marks=pytest.mark.slow)])
def test_rnn_value_and_grad_is_one_compilation_for_lengths_1_to_200(model, lengths):
    mod, params, vg = model
    run = rl.compile(vg, backend="jax", capacity={"nodes": 256})
    rng = np.random.default_rng(1)
    for n in lengths:
        words, y = _sequence(rng, n)
        got = run(*params, to_seq(mod, words), y)
        _close(got, rl.evaluate(vg, *params, to_seq(mod, words), y))
        _close(got, _jax_value_and_grad(params, words, y))
    assert run.trace_count == 1


@pytest.mark.slow
def test_rnn_value_and_grad_equals_the_interpreter_at_every_length(model):
    mod, params, vg = model
    run = rl.compile(vg, backend="jax", capacity={"nodes": 256})
    rng = np.random.default_rng(2)
    for n in range(1, 201):
        words, y = _sequence(rng, n)
        seq = to_seq(mod, words)
        _close(run(*params, seq, y), rl.evaluate(vg, *params, seq, y))
    assert run.trace_count == 1


def test_rnn_per_sequence_gradients_under_vmap_one_trace(model):
    mod, params, vg = model
    batched = rl.vmap(vg, in_axes=(None,) * N_PARAMS + (0, 0))
    run = rl.compile(batched, backend="jax", capacity={"nodes": 64})
    rng = np.random.default_rng(3)
    for lengths in ((1, 40, 7, 64, 2), (13, 3, 50)):      # two batch sizes, one capacity
        pairs = [_sequence(rng, n) for n in lengths]
        seqs = [to_seq(mod, words) for words, _ in pairs]
        ys = np.array([y for _, y in pairs], np.int32)
        got = run(*params, seqs, ys)
        assert got[1][0].shape == (len(lengths),) + params[0].shape   # one gradient each
        _close(got, rl.evaluate(batched, *params, seqs, ys))
        for k, (words, y) in enumerate(pairs):
            one = jax.tree_util.tree_map(lambda a, k=k: np.asarray(a)[k], got)
            _close(one, _jax_value_and_grad(params, words, y))
    assert run.trace_count == 1


EMPTY_BASE = """
type L { Nil, Cons(int32, L) }
def @rnn(%E: Tensor[(5, 3), float64], %W: Tensor[(3, 3), float64], %xs: L) -> Tensor[(3), float64] {
  match (%xs) {
    Nil => zeros(shape=[3], dtype="float64"),
    Cons(%w, %rest) => {
      let %h = @rnn(%E, %W, %rest);
      tanh(matmul(%W, %h) + take(%E, %w, axis=0))
    }
  }
}
def @main(%E: Tensor[(5, 3), float64], %W: Tensor[(3, 3), float64], %xs: L) -> float64 {
  let %h = @rnn(%E, %W, %xs); sum(%h * %h)
}
"""


def _empty_base_jax(E, W, words):
    """EMPTY_BASE's @main in jax (words first-outermost, so the fold runs them last first)."""
    import jax.numpy as jnp
    h = jnp.zeros(3)
    for w in reversed(words):
        h = jnp.tanh(W @ h + E[w])
    return jnp.sum(h * h)


def _int_list(mod, words):
    return rl.list_value(mod, [np.int32(w) for w in words])


def test_rnn_with_an_empty_base_case_gradient_is_one_loop():
    # `Nil => h0` writes no backpropagator: the Nil row keeps the family's pointer (-1 here),
    # so the backward chain skips it and ends at the pre-loop closure (dynamic_rows._kept)
    mod = rl.infer_type(rl.parse(EMPTY_BASE))
    rng = np.random.default_rng(4)
    E, W = rng.normal(size=(5, 3)), rng.normal(size=(3, 3)) * 0.5
    vg = rl.value_and_grad(mod, argnums=(0, 1))
    run = rl.compile(vg, backend="jax", capacity={"nodes": 64})
    forward = rl.compile(mod, backend="jax", capacity={"nodes": 64})
    for n in (0, 1, 2, 9, 40):
        words = [int(w) for w in rng.integers(5, size=n)]
        xs = _int_list(mod, words)
        got = run(E, W, xs)
        _close(got, rl.evaluate(vg, E, W, xs))
        with jax.enable_x64(True):
            _close(got, jax.value_and_grad(_empty_base_jax, argnums=(0, 1))(E, W, words))
        np.testing.assert_allclose(forward(E, W, xs), got[0], rtol=1e-12)
    assert run.trace_count == 1 and forward.trace_count == 1


def test_rnn_with_an_empty_base_case_under_vmap_one_trace():
    # fixed trips: the kept pointer is guarded like every other write past the count
    mod = rl.infer_type(rl.parse(EMPTY_BASE))
    rng = np.random.default_rng(7)
    E, W = rng.normal(size=(5, 3)), rng.normal(size=(3, 3)) * 0.5
    vg = rl.value_and_grad(mod, argnums=(0, 1))
    batched = rl.vmap(vg, in_axes=(None, None, 0))
    run = rl.compile(batched, backend="jax", capacity={"nodes": 32})
    for lengths in ((0, 5, 1, 20), (3, 0)):
        seqs = [[int(w) for w in rng.integers(5, size=n)] for n in lengths]
        got = run(E, W, [_int_list(mod, s) for s in seqs])
        for k, words in enumerate(seqs):
            one = jax.tree_util.tree_map(lambda a, k=k: np.asarray(a)[k], got)
            _close(one, rl.evaluate(vg, E, W, _int_list(mod, words)))
    assert run.trace_count == 1


VECTORS = """
type L { Nil, Cons(Tensor[(3), float64], L) }
def @rnn(%W: Tensor[(3, 3), float64], %xs: L) -> Tensor[(3), float64] {
  match (%xs) {
    Nil => zeros(shape=[3], dtype="float64"),
    Cons(%x, %rest) => { let %h = @rnn(%W, %rest); tanh(matmul(%W, %h) + %x) }
  }
}
def @main(%W: Tensor[(3, 3), float64], %xs: L) -> float64 {
  let %h = @rnn(%W, %xs); sum(%h * %h)
}
"""


def _vectors_jax(W, xs):
    import jax.numpy as jnp
    h = jnp.zeros(3)
    for x in reversed(xs):
        h = jnp.tanh(W @ h + x)
    return jnp.sum(h * h)


def test_rnn_over_a_list_of_vectors_gradient_is_one_loop():
    # reverse AD lifts the list (@ad_lift_L: L -> L_ad, a reference per element) and reads the
    # element gradients back (@ad_grad_L: L_ad -> L): both are maps (dynamic_rule.py), loops
    # that make a node table of the other type, so value_and_grad w.r.t. the weights AND the
    # list's vectors is one trace for every length; the list gradient comes back as a list
    mod = rl.infer_type(rl.parse(VECTORS))
    rng = np.random.default_rng(6)
    W = rng.normal(size=(3, 3)) * 0.5
    forward = rl.compile(mod, backend="jax", capacity={"nodes": 64})
    weights = rl.value_and_grad(mod, argnums=0)
    both = rl.value_and_grad(mod, argnums=(0, 1))
    run_weights = rl.compile(weights, backend="jax", capacity={"nodes": 64})
    run_both = rl.compile(both, backend="jax", capacity={"nodes": 64})
    for n in (0, 1, 2, 3, 17, 60):
        xs = list(rng.normal(size=(n, 3)))
        value = rl.list_value(mod, xs)
        np.testing.assert_allclose(forward(W, value), rl.evaluate(mod, W, value), rtol=1e-12)
        _close(run_weights(W, value), rl.evaluate(weights, W, value))
        loss, (dW, dxs) = run_both(W, value)
        e_loss, (e_dW, e_dxs) = rl.evaluate(both, W, value)
        _close((loss, dW, rl.from_list_value(dxs)), (e_loss, e_dW, rl.from_list_value(e_dxs)))
        with jax.enable_x64(True):
            j_loss, (j_dW, j_dxs) = jax.value_and_grad(_vectors_jax, argnums=(0, 1))(W, xs)
        _close((loss, dW, rl.from_list_value(dxs)), (j_loss, j_dW, list(j_dxs)))
    assert forward.trace_count == 1
    assert run_weights.trace_count == 1 and run_both.trace_count == 1
