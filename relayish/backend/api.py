"""rl.compile: pick a backend for a function or module."""
from relayish.errors import RelayishError


def compile(f_or_mod, backend="jax", device="cpu"):  # noqa: A001 - API name
    raise RelayishError("the jax backend is not implemented yet; use rl.evaluate")
