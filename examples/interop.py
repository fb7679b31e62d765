"""jax and PyTorch models in relayish, and back to jax (docs/interop.md).

1. A jax function with a while loop (a fixed-point iteration that runs until converged):
   rl.from_jax reads it; relayish's gradient goes through the loop, which jax.grad refuses.
2. rl.to_jax exports it back; it is trained inside jax.jit with optax when optax is
   installed, by plain SGD otherwise, its gradients being relayish's reverse mode.
3. A small PyTorch CNN read with rl.from_torch: relayish's parameter gradients against
   PyTorch's autograd (skipped when torch is not installed).

    python examples/interop.py
"""
import numpy as np
import jax
import jax.numpy as jnp

import relayish as rl

jax.config.update("jax_enable_x64", True)


def fixed_point_layer(w, x):
    """z = tanh(x @ w + 0.5 z), iterated until it stops moving; the loss is mean(z^2)."""
    def step(c):
        z, _ = c
        return jnp.tanh(x @ w + 0.5 * z), z
    z, _ = jax.lax.while_loop(lambda c: jnp.max(jnp.abs(c[0] - c[1])) > 1e-12, step,
                              (jnp.zeros((x.shape[0], w.shape[1])), jnp.ones((x.shape[0],
                                                                              w.shape[1]))))
    return jnp.mean((z - 0.3) ** 2)


def jax_model(steps=30):
    rng = np.random.default_rng(0)
    w, x = rng.normal(size=(4, 3)) * 0.5, rng.normal(size=(5, 4))
    mod = rl.from_jax(fixed_point_layer, w, x)
    try:
        jax.grad(fixed_point_layer)(w, x)
        raise AssertionError("jax reversed the while loop")
    except ValueError:
        pass                                   # jax: reverse mode through while_loop fails
    g = np.asarray(rl.compile(rl.grad(mod), backend="jax")(w, x))
    # the implicit function theorem's gradient of the fixed point, by finite differences
    eps, d = 1e-6, rng.normal(size=w.shape)
    fd = (fixed_point_layer(w + eps * d, x) - fixed_point_layer(w - eps * d, x)) / (2 * eps)
    assert abs(np.vdot(g, d) - fd) < 1e-7 * max(1.0, abs(fd)), (np.vdot(g, d), fd)

    loss = rl.to_jax(mod)
    try:
        import optax
        opt, how = optax.adam(0.05), "optax adam"
    except ImportError:
        opt, how = None, "SGD"
    w_t = jnp.asarray(w)
    if opt is not None:
        state = opt.init(w_t)

        @jax.jit
        def step(w, state):
            value, g = jax.value_and_grad(loss)(w, x)
            updates, state = opt.update(g, state, w)
            return optax.apply_updates(w, updates), state, value
    else:
        state = None

        @jax.jit
        def step(w, state):
            value, g = jax.value_and_grad(loss)(w, x)
            return w - 0.5 * g, state, value
    values = []
    for _ in range(steps):
        w_t, state, value = step(w_t, state)
        values.append(float(value))
    print(f"jax model with a while loop: trained with {how} through rl.to_jax, "
          f"loss {values[0]:.4f} -> {values[-1]:.4f}")
    assert values[-1] < values[0]
    return values


def torch_cnn():
    try:
        import torch
    except ImportError:
        print("PyTorch CNN: skipped (torch is not installed)")
        return None

    class SmallCNN(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(1, 3, 3, padding=1)
            self.fc = torch.nn.Linear(3 * 4 * 4, 2)

        def forward(self, x):
            h = torch.nn.functional.max_pool2d(torch.relu(self.conv(x)), 2)
            return torch.log_softmax(self.fc(h.flatten(1)), dim=-1)

    torch.manual_seed(0)
    cnn = SmallCNN().double()
    images = torch.randn(4, 1, 8, 8, dtype=torch.float64)
    mod = rl.from_torch(cnn, (images,))
    params = [p.detach().numpy() for p in cnn.parameters()]
    _, grads = rl.evaluate(rl.gradient(mod), *params, images.numpy())
    cnn(images).sum().backward()
    worst = max(float(np.max(np.abs(g - p.grad.numpy()))) for g, p in zip(grads,
                                                                          cnn.parameters()))
    print(f"PyTorch CNN: relayish's parameter gradients vs autograd, largest difference "
          f"{worst:.1e}")
    assert worst < 1e-10
    return worst


if __name__ == "__main__":
    jax_model()
    torch_cnn()
