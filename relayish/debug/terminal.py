"""`relayish debug FILE [ARG...] [--grad]`: a pdb-like terminal front end over rl.debug.Debugger.

    interact(target, stdin, stdout) -> exit status     the command loop, until `q` or end of input
    parse_command(line) -> (name, argument text)       `b 7 %x > 0f` -> ("break", "7 %x > 0f")

`target` is the command line's DebugTarget (relayish/cli.py): the program of the file, its
arguments converted from JSON, `debugger()`, `result_text(value)` and `parse_value(text, old)`;
taking it as an argument keeps this module below the command line in the import graph.

The session prints where the program is paused (file:line:column, the function, the binding
about to run; for a gradient program, the primal line a backward binding comes from), then
reads commands at the `(rdb)` prompt; an empty line repeats the last motion command, as in
pdb. COMMANDS below is the list `help` prints (and `relayish debug --help`).

An error of the debugged program (a failed op, a NaN check) leaves the session paused at the
binding that failed, so its inputs can be inspected; a mistake in a command (an unknown
command, a bad expression, a line without a binding) prints a message and changes nothing.
Ctrl-C stops a running `c` at the next step and pauses there. Nothing here recurses over the
program: listing reads lines of the text, the debugger steps with its own explicit stack.
"""
from __future__ import annotations

import numpy as np

from relayish.errors import RelayishError
from relayish.backend.values import ConstructorValue, RefValue
from relayish.debug.api import DebuggerError

__all__ = ["interact", "parse_command", "COMMANDS", "PROMPT"]

PROMPT = "(rdb) "
LIST_CONTEXT = 5                     # lines shown above and below the current one by `l`
VALUE_ELEMENTS = 200                 # elements of a tensor `p` prints before eliding
TEXT_LIMIT = 2000                    # characters of a tuple's or ADT value's text `p` prints

COMMANDS = """\
  n, next             run to the next line, over calls
  s, step             run to the next line, into calls
  r, return           run until the current function returns
  c, continue         run until a breakpoint or the end
  back                step back to the line before (undoes what ran since)
  b LINE [COND]       break at a line of the text, if COND (an expression over the variables
  b @NAME [COND]        in scope, e.g. `%x > 0f`) holds; b @NAME breaks at a function's entry;
  b                     b alone lists the breakpoints
  cl [N]              clear breakpoint N (all of them without N)
  p EXPR              print an expression over the variables in scope (`p %x`, `p sum(%x)`)
  l, list             the text around the current binding (-> marks it, B a breakpoint)
  locals              the variables in scope: name, type, summary
  bt, where           the call stack, outermost first (> marks the current frame)
  set NAME VALUE      give variable NAME a new value: JSON of its type (`set %x [1, 2]`) or an
                        expression (`set %x %y * 2f`)
  h, help             this list
  q, quit             stop debugging"""

ALIASES = {
    "n": "next", "next": "next", "s": "step", "step": "step", "r": "return",
    "return": "return", "c": "continue", "cont": "continue", "continue": "continue",
    "back": "back", "b": "break", "break": "break", "cl": "clear", "clear": "clear", "p": "print", "print": "print",
    "l": "list", "list": "list", "locals": "locals", "bt": "where", "where": "where",
    "w": "where", "set": "set", "h": "help", "help": "help", "?": "help", "q": "quit",
    "quit": "quit", "exit": "quit",
}
MOTIONS = ("next", "step", "return", "continue", "back")


class UsageError(RelayishError):
    """A mistake in a debugger command (unknown, missing its argument, a bad line number)."""


def parse_command(line):
    """(name, argument text) of a command line; ("", "") for an empty line. The name is the
    full one (`n` -> "next"); an unknown word raises UsageError."""
    text = line.strip()
    if not text:
        return "", ""
    word, _, rest = text.partition(" ")
    name = ALIASES.get(word)
    if name is None:
        raise UsageError(f"unknown command {word!r} (help lists the commands)")
    rest = rest.strip()
    if name in ("print", "set") and not rest:
        raise UsageError(f"{word} needs an argument: "
                           + ("p EXPR" if name == "print" else "set NAME VALUE"))
    if name in MOTIONS + ("list", "locals", "where", "help", "quit") and rest:
        raise UsageError(f"{word} takes no argument, got {rest!r}")
    return name, rest


def parse_break(text):
    """(dict of break_at keywords, condition or None) of `b`'s argument: `7`, `7 COND`,
    `@name`, `@name COND`."""
    where, _, cond = text.partition(" ")
    cond = cond.strip() or None
    if where.startswith("@") and len(where) > 1:
        return {"function": where[1:]}, cond
    try:
        line = int(where)
    except ValueError:
        raise UsageError(f"b takes a line number or @FUNCTION, got {where!r}") from None
    if line < 1:
        raise UsageError(f"line numbers start at 1, got {line}")
    return {"line": line}, cond


def parse_set(text):
    """(name without %, value text) of `set`'s argument."""
    name, _, value = text.partition(" ")
    value = value.strip()
    if not value:
        raise UsageError("set needs a name and a value: set NAME VALUE")
    return name.lstrip("%"), value


def by_line(dbg, move):
    """`move()` repeated until the line changes, or the call does, or the program ends: a
    line such as `%r := !%r + 1f64` has a pause point per operation, and `n`, like pdb's and
    an editor's "step over", goes by lines. (dap.py moves the same way.)"""
    start, depth = dbg.where().line, len(dbg.frames())
    move()
    # (a binding without a place in the text is a line of its own)
    while start is not None and not dbg.finished and dbg.where().line == start \
            and len(dbg.frames()) == depth:
        move()


def back_by_line(dbg):
    """step_back repeated until the line changes (or the call does, or the history ends):
    the reverse of by_line. It lands on the last pause point of the line before (the
    debugger's history cannot be looked into without stepping back)."""
    start = (dbg.where().line, len(dbg.frames()))
    dbg.step_back()                  # nothing to go back to: DebuggerError, nothing changed
    while start[0] is not None and (dbg.where().line, len(dbg.frames())) == start:
        try:
            dbg.step_back()
        except DebuggerError:
            return


class Shell:
    """The command loop's state: the debugger, the breakpoints set, the last motion."""

    def __init__(self, target, write):
        self.target = target
        self.write = write
        self.dbg = target.debugger()
        self.breaks = []             # per breakpoint number: see do_break
        self.last = ""

    # ---- the loop ---------------------------------------------------------------------------
    def run(self, read):
        self.show_position()
        while True:
            line = read()
            if line is None:         # end of input: as `q`
                return 0
            try:
                name, arg = parse_command(line)
                if not name:
                    name, arg = self.last, ""
                    if not name:
                        continue
                if name == "quit":
                    return 0
                if name in MOTIONS:
                    self.last = name
                getattr(self, "do_" + name)(arg)
            except RelayishError as e:
                self.write(f"*** {e}\n")

    # ---- motions ------------------------------------------------------------------------------
    def do_next(self, arg):
        self._move(lambda: by_line(self.dbg, self.dbg.step))

    def do_step(self, arg):
        self._move(lambda: by_line(self.dbg, self.dbg.step_in))

    def do_return(self, arg):
        self._move(self.dbg.step_out)

    def do_continue(self, arg):
        self._move(self.dbg.cont)

    def do_back(self, arg):
        self._move(lambda: back_by_line(self.dbg), backward=True)

    def _move(self, motion, backward=False):
        if self.dbg.finished and not backward:
            raise UsageError("the program has finished (back steps into it again; q quits)")
        try:
            motion()
        except KeyboardInterrupt:
            self.write("interrupted\n")
        except DebuggerError:
            raise                   # a command the debugger refused: nothing ran
        except RelayishError as e:
            # the program failed: stay at the binding that failed, to look at its inputs
            self.write(f"*** the program failed: {e}\n")
        self.show_position()

    # ---- breakpoints ------------------------------------------------------------------------
    def do_break(self, arg):
        if not arg:
            if not any(self.breaks):
                self.write("no breakpoints\n")
            for k, entry in enumerate(self.breaks, 1):
                if entry is not None:
                    self.write(f"{k}: {entry[0]}\n")
            return
        where, cond = parse_break(arg)
        self.dbg.break_at(condition=cond, **where)
        line = where.get("line")
        text = (f"line {line}" if line else f"@{where['function']}") + \
            (f" if {cond}" if cond else "")
        # (text, line, condition, where) per breakpoint; None once cleared (numbers stay)
        self.breaks.append((text, line, cond, where))
        self.write(f"breakpoint {len(self.breaks)} at {text}\n")

    def do_clear(self, arg):
        if not arg:
            self.dbg.clear_breaks()
            self.write(f"cleared {sum(e is not None for e in self.breaks)} breakpoint(s)\n")
            self.breaks = [None] * len(self.breaks)     # numbers are not reused, as in pdb
            return
        try:
            k = int(arg)
        except ValueError:
            raise UsageError(f"cl takes a breakpoint number, got {arg!r}") from None
        if not 1 <= k <= len(self.breaks) or self.breaks[k - 1] is None:
            raise UsageError(f"there is no breakpoint {k} (b lists them)")
        # the debugger removes breakpoints all at once: set the others again
        self.breaks[k - 1] = None
        self.dbg.clear_breaks()
        for entry in self.breaks:
            if entry is not None:
                self.dbg.break_at(condition=entry[2], **entry[3])
        self.write(f"cleared breakpoint {k}\n")

    # ---- inspecting -------------------------------------------------------------------------
    def do_print(self, arg):
        self._paused("p")
        self.write(value_text(self.dbg.evaluate(arg)) + "\n")

    def do_locals(self, arg):
        self._paused("locals")
        items = self.dbg.describe_locals()
        if not items:
            self.write("no variables in scope\n")
        width = max((len(name) for name, _, _ in items), default=0) + 1
        for name, type_text, summary in items:
            # a tensor's summary starts with its type (float64[2] min ..): say it once
            shown = summary if summary.startswith(type_text) else f"{type_text}: {summary}"
            self.write(f"%{name:<{width}} {shown}\n")

    def do_where(self, arg):
        self._paused("bt")
        frames = list(self.dbg.frames())
        pos = self.dbg.where()
        for k in reversed(range(len(frames))):
            frame = frames[k]
            tail = frame.tail_call
            if tail is not None:         # the frame a tail call replaced, where it made it
                self.write(f"  {self._place()}:{tail.line or '?'} in {_function(tail)} "
                           f"(tail call){origin_note(tail)}\n")
            line = pos.line if k == 0 else getattr(frame, "line", None)
            mark = ">" if k == 0 else " "
            self.write(f"{mark} {self._place()}:{line or '?'} in {_function(frame)}"
                       f"{origin_note(frame.position)}\n")

    def do_list(self, arg):
        self._paused("l")
        pos = self.dbg.where()
        if pos.line is None:
            raise UsageError(f"the current step has no place in the text ({pos.expr})")
        lines = self.dbg.text.splitlines()
        marked = {entry[1] for entry in self.breaks if entry is not None}
        lo = max(1, pos.line - LIST_CONTEXT)
        hi = min(len(lines), pos.line + LIST_CONTEXT)
        for n in range(lo, hi + 1):
            mark = "->" if n == pos.line else "  "
            bp = "B" if n in marked else " "
            self.write(f"{n:4d} {bp}{mark} {lines[n - 1]}\n")

    def do_set(self, arg):
        self._paused("set")
        name, text = parse_set(arg)
        scope = dict(self.dbg.locals())
        if name not in scope:
            raise UsageError(f"there is no variable %{name} in scope")
        value = self.target.parse_value(text, scope[name],
                                        f"%{name} in {self.dbg.where().function}")
        if value is None:
            value = self.dbg.evaluate(text)
        self.dbg.set(name, value)
        self.write(f"%{name} = {value_text(dict(self.dbg.locals())[name])}\n")

    def do_help(self, arg):
        self.write(COMMANDS + "\n")

    # ---- showing where we are -------------------------------------------------------------------
    def _paused(self, command):
        if self.dbg.finished:
            raise UsageError(f"{command}: the program has finished (back steps into it again)")

    def show_position(self):
        dbg = self.dbg
        if dbg.finished:
            self.write(f"@main returned {self.target.result_text(dbg.result)}\n")
            return
        pos = dbg.where()
        self.write(f"> {self._place()}:{pos.line}:{pos.column} in {pos.function}\n")
        self.write(f"-> {pos.text or pos.expr}{origin_note(pos)}\n")

    def _place(self):
        """The name the lines belong to: the file, or the gradient program's text (`l`)."""
        return f"{self.target.path} (gradient)" if self.target.grad else self.target.path


def origin_note(pos):
    """"  [backward step of line 8]" for a binding AD generated (Position.origin: the primal
    expression's place), "" otherwise."""
    if pos is None or pos.origin is None:
        return ""
    kind = getattr(pos, "origin_kind", None) or "derived"
    return f"  [{kind} step of line {pos.origin[1]}]"


def _function(frame):
    name = getattr(frame, "function", None) or "?"
    return name if name.startswith(("@", "%", "fn")) else f"@{name}"


def value_text(value):
    """A value as `p` prints it: a tensor's summary line and its elements (elided past
    VALUE_ELEMENTS); a scalar's number and dtype; a tuple, ADT value or reference written
    out (cut after TEXT_LIMIT characters); a closure's name."""
    from relayish.backend.runtime.summary import summarize
    if isinstance(value, (np.ndarray, np.generic)):
        arr = np.asarray(value)
        if arr.ndim == 0:
            return f"{arr.item()!r} ({arr.dtype})"
        body = np.array2string(arr, threshold=VALUE_ELEMENTS, max_line_width=100)
        return f"{summarize(arr)}\n{body}"
    return plain_text(value)


def plain_text(value, limit=None):
    """`(1.5, Cons(2.5, Nil))`: a value written out, tensors as numbers or nested lists, cut
    with "..." after `limit` characters. A loop over an explicit stack: an ADT list may be
    10^5 long."""
    from relayish.backend.runtime.summary import summarize
    limit = TEXT_LIMIT if limit is None else limit
    out, size = [], 0
    stack = [value]
    while stack and size <= limit:
        item = stack.pop()
        if isinstance(item, _Literal):
            text = item.text
        elif isinstance(item, (np.ndarray, np.generic)):
            arr = np.asarray(item)
            text = repr(arr.tolist()) if arr.size <= VALUE_ELEMENTS else summarize(arr)
        elif isinstance(item, tuple):
            stack.append(_Literal(",)" if len(item) == 1 else ")"))
            for k in reversed(range(len(item))):
                stack.append(item[k])
                if k:
                    stack.append(_Literal(", "))
            text = "("
        elif isinstance(item, ConstructorValue):
            text = item.constructor.name_hint
            if item.fields:
                stack.append(_Literal(")"))
                for k in reversed(range(len(item.fields))):
                    stack.append(item.fields[k])
                    if k:
                        stack.append(_Literal(", "))
                text += "("
        elif isinstance(item, RefValue):
            stack += [_Literal(")"), item.value]
            text = "ref("
        else:
            text = summarize(item)
        out.append(text)
        size += len(text)
    text = "".join(out)
    return text if not stack and size <= limit else text[:limit] + "..."


class _Literal:
    """Punctuation waiting on plain_text's stack (a str there would be taken for a value)."""

    __slots__ = ("text",)

    def __init__(self, text):
        self.text = text


def interact(target, stdin, stdout):
    """Run the command loop on text streams; returns the exit status (0)."""
    def write(text):
        stdout.write(text)
        stdout.flush()

    def read():
        write(PROMPT)
        try:
            line = stdin.readline()
        except KeyboardInterrupt:     # Ctrl-C at the prompt: a fresh prompt, as pdb
            write("\n")
            return ""
        if not line:
            write("\n")
            return None
        return line

    return Shell(target, write).run(read)
