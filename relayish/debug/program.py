"""The debugger's compile of a program: the interpreter's compiler, remembering what it made.

    program = DebugProgram(mod)          a backend.interp Program
    code = program.compile_function(func, "fn"); program.drain()
    program.codes                        every Code compiled (globals, inner functions)
    program.slot_vars[id(code)]          per slot, the Var first bound to it (or None)

The interpreter keeps only each slot's name_hint (Code.slot_names); the debugger needs the Var
itself, to show it under the name `rl.astext` prints for it (the printer makes every Var's name
unique: `%g`, `%g_1`, ...) and to type-check a value set into it. This subclass of the compiler
records them from its environment when a function's body is compiled, so the interpreter
itself keeps nothing more.

The interpreter's fast paths stay (fused accumulation steps, the shared zero tensor): the
undo log of reference writes (engine.py) holds each old value before the write runs, so the
in-place paths, which need the reference to be the array's only holder, never mutate a logged
value. (Compiling with reuse=False instead made the TreeLSTM gradient 5x slower under the
debugger: each embedding-row gradient became a dense one.)
"""
from __future__ import annotations

from relayish.ir.expr import Var
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
        super().__init__(mod)
        self.codes = []
        self.slot_vars = {}

    def compile_function(self, func, name, captures=(), ncaptures=None, tuple_fields=None):
        code = Code(name, func)
        _RecordingCompiler(self, code, func.params, captures, ncaptures,
                           tuple_fields).compile_body(func.body)
        return code

    def drain(self):
        while self.pending:
            code, func = self.pending.pop()
            _RecordingCompiler(self, code, func.params, ()).compile_body(func.body)
