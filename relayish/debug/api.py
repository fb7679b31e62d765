"""The stepping debugger's Python API (`rl.debug.Debugger`).

    dbg = rl.debug.Debugger(f_or_mod, *args, mod=None)  paused before the first step
    dbg.step()  dbg.step_in()  dbg.step_out()  dbg.cont()  dbg.step_back()   -> dbg.where()
    dbg.break_at(line=7) / (function="name") / (line=7, condition="%i > 3")  -> Breakpoint
    dbg.clear_breaks()                          remove every breakpoint
    dbg.breakable_lines()                       the lines a breakpoint can be set on
    dbg.where()       Position(line, column, text, ...): the binding about to run
    dbg.frames()      [Frame(function, line, column, position)], innermost first
    dbg.locals(depth=0)          {name: value} of the variables in scope (depth 0: innermost)
    dbg.describe_locals(depth=0) [(name, type text, summary)]: tensors as shape, dtype,
                                 min/max, NaN and Inf counts
    dbg.evaluate("%x * 2f")      an expression over the variables in scope, by the interpreter
    dbg.set("x", value)          replace a variable's value (checked against its type)
    dbg.restart(*args)           run again from the start (compiled program, breakpoints kept)
    dbg.finished, dbg.result, dbg.text, dbg.filename

Positions are lines and columns of `dbg.text`: the file, for a program parsed from text
(`rl.parse` keeps the parser's positions), else `rl.astext` of the program (positions.py).
A binding AD generated also tells where its primal expression was (`Position.origin`,
when the primal was parsed): stepping a gradient program shows the backward pass as ordinary
bindings and says "backward step of line 7".

Stepping. The machine (engine.py) pauses before every step and every call, return, `if` and
`match`. `step()` runs to the next pause point in this call or its caller (a call runs to its
end unless a breakpoint inside it hits), `step_in()` to the next pause point anywhere,
`step_out()` until this call returns, `cont()` until a breakpoint or the end.

Stepping back. Each command first takes a snapshot: the positions of the active frames, a
copy of their slots (a frame below the top shares the copy of the previous snapshot while it
has not moved, so a command copies the innermost frame's slots only), the length of the log
of reference writes (the debugger logs each write's old value) and the count of units run.
`step_back()` goes back one pause point: it restores the latest snapshot taken before the
current pause point (undoing the reference writes made after it), replays from there to
find the last pause point before the current one, restores again and replays to it. So
it lands on the step just before, even after a `cont()` that ran many, and it steps back
into a call that has returned. Cost: a step back replays the command it undoes twice, unit
by unit; one log entry per reference write while the debugger runs keeps the old values
alive. Python callbacks' own effects are not undone, and a replay runs them again.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from relayish.errors import ParseError, RelayishError, did_you_mean
from relayish.ir.expr import Function, Var
from relayish.ir.module import Module
from relayish.ir.visitor import no_gc, run_deep
from relayish.backend.runtime.check import checked, param_type
from relayish.backend.runtime.describe import node_text
from relayish.backend.interp.code import BRANCH, CALL, MATCH, RETURN, TAILCALL
from relayish.backend.interp.closures import value_checker
from relayish.debug.engine import Machine, Snapshot, is_pause
from relayish.debug.program import DebugProgram
from relayish.debug.positions import SourceMap, origin
from relayish.backend.runtime.summary import summarize, type_summary

__all__ = ["Debugger", "Position", "Frame", "Breakpoint", "DebuggerError"]

_UNBOUND = re.compile(r"unbound variable %([A-Za-z0-9_]+)")    # the parser's words


class DebuggerError(RelayishError):
    """A debugger command that cannot be done: an unknown variable, a line without bindings,
    nothing to step back to, a condition that is not a boolean."""


@dataclass(frozen=True)
class Position:
    """Where the debugger is: `line`, `column` (1-based, in Debugger.text; None where the node
    has no position) and `text` (that line, stripped). Also `function` (the Code's name:
    "@main", "%f", "fn"), `binding` (the variable the step binds, None for a temporary), `kind`
    ("step", "call", "tailcall", "branch", "match", "finished"), `expr` (the
    expression about to run, shortened), `origin` ((filename, line, column) of the primal
    expression a binding AD generated came from, or None) and `origin_kind` ("primal": the
    primal computation replayed, "backward": reverse mode's backward pass, "tangent": forward
    mode's; None)."""
    line: int | None
    column: int | None
    text: str
    function: str | None = None
    binding: str | None = None
    kind: str = "step"
    expr: str = ""
    origin: tuple | None = field(default=None, compare=False)
    origin_kind: str | None = field(default=None, compare=False)

    def __str__(self):
        if self.kind == "finished":
            return "<finished>"
        where = f"line {self.line}, column {self.column}" if self.line else "(no position)"
        s = f"{self.function} {where}: {self.text or self.expr}"
        if self.origin is not None:
            s += f"  [{self.origin_kind} step of line {self.origin[1]}" + (
                f" of {self.origin[0]}]" if self.origin[0] else "]")
        return s


@dataclass(frozen=True)
class Frame:
    """One active IR call: `function` (the Code's name), `line`, `column` and the `position`
    it is paused at; `tail_call`: for a frame a tail call made, the Position of that tail
    call in the function whose frame it replaced (`@main`'s `@cost(%y)` as its last
    expression), else None."""
    function: str
    line: int | None
    column: int | None = None
    position: Position | None = field(default=None, compare=False)
    tail_call: Position | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Breakpoint:
    """A breakpoint as break_at set it; `places` is the number of pause points it covers."""
    id: int
    line: int | None
    function: str | None
    condition: str | None
    places: int


_KINDS = {CALL: "call", TAILCALL: "tailcall", RETURN: "return", BRANCH: "branch", MATCH: "match"}


class Debugger:
    """A paused run of a program on the interpreter (see the module docstring)."""

    def __init__(self, f_or_mod, *args, mod=None):
        if isinstance(f_or_mod, Module):
            target, main_mod = f_or_mod, f_or_mod
        elif isinstance(f_or_mod, Function):
            target, main_mod = f_or_mod, mod
        else:
            raise DebuggerError(f"Debugger takes a Function or a Module, "
                                f"got {type(f_or_mod).__name__}")
        main_mod, main = checked(target, main_mod, who="Debugger")
        self.program = target
        self.mod = main_mod
        program = DebugProgram(main_mod)

        def build():
            if isinstance(target, Module):
                clo = program.global_closure(main_mod.get_global_var("main"))
                program.drain()
                return clo.code
            code = program.compile_function(main, "fn")
            program.drain()
            return code
        with no_gc():
            self.code = code = run_deep(build)
        frame = code.params.convert(args) + list(code.rest)
        self.source_map = SourceMap(target, main_mod)
        self.machine = Machine(code, frame, program.codes, self._node_position,
                               program.ref_log)
        self._slot_vars = program.slot_vars
        self._names = {}               # id(code) -> per slot, its name in the text (or None)
        self.history = []
        self._reusable = None          # the snapshot whose frame copies the next one may share
        self._breakpoints = []
        self._vars = None
        self._types = {}               # id(code) -> {slot: type}
        self._exprs = {}               # (text, id(code)) -> (Function, params) to evaluate

    def restart(self, *args):
        """Run the program again from its start on `args` (the compiled program and the
        breakpoints stay; the step-back history goes)."""
        frame = self.code.params.convert(args) + list(self.code.rest)
        self.history.clear()
        self._reusable = None
        self.machine.reset(self.code, frame)
        return self.where()

    # ---- positions ------------------------------------------------------------------------------
    def _node_position(self, node):
        return self.source_map.position(node)

    @property
    def text(self):
        """The text the positions refer to (the file, or rl.astext of the program)."""
        return self.source_map.text

    @property
    def filename(self):
        return self.source_map.filename

    def _position(self, frame):
        return self._position_of(frame.code, frame.block, frame.index)

    def _position_of(self, code, block, index):
        if index < len(block.info):
            info = block.info[index]
            node, kind, binding = info.node, "step", self._slot_names(code)[info.slot]
        else:
            node, kind = block.node, _KINDS.get(block.kind, "step")
            binding = (self._slot_names(code)[block.dst]
                       if block.kind is CALL and block.dst is not None else None)
        pos = self._position_at(block, index)
        line, col = pos if pos else (None, None)
        org = _origin_at(block, index)
        return Position(line, col, self.source_map.line_text(line).strip(), code.name,
                        binding, kind, node_text(node, 80), org and org[:3], org and org[3])

    def where(self):
        """The Position of the binding about to run (kind "finished" at the end)."""
        if self.machine.finished:
            return Position(None, None, "", None, None, "finished", "", None)
        return self._position(self.machine.frames[-1])

    def frames(self):
        """The IR call stack, innermost first: [Frame(function, line, column, position)]."""
        out = []
        for f in reversed(self.machine.frames):
            pos = self._position(f)
            tail = f.tail_from and self._position_of(*f.tail_from)
            out.append(Frame(f.code.name, pos.line, pos.column, pos, tail))
        return out

    # ---- stepping -------------------------------------------------------------------------------
    def _go(self, stop):
        m = self.machine
        if m.finished:
            return self.where()
        self.history.append(Snapshot(m, self._reusable))
        self._reusable = self.history[-1]
        m.run(stop)
        return self.where()

    def step(self):
        """Step over: to the next pause point of this call (or of its caller, once it returns);
        a call runs to its end unless a breakpoint inside it hits."""
        frames = self.machine.frames
        depth = len(frames)
        top = frames[-1] if frames else None
        return self._go(lambda m: len(m.frames) < depth or (
            len(m.frames) == depth and m.frames[-1] is top))

    def step_in(self):
        """Step into: to the next pause point anywhere (the first step of a called function)."""
        return self._go(lambda m: True)

    def step_out(self):
        """Run until the current call returns (to the pause point after it in the caller)."""
        depth = len(self.machine.frames)
        return self._go(lambda m: len(m.frames) < depth)

    def cont(self):
        """Run until a breakpoint hits or the program ends."""
        return self._go(lambda m: False)

    def step_back(self):
        """Rewind to the pause point before the current one, wherever it is: earlier in
        this call, in a call that has returned since, or in the caller (see the module
        docstring for how, and what it costs)."""
        m = self.machine
        now = m.units
        while self.history and self.history[-1].units >= now:
            self.history.pop()
        if not self.history:
            raise DebuggerError("nothing to step back to (the history starts where the "
                                "program started, or was restarted)")
        snap = self.history[-1]
        snap.restore(m)
        target = m.last_pause_before(now)
        snap.restore(m)
        m.replay(snap.units if target is None else target)
        # what runs from here may differ from what ran (a `set` undone): the next snapshot
        # copies every frame rather than share a copy made before the step back
        self._reusable = None
        return self.where()

    @property
    def finished(self):
        return self.machine.finished

    @property
    def result(self):
        """The program's value once it has finished (None before)."""
        return self.machine.result

    # ---- breakpoints ----------------------------------------------------------------------------
    def break_at(self, line=None, function=None, condition=None):
        """A breakpoint at the first pause point of source `line` (in every function that has
        code there) or at the entry of `function` ("name", "@name" or "%name" of a local
        function); `condition`: a text expression over the variables in scope there (parsed
        now, evaluated by the interpreter at each hit; the breakpoint stops where it is true)."""
        if (line is None) == (function is None):
            raise DebuggerError("break_at takes line= or function= (one of them)")
        m = self.machine
        places = []
        if line is not None:
            if not isinstance(line, int) or isinstance(line, bool):
                raise DebuggerError(f"break_at: line must be an int, got {line!r}")
            for code in m.codes:
                places += [(b, i) for b, i, ln in m.pause_points(code) if ln == line]
            if not places:
                lines = self.breakable_lines()
                shown = ", ".join(map(str, lines[:30])) + (" ..." if len(lines) > 30 else "")
                raise DebuggerError(f"no binding on line {line} of the program "
                                    f"(lines with bindings: {shown})")
        else:
            name = str(function).lstrip("@%")
            for code in m.codes:
                if code.name.lstrip("@%") == name:
                    places.append(_entry_pause(code))
            if not places:
                known = sorted({c.name for c in m.codes if c.name != "fn"})
                raise DebuggerError(f"no function named {function!r} in the program "
                                    f"(functions: {', '.join(known)})")
        cond = None
        if condition is not None:
            cond = self._condition(condition)
        for block, index in places:
            m.add_break(block, index, cond)
        bp = Breakpoint(len(self._breakpoints) + 1, line, function, condition, len(places))
        self._breakpoints.append(bp)
        return bp

    def breakable_lines(self):
        """The sorted source lines a line breakpoint can be set on (they hold a pause point)."""
        m = self.machine
        return sorted({ln for c in m.codes for _, _, ln in m.pause_points(c)})

    def breakpoints(self):
        return list(self._breakpoints)

    def clear_breaks(self):
        """Remove every breakpoint."""
        self.machine.clear_breaks()
        self._breakpoints.clear()

    def _condition(self, text):
        self._check_syntax(text, "condition")

        def holds(machine):
            value = self._evaluate_text(text, machine.frames[-1], "condition")
            a = np.asarray(value)
            if a.shape != () or a.dtype != np.bool_:
                raise DebuggerError(f"the breakpoint condition {text!r} is not a bool scalar "
                                    f"(it gave {summarize(value)})")
            return bool(a)
        return holds

    # ---- variables ------------------------------------------------------------------------------
    def _frame(self, depth):
        frames = self.machine.frames
        if self.machine.finished:
            raise DebuggerError("the program has finished: no variables in scope "
                                "(dbg.result holds its value)")
        if not 0 <= depth < len(frames):
            raise DebuggerError(f"no frame at depth {depth} (the call stack has {len(frames)})")
        return frames[-1 - depth]

    def _slot_names(self, code):
        """Per slot of `code`, the name its variable has in dbg.text (None: a temporary)."""
        names = self._names.get(id(code))
        if names is None:
            names = list(code.slot_names)
            for i, var in enumerate(self._slot_vars.get(id(code), ())):
                if var is not None:
                    names[i] = self.source_map.name(var)
            self._names[id(code)] = names
        return names

    def _position_at(self, block, index, look_ahead=8):
        """(line, column) of unit `index` of `block`: its node's, else that of the next unit
        with one (a node the parser does not mark, such as a `fn` literal, is shown at the
        binding it is part of)."""
        info = block.info
        for i in range(index, min(len(info), index + look_ahead) + 1):
            pos = self.source_map.position(info[i].node if i < len(info) else block.node)
            if pos is not None:
                return pos
        return None

    def _named_slots(self, frame):
        names = self._slot_names(frame.code)
        out = {}
        for i, (name, value) in enumerate(zip(names, frame.slots)):
            if name is not None and value is not None:
                out[name] = i
        return out

    def locals(self, depth=0):
        """{name: value} of the variables bound so far in frame `depth` (0: innermost)."""
        frame = self._frame(depth)
        return {name: frame.slots[i] for name, i in self._named_slots(frame).items()}

    def describe_locals(self, depth=0):
        """[(name, type, summary)] of frame `depth`'s variables: tensors as dtype[shape] with
        min, max, NaN and Inf counts."""
        return [(name, type_summary(v), summarize(v)) for name, v in self.locals(depth).items()]

    def set(self, name, value, depth=0):
        """Replace the value of variable `name` in frame `depth`, checked and converted against
        its type (a RelayishError naming the variable otherwise)."""
        frame = self._frame(depth)
        name = str(name).lstrip("%")
        slot = self._named_slots(frame).get(name)
        if slot is None:
            raise DebuggerError(f"no variable %{name} in scope in {frame.code.name} "
                                f"(in scope: {', '.join(self._named_slots(frame)) or 'none'})")
        t = self._slot_type(frame.code, slot, name)
        if t is None:
            raise DebuggerError(f"the type of %{name} is not known: it cannot be set")
        checker = value_checker()
        new = value if checker.conforms(value, t) else checker.to_value(
            value, t, f"the value set for %{name}")
        frame.slots[slot] = new
        self._reusable = None          # a caller's slots changed in place: copy them anew
        return new

    def evaluate(self, text, depth=0):
        """The value of a text expression over the variables in scope in frame `depth`
        (parsed, type-checked against their types and run by the interpreter)."""
        self._check_syntax(text, "expression")
        return self._evaluate_text(text, self._frame(depth), "expression")

    # ---- expressions over the variables in scope -------------------------------------------------
    def _program_vars(self):
        """name -> a Var of that name, for every variable name of the program's text (to
        read a condition when its breakpoint is set, before any frame exists)."""
        if self._vars is None:
            self._vars = {name: Var(name) for code in self.machine.codes
                          for name in self._slot_names(code) if name is not None}
        return self._vars

    def _parse(self, text, env, what, scope=None):
        """The expression of `text` over the variables `env`; a variable it names that is not
        there is a DebuggerError listing the ones that are (`scope`: those bound in the
        frame, for `p` and `set`; None: every variable of the program, for a condition)."""
        from relayish.ir.text.parser import parse_expr
        if not isinstance(text, str):
            raise DebuggerError(f"the {what} must be text, got {type(text).__name__}")
        try:
            return parse_expr(text, mod=self.mod, free_vars=env)
        except ParseError as exc:
            unbound = _UNBOUND.match(exc.message)
            if unbound is None:
                raise DebuggerError(f"cannot read the {what} {text!r}: {exc}") from None
            name = unbound.group(1)
            names = sorted(env if scope is None else scope)
            where = "in the program" if scope is None else "in scope"
            listed = ", ".join("%" + n for n in names) if names else "none"
            raise DebuggerError(f"no variable %{name} {where} (for {text!r}; the variables "
                                f"{where}: {listed}){did_you_mean(name, names, '%')}") from None
        except RelayishError as exc:
            raise DebuggerError(f"cannot read the {what} {text!r}: {exc}") from None

    def _check_syntax(self, text, what):
        """A ParseError now (naming the text) for a malformed condition or expression."""
        self._parse(text, self._program_vars(), what)

    def _evaluate_text(self, text, frame, what):
        """Parse `text` over the named variables of `frame`'s function (Vars annotated with
        their types; cached per text and function), then evaluate it on their values."""
        from relayish.ir.analysis import free_vars
        from relayish.backend.interp.api import evaluate
        key = (text, id(frame.code))
        compiled = self._exprs.get(key)
        if compiled is None:
            env = {}
            for i, name in enumerate(self._slot_names(frame.code)):
                if name is not None and name not in env:
                    t = self._slot_type(frame.code, i, name)
                    if t is not None:
                        env[name] = Var(name, t)
            expr = self._parse(text, env, what, self._named_slots(frame))
            params = list(free_vars(expr))
            compiled = self._exprs[key] = (Function(params, expr), params)
        func, params = compiled
        scope = self._named_slots(frame)
        missing = [v.name_hint for v in params if v.name_hint not in scope]
        if missing:
            raise DebuggerError(f"{', '.join('%' + n for n in missing)} not in scope in "
                                f"{frame.code.name} (for {text!r})")
        values = [frame.slots[scope[v.name_hint]] for v in params]
        try:
            return evaluate(func, *values, mod=self.mod)
        except RelayishError as exc:
            raise DebuggerError(f"evaluating {text!r}: {exc}") from None

    def _slot_type(self, code, slot, name):
        types = self._types.get(id(code))
        if types is None:
            types = {}
            for i, t in enumerate(code.params.types):
                types[i] = t
            for info in code.steps:
                t = getattr(info.node, "_checked_type", None)
                if t is not None:
                    types.setdefault(info.slot, t)
            self._types[id(code)] = types
        var = self._slot_vars.get(id(code), [None] * (slot + 1))[slot]
        t = param_type(var) if var is not None else None
        return t if t is not None else types.get(slot)


def _origin_at(block, index, look_ahead=8):
    """The AD origin of unit `index` of `block`: its node's, else that of the binding it is
    part of (AD marks only the bound expression; its sub-expressions are the steps just
    before it in the same block)."""
    info = block.info
    for i in range(index, min(len(info), index + look_ahead) + 1):
        found = origin(info[i].node if i < len(info) else block.node)
        if found is not None:
            return found
    return None


def _entry_pause(code):
    block = code.entry
    for index in range(len(block.info) + 1):
        if is_pause(block, index):
            return block, index
    return block, len(block.info)
