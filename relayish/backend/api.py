"""rl.compile: run a function or module on a backend.

    run = rl.compile(f, backend="jax", device="cpu")    # one XLA computation, traced per shape
    run = rl.compile(f, backend="interpreter")          # the numpy reference interpreter
    run(*args)
"""
from relayish.errors import RelayishError
from relayish.ir.expr import describe

BACKENDS = ("jax", "interpreter")


def compile(f_or_mod, backend="jax", device="cpu", limits=None):  # noqa: A001 - API name
    """A callable running `f_or_mod` (a Function, or a Module's @main) on `backend`.

    backend="jax": lowered to XLA by tracing under jax.jit (relayish/backend/jax/);
    device="cpu" or "gpu" (a CUDA device; a RelayishError when jax has none).
    limits: a dict overriding the bounds on tracing (relayish.backend.jax.TRACE_LIMITS):
    "max_depth" (longest chain of dependent operations handed to XLA, 10,000: deeper programs
    crash XLA's compiler), "max_ops" (tensor operations recorded in one trace, 200,000) and
    "max_seconds" (one trace's wall time, 300). Past one, a CompileError says to use the
    interpreter.
    backend="interpreter": each call is rl.evaluate(f_or_mod, *args).

    >>> x = rl.var("x", shape=(3,)); run = rl.compile(rl.Function([x], rl.sum(x * x)))
    >>> run(np.ones(3, "float32"))    # Array(3., dtype=float32)
    """
    if not isinstance(backend, str):
        raise RelayishError(f"backend must be one of {', '.join(BACKENDS)}, got {describe(backend)}")
    if backend == "jax":
        from relayish.backend.jax import compile_jax
        return compile_jax(f_or_mod, device=device, limits=limits)
    if backend == "interpreter":
        if limits is not None:
            raise RelayishError("limits= bounds tracing for XLA; the interpreter takes none")
        if device not in (None, "cpu"):
            raise RelayishError(f"the interpreter runs on the cpu only, got device={device!r}")
        from relayish.backend.interpreter import evaluate

        def run(*args):
            return evaluate(f_or_mod, *args)
        run.__doc__ = "rl.evaluate of the compiled function"
        return run
    raise RelayishError(f"unknown backend {backend!r}; expected one of {', '.join(BACKENDS)}")
