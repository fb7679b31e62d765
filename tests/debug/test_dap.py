"""`relayish dap` (relayish/debug/dap.py): the Debug Adapter Protocol over stdio.

A Python client spawns the real command and drives whole sessions over its pipes: initialize
(capabilities), launch (args as JSON values, stopOnEntry, grad), setBreakpoints (lines,
conditions) and setFunctionBreakpoints, configurationDone, threads, stackTrace, scopes,
variables (a tuple, an ADT value, a closure, a reference, a tensor's elements), next, stepIn,
stepOut, stepBack, reverseContinue, continue, setVariable, evaluate (and `:dot`), source,
disconnect, and the stopped/output/exited/terminated events; on a program with a closure, a
reference, an ADT match and recursion, and on its gradient program. Mistakes (unknown
requests, bad arguments, a broken message) get error responses and the server goes on.

The same exchanges run through the VS Code project's own client (DebugClient of
@vscode/debugadapter-testsupport, tests/debug/js/) when node and that package are there
(`cd tests/debug/js && npm install`); otherwise that test is skipped, saying why.
"""
import json
import os
import queue
import shutil
import subprocess
import sys
import threading

import pytest

from relayish.debug.dap import CAPABILITIES, FramingError, read_message, write_message

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
JS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "js")
TIMEOUT = 60

PROGRAM = """\
type List[a] { Cons(a, List[a]), Nil }

def @sum_list(%l: List[float64]) -> float64 {
  match (%l) {
    Cons(%h, %t) => %h + @sum_list(%t),
    Nil => 0f64,
  }
}

def @main(%x: Tensor[(2), float64]) -> float64 {
  let %a = take(%x, 0);
  let %scale = fn (%y: float64) { %y * %a };
  let %r = ref(%a);
  %r := !%r + 1f64;
  let %pair = (%a, Cons(%a, Nil()));
  let %s = @sum_list(Cons(%a, Cons(2.5f64, Nil())));
  %scale(!%r) + %s
}
"""
# x = [1.5, 2]: result 2.5 * 1.5 + (1.5 + 2.5) = 7.75; gradient [5, 0]


def line_of(text):
    for k, line in enumerate(PROGRAM.splitlines(), 1):
        if text in line:
            return k
    raise AssertionError(text)


class Client:
    """A DAP client over the pipes of `relayish dap`: `request` sends a request and returns its
    response; events are queued for `event`."""

    def __init__(self):
        env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
        self.proc = subprocess.Popen([sys.executable, "-m", "relayish", "dap"], cwd=ROOT,
                                     env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE)
        self.seq = 0
        self.responses = queue.Queue()
        self.events = queue.Queue()
        self.order = []                 # every message's (type, command or event), in order
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        while True:
            try:
                message = read_message(self.proc.stdout)
            except (FramingError, ValueError, OSError):
                message = None
            if message is None:
                self.events.put(None)
                self.responses.put(None)
                return
            kind = message.get("type")
            self.order.append((kind, message.get("command") or message.get("event")))
            (self.responses if kind == "response" else self.events).put(message)

    def send_raw(self, data):
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def request(self, command, **arguments):
        self.seq += 1
        seq = self.seq
        write_message(self.proc.stdin, {"seq": seq, "type": "request", "command": command,
                                        "arguments": arguments})
        response = self.responses.get(timeout=TIMEOUT)
        assert response is not None, f"the server ended; stderr: {self.stderr()}"
        assert response["request_seq"] == seq and response["command"] == command, response
        return response

    def ok(self, command, **arguments):
        response = self.request(command, **arguments)
        assert response["success"], response
        return response.get("body") or {}

    def fails(self, command, **arguments):
        response = self.request(command, **arguments)
        assert not response["success"] and response["message"], response
        assert "internal error" not in response["message"], response
        return response["message"]

    def event(self, name):
        """The next event named `name` (events before it of other names are dropped)."""
        while True:
            e = self.events.get(timeout=TIMEOUT)
            assert e is not None, f"the server ended; stderr: {self.stderr()}"
            if e["event"] == name:
                return e["body"]

    def stderr(self):
        if self.proc.poll() is None:
            return "(running)"
        return self.proc.stderr.read().decode(errors="replace")

    def close(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    # ---- helpers over a stopped program ---------------------------------------------------------
    def top(self):
        return self.ok("stackTrace", threadId=1)["stackFrames"][0]

    def locals(self, frame_id=0):
        scopes = self.ok("scopes", frameId=frame_id)["scopes"]
        ref = scopes[0]["variablesReference"]
        return ref, {v["name"]: v for v in self.ok("variables", variablesReference=ref)[
            "variables"]}

    def expand(self, variable, **paging):
        assert variable["variablesReference"] > 0, variable
        return {v["name"]: v for v in self.ok(
            "variables", variablesReference=variable["variablesReference"], **paging)[
            "variables"]}


@pytest.fixture
def program(tmp_path):
    path = tmp_path / "model.rly"
    path.write_text(PROGRAM)
    return str(path)


@pytest.fixture
def client():
    clients = []

    def start():
        c = Client()
        clients.append(c)
        return c
    yield start
    for c in clients:
        c.close()


def launch(c, program, stop_on_entry=True, grad=False, breakpoints=(), raw=False):
    caps = c.ok("initialize", adapterID="relayish", linesStartAt1=True, columnsStartAt1=True)
    assert caps == CAPABILITIES
    c.ok("launch", program=program, args=[[1.5, 2]], stopOnEntry=stop_on_entry, grad=grad,
         raw=raw)
    c.event("initialized")
    result = None
    if breakpoints:
        result = c.ok("setBreakpoints", source={"path": program},
                      breakpoints=list(breakpoints))["breakpoints"]
    c.ok("configurationDone")
    return result


def test_a_session_on_closures_refs_a_match_and_recursion(program, client):
    c = client()
    launch(c, program)
    stop = c.event("stopped")
    assert stop["reason"] == "entry" and stop["threadId"] == 1
    assert c.ok("threads") == {"threads": [{"id": 1, "name": "main"}]}
    frame = c.top()
    assert frame["line"] == line_of("let %a") and frame["name"] == "@main"
    assert os.path.samefile(frame["source"]["path"], program)

    # breakpoints: a line with a condition, a line without bindings, a function
    bps = c.ok("setBreakpoints", source={"path": program}, breakpoints=[
        {"line": line_of("Cons(%h, %t) =>"), "condition": "%h == 2.5f64"},
        {"line": 2}])["breakpoints"]
    assert bps[0]["verified"] and bps[0]["line"] == line_of("Cons(%h, %t) =>")
    assert not bps[1]["verified"] and "no binding on line 2" in bps[1]["message"]

    # next: over the bindings of @main
    c.ok("next", threadId=1)
    assert c.event("stopped")["reason"] == "step"
    assert c.top()["line"] == line_of("let %scale")
    for _ in range(3):
        c.ok("next", threadId=1)
        c.event("stopped")
    assert c.top()["line"] == line_of("let %pair")

    # variables: a tensor's summary and elements, a closure's captured value, a reference
    scope, names = c.locals()
    x = names["%x"]
    assert x["value"].startswith("float64[2]") and x["indexedVariables"] == 2
    assert {k: v["value"] for k, v in c.expand(x).items()} == {
        "[0]": "1.5 (float64)", "[1]": "2 (float64)"}
    assert names["%a"]["value"] == "1.5 (float64)" and names["%a"]["variablesReference"] == 0
    captured = c.expand(names["%scale"])
    assert captured["%a"]["value"] == "1.5 (float64)"
    assert c.expand(names["%r"])["value"]["value"] == "2.5 (float64)"

    # a tuple holding an ADT value
    c.ok("next", threadId=1)
    c.event("stopped")
    scope, names = c.locals()
    pair = c.expand(names["%pair"])
    assert pair["0"]["value"] == "1.5 (float64)"
    cons = c.expand(pair["1"])
    assert cons["0"]["value"] == "1.5 (float64)" and cons["1"]["value"] == "Nil"

    # evaluate over the variables in scope (hover and repl)
    assert c.ok("evaluate", expression="%a * 2f64", frameId=0,
                context="repl")["result"] == "3 (float64)"
    assert c.ok("evaluate", expression="%x", context="hover")["result"].startswith("float64[2]")
    assert c.ok("evaluate", expression="a", context="hover")["result"] == "1.5 (float64)"
    assert "%nosuch" in c.fails("evaluate", expression="%nosuch + 1f64", frameId=0)
    dot = c.ok("evaluate", expression=":dot", frameId=0, context="repl")["result"]
    assert dot.startswith("digraph") and "%scale" in dot and "%pair" in dot

    # stepBack: to the line before, the reference write undone; next redoes it
    for line in ("let %pair", "%r := !%r"):
        c.ok("stepBack", threadId=1)
        assert c.event("stopped")["reason"] == "step"
        assert c.top()["line"] == line_of(line)
    assert c.ok("evaluate", expression="!%r", frameId=0)["result"] == "1.5 (float64)"
    for line in ("let %pair", "let %s ="):
        c.ok("next", threadId=1)
        c.event("stopped")
        assert c.top()["line"] == line_of(line)
    assert c.ok("evaluate", expression="!%r", frameId=0)["result"] == "2.5 (float64)"

    # stepIn: into the recursive function
    c.ok("stepIn", threadId=1)
    c.event("stopped")
    assert [f["name"] for f in c.ok("stackTrace", threadId=1)["stackFrames"]] == [
        "@sum_list", "@main"]

    # continue to the conditional breakpoint, inside the recursion
    c.ok("continue", threadId=1)
    assert c.event("stopped")["reason"] == "breakpoint"
    trace = c.ok("stackTrace", threadId=1)
    assert [f["name"] for f in trace["stackFrames"]] == ["@sum_list", "@sum_list", "@main"]
    assert trace["stackFrames"][0]["line"] == line_of("Cons(%h, %t) =>")
    assert trace["stackFrames"][2]["line"] == line_of("let %s =")
    _, names = c.locals()
    assert names["%h"]["value"] == "2.5 (float64)"
    _, outer = c.locals(frame_id=2)                 # @main's variables, two frames up
    assert outer["%a"]["value"] == "1.5 (float64)"
    assert c.ok("evaluate", expression="%h", frameId=1)["result"] == "1.5 (float64)"
    dot = c.ok("evaluate", expression=":dot", frameId=0)["result"]
    assert dot.startswith("digraph") and "%h" in dot and "%scale" not in dot

    # stepOut: to the caller, the other @sum_list
    c.ok("setBreakpoints", source={"path": program}, breakpoints=[])
    c.ok("stepOut", threadId=1)
    c.event("stopped")
    assert len(c.ok("stackTrace", threadId=1)["stackFrames"]) == 2

    # setVariable: JSON of the variable's type; a wrong type is refused
    ref, names = c.locals()
    assert names["%h"]["value"] == "1.5 (float64)"
    assert "float64" in c.fails("setVariable", variablesReference=ref, name="%h", value="true")
    changed = c.ok("setVariable", variablesReference=ref, name="%h", value="10")
    assert changed["value"] == "10 (float64)"

    # to the end: the result (10 instead of 1.5 in the sum), exited, terminated
    c.ok("continue", threadId=1)
    out = c.event("output")
    assert out["category"] == "stdout" and out["output"] == "@main returned 16.25\n"
    assert c.event("exited")["exitCode"] == 0
    c.event("terminated")
    assert "ended" in c.fails("next", threadId=1)
    c.ok("disconnect")
    assert c.proc.wait(timeout=TIMEOUT) == 0
    # each response comes before the events it causes
    k = c.order.index(("response", "configurationDone"))
    assert c.order[k + 1] == ("event", "stopped")


def test_breakpoints_before_the_run_and_reverse_continue(program, client):
    c = client()
    first, later = line_of("let %a"), line_of("let %s =")
    bps = launch(c, program, stop_on_entry=False,
                 breakpoints=[{"line": first}, {"line": later}])
    assert [(b["verified"], b["line"]) for b in bps] == [(True, first), (True, later)]
    # a breakpoint on the first binding stops there
    assert c.event("stopped")["reason"] == "breakpoint" and c.top()["line"] == first
    c.ok("continue", threadId=1)
    assert c.event("stopped")["reason"] == "breakpoint" and c.top()["line"] == later
    c.ok("next", threadId=1)
    c.event("stopped")
    assert c.top()["line"] == later + 1
    c.ok("reverseContinue", threadId=1)
    assert c.event("stopped")["reason"] == "breakpoint" and c.top()["line"] == later
    c.ok("reverseContinue", threadId=1)
    assert c.event("stopped")["reason"] == "breakpoint" and c.top()["line"] == first
    c.ok("setBreakpoints", source={"path": program}, breakpoints=[])
    c.ok("setFunctionBreakpoints", breakpoints=[{"name": "sum_list"}])
    c.ok("continue", threadId=1)
    c.event("stopped")
    assert c.top()["name"] == "@sum_list"
    c.ok("disconnect")


def test_breakpoints_sent_before_launch_are_set_at_launch(program, tmp_path, client):
    c = client()
    c.ok("initialize", adapterID="relayish")
    early = c.ok("setBreakpoints", source={"path": program},
                 breakpoints=[{"line": line_of("let %s =")}])["breakpoints"]
    assert not early[0]["verified"] and "not launched" in early[0]["message"]
    other = c.ok("setBreakpoints", source={"path": str(tmp_path / "other.rly")},
                 breakpoints=[{"line": 1}])["breakpoints"]
    assert len(other) == 1
    c.ok("launch", program=program, args=[[1.5, 2]])
    c.event("initialized")
    other = c.ok("setBreakpoints", source={"path": str(tmp_path / "other.rly")},
                 breakpoints=[{"line": 1}, {"line": 2}])["breakpoints"]
    assert [b["verified"] for b in other] == [False, False]
    assert "not the launched program" in other[0]["message"]
    c.ok("configurationDone")
    assert c.event("stopped")["reason"] == "breakpoint"
    assert c.top()["line"] == line_of("let %s =")
    c.ok("disconnect")


@pytest.mark.parametrize("raw", [True, False])
def test_the_gradient_program(program, client, raw):
    # raw: as AD builds it; else optimized (the passes keep the primal positions), where this
    # program keeps references and closures too (they flow into a recursive global)
    c = client()
    launch(c, program, grad=True, raw=raw)
    c.event("stopped")
    frame = c.top()
    # the gradient program has no file: its text comes by sourceReference
    ref = frame["source"]["sourceReference"]
    text = c.ok("source", sourceReference=ref, source=frame["source"])["content"]
    assert text.splitlines()[frame["line"] - 1].strip() and "def @main" in text
    steps = closures = refs = 0
    names_seen = set()
    while True:
        c.ok("stepIn", threadId=1, granularity="instruction")
        e = c.events.get(timeout=TIMEOUT)
        while e["event"] not in ("stopped", "output"):
            e = c.events.get(timeout=TIMEOUT)
        if e["event"] == "output":
            break
        steps += 1
        names_seen.update(f["name"] for f in c.ok("stackTrace", threadId=1)["stackFrames"])
        # the backward pass's closures (backpropagators) and gradient references are values
        _, names = c.locals()
        for v in names.values():
            if v["type"] == "fn" and v["variablesReference"]:
                closures += 1
                c.expand(v)
            elif v["type"].startswith("ref") and v["variablesReference"]:
                refs += 1
                assert set(c.expand(v)) == {"value"}
    assert e["body"]["output"] == "@main returned [7.75, [[5.0, 0.0]]]\n"
    assert steps > 20 and closures > 0 and refs > 0
    # a frame running a binding AD generated names the primal line it comes from
    backward = f"fn  [backward step of line {line_of('let %a')}]"
    assert (backward in names_seen if raw else
            any(name.endswith(backward) for name in names_seen)), names_seen
    c.event("terminated")
    c.ok("disconnect")


def test_run_without_debugging(program, client):
    c = client()
    c.ok("initialize", adapterID="relayish")
    c.ok("launch", program=program, args=[[1.5, 2]], noDebug=True, stopOnEntry=True)
    c.event("initialized")
    bps = c.ok("setBreakpoints", source={"path": program},
               breakpoints=[{"line": line_of("let %s =")}])["breakpoints"]
    assert not bps[0]["verified"]
    c.ok("configurationDone")
    assert c.event("output")["output"] == "@main returned 7.75\n"
    c.event("terminated")
    c.ok("disconnect")


def test_a_failing_program_pauses_at_the_binding_that_failed(tmp_path, client):
    path = tmp_path / "fail.rly"
    path.write_text("def @main(%x: Tensor[(2), float64]) -> float64 {\n"
                    "  let %i = 5;\n"
                    "  take(%x, %i)\n"
                    "}\n")
    c = client()
    c.ok("initialize", adapterID="relayish")
    c.ok("launch", program=str(path), args=[[1, 2]])
    c.ok("configurationDone")
    out = c.event("output")
    assert out["category"] == "stderr"
    stop = c.event("stopped")
    assert stop["reason"] == "exception" and "take" in stop["text"]
    assert c.top()["line"] == 3
    _, names = c.locals()
    assert names["%i"]["value"] == "5 (int32)"
    c.ok("continue", threadId=1)
    assert c.event("exited")["exitCode"] == 1
    c.ok("disconnect")


def test_mistakes_get_error_responses_and_the_server_goes_on(program, tmp_path, client):
    c = client()
    assert "unsupported request 'frobnicate'" in c.fails("frobnicate")
    assert "launch" in c.fails("stackTrace", threadId=1)
    assert "program" in c.fails("launch", args=[])
    assert "cannot read the file" in c.fails("launch", program=str(tmp_path / "none.rly"))
    bad = tmp_path / "bad.rly"
    bad.write_text("def @main(%x: float32) { %x + }\n")
    assert "1:31: expected an expression" in c.fails("launch", program=str(bad), args=[1])
    assert "has shape (3,)" in c.fails("launch", program=program, args=[[1, 2, 3]])
    assert "takes 1 argument" in c.fails("launch", program=program, args=[])
    assert "args" in c.fails("launch", program=program, args="[1, 2]")
    # a body that is not JSON: reported as output, the session goes on
    c.send_raw(b"Content-Length: 5\r\n\r\n{nope")
    assert "not UTF-8 JSON" in c.event("output")["output"]
    c.ok("launch", program=program, args=[[1.5, 2]], stopOnEntry=True)
    assert "already launched" in c.fails("launch", program=program, args=[[1.5, 2]])
    assert "configurationDone" in c.fails("next", threadId=1)
    c.ok("configurationDone")
    c.event("stopped")
    assert "variablesReference" in c.fails("variables", variablesReference=999)
    assert "frameId" in c.fails("scopes", frameId=7)
    assert "nothing to step back" in c.fails("stepBack", threadId=1)
    ref, _ = c.locals()
    assert "no variable %nosuch" in c.fails("setVariable", variablesReference=ref,
                                            name="%nosuch", value="1")
    assert "cannot read the expression" in c.fails("evaluate", expression="%x +", frameId=0)
    # a reference from before the program moved is out of date
    c.ok("next", threadId=1)
    c.event("stopped")
    assert "out of date" in c.fails("variables", variablesReference=ref)
    c.ok("disconnect")
    assert c.proc.wait(timeout=TIMEOUT) == 0


LONG_LOOP = """\
def @count(%i: int64, %acc: float64) -> float64 {
  if (%i > 0i64) {
    let %next = %acc + 1f64;
    @count(%i - 1i64, %next)
  } else {
    %acc
  }
}

def @main(%x: float64) -> float64 {
  let %n = 100000000i64;
  @count(%n, %x)
}
"""


def test_pause_stops_a_running_program_and_restart_runs_it_again(tmp_path, client):
    path = tmp_path / "loop.rly"
    path.write_text(LONG_LOOP)
    c = client()
    c.ok("initialize", adapterID="relayish")
    c.ok("launch", program=str(path), args=[0.5], stopOnEntry=True)
    c.ok("configurationDone")
    assert c.event("stopped")["reason"] == "entry"
    c.ok("continue", threadId=1)            # 10^8 trips: it runs until paused
    assert "running" in c.fails("stackTrace", threadId=1)
    c.ok("pause", threadId=1)
    assert c.event("stopped")["reason"] == "pause"
    frames = c.ok("stackTrace", threadId=1)["stackFrames"]
    assert frames[0]["name"] == "@count"
    _, names = c.locals()
    assert 0 < float(names["%acc"]["value"].split()[0]) - 0.5 < 1e8
    c.ok("restart")
    assert c.event("stopped")["reason"] == "entry"
    assert c.top()["line"] == LONG_LOOP.splitlines().index("  @count(%n, %x)") + 1
    assert [f["name"] for f in c.ok("stackTrace", threadId=1)["stackFrames"]] == ["@main"]
    _, names = c.locals()
    assert "%acc" not in names and names["%x"]["value"] == "0.5 (float64)"
    c.ok("disconnect")
    assert c.proc.wait(timeout=TIMEOUT) == 0


def test_step_back_into_a_call_that_has_returned(program, client):
    c = client()
    launch(c, program, stop_on_entry=False, breakpoints=[{"line": line_of("%scale(!%r) + %s")}])
    assert c.event("stopped")["reason"] == "breakpoint"
    assert [f["name"] for f in c.ok("stackTrace", threadId=1)["stackFrames"]] == ["@main"]
    c.ok("stepBack", threadId=1)            # back into @sum_list, which has returned
    c.event("stopped")
    names = [f["name"] for f in c.ok("stackTrace", threadId=1)["stackFrames"]]
    assert names[0] == "@sum_list" and names[-1] == "@main"
    c.ok("next", threadId=1)
    c.event("stopped")
    c.ok("continue", threadId=1)            # to the breakpoint again, then to the end
    assert c.event("stopped")["reason"] == "breakpoint"
    c.ok("continue", threadId=1)
    assert c.event("output")["output"] == "@main returned 7.75\n"
    c.ok("disconnect")


def test_a_broken_framing_ends_the_server_with_a_message(client):
    c = client()
    c.send_raw(b"Content-Lenght: 10\r\nhello\r\n\r\n")
    assert c.proc.wait(timeout=TIMEOUT) == 1
    assert "relayish dap:" in c.stderr() and "Traceback" not in c.stderr()


def test_framing_round_trip():
    import io
    buf = io.BytesIO()
    write_message(buf, {"seq": 1, "type": "event", "event": "output",
                        "body": {"output": "é\n"}})
    write_message(buf, {"seq": 2, "type": "event", "event": "terminated"})
    data = buf.getvalue()
    assert data.startswith(b"Content-Length: ")
    stream = io.BytesIO(data)
    assert read_message(stream)["body"]["output"] == "é\n"
    assert read_message(stream)["event"] == "terminated"
    assert read_message(stream) is None
    with pytest.raises(FramingError):
        read_message(io.BytesIO(b"Content-Length: 10\r\n\r\n{}"))
    with pytest.raises(FramingError):
        read_message(io.BytesIO(b"Content-Length: x\r\n\r\n"))
    assert "_malformed" in read_message(io.BytesIO(b"Content-Length: 2\r\n\r\n[]"))


# ---- the VS Code project's own client -------------------------------------------------------------

def _node_client_missing():
    if shutil.which("node") is None:
        return "node is not installed"
    if not os.path.isdir(os.path.join(JS, "node_modules", "@vscode",
                                      "debugadapter-testsupport")):
        return ("@vscode/debugadapter-testsupport is not installed "
                "(cd tests/debug/js && npm install)")
    return None


# a node process driving a relayish server (2.6 s of CPU): under -m slow, which CI runs with the
# client installed; the default run's tests above speak the same protocol to the same server
@pytest.mark.slow
@pytest.mark.skipif(_node_client_missing() is not None,
                    reason=_node_client_missing() or "")
def test_vscode_debugclient(program):
    relayish = os.path.join(os.path.dirname(sys.executable), "relayish")
    config = {"relayish": relayish, "program": program, "root": ROOT,
              "lines": {"let_a": line_of("let %a"), "cons": line_of("Cons(%h, %t) =>"),
                        "let_s": line_of("let %s =")}}
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run(["node", "--test-reporter=tap", os.path.join(JS, "dap_client.test.js"),
                           json.dumps(config)],
                          cwd=JS, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "# fail 0" in proc.stdout and "# pass" in proc.stdout, proc.stdout
