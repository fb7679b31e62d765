"""Interoperation with jax and PyTorch: rl.from_jax, rl.to_jax, rl.from_torch."""
from relayish.interop.jaxpr import from_jax
from relayish.interop.to_jax import to_jax
from relayish.interop.torch import from_torch
