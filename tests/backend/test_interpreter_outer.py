"""Deferred outer-product accumulation (relayish/backend/interp/deferred.py): reverse AD's
`r := !r + expand_dims(g, axis=-1) * x` records (g, x) on r and sums them as one matrix product
when r is read. Values must be those of the plain sum, whoever reads the reference and when."""
import numpy as np
import pytest

import relayish as rl
from relayish.backend.interp import api as interp_api
from relayish.backend.interp import deferred


def run(text, *args):
    mod = rl.infer_type(rl.parse(text))
    out = rl.evaluate(mod, *args)
    assert not deferred.pending()        # nothing pending once control is back in Python
    return out


G = np.array([1.0, 2.0, 3.0])
X = np.array([0.5, -1.0])
H = np.array([4.0, -2.0, 0.25])
OUTER = np.outer(G, X)

HEAD = """
def @main(%g: Tensor[(3), float64], %x: Tensor[(2), float64], %h: Tensor[(3), float64]{extra}) {{
  let %r = ref(zeros(shape=[3, 2], dtype="float64"));
  let %v = expand_dims(%g, axis=-1) * %x;
  let %w = expand_dims(%h, axis=-1) * %x;
"""


def test_reads_between_accumulations_see_the_sums_so_far_and_are_never_mutated():
    a, b, c = run(HEAD.format(extra="") + """
  let %u0 = %r := !%r + %v;
  let %a = !%r;
  let %u1 = %r := !%r + %w;
  let %u2 = %r := !%r + %v;
  let %b = !%r;
  let %u3 = %r := !%r + %w;
  (%a, %b, !%r)
}""", G, X, H)
    np.testing.assert_allclose(a, OUTER)
    np.testing.assert_allclose(b, 2 * OUTER + np.outer(H, X))
    np.testing.assert_allclose(c, 2 * OUTER + 2 * np.outer(H, X))


def test_the_accumulation_is_one_step_and_the_outer_product_is_not_computed():
    text = HEAD.format(extra="") + """
  let %u0 = %r := !%r + %v;
  let %u1 = %r := !%r + %w;
  !%r
}"""
    mod = rl.infer_type(rl.parse(text))
    np.testing.assert_allclose(rl.evaluate(mod, G, X, H), OUTER + np.outer(H, X))
    code = interp_api._MODULE_CACHE[mod][1].code
    names = [s.node.op.name if isinstance(s.node, rl.Call) else type(s.node).__name__
             for s in code.steps]
    assert "multiply" not in names and "expand_dims" not in names
    assert [s.fn.__qualname__.split(".")[0] for s in code.steps].count("outer_accumulate_step") == 2


def test_a_deferred_value_used_elsewhere_is_computed_there_too():
    v, r = run(HEAD.format(extra="") + """
  let %u0 = %r := !%r + %v;
  let %u1 = %r := !%r + %v;
  (%v, !%r)
}""", G, X, H)
    np.testing.assert_allclose(v, OUTER)
    np.testing.assert_allclose(r, 2 * OUTER)


def test_used_in_both_branches_of_an_if():
    text = HEAD.format(extra=", %c: bool") + """
  let %u0 = %r := !%r + %v;
  let %s = if (%c) { %v * 2f64 } else { %v + %w };
  (%s, !%r)
}"""
    for c in (True, False):
        s, r = run(text, G, X, H, np.bool_(c))
        np.testing.assert_allclose(s, 2 * OUTER if c else OUTER + np.outer(H, X))
        np.testing.assert_allclose(r, OUTER)


def test_a_reference_returned_or_passed_to_python_holds_the_settled_array():
    seen = []

    def peek(ref):
        seen.append(np.array(ref.value))
        return ref.value * 0.0
    text = HEAD.format(extra=", %f: fn (ref(Tensor[(3, 2), float64])) -> Tensor[(3, 2), float64]") + """
  let %u0 = %r := !%r + %v;
  let %z = %f(%r);
  let %u1 = %r := !%r + %w;
  (%z, %r)
}"""
    z, r = run(text, G, X, H, peek)
    np.testing.assert_allclose(seen[0], OUTER)
    assert isinstance(r, rl.RefValue) and isinstance(r.value, np.ndarray)
    np.testing.assert_allclose(r.value, OUTER + np.outer(H, X))


def test_an_initial_value_the_reference_does_not_own_is_never_mutated():
    w0 = np.arange(6.0).reshape(3, 2)
    text = """
def @main(%g: Tensor[(3), float64], %x: Tensor[(2), float64], %w0: Tensor[(3, 2), float64]) {
  let %r = ref(%w0);
  let %v = expand_dims(%g, axis=-1) * %x;
  let %u0 = %r := !%r + %v;
  let %u1 = %r := !%r + %v;
  (!%r, %w0)
}"""
    r, w = run(text, G, X, w0.copy())
    np.testing.assert_allclose(r, w0 + 2 * OUTER)
    np.testing.assert_array_equal(w, w0)


def test_an_error_mid_run_leaves_no_pending_sum():
    text = HEAD.format(extra=", %i: int32") + """
  let %u0 = %r := !%r + %v;
  take(%g, %i)
}"""
    with pytest.raises(rl.RelayishError):
        run(text, G, X, H, np.int32(7))
    assert not deferred.pending()


def test_matmul_gradient_in_a_loop_matches_numpy():
    # the TreeLSTM's case: one weight used at every level of a recursion
    text = """
def @loop(%W: Tensor[(4, 3), float32], %h: Tensor[(3), float32], %n: int32) -> Tensor[(3), float32] {
  if (%n == 0) { %h } else {
    let %z = tanh(matmul(%W, %h));
    @loop(%W, strided_slice(%z, begin=[0], end=[3]), %n - 1)
  }
}
def @main(%W: Tensor[(4, 3), float32], %h: Tensor[(3), float32]) -> float32 {
  sum(@loop(%W, %h, 6))
}"""
    mod = rl.infer_type(rl.parse(text))
    rng = np.random.default_rng(0)
    W = rng.normal(size=(4, 3)).astype("float32")
    h = rng.normal(size=3).astype("float32")
    gW, gh = rl.evaluate(rl.grad(mod, argnums=(0, 1)), W, h)
    assert not deferred.pending()

    def loss(W, h):
        for _ in range(6):
            h = np.tanh(W @ h)[:3]
        return h.sum()
    eps = 1e-3
    W64, h64 = W.astype("float64"), h.astype("float64")
    num = np.zeros_like(W64)
    for idx in np.ndindex(W.shape):
        d = np.zeros_like(W64)
        d[idx] = eps
        num[idx] = (loss(W64 + d, h64) - loss(W64 - d, h64)) / (2 * eps)
    np.testing.assert_allclose(gW, num, rtol=1e-3, atol=1e-4)
    assert gW.dtype == np.float32


@pytest.mark.parametrize("shape, sections, axis", [((6,), 3, 0), ((0,), 2, 0), ((4, 6), 2, 1),
                                                   ((4, 6), [1, 4], -1), ((6, 2), [2, 2, 5], 0)])
def test_split_on_the_interpreter_matches_numpy_split(shape, sections, axis):
    # split's numpy fast path (relayish/ops/tensor.py _split_fast) gives basic slices
    x = rl.var("x", shape=shape, dtype="float64")
    f = rl.Function([x], rl.split(x, sections, axis=axis))
    a = np.arange(float(np.prod(shape))).reshape(shape)
    got = rl.evaluate(f, a)
    want = np.split(a, sections, axis=axis)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_array_equal(g, w)


def test_runs_in_two_threads_do_not_settle_each_others_references():
    import threading
    text = HEAD.format(extra="") + """
  let %u0 = %r := !%r + %v;
  let %u1 = %r := !%r + %w;
  let %u2 = %r := !%r + %v;
  !%r
}"""
    mod = rl.infer_type(rl.parse(text))
    want = 2 * OUTER + np.outer(H, X)
    rl.evaluate(mod, G, X, H)
    bad = []

    def work():
        for _ in range(300):
            got = rl.evaluate(mod, G, X, H)
            if not np.allclose(got, want):
                bad.append(got)
    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not bad
