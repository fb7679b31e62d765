"""The debugger's compile of a program: the interpreter's compiler, remembering what it made.

    program = DebugProgram(mod)          a backend.interp Program
    code = program.compile_function(func, "fn"); program.drain()
    program.codes                        every Code compiled (globals, inner functions)
    program.slot_vars[id(code)]          per slot, the Var first bound to it (or None)
    program.ref_log                      (reference, old value) per reference write run

The interpreter keeps only each slot's name_hint (Code.slot_names); the debugger needs the Var
itself, to show it under the name `rl.astext` prints for it (the printer makes every Var's name
unique: `%g`, `%g_1`, ...) and to type-check a value set into it. This subclass of the compiler
records them from its environment when a function's body is compiled, so the interpreter
itself keeps nothing more.

Each reference write is compiled with a logging wrapper (the Program's wrap_step, chosen at
compile time like the debug modes'): it appends the reference and its old value to `ref_log`
before the write, so step_back can undo it (engine.py). The interpreter's other fast paths
stay (fused accumulation steps, the shared zero tensor): the log holds each old value before
the write runs, so the in-place paths, which need the reference to be the array's only holder
(by its reference count), never mutate a logged value. (Compiling the gradient accumulations
as separate read, add and write steps instead made the TreeLSTM gradient 5x slower under the
debugger: each embedding-row gradient became a dense one.)

The deferred outer products (backend/interp/deferred.py) stay on too: the machine settles
every pending reference whenever a command ends (engine.py), so the user only ever sees
arrays, and each command's snapshot starts from settled references: undoing the log back to
a snapshot ends, for each reference, on the array it held then (a pending sum logged between
two snapshots may have grown since, but it is never what a restore ends on). The outer
accumulation step logs like any reference write, and the log's hold on the old array keeps
settling from adding into it. Without the deferral the TreeLSTM gradient ran 7.3x slower
under the debugger than in the interpreter.
"""
from __future__ import annotations

from relayish.ir.expr import RefWrite, Var
from relayish.backend.interp.code import Code
from relayish.backend.interp.compiler import FunctionCompiler, Program

__all__ = ["DebugProgram"]


class _RecordingCompiler(FunctionCompiler):
    """A FunctionCompiler that records, per slot, the first Var bound to it."""

    def __init__(self, program, code, params, captures, *rest):
        super().__init__(program, code, params, captures, *rest)
        self.bound = list(params) + list(captures)

    def compile_body(self, body):
        super().compile_body(body)
        slots = [None] * self.code.nslots
        candidates = self.bound + [k for k in self.keep if isinstance(k, Var)]
        for v in candidates:
            slot = self.env.get(id(v))
            if slot is not None and slots[slot] is None:
                slots[slot] = v
        self.program.slot_vars[id(self.code)] = slots
        self.program.codes.append(self.code)


class DebugProgram(Program):
    """A Program compiling with _RecordingCompiler (see the module docstring)."""

    def __init__(self, mod):
        super().__init__(mod, wrap_step=self.log_writes, defer=True)
        self.codes = []
        self.slot_vars = {}
        self.ref_log = []

    def log_writes(self, info):
        """The step of code.Step `info`; a reference write logs the old value first."""
        step = info.fn
        if not isinstance(info.node, RefWrite) or not info.srcs:
            return step
        log, ref_slot = self.ref_log, info.srcs[0]      # the reference is the first operand

        def logged(slots):
            ref = slots[ref_slot]
            log.append((ref, ref.value))
            step(slots)
        return logged

    def compile_function(self, func, name, captures=(), ncaptures=None, tuple_fields=None):
        code = Code(name, func)
        _RecordingCompiler(self, code, func.params, captures, ncaptures,
                           tuple_fields).compile_body(func.body)
        return code

    def drain(self):
        while self.pending:
            code, func = self.pending.pop()
            _RecordingCompiler(self, code, func.params, ()).compile_body(func.body)
