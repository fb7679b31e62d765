"""The recorded graph stays bounded over long loops (counted in nodes and pending bindings,
not timed), and repeated iterations reuse one compiled program."""
import gc

import numpy as np

from relayish import eager as re
from relayish.eager import graph
from relayish.eager.graph import Node


def _nodes_alive():
    gc.collect()
    return sum(1 for o in gc.get_objects() if isinstance(o, Node))


def _sgd_step(params, x, y, lr=0.1):
    w, b = params
    loss = ((x @ w + b - y) ** 2.0).mean()
    grads = re.grad(loss, wrt=params)
    with re.no_grad():
        params = [p - lr * g for p, g in zip(params, grads)]
    return loss, params


def test_a_training_loop_keeps_a_flat_graph_and_hits_the_cache():
    rng = np.random.default_rng(0)
    x = re.tensor(rng.normal(size=(8, 3)))
    y = re.tensor(rng.normal(size=(8, 1)))
    params = [re.tensor(np.zeros((3, 1))), re.tensor(np.zeros(1))]
    re.clear_cache()
    counts = []
    for step in range(1, 3_001):       # 30 times the steps of the first count
        loss, params = _sgd_step(params, x, y)
        float(loss)
        if step in (100, 3_000):
            counts.append((re.stats()["pending"], _nodes_alive()))
    assert counts[0] == counts[1]
    assert counts[1][0] == 0
    s = re.stats()
    assert s["misses"] == 1 and s["compiles"] == 1 and s["hit_rate"] > 0.999
    want = np.linalg.lstsq(np.c_[np.asarray(x), np.ones(8)], np.asarray(y), rcond=None)[0]
    np.testing.assert_allclose(np.asarray(params[0]).ravel(), want[:3].ravel(), atol=1e-6)


def test_a_loop_that_never_inspects_runs_at_the_bound(monkeypatch):
    monkeypatch.setattr(graph, "AUTO_RUN_BINDINGS", 200)
    x = re.tensor(np.ones(2))
    most = 0
    for _ in range(3_000):
        x = x * 0.999 + 0.001
        most = max(most, graph.STATE.recorded_since_run)
    assert most <= 201
    assert re.stats()["pending"] <= 201
    np.testing.assert_allclose(np.asarray(x), np.ones(2))


def test_requires_grad_results_keep_only_their_own_derivation():
    w = re.tensor(np.ones(3), requires_grad=True)
    before = _nodes_alive()
    for _ in range(1_000):
        loss = (re.tanh(w) * w).sum()
        float(loss)
    # one loss alive: its bindings (tanh, multiply, sum) and w; earlier ones are gone
    assert _nodes_alive() - before <= 4
