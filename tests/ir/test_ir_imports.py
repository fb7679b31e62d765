"""relayish/ir has no import cycle (issue 11), counting imports inside functions too.

expr.py sits below op.py and the printer: `str(node)` and `x + y` reach them through the
entry points they install on import (expr.provide), never through an import. The layers, bottom
up: fields, float_range, types, expr, op / visitor / module, structural, text/printer, text/parser.
"""
from import_graph import describe_cycles, module_graph, strongly_connected


def _ir_graph():
    graph = module_graph()
    inside = {m for m in graph if m.startswith("relayish.ir.") or m == "relayish.ir"}
    return {m: graph[m] & inside for m in inside}


def test_ir_and_ir_text_have_no_import_cycle():
    graph = _ir_graph()
    assert "relayish.ir.text.printer" in graph and "relayish.ir.text.parser" in graph
    assert not strongly_connected(graph), "import cycles in relayish/ir:\n" + describe_cycles(graph)


def test_the_bottom_layers_import_nothing_above_them():
    graph = _ir_graph()
    assert graph["relayish.ir.fields"] == set()
    assert graph["relayish.ir.types"] <= {"relayish.ir.fields", "relayish.ir.text.lexer"}
    assert graph["relayish.ir.float_range"] == set()
    assert graph["relayish.ir.expr"] <= {"relayish.ir.fields", "relayish.ir.types",
                                         "relayish.ir.float_range"}
