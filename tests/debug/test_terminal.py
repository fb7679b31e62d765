"""`relayish debug` (relayish/debug/terminal.py) driven through a pseudo-terminal, as a user
types at it: every command (n, s, r, b LINE [COND], b @NAME, c, p, l, bt, locals, set, back,
help, q) on a program with a closure, a reference, an ADT match and recursion, and on its
gradient program (--grad); the command parser alone; mistakes answered with a message.

The real command runs in a child process whose stdin/stdout/stderr are the slave side of a
pty (its line discipline echoes what is typed and turns \\n into \\r\\n, as a terminal does).
"""
import doctest
import os
import pathlib
import pty
import re
import shlex
import select
import subprocess
import sys
import time

import pytest

import relayish as rl

from relayish.debug.terminal import ALIASES, PROMPT, UsageError, parse_break, parse_command

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# line numbers matter: the tests break at them
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
  let %s = @sum_list(Cons(%a, Cons(2.5f64, Nil())));
  %scale(!%r) + %s
}
"""
# with x = [1.5, 2]: a = 1.5, !r = 2.5, s = 1.5 + 2.5 = 4, result 2.5 * 1.5 + 4 = 7.75;
# d/dx0 = 2a + 1 + 1 = 5, d/dx1 = 0
TIMEOUT = 60.0


class Terminal:
    """`relayish debug ARGS` on a pty; `send(line)` types a line and returns what the command
    printed up to its next prompt (without the echo of the line)."""

    def __init__(self, *args, cwd=ROOT):
        master, slave = pty.openpty()
        env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
        self.proc = subprocess.Popen([sys.executable, "-m", "relayish", "debug", *args],
                                     stdin=slave, stdout=slave, stderr=slave, cwd=cwd,
                                     env=env, close_fds=True)
        os.close(slave)
        self.fd = master
        self.banner = self.read_until(PROMPT)

    def read_until(self, marker, timeout=TIMEOUT):
        data = b""
        end = time.monotonic() + timeout
        while not data.decode(errors="replace").replace("\r\n", "\n").endswith(marker):
            left = end - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {marker!r} after {timeout} s; got {data!r}")
            ready, _, _ = select.select([self.fd], [], [], left)
            if not ready:
                continue
            try:
                chunk = os.read(self.fd, 65536)
            except OSError:            # the child closed the pty (EIO on Linux)
                break
            if not chunk:
                break
            data += chunk
        text = data.decode(errors="replace").replace("\r\n", "\n")
        return text[:-len(marker)] if text.endswith(marker) else text

    def send(self, line):
        os.write(self.fd, line.encode() + b"\n")
        out = self.read_until(PROMPT)
        echo = line + "\n"
        assert out.startswith(echo), (line, out)
        return out[len(echo):]

    def finish(self, line="q"):
        """Type the last command; the exit status and the rest of the output."""
        os.write(self.fd, line.encode() + b"\n")
        rest = self.read_until("\0", timeout=TIMEOUT)     # to the end of output
        code = self.proc.wait(timeout=TIMEOUT)
        os.close(self.fd)
        return code, rest

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        try:
            os.close(self.fd)
        except OSError:
            pass


@pytest.fixture
def program(tmp_path):
    path = tmp_path / "model.rly"
    path.write_text(PROGRAM)
    return str(path)


@pytest.fixture
def terminal():
    sessions = []

    def start(*args, **options):
        t = Terminal(*args, **options)
        sessions.append(t)
        return t
    yield start
    for t in sessions:
        t.close()


def line_of(text):
    """The 1-based line of PROGRAM that contains `text`."""
    for k, line in enumerate(PROGRAM.splitlines(), 1):
        if text in line:
            return k
    raise AssertionError(text)


def test_the_commands_on_closures_refs_a_match_and_recursion(program, terminal):
    t = terminal(program, "[1.5, 2]")
    # paused before the first binding of @main, with its place and text
    assert f"{program}:{line_of('let %a')}:" in t.banner and "in @main" in t.banner
    assert "-> let %a = take(%x, 0);" in t.banner

    listing = t.send("l")
    assert f"{line_of('let %a'):4d}  -> " in listing and "let %scale" in listing

    out = t.send("n")
    assert "-> let %scale = fn" in out
    assert "-> let %r = ref(%a);" in t.send("")          # an empty line repeats `n`

    # the closure and the value it captured
    assert "closure %scale" in t.send("p %scale")
    locals_ = t.send("locals")
    assert "%x" in locals_ and "float64[2]" in locals_ and "%scale" in locals_

    # set: JSON of the variable's type, then an expression; the value is type-checked
    assert "3.0" in t.send("set %a 3")
    assert "*** " in t.send("set %a [1, 2]")             # a tensor of another shape
    assert "*** " in t.send("set %a true")               # a bool for a float64
    assert "1.5" in t.send("set %a take(%x, 0)")

    # the reference: written (back undoes the write), then read
    assert f":{line_of('%r := !%r')}:" in t.send("n")
    assert "2.5" in t.send("p !%r + 1f64") and "1.5" in t.send("p !%r")
    assert f":{line_of('let %s =')}:" in t.send("n")
    assert "2.5" in t.send("p !%r")
    assert f":{line_of('%r := !%r')}:" in t.send("back")
    assert "1.5" in t.send("p !%r")
    t.send("n")

    # step into the recursive function and back out of it
    out = t.send("s")
    assert "in @sum_list" in out and len(t.send("bt").strip().splitlines()) == 2
    out = t.send("back")
    assert f":{line_of('let %s =')}:" in out and len(t.send("bt").strip().splitlines()) == 1

    # a conditional breakpoint in the recursive function's match: stops where %h is 2.5
    assert "breakpoint 1 at line 5 if %h == 2.5f64" in t.send("b 5 %h == 2.5f64")
    out = t.send("c")
    assert f":{line_of('Cons(%h, %t) =>')}:" in out and "in @sum_list" in out
    assert "2.5" in t.send("p %h")
    assert t.send("p %l") == "Cons(2.5, Nil)\n"
    assert t.send("p (%h, %t, ref(%h))") == "(2.5, Nil, ref(2.5))\n"
    stack = t.send("bt")
    # outermost first; the recursion shows as two @sum_list frames under @main
    names = [ln.split(" in ")[-1] for ln in stack.strip().splitlines()]
    assert names == ["@main", "@sum_list", "@sum_list"], stack
    assert stack.strip().splitlines()[-1].startswith(">")

    # breakpoints listed, cleared; return to the caller frame, then step into and back
    assert "1: line 5 if %h == 2.5f64" in t.send("b")
    assert "cleared 1 breakpoint(s)" in t.send("cl")
    assert "no breakpoints" in t.send("b")
    out = t.send("r")
    assert "in @sum_list" in out and len(t.send("bt").strip().splitlines()) == 2


    # to the end: the result, as JSON
    out = t.send("c")
    while "@main returned" not in out:
        out = t.send("c")
    assert "@main returned 7.75" in out
    assert "finished" in t.send("n")
    code, rest = t.finish("q")
    assert code == 0


def test_a_function_breakpoint_stops_at_each_call(program, terminal):
    t = terminal(program, "[1.5, 2]")
    assert "breakpoint 1 at @sum_list" in t.send("b @sum_list")
    assert "breakpoint 2 at line 16" in t.send("b 16")
    assert "cleared breakpoint 2" in t.send("cl 2")
    assert "*** there is no breakpoint 2" in t.send("cl 2")
    for depth in (2, 3, 4):                 # Cons(1.5, ..), Cons(2.5, ..), Nil
        out = t.send("c")
        assert "in @sum_list" in out and len(t.send("bt").strip().splitlines()) == depth
    listing = t.send("l")
    assert f"{line_of('match (%l)'):4d}  -> " in listing
    assert "@main returned 7.75" in t.send("c")
    code, _ = t.finish("q")
    assert code == 0


@pytest.mark.parametrize("raw", [True, False])
def test_the_gradient_program(program, terminal, raw):
    # --grad: the optimized gradient (the passes keep each binding's primal line); --raw: the
    # transform as built
    t = terminal(program, "[1.5, 2]", "--grad", *(["--raw"] if raw else []))
    assert "(gradient)" in t.banner and "[primal step of line" in t.banner
    listing = t.send("l")
    assert "->" in listing
    # the backward pass is ordinary bindings, each placed at the primal line it comes from:
    # step through all of it, into the backpropagator closures
    out, seen = "", ""
    for _ in range(2000):
        out = t.send("s")
        seen += out
        if "@main returned" in out:
            break
    for primal in ("let %a", "%scale(!%r) + %s", "Cons(%h, %t) =>"):
        assert f"[backward step of line {line_of(primal)}]" in seen, primal
    assert "@main returned [7.75, [[5.0, 0.0]]]" in out, out
    code, _ = t.finish("q")
    assert code == 0


def test_mistakes_get_a_message_and_change_nothing(program, terminal):
    t = terminal(program, "[1.5, 2]")
    where = t.send("bt")
    assert "*** unknown command 'frobnicate'" in t.send("frobnicate")
    assert "*** " in t.send("b 2")                       # a line without a binding
    assert "*** " in t.send("b 9999")
    assert "*** " in t.send("b @nosuch")
    assert "*** " in t.send("b x")
    assert "*** " in t.send("p %nosuch")
    assert "*** " in t.send("p %x +")                    # not an expression
    assert "*** " in t.send("set %nosuch 1")
    assert "*** " in t.send("back")                      # nothing to step back to yet
    assert "*** " in t.send("n 3")
    assert t.send("bt") == where
    assert "n, next" in t.send("help")
    code, _ = t.finish("q")
    assert code == 0


def test_end_of_input_quits(program, terminal):
    t = terminal(program, "[1.5, 2]")
    os.write(t.fd, b"\x04")                              # Ctrl-D at the prompt
    assert t.proc.wait(timeout=TIMEOUT) == 0


def test_a_bad_file_or_argument_is_reported_before_the_session(tmp_path, program, terminal):
    bad = tmp_path / "bad.rly"
    bad.write_text("def @main(%x: float32) { %x + }\n")
    for args, message in [((str(bad), "1"), "bad.rly:1:31: expected an expression"),
                          ((program, "[1, 2, 3]"), "has shape (3,)"),
                          ((program,), "takes 1 argument(s), 0 given")]:
        proc = subprocess.run([sys.executable, "-m", "relayish", "debug", *args], cwd=ROOT,
                              capture_output=True, text=True, timeout=TIMEOUT, stdin=subprocess.DEVNULL)
        assert proc.returncode == 1 and message in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr


def test_values_print_without_recursion():
    import numpy as np
    from relayish.backend.values import ConstructorValue, RefValue
    from relayish.debug.terminal import plain_text, value_text
    cons, nil = rl.Constructor("Cons", []), rl.Constructor("Nil", [])
    value = ConstructorValue(nil, [])
    for k in range(100_000):
        value = ConstructorValue(cons, [np.float64(k), value])
    text = plain_text(value, limit=60)
    assert text.startswith("Cons(99999.0, Cons(99998.0, ") and text.endswith("...")
    assert plain_text((RefValue(np.float32(2)),)) == "(ref(2.0),)"
    assert value_text(np.zeros((2, 2))).startswith("float64[2, 2] min 0 max 0")
    assert value_text(np.float32(1.5)) == "1.5 (float32)"


def test_parse_command():
    assert parse_command("  n ") == ("next", "")
    assert parse_command("") == ("", "")
    assert parse_command("b 7 %x > 0f") == ("break", "7 %x > 0f")
    assert parse_command("p sum(%x)") == ("print", "sum(%x)")
    assert parse_command("bt") == ("where", "")
    assert {ALIASES[w] for w in ("n", "s", "r", "b", "c", "p", "l", "bt", "set", "back", "q")} \
        == {"next", "step", "return", "break", "continue", "print", "list", "where", "set",
            "back", "quit"}
    assert parse_break("7") == ({"line": 7}, None)
    assert parse_break("7 %x > 0f") == ({"line": 7}, "%x > 0f")
    assert parse_break("@sum_list %h > 1f64") == ({"function": "sum_list"}, "%h > 1f64")
    for bad in ("frob", "p", "set", "n 2"):
        with pytest.raises(UsageError):
            parse_command(bad)
    for bad in ("x", "0", "-3"):
        with pytest.raises(UsageError):
            parse_break(bad)


# ---- the sessions shown in the documentation ---------------------------------------------------

def doc_sessions():
    """(doc name, {file name: text}, session lines) of each `text` block of docs/*.md that
    starts with `$ relayish debug`; the files are the doc's `<!-- docs: file NAME -->` blocks."""
    mark = re.compile(r"^<!--\s*docs:\s*file\s+(\S+)\s*-->$")
    out = []
    for md in sorted(pathlib.Path(ROOT, "docs").glob("*.md")):
        lines = md.read_text().splitlines()
        files, sessions, k, name = {}, [], 0, None
        while k < len(lines):
            m = mark.match(lines[k].strip())
            if m:
                name = m.group(1)
            elif lines[k].startswith("```"):
                lang = lines[k][3:].strip()
                end = k + 1
                while not lines[end].startswith("```"):
                    end += 1
                body = lines[k + 1:end]
                if name is not None:
                    files[name] = "\n".join(body) + "\n"
                elif lang == "text" and body and body[0].startswith("$ relayish debug "):
                    sessions.append(body)
                name, k = None, end
            k += 1
        out += [(md.name, files, body) for body in sessions]
    return out


SESSIONS = doc_sessions()


def _matches(want, got):
    checker = doctest.OutputChecker()
    return checker.check_output(want, got, doctest.ELLIPSIS)


@pytest.mark.parametrize("doc,files,session", SESSIONS,
                         ids=[f"{d}:{s[0][2:60]}" for d, _, s in SESSIONS])
def test_the_sessions_in_the_docs(doc, files, session, tmp_path, terminal):
    """Each terminal session the docs show is typed again, and prints what they show."""
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    args = shlex.split(session[0][2:])[1:]
    assert args[0] == "debug"
    t = terminal(*args[1:], cwd=str(tmp_path))
    banner, steps = [], []          # steps: [command, [its output lines]]
    for line in session[1:]:
        if line.startswith(PROMPT.rstrip()):
            steps.append([line[len(PROMPT):], []])
        else:
            (steps[-1][1] if steps else banner).append(line)
    assert _matches("\n".join(banner) + "\n", t.banner), (t.banner, banner)
    for command, want in steps:
        if command == "q":
            assert t.finish("q")[0] == 0
            return
        got = t.send(command)
        expected = "\n".join(want) + "\n" if want else ""
        assert _matches(expected, got), (command, got, expected)
    raise AssertionError("a session in the docs should end with q")
