"""Debugging relayish programs (issue 14): a stepping debugger and the debug modes.

    dbg = rl.debug.Debugger(f_or_mod, *args)     the Python API (api.py)
    rl.evaluate(f, *args, debug_nans=True)       stop at the first NaN/Inf binding (modes.py)
    rl.evaluate(f, *args, debug_alloc=True)      no buffer sharing, released buffers poisoned
    rl.to_dot(f_or_mod)                          Graphviz DOT text of the dataflow (dot.py)

Modules (each imports only those above it):

    positions.py   source positions of the debugged program's nodes (and AD's origins)
    engine.py      the stepping machine over the interpreter's compiled Code
    api.py         Debugger, Position, Frame, Breakpoint
    dot.py         to_dot
Value summaries (shape, dtype, min/max, NaN counts) are backend/runtime/summary.py's: the
interpreter's debug_nans error shows them too. notes/debugger.md has the design and costs.
"""
from relayish.debug.api import Breakpoint, Debugger, DebuggerError, Frame, Position
from relayish.debug.dot import to_dot

__all__ = ["Debugger", "Position", "Frame", "Breakpoint", "DebuggerError", "to_dot"]
