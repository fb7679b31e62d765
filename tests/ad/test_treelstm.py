"""The TreeLSTM of examples/treelstm.py (small dimensions, float64): its relayish gradient
w.r.t. all parameters matches jax.grad of the same model, on trees of two shapes, through ONE
gradient program; so the model of benchmarks/treelstm.py cannot rot."""
import numpy as np
import pytest

import relayish as rl
from examples.treelstm import (PARAMS, init_params, reference_loss, to_value, treelstm_module)

jax = pytest.importorskip("jax")
jnp = jax.numpy

DIMS = dict(vocab=7, embed=4, hidden=3, classes=2, dtype="float64")
TREES = [((3, (5, 0)), 6), ((((1, 1), 2), (4, (6, 3))), 0)]


@pytest.fixture(scope="module")
def model():
    mod = treelstm_module(**DIMS)
    params = init_params(np.random.default_rng(3), **DIMS)
    return mod, params, rl.value_and_grad(mod, argnums=tuple(range(len(PARAMS))))


@pytest.mark.parametrize("k", [0] + [pytest.param(k, marks=pytest.mark.slow)
                                     for k in range(1, len(TREES))])
def test_gradient_matches_jax(model, k):
    mod, params, vg = model
    tree, label = TREES[k][0], TREES[k][1] % DIMS["classes"]
    value, grads = rl.evaluate(vg, *params, to_value(mod, tree), np.int32(label))
    with jax.enable_x64(True):
        # jitted: one compilation of the reference, not one per jax primitive run eagerly
        want_v, want_g = jax.jit(jax.value_and_grad(
            lambda ps: reference_loss(jnp, ps, tree, label)))(tuple(jnp.asarray(p) for p in params))
        want_v, want_g = float(want_v), [np.asarray(g) for g in want_g]
    np.testing.assert_allclose(value, want_v, rtol=1e-10)
    for name, got, want in zip(PARAMS, grads, want_g):
        assert got.shape == want.shape, name
        np.testing.assert_allclose(got, want, rtol=1e-8, atol=1e-12, err_msg=name)


def _global_text(mod, name):
    return rl.astext(mod[name])


def test_frozen_embedding_gets_no_gradient_through_the_recursion(model):
    """argnums leaving out E (a frozen embedding): E is a constant through the calls of the
    recursive @cell too, so the lifted cell never runs take_backward (a dense |V| x D array per
    leaf), and the other gradients are unchanged."""
    mod, params, vg = model
    frozen = rl.grad(mod, argnums=tuple(range(1, len(PARAMS))))
    names = [g.name_hint for g in frozen.functions]
    lifted = [n for n in names if n.startswith("cell_ad")]
    assert lifted == ["cell_ad_const0"], names
    assert "take_backward" not in _global_text(frozen, "cell_ad_const0")
    assert "take_backward" in _global_text(rl.grad(mod, argnums=(0, 1, 2, 3, 4)), "cell_ad")
    tree, label = to_value(mod, TREES[1][0]), np.int32(1)
    got = rl.evaluate(frozen, *params, tree, label)
    _, want = rl.evaluate(vg, *params, tree, label)
    for name, a, b in zip(PARAMS[1:], got, want[1:]):
        np.testing.assert_allclose(a, b, rtol=1e-12, err_msg=name)


def test_constant_arguments_of_globals_are_specialised_per_call_site():
    """The same global called with a constant and with an active first argument gets two lifted
    copies; the gradient still matches finite differences."""
    mod = rl.parse("""
    def @f(%x: Tensor[(3), float64], %w: float64) -> float64 {
      sum(take(%x, 1, axis=0) * %w * %x)
    }
    def @main(%x: Tensor[(3), float64], %w: float64) -> float64 {
      @f(%x, %w) + @f(%x * 2f64, %w * %w) + @f(exp(%w) * ones(shape=[3], dtype="float64"), %w)
    }""")
    gw = rl.grad(mod, argnums=1)
    names = sorted(g.name_hint for g in gw.functions if g.name_hint.startswith("f_"))
    assert names == ["f_ad", "f_ad_const0"]
    assert "take_backward" not in _global_text(gw, "f_ad_const0")
    x, w, eps = np.array([0.3, -1.2, 0.7]), 0.9, 1e-6
    fd = (rl.evaluate(mod, x, w + eps) - rl.evaluate(mod, x, w - eps)) / (2 * eps)
    np.testing.assert_allclose(rl.evaluate(gw, x, w), fd, rtol=1e-7)
    gx = rl.evaluate(rl.grad(mod, argnums=0), x, w)
    fdx = [(rl.evaluate(mod, x + eps * e, w) - rl.evaluate(mod, x - eps * e, w)) / (2 * eps)
           for e in np.eye(3)]
    np.testing.assert_allclose(gx, fdx, rtol=1e-7)


def test_a_constant_that_a_recursion_changes_is_not_specialised():
    """A left fold's accumulator starts as a constant but each self-call passes a new value:
    no `@walk_ad_const1` (a first step peeled off @walk_ad), the constant goes in as a pair;
    the weight, which the self-calls pass on unchanged, would still be specialised."""
    mod = rl.parse("""
    type L { Nil, Cons(Tensor[(2), float64], L) }
    def @walk(%W: Tensor[(2, 2), float64], %h: Tensor[(2), float64], %xs: L) -> Tensor[(2), float64] {
      match (%xs) {
        Nil => %h,
        Cons(%x, %rest) => @walk(%W, tanh(matmul(%W, %h) + %x), %rest)
      }
    }
    def @main(%W: Tensor[(2, 2), float64], %xs: L) -> float64 {
      sum(@walk(%W, ones(shape=[2], dtype="float64"), %xs))
    }""")
    gw = rl.grad(mod, argnums=0)
    names = sorted(g.name_hint for g in gw.functions if g.name_hint.startswith("walk"))
    assert names == ["walk", "walk_ad"], names
    frozen = rl.grad(rl.parse(rl.astext(mod).replace(
        "def @main(%W: Tensor[(2, 2), float64], %xs: L) -> float64 {",
        "def @main(%W: Tensor[(2, 2), float64], %xs: L, %v: Tensor[(2), float64]) -> float64 {"
    ).replace('ones(shape=[2], dtype="float64"), %xs', "%v, %xs")), argnums=2)
    assert "walk_ad_const0" in {g.name_hint for g in frozen.functions}   # W: unchanged
    W = np.array([[0.4, -0.3], [0.2, 0.5]])
    xs = rl.list_value(mod, [np.array([0.1, -0.2]), np.array([0.3, 0.05]),
                             np.array([-0.4, 0.2])])
    eps = 1e-6
    fd = np.zeros((2, 2))
    for i in range(2):
        for j in range(2):
            d = np.zeros((2, 2))
            d[i, j] = eps
            fd[i, j] = (rl.evaluate(mod, W + d, xs) - rl.evaluate(mod, W - d, xs)) / (2 * eps)
    np.testing.assert_allclose(rl.evaluate(gw, W, xs), fd, rtol=1e-7, atol=1e-10)


ALIASING = """
def @main(%x: Tensor[(4, 2), float64], %g: Tensor[(2), float64], %gs: Tensor[(3, 2), float64],
          %ids: Tensor[(3), int32]) {
  let %r = ref(zeros(shape=[4, 2], dtype="float64"));
  let %u1 = %r := !%r + take_backward(%g, 1, %x, axis=0);
  let %u2 = %r := !%r + take_backward(%g, 3, %x, axis=0);
  let %a = !%r;
  let %u3 = %r := !%r + take_backward(%gs, %ids, %x, axis=0);
  let %b = !%r;
  let %u4 = %r := !%r + %x;
  let %u5 = %r := !%r + %x;
  let %c = !%r;
  let %u6 = %r := !%r + %x;
  let %s = ref(zeros(shape=[4, 2], dtype="float64"));
  let %u7 = %s := !%s + %x;
  let %u8 = %s := !%s + take_backward(%g, -1, %x, axis=0);
  (%a, %b, %c, !%r, %x, !%s)
}"""


def test_in_place_accumulation_never_changes_a_value_read_before():
    """`r := !r + take_backward(..)` and `r := !r + g` add in place only into an array the
    reference alone holds: values read from it before, the stored g and x keep their contents."""
    mod = rl.parse(ALIASING)
    x = np.arange(8.0).reshape(4, 2)
    g, gs = np.array([1.0, 2.0]), np.array([[1.0, 1.0], [2.0, 2.0], [3.0, 3.0]])
    a, b, c, r, x_out, s = rl.evaluate(mod, x, g, gs, np.array([0, 3, 3], dtype=np.int32))
    rows = np.zeros((4, 2))
    rows[1] += g
    rows[3] += g
    np.testing.assert_array_equal(a, rows)
    rows[0] += gs[0]
    rows[3] += gs[1] + gs[2]
    np.testing.assert_array_equal(b, rows)
    np.testing.assert_array_equal(c, rows + 2 * x)
    np.testing.assert_array_equal(r, rows + 3 * x)
    np.testing.assert_array_equal(x_out, np.arange(8.0).reshape(4, 2))
    np.testing.assert_array_equal(s, x + np.array([[0, 0], [0, 0], [0, 0], [1, 2]]))
    np.testing.assert_array_equal(g, [1.0, 2.0])


def test_take_gradient_accumulates_rows_into_the_reference():
    """The gradient program leaves `!r + take_backward(..)` inline in the accumulation (the
    interpreter's in-place scatter); the embedding gradient still matches jax (test above) and
    repeated words add up."""
    mod = rl.parse("""
    def @main(%E: Tensor[(5, 3), float64], %w: Tensor[(4), int32]) -> float64 {
      sum(take(%E, %w, axis=0) * take(%E, %w, axis=0)) + sum(take(%E, 2, axis=0))
    }""")
    g = rl.grad(mod, argnums=0, optimize=False)     # the transform; the passes may fold it
    assert "+ take_backward(" in rl.astext(g)
    E = np.arange(15.0).reshape(5, 3) / 10
    w = np.array([1, 4, 1, 0], dtype=np.int32)
    want = np.zeros((5, 3))
    for i in w:
        want[i] += 2 * E[i]
    want[2] += 1
    np.testing.assert_allclose(rl.evaluate(g, E, w), want, rtol=1e-12)
    np.testing.assert_allclose(rl.evaluate(g, E, w), want, rtol=1e-12)   # fresh refs per run
