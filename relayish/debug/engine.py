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
    makes a new one). `tail_from`: for a frame a tail call made, (code, block, index) of the
    tail call that began the chain of tail calls (the frame it replaced is gone, but `bt`
    shows where it was: @main's tail call stays on the stack as its caller would see it)."""

    __slots__ = ("code", "slots", "block", "index", "serial", "tail_from")

    def __init__(self, code, slots, serial, tail_from=None):
        self.code, self.slots, self.block, self.index, self.serial = (
            code, slots, code.entry, 0, serial)
        self.tail_from = tail_from

    def at_terminator(self):
        return self.index >= len(self.block.steps)

    def current_node(self):
        """The IR node about to run: the step's node, or the terminator's."""
        block = self.block
        if self.index < len(block.info):
            return block.info[self.index].node
        return block.node


class Snapshot:
    """What step_back restores: the frames (each with block, index, serial), a copy of every
    frame's slots, the length of the reference-write log and the machine's unit count.

    A frame below the top does not run, and its blocks form no loop (a loop is a tail call,
    which makes a new frame), so a frame's (block, index, serial) tells its slots: a
    snapshot shares the copy `previous` made of a frame still in the same state. Each
    command then copies the innermost frame's slots only, however deep the stack."""

    __slots__ = ("frames", "states", "slots", "log_len", "units")

    def __init__(self, machine, previous=None):
        self.frames = list(machine.frames)
        self.states = [(f.block, f.index, f.serial) for f in self.frames]
        known = {}
        if previous is not None:
            known = {id(f): (state, slots) for f, state, slots
                     in zip(previous.frames, previous.states, previous.slots)}
        top = len(self.frames) - 1
        copies = []
        for k, (f, state) in enumerate(zip(self.frames, self.states)):
            old = known.get(id(f))          # previous holds its frames: an id is not reused
            copies.append(old[1] if k < top and old is not None and old[0] == state
                          else tuple(f.slots))
        self.slots = copies
        self.log_len = len(machine.ref_log)
        self.units = machine.units

    def restore(self, machine):
        for f, (block, index, serial), slots in zip(self.frames, self.states, self.slots):
            f.block, f.index, f.serial = block, index, serial
            f.slots[:] = slots
        machine.frames[:] = self.frames
        log = machine.ref_log
        while len(log) > self.log_len:
            ref, old = log.pop()
            ref.value = old
        machine.units = self.units
        machine.finished = False
        machine.result = None


class Machine:
    """A paused run of compiled Code (see the module docstring).

    `codes`: the Code objects compiled for this run; `ref_log`: the list their reference
    writes log into (program.py); `position(node)`: a node's (line, column), or None."""

    def __init__(self, code, slots, codes, position, ref_log):
        self.serial = 0
        self.units = 0                  # units run so far: where a pause point is in time
        self.interrupted = False        # set by another thread (DAP's pause): stop at the next
        #                                 pause point; the one who set it clears it
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
        self.units = 0
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
            if stop(self) or self._break_hit(frame) or self.interrupted:
                return
            block = frame.block
            steps = block.steps
            if frame.index < len(steps) and id(block) not in breaks:
                # nothing can stop inside this block: its steps run as in the interpreter
                slots = frame.slots
                i = frame.index
                start = i
                try:
                    for i in range(i, len(steps)):
                        steps[i](slots)
                except BaseException:
                    frame.index = i
                    self.units += i - start
                    raise
                frame.index = len(steps)
                self.units += len(steps) - start
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
            self.units += 1
            return
        try:
            self._terminator(frame, block)
        except RelayishError:
            raise
        except Exception as exc:  # noqa: BLE001 - only an ill-typed program faults here
            raise EvaluationError(f"{type(exc).__name__}: {exc} in {node_text(block.node)}") \
                from exc
        self.units += 1

    # ---- replaying (stepping back) ---------------------------------------------------------------
    def last_pause_before(self, end):
        """Run forward unit by unit, from a restored snapshot, to unit count `end` (or the
        end of the program); the unit count of the last pause point passed before `end`
        (None: none). Breakpoints are not looked at: this replays what already ran."""
        last = None
        with np.errstate(all="ignore"):
            while not self.finished and self.units < end:
                frame = self.frames[-1]
                if is_pause(frame.block, frame.index):
                    last = self.units
                self._advance()
        return last

    def replay(self, target):
        """Run forward from a restored snapshot to unit count `target`, ignoring breakpoints."""
        try:
            with np.errstate(all="ignore"):
                while not self.finished and self.units < target:
                    self._advance()
        finally:
            if pending():
                settle_all()

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
                    origin = frame.tail_from or (frame.code, block, frame.index)
                    self.frames[-1] = StackFrame(callee, new, self._next_serial(), origin)
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
