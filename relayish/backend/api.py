"""rl.compile: run a function or module on a backend.

    run = rl.compile(f, backend="jax", device="cpu")    # one XLA computation, traced per shape
    run = rl.compile(f, backend="interpreter")          # the numpy reference interpreter
    run(*args)
"""
from relayish.errors import EvaluationError, RelayishError
from relayish.backend import registry
from relayish.backend.batching import Batched, compile_batched


def compile(f_or_mod, backend="jax", device=None, limits=None,  # noqa: A001 - API name
            debug_nans=False, debug_alloc=False, devices=None, capacity=None,
            check_indices=True):
    """A callable running `f_or_mod` (a Function, or a Module's @main) on `backend`, one of the
    registered backends (relayish/backend/registry.py: `registry.names()`).

    backend="jax": lowered to XLA by tracing under jax.jit (relayish/backend/jax/);
    device="cpu" (the default) or "gpu" (a CUDA device; a RelayishError when jax has none).
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
    With debug_nans the program's zero adjoints (reverse AD's) are compiled as ordinary zeros,
    so that a NaN the jax backend would fold into 0 shows (ir/passes/ieee_zeros.py).
    capacity: a dict sizing the jax backend's loops over dynamic structure (a tree or list
    argument folded by a recognized recursion runs as one XLA loop for every shape, issue 17):
    "nodes" (rows of a node table; default: the node count rounded up to a power of two, so
    a data set compiles once per bucket, while a fixed capacity compiles once). An argument
    over capacity is an EvaluationError naming it.
    check_indices: an index out of range (take, gather, scatter_add) is an EvaluationError
    naming the op and the call on every backend: the interpreter's impls raise, and the jax
    backend checks each call's indices (jax itself clamps them; backend/jax/index_checks.py).
    check_indices=False drops the jax checks for speed, and jax's clamping applies (rl.vmap
    programs are checked per example).
    A batched program (rl.vmap, backend/batching.py) runs as one jax.vmap on the jax backend;
    devices= (jax devices or strings such as "cpu:0") shards its batch over a 1-D mesh of them.
    An unknown backend or device, or limits= for a backend that takes none, is a RelayishError
    naming what is registered.

    >>> x = rl.var("x", shape=(3,)); run = rl.compile(rl.Function([x], rl.sum(x * x)))
    >>> run(np.ones(3, "float32"))    # Array(3., dtype=float32)
    """
    record = registry.get(backend)
    if debug_nans and not isinstance(f_or_mod, Batched):
        # reverse AD's zero adjoints as ordinary zeros, so that the jax backend does not fold
        # `g * 0` at an inf or nan g into 0 (ir/passes/ieee_zeros.py): the NaN shows
        from relayish.ir.passes.ieee_zeros import ieee_zeros
        f_or_mod = ieee_zeros(f_or_mod)
    if isinstance(f_or_mod, Batched):
        if devices is not None and device is not None:
            raise RelayishError("rl.compile takes device= or devices= (a batch sharded over "
                                "several devices), not both")

        def compile_one(program, platform):
            return registry.compile_with(record, program, device=platform or device,
                                         limits=limits, capacity=capacity,
                                         check_indices=check_indices)
        run = compile_batched(f_or_mod, record, compile_one, devices)
    elif devices is not None:
        raise RelayishError("devices= shards a batch over several devices: compile a batched "
                            "program, rl.compile(rl.vmap(f), devices=...)")
    else:
        run = registry.compile_with(record, f_or_mod, device=device, limits=limits,
                                    capacity=capacity, check_indices=check_indices)
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
