"""Train a small CNN written in relayish text (examples/cnn.rly) with rl.grad and plain SGD.

    python examples/cnn.py [--steps 30] [--lr 0.3] [--backend interpreter|jax]

The data set is synthetic: 8x8 images of a horizontal bar, a vertical bar or a diagonal, with
noise, labelled 0, 1, 2. The model (conv2d 3x3, relu, 2x2 max pool, dense, log_softmax) and its
cross-entropy loss are the @main of cnn.rly; rl.grad differentiates it with respect to the four
weight tensors and the loop below takes SGD steps, printing the loss as it falls.
"""
import argparse
import pathlib

import numpy as np

import relayish as rl

MODEL = pathlib.Path(__file__).with_name("cnn.rly")
BATCH, SIZE, CLASSES = 32, 8, 3


def make_data(seed=0):
    """A batch of noisy bar images (32, 1, 8, 8) float32 and their int32 labels."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, CLASSES, BATCH).astype("int32")
    images = rng.normal(0.0, 0.3, (BATCH, 1, SIZE, SIZE))
    for k, label in enumerate(labels):
        at = rng.integers(1, SIZE - 1)
        if label == 0:
            images[k, 0, at, :] += 1.0
        elif label == 1:
            images[k, 0, :, at] += 1.0
        else:
            images[k, 0] += np.eye(SIZE)
    return images.astype("float32"), labels


def init_params(seed=1):
    rng = np.random.default_rng(seed)
    return [rng.normal(0, 0.3, (4, 1, 3, 3)).astype("float32"), np.zeros(4, "float32"),
            rng.normal(0, 0.1, (CLASSES, 64)).astype("float32"), np.zeros(CLASSES, "float32")]


def train(steps=30, lr=0.3, backend="interpreter", log=print):
    """SGD on the fixed batch; returns the losses before each step and after the last."""
    main = rl.parse(MODEL.read_text())["main"]
    loss_and_grads = rl.value_and_grad(main, argnums=(2, 3, 4, 5))
    run = (rl.compile(loss_and_grads, backend="jax") if backend == "jax"
           else lambda *a: rl.evaluate(loss_and_grads, *a))
    x, labels = make_data()
    params = init_params()
    losses = []
    for step in range(steps):
        loss, grads = run(x, labels, *params)
        losses.append(float(loss))
        params = [p - lr * np.asarray(g) for p, g in zip(params, grads)]
        if step % 5 == 0:
            log(f"step {step:3d}  loss {float(loss):.4f}")
    losses.append(float(run(x, labels, *params)[0]))
    log(f"final     loss {losses[-1]:.4f}")
    return losses


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--lr", type=float, default=0.3)
    parser.add_argument("--backend", choices=["interpreter", "jax"], default="interpreter")
    args = parser.parse_args(argv)
    return train(args.steps, args.lr, args.backend)


if __name__ == "__main__":
    main()
