"""The JAX backend: lowering relayish to one XLA computation by abstract evaluation.

    run = rl.compile(f_or_mod, backend="jax", device="cpu")    # compile_jax
    run(*args)            # jax arrays out; traced once per argument structure

Scheme. A relayish program is evaluated once, under `jax.jit`, by a tree-walking evaluator whose
tensors are jax traced values (or numpy arrays where they are known at trace time: constants and
everything computed from constants only). Every other value is a Python object at trace time
(values.py), so the closures and references that reverse AD introduces vanish from the XLA
program: only the tensor operations they perform are recorded. An `if` whose condition is a
trace-time constant takes its branch at trace time; recursion over trace-time structure (Nat,
lists, trees) unrolls. An `if` on a traced condition becomes a lax.switch over the joined
alternatives (joins.py). Recursion whose depth depends on a traced value would nest joins
forever: it is a CompileError naming the function, as are traces too big or too deep for XLA
(limits.py).

Modules, each importing only those listed before it:
    values.py     trace-time values (JClosure, JRef, JAdt, JUnion, TailCall), serials, Frame
    zeros.py      zero adjoints folded at trace time (ZeroTracker)
    dots.py       matmul(transpose(a), b) traced as one dot_general (DotFolding)
    limits.py     TRACE_LIMITS, the join bounds, the chain depth of a jaxpr
    index_checks.py  which op calls index, and their run-time range checks (jax clamps)
    joins.py      switch: probes, the joiner and rebuilder of joined values
    batching.py   a tuple of independent calls traced as one jax.vmap
    dynamic_rule.py    which recursions over ADT arguments run as loops (the rule, IR only)
    dynamic_tables.py  node tables: tree/list arguments as arrays (TableSpec, NodeTable)
    dynamic_defer.py   the backward loop's cost model: pool slots through cells, deferred sums
    dynamic_rows.py    what outlives a loop's iteration (pool slots, family rows); the chain loop
    dynamic_left.py    a left fold (tail recursion with an accumulator) as one while loop
    dynamic_loops.py   a fold over a node table as one lax loop
    dynamic_tail.py    a tail recursion with a traced trip count as one lax.while_loop
    dynamic_nest.py    a gradient's loop nested in another, its tape replayed backward
    trace.py      TraceEvaluator: one visit_<Node> per node kind
    dtypes.py     does a program need float64 (x64 mode)?
    devices.py    resolve_device: "cpu" / "gpu"
    arguments.py  arguments checked and flattened in, results encoded and decoded out
    function.py   JaxFunction (the cache of jitted specializations) and compile_jax
"""
from relayish.backend.jax.function import JaxFunction, compile_jax
from relayish.backend.jax.limits import TRACE_LIMITS


__all__ = ["JaxFunction", "TRACE_LIMITS", "compile_jax"]
