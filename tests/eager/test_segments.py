"""The segment's structural key (graph.py): programs that differ only where the key must see
it (shared Python-number leaves, -0.0, marks) never share a compiled program wrongly; the
table's reset, a run inside an api function's recording (the walked path) and re.grad's
walk-free path give the values the general path gives."""
import numpy as np
import pytest

from relayish import eager as re
from relayish.eager import graph


def test_python_numbers_shared_or_not_get_their_own_programs():
    x = re.tensor(np.array([1.0, 2.0]))
    y = re.tensor(np.array([3.0, 4.0]))
    re.clear_cache()
    for _ in range(3):                   # interpreter, compile, compiled
        for a, b in [(0.5, 0.5), (0.5, 0.25), (0.25, 0.25), (-0.0, 0.0), (0.0, -0.0)]:
            got = np.asarray(x * a + y * b)
            np.testing.assert_array_equal(got, np.array([1.0, 2.0]) * a + np.array([3.0, 4.0]) * b)
            assert np.array_equal(np.signbit(got), np.signbit(np.array([1.0, 2.0]) * a
                                                              + np.array([3.0, 4.0]) * b))
        z = re.tensor(np.array([0.0, 1.0])) * -0.0
        assert np.signbit(np.asarray(z)).all()


def _mlp_losses(steps):
    rng = np.random.default_rng(0)
    x = re.tensor(rng.normal(size=(8, 3)))
    y = re.tensor(rng.normal(size=(8, 1)))
    params = [re.tensor(np.zeros((3, 1))), re.tensor(np.zeros(1))]
    out = []
    for _ in range(steps):
        w, b = params
        loss = ((x @ w + b - y) ** 2.0).mean()
        grads = re.grad(loss, wrt=params)
        with re.no_grad():
            params = [p - 0.1 * g for p, g in zip(params, grads)]
        out.append(float(loss))
    return out


def test_a_table_reset_mid_loop_changes_no_value(monkeypatch):
    want = _mlp_losses(20)
    re.clear_cache()
    monkeypatch.setattr(graph, "_TRIE_SIZE", 7)        # the table resets inside each step
    np.testing.assert_allclose(_mlp_losses(20), want, rtol=1e-12)


def test_a_run_inside_an_api_function_takes_the_walked_path(monkeypatch):
    monkeypatch.setattr(graph, "AUTO_RUN_BINDINGS", 1)  # a run at (almost) every record
    a = re.tensor(np.arange(6.0).reshape(2, 3))
    b = re.tensor(np.ones((2, 3)))
    for _ in range(3):
        joined = re.concatenate([a * 2.0, b + 1.0], axis=0)
        parts = re.split(joined, 2, axis=0)
        total = (parts[0] + parts[1]).sum()
        assert float(total) == pytest.approx((np.arange(6.0) * 2 + 2).sum())


def test_grad_of_a_repeated_step_walks_nothing_and_matches_the_walk():
    w0 = np.array([0.3, -0.2, 0.8])

    def step(w):
        return (re.tanh(w * w) * w).sum()
    re.clear_cache()
    grads = []
    for _ in range(4):
        w = re.tensor(w0)
        (g,) = re.grad(step(w), wrt=[w])
        grads.append(np.asarray(g))
    want = (1 - np.tanh(w0 ** 2) ** 2) * 2 * w0 * w0 + np.tanh(w0 ** 2)
    for g in grads:
        np.testing.assert_allclose(g, want, rtol=1e-12)


def test_a_handle_on_a_node_recorded_before_the_last_run_is_computed():
    x = re.tensor(np.array([1.0, 2.0]))
    hidden = (x * 3.0).node                # no handle: the run below does not compute it
    float((x * 2.0).sum())
    late = re.Tensor(hidden)
    np.testing.assert_allclose(np.asarray(late), [3.0, 6.0])
