"""Devices: the jax device behind rl.compile(..., device="cpu" | "gpu").

"gpu" (or "cuda") is jax's first CUDA device; without one it is a CompileError (the program
cannot be compiled for that device here) naming the platforms jax has. A device that is not jax's default is given to jax.jit as a
SingleDeviceSharding (function.py).
"""
from __future__ import annotations

from relayish.errors import CompileError, RelayishError
from relayish.backend.jax.values import load_jax


def resolve_device(device):
    """The jax device for "cpu" / "gpu" (CUDA), or a CompileError saying why there is none."""
    jax = load_jax()
    name = "cpu" if device is None else str(device).lower()
    if name in ("gpu", "cuda"):
        try:
            devices = jax.devices("gpu")
        except RuntimeError:
            devices = []
        if not devices:
            raise CompileError(
                "device='gpu' was requested but jax has no CUDA device here (jax sees: "
                f"{', '.join(sorted({d.platform for d in jax.devices()}))}); install a CUDA "
                "build of jax on a machine with an NVIDIA GPU, or use device='cpu'")
        return devices[0]
    if name == "cpu":
        return jax.devices("cpu")[0]
    raise RelayishError(f"unknown device {device!r}; expected 'cpu' or 'gpu'")
