"""rl.debug.Debugger, the Python API (issue 14): each command on a program with closures, refs,
an ADT match and recursion, and on a gradient program."""
import numpy as np
import pytest

import relayish as rl
from relayish.debug import Debugger, DebuggerError

PROGRAM = """\
type Tree {
  Leaf(float64),
  Node(Tree, Tree),
}

def @size(%t: Tree) -> float64 {
  match (%t) {
    Leaf(%v) => %v,
    Node(%a, %b) => {
      let %sa = @size(%a);
      let %sb = @size(%b);
      %sa + %sb
    },
  }
}

def @main(%x: float64) -> float64 {
  let %r = ref(%x);
  let %scale = fn (%v: float64) -> float64 {
    let %c = !%r;
    %v * %c
  };
  let %u = %r := !%r + 1f64;
  let %t = Node(Leaf(%x), Node(Leaf(2f64), Leaf(3f64)));
  let %s = @size(%t);
  let %y = %scale(%s);
  %y
}
"""


def raw_grad(f, **kwargs):
    """rl.grad's own output, the references and backpropagator closures as the transform
    builds them (rl.grad may optimize its result: optimize=False where it takes it)."""
    import inspect
    if "optimize" in inspect.signature(rl.grad).parameters:
        kwargs["optimize"] = False
    return rl.grad(f, **kwargs)


@pytest.fixture
def mod():
    return rl.parse(PROGRAM, filename="tree.rly")


def test_paused_before_the_first_step(mod):
    d = Debugger(mod, 1.0)
    p = d.where()
    assert (p.line, p.function, p.binding, p.kind) == (18, "@main", "r", "step")
    assert p.text == "let %r = ref(%x);"
    assert not d.finished and d.result is None
    assert d.filename == "tree.rly" and d.text == PROGRAM
    assert set(d.locals()) == {"x"}


def test_step_over_runs_calls_to_their_end(mod):
    d = Debugger(mod, 1.0)
    lines = [d.where().line]
    while not d.finished:
        lines.append(d.step().line)
    # `%r := !%r + 1f64` is one step (the interpreter's fused accumulation); the tree is
    # four constructor steps and the outer Node
    assert lines == [18, 19, 23, 24, 24, 24, 24, 24, 25, 26, None]
    assert d.result == 12.0 and d.where().kind == "finished"
    assert d.step().kind == "finished"          # stepping a finished program is harmless


def test_step_in_enters_globals_closures_and_recursion(mod):
    d = Debugger(mod, 1.0)
    d.break_at(line=25)
    assert d.cont().kind == "call"
    p = d.step_in()
    assert (p.function, p.line, p.kind) == ("@size", 7, "match")
    assert [f.function for f in d.frames()] == ["@size", "@main"]
    assert d.frames()[1].line == 25
    d.step_in()                                   # Node(...) matched: %sa = @size(%a)
    assert d.where().binding == "sa"
    d.step_in()
    assert [f.function for f in d.frames()] == ["@size", "@size", "@main"]
    assert d.locals()["t"].constructor.name_hint == "Leaf"
    d.break_at(line=26)
    assert d.cont().line == 26
    p = d.step_in()
    assert (p.function, p.line) == ("%scale", 20)
    assert d.locals().keys() >= {"v", "r"}       # a parameter and a captured reference


def test_step_out(mod):
    d = Debugger(mod, 1.0)
    d.break_at(function="size")
    d.cont()
    d.clear_breaks()                  # else the next call of @size would stop step_out
    d.step_in()
    d.step_in()
    assert len(d.frames()) == 3
    p = d.step_out()
    assert len(d.frames()) == 2 and p.function == "@size" and p.binding == "sb"
    assert d.locals()["sa"] == 1.0
    p = d.step_out()
    assert (p.function, p.line) == ("@main", 26)
    assert d.locals()["s"] == 6.0
    d.step_out()
    assert d.finished and d.result == 12.0


def test_breakpoints_by_line_function_and_condition(mod):
    d = Debugger(mod, 1.0)
    bp = d.break_at(function="@size")
    assert bp.places == 1
    seen = 0
    while not d.cont().kind == "finished":
        seen += 1
        assert d.where().function == "@size"
    assert seen == 5                  # 2 nodes and 3 leaves
    d = Debugger(mod, 1.0)
    assert d.break_at(line=10).places == 1
    assert d.break_at(line=20).places == 1       # inside the closure
    assert (d.cont().line, d.cont().line, d.cont().line) == (10, 10, 20)
    assert d.cont().kind == "finished"
    assert [bp.line for bp in d.breakpoints()] == [10, 20]


def test_conditional_breakpoint(mod):
    d = Debugger(mod, 1.0)
    d.break_at(line=12, condition="%sa > 1.5f64")
    p = d.cont()
    assert p.line == 12 and d.locals()["sa"] == 2.0 and d.locals()["sb"] == 3.0
    assert d.cont().kind == "finished"            # the outer node has %sa == 1
    d = Debugger(mod, 1.0)
    d.break_at(line=12, condition="%sb >= 3f64")
    assert d.cont().line == 12 and d.locals()["sb"] == 3.0
    assert d.cont().line == 12 and d.locals()["sb"] == 5.0


def test_breakpoint_errors(mod):
    d = Debugger(mod, 1.0)
    with pytest.raises(DebuggerError, match="no binding on line 3"):
        d.break_at(line=3)
    with pytest.raises(DebuggerError, match="no function named 'nope'"):
        d.break_at(function="nope")
    with pytest.raises(DebuggerError, match="cannot read the condition"):
        d.break_at(line=12, condition="%sa >")
    d.break_at(line=12, condition="%sa")
    with pytest.raises(DebuggerError, match="not a bool scalar"):
        d.cont()
    d = Debugger(mod, 1.0)
    d.break_at(line=10, condition="%sb > 0f64")     # %sb is not bound yet on line 10
    with pytest.raises(DebuggerError, match="%sb not in scope"):
        d.cont()


def test_step_back_restores_values_and_references(mod):
    d = Debugger(mod, 1.0)
    d.step()
    d.step()
    r = d.locals()["r"]
    assert r.value == 1.0
    while d.where().line == 23:
        d.step()
    assert r.value == 2.0 and "u" in d.locals()
    back = d.step_back()
    assert back.line == 23 and "u" not in d.locals()
    assert r.value == 1.0                         # the reference write is undone
    while d.where().line != 19:
        d.step_back()
    assert set(d.locals()) == {"x", "r"}
    assert d.cont().kind == "finished" and d.result == 12.0   # the same result as before


def test_step_back_out_of_a_call_and_after_the_end(mod):
    d = Debugger(mod, 1.0)
    d.break_at(line=25)
    d.cont()
    d.step_in()
    d.step_in()
    assert len(d.frames()) == 2
    d.step_back()
    d.step_back()
    assert len(d.frames()) == 1 and d.where().line == 25
    assert d.cont().kind == "finished"
    last = d.step_back()                           # the end is undone too: the last step ran
    assert (last.line, last.function, len(d.frames())) == (21, "%scale", 2)
    assert last.text == "%v * %c"
    assert not d.finished and d.cont().kind == "finished" and d.result == 12.0
    d = Debugger(mod, 1.0)
    with pytest.raises(DebuggerError, match="nothing to step back to"):
        d.step_back()


THREE_LETS = """\
def @main(%x: float64) -> float64 {
  let %a0 = %x + 1f64;
  let %a1 = %a0 * 2f64;
  let %a2 = %a1 - 3f64;
  let %a3 = %a2 * %a2;
  let %a4 = %a3 + %x;
  let %b = %a4 * 2f64;
  let %c = %b + 1f64;
  let %d = %c * %c;
  %d
}
"""


def test_finding_10_step_back_after_break_and_cont_lands_one_step_back():
    # issue 25, finding 10: lines 7-9 are three lets; break at 9, cont, step_back: line 8
    d = Debugger(rl.parse(THREE_LETS, filename="lets.rly"), 1.0)
    d.break_at(line=9)
    assert d.cont().line == 9
    back = d.step_back()
    assert (back.line, back.binding) == (8, "c")
    assert set(d.locals()) == {"x", "a0", "a1", "a2", "a3", "a4", "b"}
    assert d.step_back().line == 7
    assert d.step().line == 8 and d.step().line == 9
    assert d.cont().kind == "finished" and d.result == 25.0
    back = d.step_back()                  # from the end: the last binding
    assert back.line == 9 and d.cont().kind == "finished"


def test_step_back_into_a_call_that_has_returned(mod):
    d = Debugger(mod, 1.0)
    d.break_at(line=26)                   # let %y = %scale(%s), after @size has returned
    d.cont()
    assert len(d.frames()) == 1
    back = d.step_back()                  # the last step of the @size call that returned
    assert len(d.frames()) >= 2 and back.function == "@size"
    assert "sb" in d.locals() or "v" in d.locals()
    assert "s" not in d.locals(depth=len(d.frames()) - 1)   # @main has not bound %s yet
    assert d.step_out().function is not None
    while d.where().line != 26:
        d.step()
    assert d.cont().kind == "finished" and d.result == 12.0


def test_set_is_type_checked(mod):
    d = Debugger(mod, 1.0)
    d.break_at(line=26)
    d.cont()
    d.set("s", 10.0)                      # a Python float for a float64 scalar: converted
    assert isinstance(d.locals()["s"], np.ndarray)
    assert d.cont().kind == "finished" and d.result == 20.0
    d = Debugger(mod, 1.0)
    d.break_at(line=26)
    d.cont()
    with pytest.raises(rl.RelayishError, match="%s"):
        d.set("s", np.ones(3))
    with pytest.raises(rl.RelayishError, match="%s"):
        d.set("s", "hello")
    with pytest.raises(DebuggerError, match="no variable %nope in scope"):
        d.set("nope", 1.0)
    with pytest.raises(rl.RelayishError):
        d.set("t", 1.0)                    # an ADT variable
    d.set("%s", np.array(4.0))            # a leading % is fine


def test_locals_describe_and_evaluate(mod):
    d = Debugger(mod, np.float64(-1.0))
    d.break_at(line=26)
    d.cont()
    rows = {name: (ty, summary) for name, ty, summary in d.describe_locals()}
    assert rows["s"] == ("float64[]", "float64[] min 4 max 4 nan 0 inf 0")
    assert rows["t"][0] == "Node" and rows["r"][0] == "ref float64[]"
    assert rows["scale"][1] == "closure %scale"
    assert d.evaluate("%s * 2f64") == 8.0
    assert d.evaluate("!%r") == 0.0
    with pytest.raises(DebuggerError, match="%y not in scope"):
        d.evaluate("%y")
    assert d.locals(depth=0) == d.locals()
    with pytest.raises(DebuggerError, match="no frame at depth 3"):
        d.locals(depth=3)
    d.cont()
    with pytest.raises(DebuggerError, match="finished"):
        d.locals()


def test_errors_at_construction():
    with pytest.raises(DebuggerError, match="takes a Function or a Module"):
        Debugger(42)
    x = rl.var("x", shape=(2,), dtype="float64")
    with pytest.raises(rl.RelayishError, match="%x"):
        Debugger(rl.Function([x], x * x), np.ones(3))


def test_a_function_built_in_python_is_shown_as_its_text():
    x = rl.var("x", shape=(2,), dtype="float64")
    y = rl.var("y", shape=(2,), dtype="float64")
    f = rl.Function([x], rl.Let(y, rl.exp(x), rl.sum(y * x)))
    d = Debugger(f, [1.0, 2.0])
    assert d.text == rl.astext(f)
    assert d.where().text.startswith("let %y") and d.where().line == 2
    d.step()
    assert np.allclose(d.locals()["y"], np.exp([1.0, 2.0]))
    d.cont()
    assert np.isclose(d.result, np.exp(1.0) + 2 * np.exp(2.0))


def test_a_gradient_program_steps_through_its_backward_pass():
    x = rl.var("x", shape=(3,), dtype="float64")
    f = rl.Function([x], rl.sum(rl.tanh(x) * x))
    g = raw_grad(f)
    d = Debugger(g, np.ones(3))
    seen, closures = [], 0
    while not d.finished:
        p = d.step_in()
        seen.append(p.function)
        if not d.finished:
            closures += any(isinstance(v, rl.Closure) for v in d.locals().values())
    assert "fn" in seen and closures > 0          # the backpropagator ran as ordinary steps
    expected = np.tanh(1.0) + 1.0 * (1 - np.tanh(1.0) ** 2)
    assert np.allclose(d.result, expected)
    assert np.allclose(d.result, rl.evaluate(g, np.ones(3)))


def test_deep_recursion_and_long_chains_do_not_recurse_in_python():
    mod = rl.parse("""
def @count(%n: int64) -> int64 {
  if (%n == 0i64) { 0i64 } else {
    let %m = @count(%n - 1i64);
    %m + 1i64
  }
}
def @main(%n: int64) -> int64 { @count(%n) }
""")
    d = Debugger(mod, 20000)
    assert d.cont().kind == "finished" and d.result == 20000
    d = Debugger(mod, 3000)
    d.break_at(line=5, condition="%m == 2990i64")
    d.cont()
    # @main's call is a tail call: the frames are @count's alone
    assert len(d.frames()) == 3000 - 2990 and d.locals()["m"] == 2990
    assert d.step_out().function == "@count"
    assert d.cont().kind == "finished" and d.result == 3000


def test_ad_bindings_carry_the_primal_line(mod):
    """A gradient of a parsed program: each binding AD generated says which primal line it
    comes from, and the backward ones say they are backward steps."""
    g = raw_grad(rl.parse("def @main(%x: float64) -> float64 {\n"
                         "  let %y = sin(%x);\n"
                         "  let %z = %y * %x;\n"
                         "  %z\n}", filename="f.rly"))
    d = Debugger(g, 0.5)
    assert d.filename is None and d.text.startswith("#[version")   # the gradient's own text
    seen = set()
    while not d.finished:
        p = d.step_in()
        if p.origin is not None:
            assert p.origin[0] == "f.rly" and p.origin[1] in (2, 3)
            seen.add((p.origin_kind, p.origin[1]))
            assert f"{p.origin_kind} step of line {p.origin[1]} of f.rly" in str(p)
    assert {("primal", 2), ("primal", 3), ("backward", 2), ("backward", 3)} <= seen
    assert np.isclose(d.result, np.sin(0.5) + 0.5 * np.cos(0.5))


def test_an_optimized_gradient_keeps_the_primal_lines():
    """The passes keep the positions of the nodes they rewrite (ir/passes/base.py
    keep_position): rl.grad's optimized output steps as "backward step of line N" too."""
    src = rl.parse("def @main(%x: float64) -> float64 {\n"
                   "  let %y = sin(%x);\n"
                   "  let %z = %y * %x;\n"
                   "  exp(%z)\n}", filename="f.rly")
    g = rl.grad(src)
    assert "ref(" not in rl.astext(g)                  # the optimized program, not the raw
    d = Debugger(g, 0.5)
    kinds = set()
    while not d.finished:
        p = d.step_in()
        if p.kind == "finished":
            break
        assert p.origin is not None and p.origin[0] == "f.rly", str(p)
        assert f"{p.origin_kind} step of line {p.origin[1]} of f.rly" in str(p)
        kinds.add(p.origin_kind)
    assert "backward" in kinds
    np.testing.assert_allclose(d.result, rl.evaluate(rl.grad(src, optimize=False), 0.5))


def test_a_program_without_positions_has_no_origins():
    x = rl.var("x", dtype="float64")
    d = Debugger(raw_grad(rl.Function([x], rl.sin(x) * x)), 0.5)
    while not d.finished:
        assert d.step_in().origin is None


def _refs(d):
    """The values of the references in scope (by name), copied."""
    from relayish.backend.interp.deferred import OuterSum
    return {k: v.value if isinstance(v.value, OuterSum) else np.array(v.value)
            for k, v in d.locals().items() if isinstance(v, rl.RefValue)}


def _three_uses():
    x = rl.var("x", shape=(4,), dtype="float64")
    three = rl.const(3.0, "float64")
    return rl.Function([x], rl.sum(x * x) + rl.sum(rl.tanh(x) * x) + rl.sum(x * three)), \
        (np.linspace(-1.0, 1.0, 4),)


def _weight_used_twice():
    w = rl.var("w", shape=(3, 3), dtype="float64")
    x = rl.var("x", shape=(3,), dtype="float64")
    h = rl.tanh(rl.matmul(w, x))
    return rl.Function([w, x], rl.sum(rl.tanh(rl.matmul(w, h)))), \
        (np.arange(9.0).reshape(3, 3) / 10, np.array([1.0, -1.0, 0.5]))


@pytest.mark.parametrize("program", [_three_uses, _weight_used_twice])
def test_step_back_through_a_backward_pass_restores_every_reference(program):
    """The gradient accumulates in place where the interpreter may (a reference that owns its
    array), and defers the outer products of a matrix's gradient; the undo log keeps each old
    value and every pending sum is settled when a command ends, so the references in scope
    are always arrays and stepping back shows the values of then."""
    from relayish.backend.interp.deferred import OuterSum
    f, args = program()
    g = raw_grad(f)
    d = Debugger(g, *args)
    seen = []
    while not d.finished:
        refs = _refs(d)
        assert not any(isinstance(v, OuterSum) for v in refs.values())
        seen.append((d.where(), len(d.frames()), refs))
        d.step_in()
    result = np.array(d.result)
    assert np.allclose(result, rl.evaluate(g, *args))
    # each step back lands on an earlier stop (out of calls that have returned, it skips
    # their stops: it rewinds within the current call)
    j, backs = len(seen), 0
    while j > 0:
        try:
            back = d.step_back()
        except rl.RelayishError:
            break
        backs += 1
        j = next(i for i in range(j - 1, -1, -1)
                 if (seen[i][0], seen[i][1]) == (back, len(d.frames())))
        now, then = _refs(d), seen[j][2]
        assert now.keys() == then.keys()
        for k in then:
            assert np.array_equal(now[k], then[k]), (back, k)
    assert j == 0 and backs > 10
    assert d.cont().kind == "finished" and np.allclose(d.result, result)


def test_a_set_undone_by_stepping_back_stays_undone_in_the_snapshots():
    # the outer frame's copy a snapshot shares must be of this timeline, not the one with the set
    src = ("def @cost(%w: float64) -> float64 {\n  let %s = %w * 3f64;\n  %s\n}\n"
           "def @main(%x: float64) -> float64 {\n  let %y = %x * 2f64;\n"
           "  let %c = @cost(%y);\n  %c + %y\n}\n")
    d = Debugger(rl.parse(src, filename="c.rly"), 1.0)
    d.step()
    d.set("y", 10.0)
    d.step_in()
    assert d.locals(depth=1)["y"] == 10.0
    while d.where().line != 6:
        d.step_back()
    d.step()
    d.step_in()
    assert d.locals()["w"] == 2.0 and d.locals(depth=1)["y"] == 2.0
    d.step_in()
    d.step_back()
    assert d.locals(depth=1)["y"] == 2.0
    assert d.cont().kind == "finished" and d.result == 8.0
