"""What compiled interpreter code keeps for a debugger: each step's IR node and the slot it
writes with that slot's Var name (relayish/backend/interp/code.py)."""
import numpy as np

import relayish as rl
from relayish.backend.interp import api as interp_api
from relayish.backend.interp.code import RETURN, Code, Step
from strategies import list_module


def f64(name, shape=()):
    return rl.var(name, shape=shape, dtype="float64")


def compiled(f):
    rl.evaluate(f, *[np.ones(p.type_annotation.shape) for p in f.params])
    return interp_api._FUNCTION_CACHE[f]


def test_each_step_keeps_its_node_and_the_name_of_its_slot():
    x = f64("x", (2,))
    sb = rl.ScopeBuilder()
    y = sb.let("y", x * x)
    z = sb.let("z", rl.exp(y))
    sb.ret(rl.Tuple([y, z]))
    f = rl.Function([x], sb.get())
    code = compiled(f)
    assert isinstance(code, Code) and code.slot_names[0] == "x"
    steps = code.steps
    assert all(isinstance(s, Step) for s in steps)
    assert [(s.name, s.node.op.name if isinstance(s.node, rl.Call) else type(s.node).__name__)
            for s in steps] == [("y", "multiply"), ("z", "exp"), (None, "Tuple")]
    assert steps[0].node is y_value(f) and steps[0].fn in steps[0].block.steps
    assert code.entry.kind == RETURN and code.entry.node is steps[2].node
    assert repr(steps[0]) == "<Step slot 1 (y): %x * %x>"


def y_value(f):
    return f.body.value


def test_pattern_variables_captures_and_closures_are_named():
    mod, lst, cons, nil = list_module()
    xs = rl.var("xs", type=rl.TypeCall(lst, [rl.TensorType((), "float64")]))
    h, t = f64("h"), rl.var("t", type=rl.TypeCall(lst, [rl.TensorType((), "float64")]))
    k = f64("k")
    adder = rl.Var("adder")
    body = rl.Match(xs, [
        rl.Clause(rl.PatternConstructor(cons, [rl.PatternVar(h), rl.PatternVar(t)]),
                  rl.Let(adder, rl.Function([k], k + h), rl.Call(adder, [h]))),
        rl.Clause(rl.PatternConstructor(nil, []), rl.const(0.0, "float64"))])
    mod["main"] = rl.Function([xs], body)
    value = rl.list_value(mod, [np.array(2.0)])
    assert rl.evaluate(mod, value) == 4.0
    main = interp_api._MODULE_CACHE[mod][1].code
    assert {"xs", "h", "t", "adder"} <= set(main.slot_names)
    closure_steps = [s for s in main.steps if isinstance(s.node, rl.Function)]
    assert [s.name for s in closure_steps] == ["adder"]
    # the closure's own code names its parameter and its capture
    h2, k2 = f64("h"), f64("k")
    c = rl.evaluate(rl.Function([h2], rl.Function([k2], k2 + h2)), 1.0)
    assert c.code.slot_names[:2] == ["k", "h"]
    assert [s.node.op.name for s in c.code.steps] == ["add"]


def test_every_block_is_listed_and_every_step_names_a_slot_in_the_frame():
    x = f64("x")
    f = rl.Function([x], rl.If(x > rl.const(0.0, "float64"), x * x, -x))
    code = compiled(f)
    # entry, then, else (an If in tail position has no join: each branch returns)
    assert code.entry is code.blocks[0] and len(code.blocks) == 3
    for s in code.steps:
        assert 0 <= s.slot < code.nslots and s.block in code.blocks
    assert len(code.slot_names) == code.nslots
