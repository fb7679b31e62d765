"""rl.compile: run a function or module on a backend.

    run = rl.compile(f, backend="jax", device="cpu")    # one XLA computation, traced per shape
    run = rl.compile(f, backend="interpreter")          # the numpy reference interpreter
    run(*args)
"""
from relayish.backend import registry


def compile(f_or_mod, backend="jax", device="cpu", limits=None):  # noqa: A001 - API name
    """A callable running `f_or_mod` (a Function, or a Module's @main) on `backend`, one of the
    registered backends (relayish/backend/registry.py: `registry.names()`).

    backend="jax": lowered to XLA by tracing under jax.jit (relayish/backend/jax/);
    device="cpu" or "gpu" (a CUDA device; a RelayishError when jax has none).
    limits: a dict overriding the bounds on tracing (relayish.backend.jax.TRACE_LIMITS):
    "max_depth" (longest chain of dependent operations handed to XLA, 10,000: deeper programs
    crash XLA's compiler), "max_ops" (tensor operations recorded in one trace, 200,000) and
    "max_seconds" (one trace's wall time, 300). Past one, a CompileError says to use the
    interpreter.
    backend="interpreter": each call is rl.evaluate(f_or_mod, *args).
    An unknown backend or device, or limits= for a backend that takes none, is a RelayishError
    naming what is registered.

    >>> x = rl.var("x", shape=(3,)); run = rl.compile(rl.Function([x], rl.sum(x * x)))
    >>> run(np.ones(3, "float32"))    # Array(3., dtype=float32)
    """
    return registry.compile_with(registry.get(backend), f_or_mod, device=device, limits=limits)
