"""Parsed expressions remember where they start; type errors carry the offending node."""
import pytest

import relayish as rl
from relayish.ir.text.parser import source_position

TEXT = """def @main(%x: float32) {
  let %y = %x * 2f;
  %y + 1f64
}
"""


def test_parsed_expressions_know_their_position():
    mod = rl.parse(TEXT, filename="prog.rly")
    let = mod["main"].body
    assert source_position(let.value) == ("prog.rly", 2, 12)
    assert source_position(let.body) == ("prog.rly", 3, 3)
    assert source_position(let.var) is None          # binders are shared: no one position


def test_type_error_names_the_node_that_has_the_position():
    mod = rl.parse(TEXT, filename="prog.rly")
    with pytest.raises(rl.TypeCheckError) as info:
        rl.infer_type(mod)
    assert source_position(info.value.node) == ("prog.rly", 3, 3)


def test_built_programs_have_no_position():
    x = rl.var("x")
    assert source_position(x * x) is None
