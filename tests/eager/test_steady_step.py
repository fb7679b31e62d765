"""A repeated training step (issue 15's speed goal): one call of the cached jitted function,
on arguments that are already jax arrays, its results kept as jax arrays (nothing copied to
the host but what is inspected); the cost of new structures is counted in re.stats()."""
import numpy as np
import pytest

from relayish import eager as re
from relayish.eager import runner

jax = pytest.importorskip("jax")


def _mlp_step():
    rng = np.random.default_rng(0)
    X = re.tensor(rng.normal(size=(16, 4)).astype("float32"))
    Y = re.tensor(rng.normal(size=(16, 1)).astype("float32"))
    params = [re.tensor((rng.normal(size=s) * 0.3).astype("float32"))
              for s in ((4, 8), (8,), (8, 1), (1,))]

    def step():
        nonlocal params
        w1, b1, w2, b2 = params
        h = re.tanh(X @ w1 + b1)
        loss = ((h @ w2 + b2 - Y) ** 2).mean()
        grads = re.grad(loss, wrt=params)
        with re.no_grad():
            params = [p - 0.05 * g for p, g in zip(params, grads)]
        return float(loss), params
    return step


def test_a_steady_step_is_one_jitted_call_on_jax_arrays():
    re.clear_cache()
    step = _mlp_step()
    for _ in range(3):                  # interpreter, compile, compiled
        step()
    calls = []
    for entry in runner._SEGMENTS.values():
        if entry.compiled is not None:
            inner = entry.compiled

            def spy(*args, inner=inner):
                calls.append(args)
                return inner(*args)
            entry.compiled = spy
    before = dict(re.stats())
    loss, params = step()
    after = re.stats()
    assert len(calls) == 1 and after["runs"] == before["runs"] + 1
    assert after["compiles"] == before["compiles"] and after["misses"] == before["misses"]
    assert all(isinstance(a, jax.Array) for a in calls[0]), [type(a) for a in calls[0]]
    # the new parameters are the program's results, kept on the device side as jax arrays
    assert all(isinstance(p.node.value, jax.Array) for p in params)
    assert np.isfinite(loss)


def test_reflected_operators_with_python_numbers():
    x = re.tensor(np.array([1.0, 2.0, 4.0], "float32"))
    for _ in range(3):
        got = [np.asarray(v) for v in (2.0 - x, 2.0 / x, 2.0 * x, 2.0 + x, 3 - x, x - 0.5)]
        want = [2.0 - x.numpy(), 2.0 / x.numpy(), 2.0 * x.numpy(), 2.0 + x.numpy(),
                3 - x.numpy(), x.numpy() - 0.5]
        for g, w in zip(got, want):
            assert g.dtype == np.float32
            np.testing.assert_allclose(g, w, rtol=1e-6)


def test_stats_count_the_seconds_of_new_structures():
    re.clear_cache()
    s = re.stats()
    assert s["interpret_s"] == s["compile_s"] == s["gradient_s"] == 0
    step = _mlp_step()
    for _ in range(3):
        step()
    s = re.stats()
    assert s["misses"] == 1 and s["compiles"] == 1
    assert s["interpret_s"] > 0 and s["compile_s"] > 0 and s["gradient_s"] > 0
    compile_s = s["compile_s"]
    step()                              # a hit: no new seconds
    assert re.stats()["compile_s"] == compile_s


def test_a_steady_step_runs_on_the_synchronous_cpu_client():
    # on CPU relayish runs its compiled steps on a client of its own whose dispatch is
    # synchronous (runner.run_device): the step's results are that client's arrays
    device = runner.run_device()
    if jax.default_backend() != "cpu" or not jax.config.read("jax_cpu_enable_async_dispatch"):
        assert device is None
        return
    assert device is not None and device.client is not jax.devices()[0].client
    re.clear_cache()
    step = _mlp_step()
    for _ in range(3):
        loss, params = step()
    for p in params:
        (d,) = p.node.value.devices()
        assert d.client is device.client
    # the user's jax arrays mix with them
    x = jax.numpy.ones(params[1].shape, "float32")
    np.testing.assert_allclose(np.asarray(params[1].node.value + x), np.asarray(params[1]) + 1)
