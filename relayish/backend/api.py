"""rl.compile: run a function or module on a backend.

    run = rl.compile(f, backend="jax", device="cpu")    # one XLA computation, traced per shape
    run = rl.compile(f, backend="interpreter")          # the numpy reference interpreter
    run(*args)
"""
from relayish.errors import EvaluationError
from relayish.backend import registry


def compile(f_or_mod, backend="jax", device="cpu", limits=None,  # noqa: A001 - API name
            debug_nans=False, debug_alloc=False):
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
    debug_nans / debug_alloc: the interpreter's debug modes (rl.evaluate). On another backend,
    debug_nans checks each result and, where one holds a NaN or an Inf, runs the program again
    in the interpreter with debug_nans to name the first binding that makes it (as jax's own
    debug_nans re-runs op by op); debug_alloc runs the program in the interpreter's mode.
    An unknown backend or device, or limits= for a backend that takes none, is a RelayishError
    naming what is registered.

    >>> x = rl.var("x", shape=(3,)); run = rl.compile(rl.Function([x], rl.sum(x * x)))
    >>> run(np.ones(3, "float32"))    # Array(3., dtype=float32)
    """
    record = registry.get(backend)
    run = registry.compile_with(record, f_or_mod, device=device, limits=limits)
    if not (debug_nans or debug_alloc):
        return run
    from relayish.backend.interp.api import evaluate
    if record.name == "interpreter" or debug_alloc:
        def run_debug(*args):
            return evaluate(f_or_mod, *args, debug_nans=debug_nans, debug_alloc=debug_alloc)
        return run_debug
    from relayish.backend.runtime.summary import has_nonfinite

    def run_checked(*args):
        result = run(*args)
        if has_nonfinite(result):
            evaluate(f_or_mod, *args, debug_nans=True)     # raises at the first such binding
            raise EvaluationError(f"debug_nans: the {record.name} backend's result holds a NaN "
                                  "or an Inf, but the interpreter computes none (a difference "
                                  "between the backends' arithmetic)")
        return result
    return run_checked
