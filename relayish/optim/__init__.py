"""Newton-style optimizers over relayish objectives."""
from relayish.errors import RelayishError


def minimize(f, x0, method="newton", tol=1e-8, max_iter=100, backend="jax", verbose=False):
    raise RelayishError("rl.optim.minimize is not implemented yet")
