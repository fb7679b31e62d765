"""The stepping machine: the interpreter's compiled Code run one step at a time.

    m = Machine(program)          paused before the first step of the entry function
    m.run(stop)                   advance until `stop(m)` holds at a pause point, a breakpoint
                                  hits, or the program ends
    m.frames                      the IR call stack, outermost first (StackFrame records)

It runs the same Code as `rl.evaluate` (backend/interp/code.py): the same step functions, the
same terminators, the same frames `[params..., captures..., locals...]`. What it adds lives
beside the Code and never in the interpreter's own loop (`run.execute` is untouched):

- *pause points*: every step, and every call, tail call, `if` and `match`. The `move` steps
  that carry an if/match branch's value to its join, JUMPs and RETURNs are silent (what a
  RETURN returns was computed by the step or call before it, or is a variable).
- *breakpoints*: per block, the step indexes where one is set (by line: the first pause point
  of that line in each block; by function: the first pause point of its entry block), each
  with an optional condition (a callable over the machine). While no breakpoint sits in a
  block and the stop condition cannot change inside it (it only depends on the call depth,
  which changes only at terminators), the block's remaining steps run in a plain loop, as the
  interpreter runs them: that is what keeps an attached debugger within a small factor of
  the interpreter's speed.
- *undo*: each reference write of the debugged program logs (reference, old value) in
  `ref_log` before it runs (a step wrapper compiled in, program.py), so that stepping back can
  restore references too; a Snapshot remembers the log's length.

IR calls never recurse in Python: a CALL pushes a StackFrame, a RETURN pops one, a TAILCALL
replaces the top one (with a new serial, so "step over" a tail call runs until the caller).
"""
from __future__ import annotations

import numpy as np

from relayish.errors import EvaluationError, RelayishError
from relayish.ir.expr import If, Match
from relayish.backend.runtime.describe import node_text, value_text
from relayish.backend.interp.code import BRANCH, CALL, JUMP, RETURN, TAILCALL
from relayish.backend.interp.deferred import pending, settle_all
from relayish.backend.interp.run import (MAX_CALL_DEPTH, InterpreterClosure, arity_error,
                                         call_foreign)

__all__ = ["Machine", "StackFrame", "Snapshot"]


class StackFrame:
    """One active IR call: its Code, its slots, the block and the step index about to run
    (index == len(block.steps): the terminator). `serial` tells frames apart (a tail call
    makes a new one)."""

    __slots__ = ("code", "slots", "block", "index", "serial")

    def __init__(self, code, slots, serial):
        self.code, self.slots, self.block, self.index, self.serial = (
            code, slots, code.entry, 0, serial)

    def at_terminator(self):
        return self.index >= len(self.block.steps)

    def current_node(self):
        """The IR node about to run: the step's node, or the terminator's."""
        block = self.block
        if self.index < len(block.info):
            return block.info[self.index].node
        return block.node


class Snapshot:
    """What step_back restores: the frames (each with block, index, serial), the top frame's
    slots (a copy) and the length of the reference-write log."""

    __slots__ = ("frames", "states", "slots", "log_len")

    def __init__(self, machine):
        self.frames = list(machine.frames)
        self.states = [(f.block, f.index, f.serial) for f in self.frames]
        self.slots = list(self.frames[-1].slots) if self.frames else None
        self.log_len = len(machine.ref_log)

    def restore(self, machine):
        for f, (block, index, serial) in zip(self.frames, self.states):
            f.block, f.index, f.serial = block, index, serial
        machine.frames[:] = self.frames
        self.frames[-1].slots[:] = self.slots
        log = machine.ref_log
        while len(log) > self.log_len:
            ref, old = log.pop()
            ref.value = old
        machine.finished = False
        machine.result = None


class Machine:
    """A paused run of compiled Code (see the module docstring).

    `codes`: the Code objects compiled for this run; `ref_log`: the list their reference
    writes log into (program.py); `position(node)`: a node's (line, column), or None."""

    def __init__(self, code, slots, codes, position, ref_log):
        self.serial = 0
        self.frames = [StackFrame(code, slots, self._next_serial())]
        self.finished = False
        self.result = None
        self.ref_log = ref_log          # (RefValue, old value) per reference write run
        self.codes = list(codes)
        self.position = position
        self.breaks = {}                # id(block) -> {index: [condition or None, ...]}
        self._lines = {}                # id(code) -> [(block, index, line), ...] first per line
        self._skip_to_pause()

    def reset(self, code, slots):
        """Start over: a new run of `code` on the frame `slots` (the Code, its wrapped steps
        and the breakpoints stay)."""
        self.frames[:] = [StackFrame(code, slots, self._next_serial())]
        self.finished, self.result = False, None
        del self.ref_log[:]            # the logging steps hold this very list
        self._skip_to_pause()

    def _next_serial(self):
        self.serial += 1
        return self.serial

    # ---- the program's Code ---------------------------------------------------------------------
    def pause_points(self, code):
        """[(block, index, line)] of every pause point of `code` that starts a line within its
        block (what a line breakpoint stops at), computed once per code."""
        found = self._lines.get(id(code))
        if found is None:
            found = []
            for block in code.blocks:
                last = None
                for index in range(len(block.info) + 1):
                    if not is_pause(block, index):
                        continue
                    node = block.info[index].node if index < len(block.info) else block.node
                    pos = self.position(node)
                    line = pos[0] if pos else None
                    if line is not None and line != last:
                        found.append((block, index, line))
                    last = line
            self._lines[id(code)] = found
        return found

    # ---- breakpoints --------------------------------------------------------------------------
    def add_break(self, block, index, condition):
        self.breaks.setdefault(id(block), {}).setdefault(index, []).append(condition)

    def clear_breaks(self):
        self.breaks.clear()

    def _break_hit(self, frame):
        at = self.breaks.get(id(frame.block))
        if at is None:
            return False
        conds = at.get(frame.index)
        if conds is None:
            return False
        return any(c is None or c(self) for c in conds)

    # ---- running --------------------------------------------------------------------------------
    def run(self, stop):
        """Advance at least one unit, then until a pause point where `stop(self)` holds or a
        breakpoint hits; or until the program ends. `stop` must depend only on the frames
        (depth and serials), not on the step index: that lets whole blocks run unchecked."""
        if self.finished:
            return
        try:
            with np.errstate(all="ignore"):
                self._run(stop)
        finally:
            if pending():       # the user sees arrays, never a pending sum (deferred.py)
                settle_all()

    def _run(self, stop):
        self._advance()
        self._skip_to_pause()
        frames = self.frames
        breaks = self.breaks
        while not self.finished:
            frame = frames[-1]
            if stop(self) or self._break_hit(frame):
                return
            block = frame.block
            steps = block.steps
            if frame.index < len(steps) and id(block) not in breaks:
                # nothing can stop inside this block: its steps run as in the interpreter
                slots = frame.slots
                i = frame.index
                try:
                    for i in range(i, len(steps)):
                        steps[i](slots)
                except BaseException:
                    frame.index = i
                    raise
                frame.index = len(steps)
                if is_pause(block, frame.index):
                    continue
            self._advance()
            self._skip_to_pause()

    def _skip_to_pause(self):
        """Advance over silent units (JUMPs, if/match moves) to the next pause point."""
        while not self.finished:
            frame = self.frames[-1]
            if is_pause(frame.block, frame.index):
                return
            self._advance()

    def _advance(self):
        """Run one unit: the next step of the top frame, or its terminator."""
        frame = self.frames[-1]
        block = frame.block
        if frame.index < len(block.steps):
            block.steps[frame.index](frame.slots)
            frame.index += 1
            return
        try:
            self._terminator(frame, block)
        except RelayishError:
            raise
        except Exception as exc:  # noqa: BLE001 - only an ill-typed program faults here
            raise EvaluationError(f"{type(exc).__name__}: {exc} in {node_text(block.node)}") \
                from exc

    def _terminator(self, frame, block):
        kind = block.kind
        slots = frame.slots
        if kind is RETURN:
            self._return(slots[block.src])
        elif kind is CALL or kind is TAILCALL:
            fn = slots[block.src]
            if fn.__class__ is InterpreterClosure:
                callee = fn.code
                n = len(block.args)
                if n != callee.nparams:
                    raise arity_error(callee, n, block.node)
                new = [*(slots[i] for i in block.args), *fn.env, *callee.rest]
                if kind is CALL:
                    if len(self.frames) >= MAX_CALL_DEPTH:
                        raise EvaluationError(f"IR call depth exceeded {MAX_CALL_DEPTH} frames "
                                              f"(unbounded recursion?) at {node_text(block.node)}")
                    self.frames.append(StackFrame(callee, new, self._next_serial()))
                else:
                    self.frames[-1] = StackFrame(callee, new, self._next_serial())
                return
            value = call_foreign(fn, [slots[i] for i in block.args], block.node)
            if kind is CALL:
                slots[block.dst] = value
                frame.block, frame.index = block.target, 0
            else:
                self._return(value)
        elif kind is JUMP:
            frame.block, frame.index = block.target, 0
        elif kind is BRANCH:
            frame.block, frame.index = (block.target if slots[block.src] else block.other), 0
        else:  # MATCH
            value = slots[block.src]
            for matcher, target in block.clauses:
                if matcher is None or matcher(value, slots):
                    frame.block, frame.index = target, 0
                    return
            raise EvaluationError(f"no clause matches the value {value_text(value)} in "
                                  f"{node_text(block.node, 300)}")

    def _return(self, value):
        self.frames.pop()
        if not self.frames:
            self.finished, self.result = True, value
            return
        caller = self.frames[-1]
        block = caller.block
        caller.slots[block.dst] = value
        caller.block, caller.index = block.target, 0


def is_pause(block, index):
    """Whether the machine pauses before unit `index` of `block` (a step, or the terminator at
    index len(steps)): every step but the if/match moves, every terminator but JUMP and
    RETURN."""
    info = block.info
    if index < len(info):
        return not isinstance(info[index].node, (If, Match))
    # a RETURN is no step of its own: the value it returns was computed by the step or call
    # before it, or is a variable or constant
    return block.kind is not JUMP and block.kind is not RETURN
