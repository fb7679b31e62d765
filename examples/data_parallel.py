"""Data-parallel training of a relayish model, scaled out by jax (docs/scaling.md).

The model is relayish text; rl.to_jax makes it a jax function whose jax.grad is relayish's
reverse mode. Each device takes its shard of the batch (jax.shard_map over a Mesh), computes
relayish's gradient of its loss, and the gradients are averaged across devices (lax.pmean):
the same step as one device on the whole batch.

    python examples/data_parallel.py --devices 4     # 4 simulated CPU devices, one process
    python examples/data_parallel.py --processes 2   # 2 processes, jax.distributed on localhost

Each run prints the largest difference between the sharded training and the same steps on
one device ("max difference ...") and exits non-zero when it is over 1e-12.
"""
import argparse
import os
import socket
import subprocess
import sys

MODEL = """
def @main(%w1: Tensor[(3, 16), float64], %w2: Tensor[(16), float64],
          %x: Tensor[(8, 3), float64], %y: Tensor[(8), float64]) -> float64 {
  let %h = tanh(matmul(%x, %w1));
  let %err = matmul(%h, %w2) - %y;
  mean(%err * %err)
}
"""
BATCH, STEPS, RATE = 8, 5, 0.1


def data(n_shards):
    """The global batch (n_shards * BATCH examples) and the initial weights, the same in every
    process (a fixed seed)."""
    import numpy as np
    r = np.random.default_rng(0)
    x = r.normal(size=(n_shards * BATCH, 3))
    y = np.sin(x.sum(axis=1))
    return (r.normal(size=(3, 16)) * 0.5, r.normal(size=16) * 0.5), x, y


def train(mesh, params, x, y):
    """STEPS steps of SGD, sharded: each device its BATCH examples, gradients averaged."""
    import jax
    from jax.sharding import NamedSharding, PartitionSpec as P
    import relayish as rl

    loss = rl.to_jax(rl.parse(MODEL))

    def local_step(w1, w2, x, y):
        g1, g2 = jax.grad(loss, argnums=(0, 1))(w1, w2, x, y)     # relayish's reverse mode
        g1, g2 = jax.lax.pmean(g1, "data"), jax.lax.pmean(g2, "data")
        return w1 - RATE * g1, w2 - RATE * g2

    step = jax.jit(jax.shard_map(local_step, mesh=mesh, check_vma=False,
                                 in_specs=(P(), P(), P("data"), P("data")),
                                 out_specs=(P(), P())))
    shard = NamedSharding(mesh, P("data"))
    x = jax.make_array_from_callback(x.shape, shard, lambda index: x[index])
    y = jax.make_array_from_callback(y.shape, shard, lambda index: y[index])
    w1, w2 = params
    for _ in range(STEPS):
        w1, w2 = step(w1, w2, x, y)
    return w1, w2


def reference(params, x, y, n_shards):
    """The same steps on one device, unsharded: the mean of the shards' mean losses."""
    import jax
    import jax.numpy as jnp
    import relayish as rl
    loss = rl.to_jax(rl.parse(MODEL))

    def total(w1, w2):
        xs, ys = x.reshape(n_shards, BATCH, 3), y.reshape(n_shards, BATCH)
        return jnp.mean(jax.vmap(loss, in_axes=(None, None, 0, 0))(w1, w2, xs, ys))
    step = jax.jit(lambda w1, w2: [w - RATE * g for w, g in
                                   zip((w1, w2), jax.grad(total, argnums=(0, 1))(w1, w2))])
    w1, w2 = params
    for _ in range(STEPS):
        w1, w2 = step(w1, w2)
    return w1, w2


def compare(trained, params, x, y, n_shards):
    import numpy as np
    import jax
    expected = reference(params, x, y, n_shards)
    local = [np.asarray(jax.device_get(w.addressable_data(0))) for w in trained]
    moved = max(float(np.max(np.abs(a - b))) for a, b in zip(local, params))
    assert moved > 1e-3, "the steps did not change the weights"
    return max(float(np.max(np.abs(a - np.asarray(b)))) for a, b in zip(local, expected))


def run_devices(n):
    import jax
    from jax.sharding import Mesh
    jax.config.update("jax_enable_x64", True)
    devices = jax.devices()
    assert len(devices) == n, f"asked for {n} devices, jax has {len(devices)}"
    params, x, y = data(n)
    trained = train(Mesh(devices, ("data",)), params, x, y)
    diff = compare(trained, params, x, y, n)
    print(f"{n} devices: max difference from one device {diff:.2e}")
    return diff


def run_process(process_id, n_processes, port):
    import jax
    from jax.sharding import Mesh
    jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=f"localhost:{port}",
                               num_processes=n_processes, process_id=process_id,
                               initialization_timeout=60)
    devices = jax.devices()             # every process's devices: one global mesh
    params, x, y = data(len(devices))
    trained = train(Mesh(devices, ("data",)), params, x, y)
    diff = compare(trained, params, x, y, len(devices))
    print(f"process {process_id} of {n_processes} ({len(devices)} devices in all): "
          f"max difference from one device {diff:.2e}", flush=True)
    jax.distributed.shutdown()
    return diff


def free_port():
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def launch(n_processes, timeout=240):
    """Start n_processes copies of this script on a free localhost port; wait (bounded)."""
    port = free_port()
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=1")
    procs = [subprocess.Popen([sys.executable, __file__, "--process-id", str(k),
                               "--processes", str(n_processes), "--port", str(port)],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True) for k in range(n_processes)]
    outputs, ok = [], True
    try:
        for p in procs:
            out, _ = p.communicate(timeout=timeout)
            outputs.append(out)
            ok = ok and p.returncode == 0
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for out in outputs:
        last = [line for line in out.splitlines() if line.strip()][-1:] or ["(no output)"]
        print(last[0] if ok else out)
    return ok


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int)
    parser.add_argument("--processes", type=int)
    parser.add_argument("--process-id", type=int)
    parser.add_argument("--port", type=int)
    args = parser.parse_args()
    if args.process_id is not None:
        return 0 if run_process(args.process_id, args.processes, args.port) < 1e-12 else 1
    if args.processes:
        return 0 if launch(args.processes) else 1
    n = args.devices or 4
    if "jax" in sys.modules:
        raise SystemExit("set the device count before jax starts: run this as a script")
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                               + f" --xla_force_host_platform_device_count={n}")
    return 0 if run_devices(n) < 1e-12 else 1


if __name__ == "__main__":
    sys.exit(main())
