"""rl.to_dot: Graphviz DOT text of the dataflow (bindings as nodes, uses as edges, closures,
matches and ifs as clusters), checked for well-formedness without Graphviz."""
import re

import pytest

import relayish as rl

from test_debugger import PROGRAM, raw_grad


def check_dot(text):
    """Balanced braces, every edge between declared nodes; returns (labels, edges by label)."""
    assert text.startswith("digraph relayish {") and text.rstrip().endswith("}")
    bare = re.sub(r'"(?:[^"\\]|\\.)*"', '""', text)     # braces in labels are text
    assert bare.count("{") == bare.count("}")
    labels = dict(re.findall(r'^\s*(\w+) \[label="((?:[^"\\]|\\.)*)"', text, re.M))
    edges = re.findall(r"^\s*(\w+) -> (\w+)", text, re.M)
    for a, b in edges:
        assert a in labels and b in labels, (a, b)
    return labels, {(labels[a], labels[b]) for a, b in edges}


def test_a_module_with_closures_refs_a_match_and_recursion():
    labels, edges = check_dot(rl.to_dot(rl.parse(PROGRAM)))
    assert ("%x", "%r = ref(%x)") in edges
    assert ("%r = ref(%x)", "%c = !%r") in edges          # a capture, into the closure
    assert ("%sa = @size(%a)", "%sa + %sb") in edges
    assert ("@size", "%sa = @size(%a)") in edges          # the recursive call
    assert ("%t", "%v") in edges                          # the matched value to its pattern
    assert "%scale = fn" in labels.values() and "result = match" in labels.values()
    text = rl.to_dot(rl.parse(PROGRAM))
    assert text.count("subgraph cluster_") == 2 + 1 + 2 + 1   # globals, match, clauses, fn


def test_a_gradient_program_and_quotes_in_labels():
    x = rl.var("x", shape=(3,), dtype="float64")
    g = raw_grad(rl.Function([x], rl.sum(rl.tanh(x) * x)))
    labels, edges = check_dot(rl.to_dot(g))
    assert any('zero_adjoint(shape=[3], dtype=\\"float64\\")' in lab for lab in labels.values())
    assert any(lab.startswith("%u") and ":=" in lab for lab in labels.values())


def test_if_and_a_long_chain():
    x = rl.var("x", dtype="float64")
    labels, _ = check_dot(rl.to_dot(rl.Function([x], rl.If(x > rl.const(0.0, "float64"),
                                                           x, -x))))
    assert "result = if" in labels.values()
    text = rl.to_dot(rl.parse("def @main(%x: float64) -> float64 {\n" + "".join(
        f"  let %v{i} = tanh(%{'x' if i == 0 else f'v{i - 1}'});\n" for i in range(20000))
        + "  %v19999\n}"))
    assert text.count("->") == 20000


def test_errors():
    with pytest.raises(rl.RelayishError, match="to_dot takes a Function, Module or expression"):
        rl.to_dot(42)
