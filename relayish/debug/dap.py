"""`relayish dap`: the Debug Adapter Protocol (DAP) on stdio, over rl.debug.Debugger.

    serve(instream, outstream, load)    answer requests until `disconnect` or the end of input

The wire format is DAP's: each message is `Content-Length: N\\r\\n\\r\\n` and N bytes of UTF-8
JSON (https://microsoft.github.io/debug-adapter-protocol/). `load(program, args, grad, raw)` is
the command line's loader (relayish/cli.py `debug_target`): it reads and type-checks the file,
converts the JSON arguments to @main's parameter types and returns a DebugTarget; taking it as
an argument keeps this module below the command line in the import graph.

The session, as VS Code runs it:

    initialize          -> the capabilities below
    launch              -> {program, args: [JSON value per parameter], stopOnEntry, grad
                           (the optimized gradient of @main; with raw, as AD builds it),
                           noDebug (run to the end, past any breakpoint)}
                           the program is loaded now; then the `initialized` event (sent after
                           launch, so that breakpoints are checked against a loaded program)
    setBreakpoints      -> per line (with an optional `condition`, an expression over the
                           variables in scope); a line without a binding is not verified
    setFunctionBreakpoints, configurationDone (the program starts: `stopped` reason "entry"
                           with stopOnEntry, else it runs to a breakpoint)
    threads (one), stackTrace (innermost first), scopes (the frame's locals), variables
    next, stepIn, stepOut, stepBack, reverseContinue, continue -> `stopped` or, at the end,
                           an `output` event with the result, `exited` and `terminated`
    setVariable         -> a JSON value (or an expression) of the variable's type
    evaluate            -> an expression over the variables in scope (of the frame given);
                           `:dot` gives the frame's function as Graphviz DOT (rl.to_dot)
    source              -> the text of a program that has no file (the gradient program)
    disconnect, terminate

Variables: a tensor shows a summary (dtype, shape, min/max, NaN count) and expands to its
elements (rows of a matrix first), in pages of at most PAGE children; tuples, ADT values,
references and closures (their captured values) expand to their parts. A variablesReference
lives until the program runs again, as DAP specifies.

A failing request gets an error response (`success: false`, `message` and `body.error`) and
the server goes on; an error of the debugged program (a failed op, a failed match) is an
`output` event on stderr and a `stopped` event (reason "exception") at the binding that
failed, whose inputs can then be inspected; moving on ends the run (`exited` with code 1,
`terminated`). Nothing the client sends crashes the server: only a broken framing (no
Content-Length) ends it, with a message on stderr. Requests are answered in order, each
request's events after its response. A request that runs the program forward (continue, next,
stepIn, stepOut, configurationDone, restart) runs it on a thread of its own after its response, so
requests keep being read: `pause` stops it at the next pause point (`stopped` reason
"pause"); while it runs, requests other than pause, threads, terminate and disconnect are
refused. `restart` runs the program again from its start, breakpoints kept.
"""
from __future__ import annotations

import json
import os
import sys
import threading
import weakref

import numpy as np

from relayish.errors import RelayishError
from relayish.backend.values import Closure, ConstructorValue, RefValue
from relayish.debug.api import DebuggerError
from relayish.debug.dot import to_dot
from relayish.debug.terminal import back_by_line, by_line, origin_note
from relayish.backend.runtime.summary import summarize, type_summary

__all__ = ["serve", "read_message", "write_message", "FramingError", "CAPABILITIES"]

THREAD_ID = 1           # the program is one thread of evaluation
GRADIENT_SOURCE = 1     # the sourceReference of the gradient program's text
PAGE = 100              # children listed per `variables` request without start/count
MAX_HEADER_LINE = 1 << 16

CAPABILITIES = {
    "supportsConfigurationDoneRequest": True,
    "supportsStepBack": True,
    "supportsConditionalBreakpoints": True,
    "supportsFunctionBreakpoints": True,
    "supportsSetVariable": True,
    "supportsEvaluateForHovers": True,
    "supportsTerminateRequest": True,
    "supportsLoadedSourcesRequest": False,
    "supportsRestartRequest": True,
    "supportsExceptionInfoRequest": False,
}


class FramingError(RelayishError):
    """The input is not DAP messages (a header without Content-Length, a truncated body)."""


class RequestError(RelayishError):
    """A request the server cannot carry out; the client gets it as an error response."""


# ---- framing ---------------------------------------------------------------------------------

def read_message(stream):
    """The next message of a binary stream as a dict; None at the end of input. A body that is
    not a JSON object comes back as {"_malformed": reason} (the framing is intact, so the
    session can go on)."""
    length = None
    while True:
        line = stream.readline(MAX_HEADER_LINE)
        if not line:
            if length is None:
                return None
            raise FramingError("the input ended inside a message header")
        line = line.rstrip(b"\r\n")
        if not line:
            if length is None:
                continue                    # blank lines between messages are harmless
            break
        name, sep, value = line.decode("latin-1").partition(":")
        if not sep:
            raise FramingError(f"not a DAP header line: {line[:80]!r}")
        if name.strip().lower() == "content-length":
            try:
                length = int(value.strip())
            except ValueError:
                raise FramingError(f"Content-Length is not a number: {value.strip()!r}") \
                    from None
            if length < 0:
                raise FramingError(f"Content-Length is negative: {length}")
    body = stream.read(length)
    if len(body) < length:
        raise FramingError(f"the input ended {length - len(body)} bytes into a message body")
    try:
        message = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        return {"_malformed": f"the message is not UTF-8 JSON ({e})"}
    except RecursionError:
        return {"_malformed": "the message is nested too deeply"}
    if not isinstance(message, dict):
        return {"_malformed": f"the message is a JSON {type(message).__name__}, not an object"}
    return message


def write_message(stream, message):
    """Write one message (a dict) to a binary stream, framed, and flush it."""
    body = json.dumps(message, default=str).encode("utf-8")
    stream.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
    stream.flush()


# ---- values shown as DAP variables ---------------------------------------------------------------

def value_summary(value):
    """One line for a value: a scalar's number and dtype; otherwise rl.debug's summary (a
    tensor's dtype, shape, range and NaN/Inf counts; a tuple's, ADT's or reference's outline;
    a closure's name)."""
    if _is_array(value) and np.ndim(value) == 0:
        return _scalar_text(np.asarray(value))
    if _is_array(value):
        return summarize(np.asarray(value))
    return summarize(value)


def _is_array(value):
    return isinstance(value, (np.ndarray, np.generic)) or (
        hasattr(value, "shape") and hasattr(value, "dtype"))


def _scalar_text(arr):
    item = arr.item()
    if isinstance(item, bool):
        return "True" if item else "False"
    text = f"{item:.6g}" if isinstance(item, float) else str(item)
    return f"{text} ({arr.dtype})"


def children(value):
    """[(name, value)] of a value's parts; [] for a scalar. A tensor's parts are its rows
    (its elements when 1-d)."""
    if _is_array(value):
        arr = np.asarray(value)
        if arr.ndim == 0:
            return []
        return _LazyRows(arr)
    if isinstance(value, tuple):
        return [(str(k), v) for k, v in enumerate(value)]
    if isinstance(value, ConstructorValue):
        return [(str(k), v) for k, v in enumerate(value.fields)]
    if isinstance(value, RefValue):
        return [("value", value.value)]
    if isinstance(value, Closure):
        return _captures(value)
    return []


class _LazyRows:
    """A tensor's rows as (index, row) pairs, made only for the page asked for (a tensor of a
    million elements lists its first PAGE without making the others)."""

    def __init__(self, arr):
        self.arr = arr

    def __len__(self):
        return self.arr.shape[0]

    def __getitem__(self, window):
        return [(f"[{k}]", self.arr[k]) for k in range(*window.indices(len(self)))]


def _captures(clo):
    """A closure's captured values with the names of their Vars (interpreter closures)."""
    code, env = getattr(clo, "code", None), getattr(clo, "env", None)
    if code is None or not env:
        return []
    names = getattr(code, "slot_names", [])
    start = getattr(code, "nparams", 0)
    out = []
    for k, v in enumerate(env):
        slot = start + k
        name = names[slot] if slot < len(names) and names[slot] else f"capture {k}"
        out.append((f"%{name}" if not name.startswith("capture") else name, v))
    return out


def has_children(value):
    if _is_array(value):
        return np.ndim(value) > 0
    if isinstance(value, (tuple, RefValue)):
        return bool(value) if isinstance(value, tuple) else True
    if isinstance(value, ConstructorValue):
        return bool(value.fields)
    if isinstance(value, Closure):
        return bool(getattr(value, "env", None))
    return False


class _References:
    """variablesReference numbers for the values on show; cleared whenever the program runs
    (DAP: a reference is valid only while the program stays suspended)."""

    def __init__(self):
        self.table = {}

    def add(self, entry):
        ref = len(self.table) + 1
        self.table[ref] = entry
        return ref

    def get(self, ref):
        try:
            return self.table[ref]
        except (KeyError, TypeError):
            raise RequestError(f"variablesReference {ref!r} is unknown or out of date (the "
                               "program ran since it was given)") from None

    def clear(self):
        self.table.clear()


# ---- the session -------------------------------------------------------------------------------

class Session:
    """One debugging session: the requests of one client, in order (see the module docstring).

    `send(message)` writes a message; `load` is the command line's DebugTarget loader."""

    def __init__(self, send, load):
        self.send = send
        self.load = load
        self.seq = 0
        self.target = None              # the DebugTarget of `launch`
        self.dbg = None                 # its Debugger
        self.stop_on_entry = False
        self.no_debug = False
        self.configured = False
        self.ended = False              # the program finished or failed; `terminated` sent
        self.line_breaks = {}           # source path -> [{line, condition}] as the client gave
        self.function_breaks = []       # [{name, condition}]
        self.refs = _References()
        self.failed = False             # paused at a binding that failed
        self.events = []                # events to send after the current response
        self.done = False               # `disconnect` received
        self.lock = threading.Lock()    # one message written at a time
        self.pending = None             # (move, reason): a run to start after the response
        self.worker = None              # the thread running the program, while it runs
        self.worker_events = []         # the events it queues, sent when it stops

    # ---- dispatch ----------------------------------------------------------------------------
    def handle(self, message):
        """Answer one message; any failure becomes an error response, never an exception."""
        if "_malformed" in message:
            self._event("output", category="stderr",
                        output=f"relayish dap: ignored a message: {message['_malformed']}\n")
            self._flush_events()
            return
        if message.get("type") != "request":
            return                      # responses to reverse requests, stray events: unused
        command = message.get("command")
        method = REQUESTS.get(command) if isinstance(command, str) else None
        try:
            if method is None:
                raise RequestError(f"unsupported request {command!r}")
            if self._running() and command not in WHILE_RUNNING:
                raise RequestError(f"{command}: the program is running (send pause first)")
            arguments = message.get("arguments") or {}
            if not isinstance(arguments, dict):
                raise RequestError(f"{command}: arguments must be a JSON object")
            body = getattr(self, method)(arguments)
        except RelayishError as e:
            self._respond(message, False, message=str(e))
            self.events.clear()
        except Exception as e:  # noqa: BLE001 - a bug must not end the user's session
            self._respond(message, False, message=f"internal error ({type(e).__name__}: {e});"
                                                  " this is a bug in relayish")
            self.events.clear()
        else:
            self._respond(message, True, body=body)
        self._flush_events()
        if self.pending is not None:
            move, reason = self.pending
            self.pending = None
            self.worker = threading.Thread(target=self._background, args=(move, reason),
                                           daemon=True)
            self.worker.start()

    def _running(self):
        return self.worker is not None

    def _background(self, move, reason):
        """The worker thread: run the program, then send what it queued (`stopped`, or the
        end). It is no longer running by the time its events go out, so the request a
        client sends on `stopped` is answered."""
        try:
            self._run(move, reason)
        except DebuggerError as e:       # refused before anything ran (nothing to step back)
            self._event("output", category="stderr", output=f"relayish dap: {e}\n")
            self._stopped("step")
        except Exception as e:  # noqa: BLE001 - a bug must not end the user's session
            self._event("output", category="stderr",
                        output=f"relayish dap: internal error ({type(e).__name__}: {e}); "
                               "this is a bug in relayish\n")
            self._stopped("exception", str(e))
        finally:
            with self.lock:
                events, self.worker_events = self.worker_events, []
                self.worker = None
            for e in events:
                self._send(e)

    def _start(self, move, reason):
        """Run `move` on the worker thread once this request's response is sent."""
        self.pending = (move, reason)

    def _stop_worker(self):
        """Pause a running program and wait for its thread (terminate, disconnect)."""
        worker = self.worker
        if worker is not None:
            self.dbg.machine.interrupted = True
            worker.join(timeout=30)
    def _respond(self, request, success, body=None, message=None):
        response = {"type": "response", "request_seq": request.get("seq", 0),
                    "success": success, "command": request.get("command", "")}
        if message is not None:
            response["message"] = message
            response["body"] = {"error": {"id": 1, "format": message, "showUser": True}}
        elif body is not None:
            response["body"] = body
        self._send(response)

    def _event(self, event, **body):
        queue = (self.worker_events if threading.current_thread() is self.worker
                 else self.events)
        queue.append({"type": "event", "event": event, "body": body})

    def _flush_events(self):
        events, self.events = self.events, []
        for e in events:
            self._send(e)

    def _send(self, message):
        with self.lock:
            self.seq += 1
            message["seq"] = self.seq
            self.send(message)

    def _debugger(self):
        if self.dbg is None:
            raise RequestError("no program is running: send `launch` first")
        return self.dbg

    def _paused(self):
        dbg = self._debugger()
        if self.ended:
            raise RequestError("the program has ended")
        if not self.configured:
            raise RequestError("the program has not started: send `configurationDone` first")
        return dbg

    # ---- requests: setting up ------------------------------------------------------------------
    def initialize(self, args):
        return dict(CAPABILITIES)

    def launch(self, args):
        if self.dbg is not None:
            raise RequestError("a program is already launched in this session")
        program = args.get("program")
        if not isinstance(program, str) or not program:
            raise RequestError("launch needs `program`: the path of a .rly file")
        call_args = args.get("args", [])
        if not isinstance(call_args, list):
            raise RequestError("launch: `args` must be a list with one JSON value per "
                               f"parameter of @main, got {json.dumps(call_args)}")
        self.target = self.load(program, call_args, bool(args.get("grad", False)),
                                bool(args.get("raw", False)))
        self.dbg = self.target.debugger()
        self.stop_on_entry = bool(args.get("stopOnEntry", False))
        # "Run Without Debugging": the program runs to its end, past every breakpoint
        self.no_debug = bool(args.get("noDebug", False))
        if self.line_breaks or self.function_breaks:      # set before the launch
            self._reset_breakpoints()
        # `initialized` after the program is loaded: breakpoints then check against it
        self._event("initialized")
        return None

    def set_breakpoints(self, args):
        source = args.get("source") or {}
        path = source.get("path") or source.get("name") or ""
        breaks = args.get("breakpoints")
        if breaks is None:                       # the deprecated form: lines only
            breaks = [{"line": n} for n in args.get("lines") or []]
        if not isinstance(breaks, list) or not all(
                isinstance(b, dict) and isinstance(b.get("line"), int) for b in breaks):
            raise RequestError("setBreakpoints: `breakpoints` must be a list of {line, "
                               "condition?}")
        self.line_breaks[path] = breaks
        if self.dbg is None or self.no_debug:
            return {"breakpoints": [self._unset(b["line"]) for b in breaks]}
        return {"breakpoints": self._reset_breakpoints()[0][path]}

    def _unset(self, line=None):
        """The reply for a breakpoint that is kept but not set in the debugger."""
        result = {"verified": False, "message": "running without debugging" if self.no_debug
                  else "the program is not launched yet"}
        if line is not None:
            result["line"] = line
        return result

    def set_function_breakpoints(self, args):
        breaks = args.get("breakpoints")
        if not isinstance(breaks, list) or not all(
                isinstance(b, dict) and isinstance(b.get("name"), str) for b in breaks):
            raise RequestError("setFunctionBreakpoints: `breakpoints` must be a list of "
                               "{name, condition?}")
        self.function_breaks = breaks
        if self.dbg is None or self.no_debug:
            return {"breakpoints": [self._unset() for _ in breaks]}
        return {"breakpoints": self._reset_breakpoints()[1]}

    def _reset_breakpoints(self):
        """Set every breakpoint the client holds (DAP sends each source's whole list, so the
        debugger's breakpoints are cleared and all set again); returns the replies:
        ({source path: [one per line breakpoint]}, [one per function breakpoint])."""
        dbg = self.dbg
        dbg.clear_breaks()
        lines = {path: [self._set_one(dbg, {"line": b["line"]}, b, path) for b in breaks]
                 for path, breaks in self.line_breaks.items()}
        functions = [self._set_one(dbg, {"function": b["name"].lstrip("@")}, b, None)
                     for b in self.function_breaks]
        return lines, functions

    def _set_one(self, dbg, where, b, path):
        condition = b.get("condition") or None
        result = {"verified": False}
        if "line" in where:
            result["line"] = where["line"]
        if path is not None and not self._is_program(path):
            result["message"] = f"not the launched program ({self.target.path})"
            return result
        try:
            bp = dbg.break_at(condition=condition, **where)
        except RelayishError as e:
            result["message"] = str(e)
            return result
        result.update(verified=True, id=bp.id, source=self._source())
        return result

    def _source(self):
        """The DAP Source of the positions: the file, or (for the gradient program, which has
        no file) a sourceReference the client reads with the `source` request."""
        if self.target.grad:
            return {"name": f"{os.path.basename(self.target.path)} (gradient)",
                    "sourceReference": GRADIENT_SOURCE}
        return {"name": os.path.basename(self.target.path),
                "path": os.path.abspath(self.target.path)}

    def _is_program(self, path):
        if self.target.grad:
            return path in ("", f"{os.path.basename(self.target.path)} (gradient)")
        return os.path.realpath(path) == os.path.realpath(self.target.path)

    def set_exception_breakpoints(self, args):
        return {"breakpoints": []}

    def configuration_done(self, args):
        self._debugger()
        if self.configured:
            raise RequestError("configurationDone was already received")
        self.configured = True
        if self.no_debug:
            self.line_breaks, self.function_breaks = {}, []
            self.dbg.clear_breaks()
            self._start(lambda dbg: dbg.cont(), "breakpoint")
        else:
            self._start_at_entry()
        return None

    def _start_at_entry(self):
        if self.stop_on_entry:
            self._stopped("entry")
        elif self._at_breakpoint(self.dbg):
            # the debugger runs at least one step before it checks breakpoints: one on the
            # first binding is checked here
            self._stopped("breakpoint")
        else:
            self._start(lambda dbg: dbg.cont(), "breakpoint")

    def pause(self, args):
        self._debugger()
        if self._running():
            self.dbg.machine.interrupted = True     # the worker sends `stopped` "pause"
        elif not self.ended:
            self._stopped("pause")                  # paused already: say so, as DAP asks
        return None

    def restart(self, args):
        """Run the program again from its start (same arguments, breakpoints kept)."""
        dbg = self._debugger()
        if not self.configured:
            raise RequestError("the program has not started: send `configurationDone` first")
        self.refs.clear()
        dbg.restart(*self.target.values)
        self.ended = self.failed = False
        self._start_at_entry()
        return None

    def threads(self, args):
        return {"threads": [{"id": THREAD_ID, "name": "main"}]}

    # ---- requests: running -----------------------------------------------------------------------
    def next(self, args):
        return self._motion(_by_line(args, lambda dbg: dbg.step()), "step")

    def step_in(self, args):
        return self._motion(_by_line(args, lambda dbg: dbg.step_in()), "step")

    def step_out(self, args):
        return self._motion(lambda dbg: dbg.step_out(), "step")

    # going back replays what already ran (Debugger.step_back): it runs in the request, so
    # that nothing to go back to is the request's error
    def step_back(self, args):
        self._paused()
        self._run(_back_by_line(args), "step")
        return None

    def reverse_continue(self, args):
        self._paused()
        self._run(self._back_to_breakpoint, "breakpoint")
        return None

    def _back_to_breakpoint(self, dbg):
        """Step back (command by command, as Debugger.step_back rewinds) until a line
        breakpoint whose condition holds, or as far back as the history goes."""
        start = (dbg.where().line, len(dbg.frames()))
        dbg.step_back()             # nothing to go back to: the request fails
        while (dbg.where().line, len(dbg.frames())) == start or not self._at_breakpoint(dbg):
            try:
                dbg.step_back()
            except DebuggerError:
                return

    def _at_breakpoint(self, dbg):
        """Whether the program is paused on the line of a line breakpoint whose condition
        holds (the debugger checks its own breakpoints only while running forward)."""
        line = dbg.where().line
        conditions = [b.get("condition") or None for breaks in self.line_breaks.values()
                      for b in breaks if b["line"] == line]
        return self._holds(dbg, conditions)

    @staticmethod
    def _holds(dbg, conditions):
        for cond in conditions:
            if cond is None:
                return True
            try:
                if bool(np.asarray(dbg.evaluate(cond))):
                    return True
            except RelayishError:
                return True         # a condition that fails stops, as it does going forward
        return False

    def continue_(self, args):
        self._motion(lambda dbg: dbg.cont(), "breakpoint")
        return {"allThreadsContinued": True}

    def _motion(self, move, reason):
        self._paused()
        self._start(move, reason)
        return None

    def _run(self, move, reason):
        """Move the program, then queue `stopped`, or the result and `terminated` at the end.
        An error of the program ends the run (its message on stderr)."""
        self.refs.clear()
        dbg = self.dbg
        try:
            move(dbg)
        except DebuggerError:
            raise                   # a command the debugger refused: nothing ran
        except RelayishError as e:
            # the program failed: pause at the binding that failed, so that its inputs can
            # be looked at (continuing runs it again and ends the session)
            if self.failed:
                self._end(f"{self.target.path}: {e}\n", "stderr", 1)
            else:
                self.failed = True
                self._event("output", category="stderr", output=f"{self.target.path}: {e}\n")
                self._stopped("exception", str(e))
            return
        self.failed = False
        if dbg.machine.interrupted:      # `pause` stopped it
            dbg.machine.interrupted = False
            reason = "pause"
        if dbg.finished:
            self._end(f"@main returned {self.target.result_text(dbg.result)}\n", "stdout", 0)
        else:
            # a step can end on a breakpoint too (one inside a call it steps over)
            self._stopped("breakpoint" if reason == "step" and self._at_breakpoint(dbg)
                          else reason)

    def _stopped(self, reason, text=None):
        """Queue `stopped`; `text` (an exception's message) is what editors show beside the
        stop; other stops are told by their reason and the stack."""
        body = {"reason": reason, "threadId": THREAD_ID, "allThreadsStopped": True}
        if text is not None:
            body.update(description="the program failed", text=text)
        self._event("stopped", **body)

    def _end(self, text, category, code):
        self.ended = True
        self._event("output", category=category, output=text)
        self._event("exited", exitCode=code)
        self._event("terminated")

    # ---- requests: inspecting ----------------------------------------------------------------
    def stack_trace(self, args):
        dbg = self._paused()
        frames = list(dbg.frames())
        start = _int_arg(args, "startFrame", 0)
        levels = _int_arg(args, "levels", 0) or len(frames)
        pos = dbg.where()
        out = []
        for k, frame in enumerate(frames):
            if k < start or k >= start + levels:
                continue
            line, column = (pos.line, pos.column) if k == 0 else (frame.line, frame.column)
            out.append({"id": k, "name": _frame_name(frame), "line": line or 0,
                        "column": column or 1, "source": self._source()})
        return {"stackFrames": out, "totalFrames": len(frames)}

    def scopes(self, args):
        dbg = self._paused()
        frame_id = _int_arg(args, "frameId", 0)
        locals_ = self._frame_locals(dbg, frame_id)
        ref = self.refs.add(("scope", frame_id, locals_))
        return {"scopes": [{"name": "Locals", "presentationHint": "locals",
                            "variablesReference": ref, "namedVariables": len(locals_),
                            "expensive": False}]}

    def _frame_locals(self, dbg, frame_id):
        frames = dbg.frames()
        if not 0 <= frame_id < len(frames):
            raise RequestError(f"frameId {frame_id} is not on the stack (0..{len(frames) - 1})")
        return dict(dbg.locals(depth=frame_id))

    def variables(self, args):
        self._paused()
        entry = self.refs.get(args.get("variablesReference"))
        if entry[0] == "scope":
            items = [(f"%{name}", value) for name, value in entry[2].items()]
        else:
            items = children(entry[1])
        start = _int_arg(args, "start", 0)
        count = _int_arg(args, "count", 0) or PAGE
        page = items[start:start + count]
        return {"variables": [self._variable(name, value) for name, value in page]}

    def _variable(self, name, value):
        v = {"name": name, "value": value_summary(value), "type": type_summary(value),
             "variablesReference": 0}
        if has_children(value):
            v["variablesReference"] = self.refs.add(("value", value))
            n = len(children(value))
            if _is_array(value):
                v["indexedVariables"] = n
            else:
                v["namedVariables"] = n
        return v

    def set_variable(self, args):
        dbg = self._paused()
        entry = self.refs.get(args.get("variablesReference"))
        if entry[0] != "scope" or entry[1] != 0:
            raise RequestError("setVariable changes a variable of the innermost frame's "
                               "Locals, not a part of a value or another frame's variable")
        name = str(args.get("name", "")).lstrip("%")
        if name not in entry[2]:
            raise RequestError(f"there is no variable %{name} in scope")
        text = args.get("value")
        if not isinstance(text, str):
            raise RequestError("setVariable: `value` must be a string")
        value = self.target.parse_value(text, entry[2][name],
                                        f"%{name} in {dbg.where().function}")
        if value is None:
            value = dbg.evaluate(text)
        dbg.set(name, value)
        new = dict(dbg.locals())[name]
        entry[2][name] = new
        shown = self._variable(f"%{name}", new)
        return {"value": shown["value"], "type": shown["type"],
                "variablesReference": shown["variablesReference"]}

    def evaluate(self, args):
        dbg = self._paused()
        text = args.get("expression")
        if not isinstance(text, str) or not text.strip():
            raise RequestError("evaluate needs an `expression`")
        depth = _int_arg(args, "frameId", 0)
        if text.strip() == ":dot":
            return {"result": self._dot(dbg, depth), "variablesReference": 0}
        if args.get("context") == "hover" and not text.startswith("%") \
                and text in dbg.locals(depth=depth):
            text = "%" + text       # an editor's word under the mouse leaves out the %
        value = dbg.evaluate(text, depth=depth)
        shown = self._variable(text, value)
        return {"result": shown["value"], "type": shown["type"],
                "variablesReference": shown["variablesReference"]}

    def _dot(self, dbg, depth):
        """rl.to_dot of the function that frame `depth` runs."""
        frames = dbg.machine.frames
        if not 0 <= depth < len(frames):
            raise RequestError(f"frameId {depth} is not on the stack (0..{len(frames) - 1})")
        func = frames[-1 - depth].code.func
        if isinstance(func, weakref.ref):
            func = func()
        if func is None:
            raise RequestError("the frame's function is gone (it was compiled from a value "
                               "that no longer exists)")
        return to_dot(func, mod=dbg.mod)

    def source(self, args):
        self._debugger()
        return {"content": self.dbg.text, "mimeType": "text/x-relayish"}

    # ---- requests: ending ----------------------------------------------------------------------
    def terminate(self, args):
        self._stop_worker()
        if not self.ended:
            self.ended = True
            self._event("terminated")
        return None

    def disconnect(self, args):
        self._stop_worker()
        self.done = True
        return None


REQUESTS = {
    "initialize": "initialize", "launch": "launch", "setBreakpoints": "set_breakpoints",
    "setFunctionBreakpoints": "set_function_breakpoints",
    "setExceptionBreakpoints": "set_exception_breakpoints",
    "configurationDone": "configuration_done", "threads": "threads",
    "stackTrace": "stack_trace", "scopes": "scopes", "variables": "variables",
    "next": "next", "stepIn": "step_in", "stepOut": "step_out", "stepBack": "step_back",
    "reverseContinue": "reverse_continue", "continue": "continue_",
    "setVariable": "set_variable", "evaluate": "evaluate", "source": "source",
    "terminate": "terminate", "disconnect": "disconnect", "pause": "pause",
    "restart": "restart",
}
WHILE_RUNNING = ("pause", "threads", "terminate", "disconnect")


def _by_line(args, move):
    """`move` by lines (terminal.by_line), or one pause point with granularity
    "instruction"."""
    if args.get("granularity") == "instruction":
        return move
    return lambda dbg: by_line(dbg, lambda: move(dbg))


def _back_by_line(args):
    if args.get("granularity") == "instruction":
        return lambda dbg: dbg.step_back()
    return back_by_line


def _int_arg(args, key, default):
    value = args.get(key, default)
    if value is None:
        return default
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise RequestError(f"`{key}` must be a non-negative integer, got {json.dumps(value)}")
    return value


def _frame_name(frame):
    """The function's name, and for a binding AD generated the primal line it comes from:
    `fn  [backward step of line 8]`."""
    name = frame.function or "?"
    name = name if name.startswith(("@", "fn", "%")) else f"@{name}"
    return name + origin_note(frame.position)


def serve(instream, outstream, load):
    """Run a session on binary streams until `disconnect` or the end of input; returns the
    exit status (0, or 1 when the framing broke)."""
    session = Session(lambda m: write_message(outstream, m), load)
    while not session.done:
        try:
            message = read_message(instream)
        except FramingError as e:
            print(f"relayish dap: {e}", file=sys.stderr)
            return 1
        if message is None:
            break
        session.handle(message)
    return 0
