"""Index checks on the jax backend (issue 25, finding 9): an index out of range is an error.

    uses_index_ops(mod) -> bool           does any function of mod call an op with index_range
    check_call(ev, op, args, attrs, where)  during a trace: a check of the call's indices

The interpreter's impls raise on an index out of range (take, gather, scatter_add and take's
gradient); XLA cannot raise, and jax clamps the index (take, gather) or drops the update
(scatter). So a compiled program checks: for each call of an op whose record has
`index_range` (ir/op.py) with traced indices, the trace adds a run-time check (a
TraceEvaluator fault: a flag cell that joins and loops carry out, trace.py) that every index
lies in [-n, n), and the run raises an EvaluationError naming the op, the axis length and the
call's text when one does not. rl.compile(..., check_indices=False) traces no checks (and
jax's clamping applies); a program without such ops is traced exactly as before.

Not checked: jax_function() (the pure jax function handed to jax transformations, optim's
device loop, rl.to_jax and relayish.eager), which a JaxFunction with checks answers from a twin
compiled without them (a program with run-time checks has no pure jax function).
"""
from __future__ import annotations

import numpy as np

from relayish.ir.analysis import walk
from relayish.ir.expr import Call
from relayish.ir.op import Op
from relayish.backend.runtime.describe import node_text

__all__ = ["uses_index_ops", "check_call"]


def uses_index_ops(mod) -> bool:
    """Whether a function of `mod` calls an op whose record has index_range."""
    for func in mod.functions.values():
        for node in walk(func):
            if isinstance(node, Call) and isinstance(node.op, Op) and \
                    node.op.index_range is not None:
                return True
    return False


def check_call(ev, op, args, attrs, where):
    """Add the check of this call's indices to the trace of `ev` (a TraceEvaluator fault)."""
    import jax.numpy as jnp
    if ev.guard is not None:
        # a backward loop that defers its reference reads (dynamic_defer.py) would defer the
        # check's flag cell too; its indices (take_backward's) are the forward take's, checked
        # in the forward loop
        return
    k, n = op.index_range([np.shape(a) for a in args], attrs)
    indices = args[k]
    if np.size(indices) == 0:
        return
    if isinstance(indices, np.ndarray) and indices.min() >= -n and indices.max() < n:
        return                          # constant indices in range: nothing to check
    flat = jnp.ravel(jnp.asarray(indices))
    ev.fault(jnp.any((flat < -n) | (flat >= n)),
             f"{op.name}: an index is out of range for an axis of size {n} in "
             f"{node_text(where, 100)} (the jax backend checks indices; with "
             "rl.compile(..., check_indices=False) jax clamps or drops them instead)")
