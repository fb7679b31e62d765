"""Index checks on the jax backend (issue 25, finding 9): an index out of range is an error.

    uses_index_ops(mod) -> bool           does any function of mod call an op with index_range
    check_call(op, args, attrs, where)    during a trace: a check of the call's indices
    functionalized(fn, entry)             fn with its checks returned: (error leaves, outputs)
    raise_failed(entry, leaves)           the EvaluationError of the first failed check

The interpreter's impls raise on an index out of range (take, gather, scatter_add and take's
gradient); XLA cannot raise, and jax clamps the index (take, gather) or drops the update
(scatter). So a compiled program checks: for each call of an op whose record has
`index_range` (ir/op.py), the trace adds a `checkify.check` that every index lies in [-n, n),
and JaxFunction jits `checkify.checkify` of its trace, which carries the first failed check out
of every cond, switch and while loop as an extra output; the run raises it, naming the op, the
first bad index, the axis length and the call's text. rl.compile(..., check_indices=False)
traces no checks (and jax's clamping applies); a program without such ops is traced exactly as
before.

Not checked: jax_function() (the pure jax function handed to jax transformations, optim's
device loop, rl.to_jax and relayish.eager) and rl.vmap's batched programs, which trace
the program unchecked: jax's checkify cannot batch a check inside a while loop (jax 0.10:
"checkify-of-vmap-of-while" is refused, vmap-of-checkify fails), and batched fold loops are
while loops.
"""
from __future__ import annotations

import numpy as np

from relayish.errors import EvaluationError
from relayish.ir.analysis import walk
from relayish.ir.expr import Call
from relayish.ir.op import Op
from relayish.backend.runtime.describe import node_text

__all__ = ["uses_index_ops", "check_call", "functionalized", "raise_failed"]

_SUFFIX = " (`check` failed)"     # what checkify appends to a failed check's message


def uses_index_ops(mod) -> bool:
    """Whether a function of `mod` calls an op whose record has index_range."""
    for func in mod.functions.values():
        for node in walk(func):
            if isinstance(node, Call) and isinstance(node.op, Op) and \
                    node.op.index_range is not None:
                return True
    return False


def check_call(op, args, attrs, where):
    """Add the check of this call's indices to the trace (inside checkify.checkify)."""
    import jax.numpy as jnp
    from jax.experimental import checkify
    k, n = op.index_range([np.shape(a) for a in args], attrs)
    indices = args[k]
    if np.size(indices) == 0:
        return
    if isinstance(indices, np.ndarray) and indices.min() >= -n and indices.max() < n:
        return                          # constant indices in range: nothing to check
    flat = jnp.ravel(jnp.asarray(indices))
    bad = (flat < -n) | (flat >= n)
    text = node_text(where, 100).replace("{", "{{").replace("}", "}}")
    checkify.check(~jnp.any(bad),
                   f"{op.name}: index {{}} is out of range for an axis of size {n} in {text} "
                   "(the jax backend checks indices; with rl.compile(..., check_indices=False) "
                   "jax clamps or drops them instead)", flat[jnp.argmax(bad)])


def functionalized(fn, entry):
    """checkify.checkify(fn) for jax.jit: it returns (error leaves, fn's outputs), setting
    `entry.error_tree` when traced. Leaves, not checkify's Error: a jitted function whose
    outputs are arrays keeps jax's C++ dispatch (with the Error object each call took jax's
    Python path, about 5x slower on a small program)."""
    import jax
    from jax.experimental import checkify
    checked = checkify.checkify(fn, errors=checkify.user_checks)

    def run(*args):
        error, out = checked(*args)
        leaves, entry.error_tree = jax.tree_util.tree_flatten(error)
        return leaves, out
    return run


def raise_failed(entry, leaves):
    """An EvaluationError when the error `leaves` (functionalized's first output) hold a
    failed check."""
    # checkify's predicates are its bool leaves (the payloads here are int indices): none
    # set is the common case, and reading them is cheaper than rebuilding the Error
    if not any(leaf.dtype == np.bool_ and np.asarray(leaf).any() for leaf in leaves):
        return
    import jax
    message = jax.tree_util.tree_unflatten(entry.error_tree, leaves).get()
    if message is not None:
        raise EvaluationError(message.removesuffix(_SUFFIX).strip())
