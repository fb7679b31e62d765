"""`re.debugger()`: the recorded program not yet run, paused in relayish's debugger.

    y = re.tanh(x @ w).sum()
    dbg = re.debugger()          # rl.debug.Debugger over re.pending(), bound to its inputs
    dbg.step(); dbg.locals(); dbg.cont(); dbg.result

The debugger runs the interpreter on the pending program's Function (`re.pending()`) with the
values the recording read (arrays, Python numbers, earlier results) as its arguments. It is
a separate run: the recorded tensors stay pending until inspected, and writes the debugger
makes (`dbg.set`) change only its own run.
"""
from __future__ import annotations

import numpy as np

from relayish.eager.runner import pending_program


def debugger():
    """A paused `rl.debug.Debugger` over `re.pending()`, its parameters bound to the values the
    recorded program reads (see the module docstring)."""
    from relayish.debug import Debugger
    program = pending_program()
    # the interpreter takes numpy values; an earlier result may be a jax array
    values = [np.asarray(p.value) for p in program.params]
    return Debugger(program.function(), *values)
