"""A transformer block in relayish (pre-norm, one attention head, GELU MLP) and its gradient,
checked against the same block written in jax.

    python examples/transformer.py [--backend interpreter|jax]

    h   = layer_norm(x)                                      x: (batch, tokens, d)
    a   = softmax(q k^T / sqrt(d)) v,  q, k, v = dense(h, Wq), dense(h, Wk), dense(h, Wv)
    x1  = x + dense(a, Wo)
    out = x1 + dense(gelu(dense(layer_norm(x1), W1)), W2),   gelu(z) = z/2 (1 + erf(z/sqrt 2))

The loss is the mean square of the output; rl.grad gives its gradient with respect to x and
every weight, which main() compares with jax.grad of the jax version.
"""
import argparse
import math

import numpy as np

import relayish as rl

BATCH, TOKENS, D, HIDDEN = 2, 4, 8, 16
WEIGHTS = {"wq": (D, D), "wk": (D, D), "wv": (D, D), "wo": (D, D), "w1": (HIDDEN, D),
           "w2": (D, HIDDEN), "g1": (D,), "b1": (D,), "g2": (D,), "b2": (D,)}


def block(x, p):
    """The block on relayish expressions; p maps WEIGHTS names to expressions."""
    h = rl.nn.layer_norm(x, p["g1"], p["b1"], axis=-1)
    q, k, v = (rl.nn.dense(h, p[n]) for n in ("wq", "wk", "wv"))
    scores = rl.nn.batch_matmul(q, k) / rl.const(math.sqrt(D), "float64")   # q k^T
    attention = rl.nn.batch_matmul(rl.nn.softmax(scores, axis=-1), v, transpose_b=False)
    x1 = x + rl.nn.dense(attention, p["wo"])
    z = rl.nn.dense(rl.nn.layer_norm(x1, p["g2"], p["b2"]), p["w1"])
    gelu = z * rl.const(0.5, "float64") * (
        rl.const(1.0, "float64") + rl.erf(z / rl.const(math.sqrt(2.0), "float64")))
    return x1 + rl.nn.dense(gelu, p["w2"])


def make_loss():
    """fn(x, wq, wk, ..., b2) -> mean(block(x)^2), a relayish Function."""
    x = rl.var("x", shape=(BATCH, TOKENS, D), dtype="float64")
    params = {n: rl.var(n, shape=s, dtype="float64") for n, s in WEIGHTS.items()}
    out = block(x, params)
    return rl.Function([x, *params.values()], rl.mean(out * out))


def jax_loss(x, *weights):
    """The same block in jax (the reference)."""
    import jax
    import jax.numpy as jnp
    p = dict(zip(WEIGHTS, weights))

    def norm(v, g, b):
        c = v - v.mean(-1, keepdims=True)
        return c / jnp.sqrt((c * c).mean(-1, keepdims=True) + 1e-5) * g + b
    h = norm(x, p["g1"], p["b1"])
    q, k, v = h @ p["wq"].T, h @ p["wk"].T, h @ p["wv"].T
    a = jax.nn.softmax(q @ jnp.swapaxes(k, 1, 2) / math.sqrt(D), axis=-1) @ v
    x1 = x + a @ p["wo"].T
    z = norm(x1, p["g2"], p["b2"]) @ p["w1"].T
    out = x1 + (z * 0.5 * (1 + jax.scipy.special.erf(z / math.sqrt(2.0)))) @ p["w2"].T
    return jnp.mean(out * out)


def make_inputs(seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((BATCH, TOKENS, D))
    weights = [rng.standard_normal(s) / math.sqrt(s[-1]) if len(s) == 2
               else 1.0 + 0.1 * rng.standard_normal(s) for s in WEIGHTS.values()]
    return [x, *weights]


def gradients(backend="interpreter"):
    """(relayish gradients, jax gradients) w.r.t. x and every weight, at make_inputs()."""
    import jax
    args = make_inputs()
    grad = rl.grad(make_loss(), argnums=tuple(range(len(args))))
    ours = (rl.compile(grad, backend="jax")(*args) if backend == "jax"
            else rl.evaluate(grad, *args))
    with jax.enable_x64(True):
        theirs = jax.grad(jax_loss, argnums=tuple(range(len(args))))(*args)
    return [np.asarray(g) for g in ours], [np.asarray(g) for g in theirs]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["interpreter", "jax"], default="interpreter")
    args = parser.parse_args(argv)
    ours, theirs = gradients(args.backend)
    worst = max(float(np.max(np.abs(a - b))) for a, b in zip(ours, theirs))
    print(f"gradients of {len(ours)} inputs; largest difference from jax.grad: {worst:.2e}")
    return worst


if __name__ == "__main__":
    main()
