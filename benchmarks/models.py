"""Models written for the competitors, shared by the benchmark scripts (run as
`python benchmarks/<name>.py`, which puts this folder on sys.path). Only the benchmarks import
torch: it is in the `bench` extra, not a dependency of relayish."""


def torch_treelstm(params, device="cpu"):
    """The TreeLSTM of examples/treelstm.py in PyTorch: (ps, step), ps the parameters as leaf
    tensors on `device`, step(tree, y) the loss after loss.backward() (gradients in p.grad)."""
    import torch
    ps = [torch.tensor(p, device=device, requires_grad=True) for p in params]
    E, Wl, bl, U, bn, Wo, bo = ps

    def cell(t):
        if not isinstance(t, tuple):
            i, o, u = (Wl @ E[t] + bl).chunk(3)
            c = torch.sigmoid(i) * torch.tanh(u)
            return torch.sigmoid(o) * torch.tanh(c), c
        (hl, cl), (hr, cr) = cell(t[0]), cell(t[1])
        i, fl, fr, o, u = (U @ torch.cat([hl, hr]) + bn).chunk(5)
        c = torch.sigmoid(i) * torch.tanh(u) + torch.sigmoid(fl) * cl + torch.sigmoid(fr) * cr
        return torch.sigmoid(o) * torch.tanh(c), c

    def step(tree, y):
        for p in ps:
            p.grad = None
        loss = -torch.log_softmax(Wo @ cell(tree)[0] + bo, 0)[y]
        loss.backward()
        return loss
    return ps, step


def jax_mlp(n_layers, reduce="mean"):
    """f(*params, x, y) in jax.numpy: `n_layers` dense layers (params are W1, b1, W2, b2, ...),
    tanh between them, the squared error reduced by "mean" or "sum"."""
    import jax.numpy as jnp
    reduction = {"mean": jnp.mean, "sum": jnp.sum}[reduce]

    def f(*args):
        params, x, y = args[:-2], args[-2], args[-1]
        h = x
        for k in range(n_layers):
            h = h @ params[2 * k] + params[2 * k + 1]
            if k < n_layers - 1:
                h = jnp.tanh(h)
        err = h - y
        return reduction(err * err)
    return f
