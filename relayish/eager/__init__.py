"""Define-by-run: ordinary Python on tensors, recorded as a relayish program (issue 15).

    import numpy as np
    from relayish import eager as re

    w = re.tensor(np.ones((3, 2)), requires_grad=True)
    x = re.tensor(np.arange(3.0))
    y = re.tanh(x @ w).sum()       # records bindings; nothing computed yet
    float(y)                       # inspecting runs the pending program
    (gw,) = re.grad(y, wrt=[w])    # reverse AD of the recorded program; gw is recorded too

Each operation appends an SSA binding to the pending program (graph.py); inspecting a value
runs it as one relayish Function, cached by structure and compiled with the jax backend from
its second sighting (runner.py); `re.grad` differentiates the recorded bindings with relayish's
AD and records the call of the gradient program (autodiff.py). See docs/eager.md and
notes/eager.md.
"""
from relayish.eager.autodiff import call, grad
from relayish.eager.checkpoint import checkpoint
from relayish.eager.debugging import debugger
from relayish.eager.graph import no_grad
from relayish.eager.ops import *  # noqa: F401,F403  re.<op> for every registered op
from relayish.eager.ops import nn
from relayish.eager import indexing as _indexing  # noqa: F401  installs Tensor.__getitem__
from relayish.eager.runner import clear_cache, pending_program, run_pending
from relayish.eager.tensor import Tensor, tensor
from relayish.eager import runner as _runner


def __getattr__(name):
    """`re.my_op` for an op registered after import (ops.py builds it on first use)."""
    from relayish.eager import ops
    return getattr(ops, name)


def pending():
    """The recorded program not yet run, as a relayish Function `fn(inputs...) -> (outputs...)`:
    every value it reads (arrays, Python scalars, earlier results) is a parameter, in the order
    the bindings first use it; the outputs are the live tensors not computed yet."""
    return pending_program().function()


def run():
    """Compute every pending tensor now (what inspecting any one of them does)."""
    run_pending()


def stats() -> dict:
    """Counters: `pending` (bindings recorded, not yet run), `runs`, `hits` and `misses` of
    the structural cache, `hit_rate`, `compiles` (jax compilations), `bindings_run`, and the
    seconds spent on new structures: `interpret_s` (first sightings, run by the
    interpreter), `compile_s` (building, optimizing, tracing and XLA-compiling repeated
    programs), `gradient_s` (building gradient programs with relayish's AD)."""
    out = dict(_runner.STATS)
    out["pending"] = len(pending_program().bindings)
    out["hit_rate"] = out["hits"] / out["runs"] if out["runs"] else 0.0
    return out
