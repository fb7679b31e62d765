"""The recording front end keeps PyTorch's semantics (issue 25): one test per finding of the
audit, each a wrong value or gradient (or an error) before the fix, and dtype promotion as
torch's. The expected numbers are PyTorch's (tests/fuzz/test_eager_vs_torch.py compares with
torch itself on random programs)."""
import numpy as np
import pytest

import relayish as rl
from relayish import eager as re


def _np(t):
    return np.asarray(t)


def test_finding1_no_grad_value_not_inspected():
    # a value computed under no_grad carries no gradient, whether or not it was run there
    w = re.tensor(np.ones(3), requires_grad=True)
    with re.no_grad():
        c = (w * 2.0).sum()
    y = (w * 3.0).sum() + c
    (g,) = re.grad(y, wrt=[w])
    np.testing.assert_allclose(_np(g), [3.0, 3.0, 3.0])
    assert not c.requires_grad and c.is_leaf
    # the same value inspected inside the region: the same gradient
    w2 = re.tensor(np.ones(3), requires_grad=True)
    with re.no_grad():
        c2 = (w2 * 2.0).sum()
        float(c2)
    (g2,) = re.grad((w2 * 3.0).sum() + c2, wrt=[w2])
    np.testing.assert_allclose(_np(g2), [3.0, 3.0, 3.0])


def test_finding1_no_grad_output_is_refused():
    w = re.tensor(np.ones(3), requires_grad=True)
    with re.no_grad():
        c = (w * 2.0).sum()
    with pytest.raises(rl.GradientError, match="re.no_grad"):
        re.grad(c, wrt=[w])


def _step(w1, w2, frozen):
    w1.grad = None
    w2.grad = None
    if frozen:
        with re.no_grad():
            term = (w2 * 2.0).sum()
    else:
        term = (w2 * 2.0).sum()
    loss = (w1 * 3.0).sum() + term
    loss.backward()
    float(loss)
    return (None if w1.grad is None else _np(w1.grad),
            None if w2.grad is None else _np(w2.grad))


def test_finding2_backward_leaf_cache_keyed_by_grad_mode():
    w1 = re.tensor(np.ones(3), requires_grad=True)
    w2 = re.tensor(np.ones(3), requires_grad=True)
    for frozen in (True, False, True, False, False, True):     # both orders, repeated
        g1, g2 = _step(w1, w2, frozen)
        np.testing.assert_allclose(g1, [3.0] * 3)
        if frozen:
            assert g2 is None                                  # a frozen leaf gets nothing
        else:
            np.testing.assert_allclose(g2, [2.0] * 3)          # warm-up over: it trains


def test_finding3_grad_of_dependent_targets_is_total():
    for _ in range(3):                       # the first sighting, then the cached program
        a = re.tensor(np.ones(3), requires_grad=True)
        b = a * 2.0
        y = (b * 3.0).sum()
        ga, gb = re.grad(y, wrt=[a, b])      # torch.autograd.grad(y, [a, b]): 6, 3
        np.testing.assert_allclose(_np(ga), [6.0] * 3)
        np.testing.assert_allclose(_np(gb), [3.0] * 3)
        (ga_alone,) = re.grad(y, wrt=[a])
        np.testing.assert_allclose(_np(ga_alone), [6.0] * 3)
        float(y)
    # a target that is y itself, and the order of wrt kept
    a = re.tensor(np.array([1.0, 2.0]), requires_grad=True)
    b = re.tanh(a)
    gb, ga = re.grad(b.sum(), wrt=[b, a])
    np.testing.assert_allclose(_np(gb), [1.0, 1.0])
    np.testing.assert_allclose(_np(ga), 1.0 - np.tanh([1.0, 2.0]) ** 2)


def test_finding4_use_before_in_place_update_under_no_grad():
    for _ in range(3):
        w = re.tensor(np.array([1.0, 2.0]), requires_grad=True)
        u = w * 2.0
        with re.no_grad():
            w -= 0.5
        (u + w * w).sum().backward()
        np.testing.assert_allclose(_np(w.grad), [3.0, 5.0])     # PyTorch's
    # re.grad with respect to the updated tensor counts the earlier use the same way
    w = re.tensor(np.array([1.0, 2.0]), requires_grad=True)
    u = w * 2.0
    with re.no_grad():
        w -= 0.5
    (g,) = re.grad((u + w * w).sum(), wrt=[w])
    np.testing.assert_allclose(_np(g), [3.0, 5.0])


def test_finding5_tensor_copies_the_array():
    buf = np.zeros(3)
    sums = []
    for i in range(3):
        buf[:] = i                       # a batch buffer refilled each step
        sums.append(re.tensor(buf).sum())
    assert [float(s) for s in sums] == [0.0, 3.0, 6.0]
    # the gradient of a step whose data buffer is refilled after recording
    w = re.tensor(np.ones(3), requires_grad=True)
    x = np.full(3, 1.0)
    loss = (re.tensor(x) * w).sum()
    x[:] = 10.0
    loss.backward()
    np.testing.assert_allclose(_np(w.grad), [1.0] * 3)
    # an array operand is read when the program runs: copied too, and left writeable
    y = re.tensor(np.ones(3)) * x
    x[:] = 0.0
    np.testing.assert_allclose(_np(y), [10.0] * 3)


def test_finding6_gradient_cache_keyed_by_number_of_wrt():
    w = re.tensor(np.ones(3))
    b = re.tensor(np.full(3, 2.0))
    (gw,) = re.grad((w * b).sum(), wrt=[w])
    gw2, gb = re.grad((w * b).sum(), wrt=[w, b])
    np.testing.assert_allclose(_np(gw), [2.0] * 3)
    np.testing.assert_allclose(_np(gw2), [2.0] * 3)
    np.testing.assert_allclose(_np(gb), [1.0] * 3)


@pytest.mark.parametrize("a, b, want", [
    (np.ones(2, "float32"), np.ones(2), "float64"),             # widest float
    (np.ones(2), np.ones(2, "int64"), "float64"),              # float x int: the float
    (np.ones(2, "int32"), np.ones(2, "int64"), "int64"),
    (np.ones(2, "float32"), np.array(2.0), "float32"),          # a 0-dim of one category
    (np.ones(2, "int32"), np.array(2.5), "float64"),            # ... of a higher one
    (np.ones(2, "int64"), np.ones(2, "int64"), "float32"),     # `/` is true division
])
def test_promotion_of_tensors_as_torch(a, b, want):
    op = (lambda x, y: x / y) if want == "float32" and a.dtype.kind == "i" and \
        b.dtype.kind == "i" else (lambda x, y: x * y)
    r = op(re.tensor(a), re.tensor(b))
    assert r.dtype == want
    np.testing.assert_allclose(_np(r), op(a.astype("float64"), b.astype("float64")))


def test_promotion_python_scalars_keep_the_tensor_dtype():
    assert (re.tensor(np.ones(2, "float32")) * 2.5).dtype == "float32"
    assert (re.tensor(np.ones(2, "int32")) * 2).dtype == "int32"
    assert (re.tensor(np.ones(2, "int64")) * 2.5).dtype == "float32"    # the default float
    assert (re.tensor(np.ones(2, "int32")) < 1.5).dtype == "bool"


def test_promotion_gradients_and_in_place():
    w = re.tensor(np.ones(3, "float32"), requires_grad=True)
    x = re.tensor(np.arange(3.0))                           # float64
    loss = (w * x).sum()
    assert loss.dtype == "float64"
    loss.backward()
    assert w.grad.dtype == "float32"
    np.testing.assert_allclose(_np(w.grad), [0.0, 1.0, 2.0])
    with re.no_grad():
        w -= 0.5 * x                     # PyTorch keeps w float32
    assert w.dtype == "float32" and w.is_leaf and w.requires_grad
    np.testing.assert_allclose(_np(w), [1.0, 0.5, 0.0])
    n = re.tensor(np.ones(2, "int32"))
    with pytest.raises(rl.RelayishError, match="type"):
        n += 0.5                          # a float result into an int tensor: refused


def test_in_place_keeps_grad_and_is_leaf_as_torch():
    # found by tests/fuzz/test_eager_vs_torch.py: .grad stays with a tensor updated in
    # place after requires_grad_(False); a tensor not requiring gradients is a leaf
    w = re.tensor(np.ones(2), requires_grad=True)
    (w * 3.0).sum().backward()
    float(w.grad.sum())
    w.requires_grad_(False)
    with re.no_grad():
        w *= 0.5
    np.testing.assert_allclose(_np(w.grad), [3.0, 3.0])
    x = re.tensor(np.ones(2))
    assert (x * 2.0).is_leaf and not (w * 2.0).requires_grad


def test_dependent_targets_through_checkpoint_regions_are_refused():
    a = re.tensor(np.ones(3), requires_grad=True)
    b = a * 2.0
    block = re.checkpoint(lambda h: re.tanh(h) * 1.5)
    y = block(b).sum()
    with pytest.raises(rl.GradientError, match="not supported yet"):
        re.grad(y, wrt=[a, b])
    (ga,) = re.grad(y, wrt=[a])                     # one target: composed as before
    np.testing.assert_allclose(_np(ga), 3.0 * (1.0 - np.tanh(2.0) ** 2))
