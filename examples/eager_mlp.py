"""A two-layer MLP trained by SGD, written as ordinary Python on recorded tensors.

    python examples/eager_mlp.py [--steps 2000] [--lr 0.1]

Each step records the forward pass, asks `re.grad` for the gradients (relayish's reverse AD
on the recorded program), records the update under `re.no_grad()` and inspects the loss,
which runs the step as one program. The first step runs on the interpreter; from the second
on the step's structure is found in the cache and runs as one compiled jax program. The data
are a synthetic regression set: y = sin(x . a) + noise.
"""
import argparse
import time

import numpy as np

from relayish import eager as re


def make_data(n=256, d=4, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)).astype("float32")
    a = rng.normal(size=(d, 1)).astype("float32")
    Y = (np.sin(X @ a) + 0.05 * rng.normal(size=(n, 1))).astype("float32")
    return X, Y


def init_params(d, hidden=32, seed=1):
    rng = np.random.default_rng(seed)
    return [re.tensor((rng.normal(size=(d, hidden)) / np.sqrt(d)).astype("float32")),
            re.tensor(np.zeros(hidden, "float32")),
            re.tensor((rng.normal(size=(hidden, 1)) / np.sqrt(hidden)).astype("float32")),
            re.tensor(np.zeros(1, "float32"))]


def predict(params, X):
    w1, b1, w2, b2 = params
    return re.tanh(X @ w1 + b1) @ w2 + b2


def sgd_step(params, X, Y, lr):
    loss = ((predict(params, X) - Y) ** 2.0).mean()
    grads = re.grad(loss, wrt=params)
    with re.no_grad():
        params = [p - lr * g for p, g in zip(params, grads)]
    return loss, params


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--lr", type=float, default=0.1)
    args = parser.parse_args()
    X0, Y0 = make_data()
    X, Y = re.tensor(X0), re.tensor(Y0)
    params = init_params(X0.shape[1])
    start = None
    for step in range(1, args.steps + 1):
        loss, params = sgd_step(params, X, Y, args.lr)
        value = float(loss)          # runs this step's program
        if step == 2:                # the first step interprets, the second compiles
            start = time.perf_counter()
        if step == 1 or step % (args.steps // 5 or 1) == 0:
            print(f"step {step:5d}  loss {value:.5f}")
    s = re.stats()
    steady = (time.perf_counter() - start) / max(1, args.steps - 2) if start else float("nan")
    print(f"steady steps: {steady * 1e6:.0f} us each; cache: {s['hits']} hits, "
          f"{s['misses']} misses, {s['compiles']} compile(s)")


if __name__ == "__main__":
    main()
