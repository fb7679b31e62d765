"""The backend registry: every backend's record, read by rl.compile, the optimizers and the CLI.

A backend is one `Backend` record registered here by name:

    register(Backend(name="interpreter", load=..., devices=("cpu",), ...))

`load()` returns its compile function `(f_or_mod, device, limits) -> callable`, imported only
then (so that listing the backends, or running on the interpreter, never imports jax).
Who reads what:
* `rl.compile` (backend/api.py): `get(name)`, `check_device`, `takes_limits`, `load`;
* rl.optim (optim/problem.py, optim/backends.py): `compiles` (pay the setup once: warm up),
  `jax_traceable` (Newton's vmapped device path), `setup_cost` (backend="auto");
* the command line (cli.py): `names()`, `all_devices()` for the choices of --backend/--device.
"auto" is not a backend: it is optim's policy over the registered ones (start on a backend
with no setup cost, switch to the cheapest compiling one; optim/backends.py).

Adding a backend touches its package plus one `register` call at the end of this module.
Errors for an unknown backend or device are RelayishErrors listing the registered names.
"""
from __future__ import annotations

import sys
from typing import Callable

import attrs
import numpy as np

from relayish.errors import RelayishError
from relayish.ir.expr import Function
from relayish.ir.link import link_program
from relayish.ir.module import Module


@attrs.frozen
class Backend:
    """What the rest of relayish needs to know about one backend.

    name: the string users pass (rl.compile(backend=...), minimize(backend=...), --backend).
    load: () -> compile function (f_or_mod, device, limits) -> callable; imports the backend.
    devices: the device names it runs on (the first is the default); matched without case.
    device_aliases: other spellings of those names ({"cuda": "gpu"}).
    takes_limits: whether rl.compile's `limits=` means something to it.
    to_numpy: a result array -> numpy array (results of compiled programs may be device arrays).
    array_namespace: () -> the module its results are arrays of (numpy, jax.numpy); imports it.
    jax_traceable: its compiled callables offer `.jax_function()`, a pure jax function that
        jax.vmap and lax loops can take (optim's Newton on the device).
    setup_cost: (method, gradient op calls) -> modelled CPU seconds to get an optimizer problem
        ready (derive, compile, warm up), for backend="auto"; None for a backend that runs at
        once (nothing to compile).
    summary: one line for help texts and docs.
    """
    name: str
    load: Callable
    devices: tuple
    takes_limits: bool
    array_namespace: Callable
    summary: str
    to_numpy: Callable = np.asarray
    jax_traceable: bool = False
    setup_cost: Callable | None = None
    device_aliases: dict = attrs.field(factory=dict, hash=False)

    def device_name(self, device):
        """The registered name `device` spells (None: the default), or None if it is not one."""
        if device is None:
            return self.devices[0]
        name = str(device).lower()
        name = self.device_aliases.get(name, name)
        return name if name in self.devices else None

    @property
    def compiles(self):
        """It pays a setup (tracing, compilation) before its first run: worth warming up."""
        return self.setup_cost is not None


_BACKENDS = {}       # name -> Backend, in registration order (the first is the default listing)
_USED = set()        # names of the backends something was compiled with in this process


def register(backend):
    """Add a Backend record (or replace the one of that name); returns it."""
    if not isinstance(backend, Backend):
        raise RelayishError(f"register takes a Backend record, got {type(backend).__name__}")
    _BACKENDS[backend.name] = backend
    return backend


def names():
    """The registered backend names, in registration order."""
    return tuple(_BACKENDS)


def all_devices():
    """Every device name some registered backend runs on (for --device choices)."""
    return tuple(dict.fromkeys(d for b in _BACKENDS.values() for d in b.devices))


def get(name):
    """The Backend record named `name`, or a RelayishError listing the registered names."""
    if not isinstance(name, str):
        raise RelayishError(f"backend must be one of {', '.join(_BACKENDS)}, got "
                            f"{type(name).__name__} {name!r}")
    try:
        return _BACKENDS[name]
    except KeyError:
        raise RelayishError(f"unknown backend {name!r}; expected one of "
                            f"{', '.join(_BACKENDS)}") from None


def check_device(backend, device):
    """A RelayishError unless the Backend record `backend` runs on `device` (None: default)."""
    if backend.device_name(device) is not None:
        return
    if not any(b.device_name(device) for b in _BACKENDS.values()):
        raise RelayishError(f"unknown device {device!r}; expected one of "
                            f"{', '.join(all_devices())}")
    # the words rl.compile and minimize have always used for the interpreter on a gpu
    raise RelayishError(f"the {backend.name} runs on the {' or '.join(backend.devices)} only, "
                        f"got device={device!r}")


def compile_with(backend, f_or_mod, device=None, limits=None, capacity=None,
                 check_indices=True):
    """Compile `f_or_mod` with the Backend record `backend` (device and limits checked).
    check_indices=False: a compiler's index checks off (the interpreter always checks)."""
    check_device(backend, device)
    if limits is not None and not backend.takes_limits:
        raise RelayishError(f"limits= bounds tracing for a compiler; the {backend.name} "
                            "takes none")
    # capacity= sizes a compiler's loops over dynamic structure (jax backend, issue 17)
    extra = {} if capacity is None else {"capacity": capacity}
    if extra and not backend.takes_limits:
        raise RelayishError(f"capacity= sizes a compiler's loops over dynamic structure; the "
                            f"{backend.name} takes none")
    if not isinstance(check_indices, bool):
        raise RelayishError(f"check_indices= must be True or False, got {check_indices!r}")
    if not check_indices and backend.takes_limits:
        extra["check_indices"] = False
    compile_fn = backend.load()
    _USED.add(backend.name)
    if isinstance(f_or_mod, (Function, Module)):
        f_or_mod = link_program(f_or_mod)        # called Modules' globals merged
    return compile_fn(f_or_mod, device=backend.devices[0] if device is None else device,
                      limits=limits, **extra)


def used(name):
    """Has something been compiled with backend `name` in this process (auto's cost model:
    one-time costs such as XLA's first compilation are paid by then)."""
    return name in _USED


# ---- the registered backends -----------------------------------------------------------------

def _load_interpreter():
    from relayish.backend.interp.api import evaluate

    def compile_interpreter(f_or_mod, device="cpu", limits=None):
        def run(*args):
            return evaluate(f_or_mod, *args)
        run.__doc__ = "rl.evaluate of the compiled function"
        return run
    return compile_interpreter


def _load_jax():
    from relayish.backend.jax import compile_jax
    return compile_jax


def _numpy():
    return np


def _jax_numpy():
    import jax.numpy as jnp
    return jnp


# The modelled CPU seconds of the jax backend's setup for an optimizer problem (AD of its
# programs, tracing, XLA compilation, warm-up) on the 2-core development machine, from fits to
# measurements of RelayishProblem(..., "jax") + warm_up against the number of op calls in the
# gradient program (notes/optim.md, "backend='auto'"): (fixed seconds, seconds per op call).
JAX_SETUP_COST = {
    "newton": (0.85, 1.2e-3),        # the XLA loop around the vmapped (f, g, H, p) evaluation
    "newton-cg": (0.25, 0.75e-3),    # objective, gradient and HVP programs
    "trust-ncg": (0.25, 0.75e-3),
    "bfgs": (0.12, 0.35e-3),         # objective and gradient programs
    "gd": (0.12, 0.35e-3),
}
JAX_IMPORT_COST = 0.45      # `import jax` (once per process)
JAX_FIRST_COMPILE_COST = 0.5    # XLA:CPU's first compilation in a process (client, LLVM setup)


def jax_setup_cost(method, gradient_calls):
    """JAX_SETUP_COST for the method and program size, plus jax's one-time costs when this
    process has not paid them yet."""
    fixed, per_call = JAX_SETUP_COST[method]
    cost = fixed + per_call * gradient_calls
    if "jax" not in sys.modules:
        cost += JAX_IMPORT_COST
    if not used("jax"):
        cost += JAX_FIRST_COMPILE_COST
    return cost


register(Backend(
    name="jax", load=_load_jax, devices=("cpu", "gpu"), device_aliases={"cuda": "gpu"},
    takes_limits=True,
    array_namespace=_jax_numpy, jax_traceable=True, setup_cost=jax_setup_cost,
    summary="traced under jax.jit into one XLA computation per argument structure"))
register(Backend(
    name="interpreter", load=_load_interpreter, devices=("cpu",), takes_limits=False,
    array_namespace=_numpy,
    summary="the numpy reference interpreter (rl.evaluate); runs at once, at any depth"))
