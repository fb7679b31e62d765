"""The interpreter's debug modes (issue 14), chosen when a program is compiled.

    Program(mod, wrap_step=nan_checked)     debug_nans: every step checks what it wrote
    Program(mod, poison=True)               debug_alloc: no buffer sharing, released buffers
                                            filled with NaN (compiler.py, steps.py)
    compile_options(debug_nans, debug_alloc) -> the Program keyword arguments for them

debug_nans wraps each step the compiler emits (a separate step function, chosen at compile
time: the plain machine and its steps check nothing, so the mode costs nothing when off). The
wrapper runs the step, then looks at the value it wrote (for a reference write, the value the
reference now holds): a floating array with a NaN or an Inf stops the run with an
EvaluationError naming the binding, the op, the function, the source position (the parser's,
for a program parsed from text; for a binding AD generated, the position of the primal
expression it came from: "a backward step of line 7") and its inputs' summaries.
"""
from __future__ import annotations

import numpy as np

from relayish.errors import EvaluationError
from relayish.ir.expr import Call, RefWrite
from relayish.ir.op import Op
from relayish.ir.text.parse_core import POSITIONS
from relayish.ir.text.parser import source_position
from relayish.backend.runtime.describe import node_text
from relayish.backend.runtime.summary import nonfinite, summarize

__all__ = ["nan_checked", "compile_options"]

_ndarray = np.ndarray


def compile_options(debug_nans=False, debug_alloc=False):
    """The Program keyword arguments of the debug modes ({} when both are off)."""
    options = {}
    if debug_nans:
        options["wrap_step"] = nan_checked
    if debug_alloc:
        options["poison"] = True
    return options


def nan_checked(info):
    """The step of code.Step `info`, followed by a check of the value it wrote."""
    step, dst = info.fn, info.slot
    if isinstance(info.node, RefWrite) and info.srcs:
        ref = info.srcs[0]

        def checked_write(slots):
            step(slots)
            v = slots[ref].value
            if v.__class__ is _ndarray and v.dtype.kind in "fc" and not np.isfinite(v).all():
                raise nan_error(info, slots, v)
        return checked_write

    def checked(slots):
        step(slots)
        v = slots[dst]
        if v.__class__ is _ndarray and v.dtype.kind in "fc" and not np.isfinite(v).all():
            raise nan_error(info, slots, v)
    return checked


def nan_error(info, slots, value):
    """The EvaluationError for the step `info` that produced `value` with a NaN or an Inf."""
    node = info.node
    code = info.block.code
    name = code.slot_names[info.slot] if info.slot is not None else None
    nan, inf = nonfinite(value)
    what = " and ".join(w for w, n in (("NaN", nan), ("Inf", inf)) if n)
    subject = f"%{name} = {node_text(node, 120)}" if name else node_text(node, 120)
    op = f" (op '{node.op.name}')" if isinstance(node, Call) and isinstance(node.op, Op) else ""
    where = source_position(node)
    if where is not None:
        filename, line, column = where
        at = f" at line {line}, column {column}" + (f" of {filename}" if filename else "")
        kind = getattr(POSITIONS[node][0], "kind", None)   # a node AD generated (ad/origins.py)
        if kind is not None:
            at = f" (a {kind} step AD generated for the expression{at})"
    else:
        at = ""
    lines = [f"debug_nans: {what} in {subject}{op} in {code.name}{at}: {summarize(value)}"]
    args = getattr(node, "args", None) or ()
    for i, src in enumerate(info.srcs):
        arg = code.slot_names[src]
        label = f"%{arg}" if arg else (node_text(args[i], 40) if i < len(args) else f"input {i}")
        lines.append(f"  input {label}: {summarize(slots[src])}")
    return EvaluationError("\n".join(lines))
