"""rl.compile(rl.vmap(f), devices=[...]): the batch sharded over a 1-D jax mesh.

jax reads --xla_force_host_platform_device_count only when it starts, so the checks run in a
subprocess with XLA_FLAGS set to give it four CPU devices."""
import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import sys
    import jax
    import numpy as np
    import relayish as rl

    assert len(jax.devices("cpu")) == 4, jax.devices()
    F64 = "float64"
    rng = np.random.default_rng(1)
    x, y = rl.var("x", shape=(4,), dtype=F64), rl.var("y", shape=(), dtype=F64)
    w1, w2 = rl.var("w1", shape=(4, 8), dtype=F64), rl.var("w2", shape=(8,), dtype=F64)
    h = rl.tanh(rl.matmul(rl.reshape(x, (1, 4)), w1))
    out = rl.sum(rl.reshape(h, (8,)) * w2)
    f = rl.Function([w1, w2, x, y], (out - y) * (out - y))
    vg = rl.vmap(rl.value_and_grad(f, argnums=(0, 1)), in_axes=(None, None, 0, 0))
    args = (rng.normal(size=(4, 8)), rng.normal(size=8), rng.normal(size=(12, 4)),
            rng.normal(size=12))
    alone = rl.compile(vg)(*args)

    def check(run, n):
        got = run(*args)
        leaves = jax.tree_util.tree_leaves(got)
        for g, e in zip(leaves, jax.tree_util.tree_leaves(alone)):
            assert g.sharding.device_set == set(run.devices), (g.sharding, run.devices)
            assert len(g.sharding.device_set) == n and g.sharding.spec[0] == "batch"
            # each device holds its slice of the batch, not a copy of all of it
            assert {s.data.shape[0] for s in g.addressable_shards} == {12 // n}
            np.testing.assert_allclose(np.asarray(g), np.asarray(e), rtol=1e-12, atol=1e-14)
        assert run.trace_count == 1

    check(rl.compile(vg, devices=jax.devices("cpu")), 4)
    check(rl.compile(vg, devices=["cpu:1", "cpu:3"]), 2)
    check(rl.compile(vg, devices="cpu"), 4)

    # a batch on axis 1 of a tuple argument is split along that axis
    p = rl.var("p", type=rl.TupleType([rl.TensorType((3, 2), F64), rl.TensorType((3,), F64)]))
    g = rl.Function([p], rl.sum(rl.TupleGetItem(p, 0)) * rl.TupleGetItem(p, 1))
    vt = rl.vmap(g, in_axes=1)
    pair = (rng.normal(size=(3, 8, 2)), rng.normal(size=(3, 8)))
    got = rl.compile(vt, devices=jax.devices("cpu"))(pair)
    assert got.shape == (8, 3) and len(got.sharding.device_set) == 4
    np.testing.assert_allclose(np.asarray(got), rl.evaluate(vt, pair), rtol=1e-12)

    try:
        rl.compile(vg, devices=jax.devices("cpu"))(args[0], args[1], args[2][:10], args[3][:10])
    except rl.EvaluationError as e:
        assert "a batch of 10 example(s) does not split evenly over 4 devices" in str(e), e
    else:
        raise AssertionError("an uneven batch was accepted")

    # a batch of trees: node tables stacked [B, capacity, ...], their rows sharded by example
    sys.path.insert(0, "examples")
    from treelstm import init_params, random_tree, to_value, treelstm_module
    dims = dict(vocab=20, embed=6, hidden=4, classes=3)
    mod = treelstm_module(**dims)
    params = init_params(np.random.default_rng(0), **dims)
    trees = [to_value(mod, random_tree(rng, int(rng.integers(1, 9)), 20)) for _ in range(8)]
    ys = rng.integers(3, size=8).astype(np.int32)
    vt = rl.vmap(mod, in_axes=(None,) * len(params) + (0, 0))
    got = rl.compile(vt, devices=jax.devices("cpu"))(*params, trees, ys)
    assert len(got.sharding.device_set) == 4
    np.testing.assert_allclose(np.asarray(got), rl.evaluate(vt, *params, trees, ys), rtol=1e-5)
    print("ok")
""")


def test_the_batch_is_sharded_over_four_simulated_cpu_devices():
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4",
               JAX_PLATFORMS="cpu")
    root = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir)
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                         env=env, timeout=300, cwd=root)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stdout + out.stderr
