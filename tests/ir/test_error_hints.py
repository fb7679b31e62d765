"""Error messages that say what to write instead (issue 28, the newcomer's second hour): a
near name for an unknown op or variable, the literal in the program's dtype, rl.take for
indexing a tensor."""
import pytest

import relayish as rl


def check(text):
    with pytest.raises(rl.RelayishError) as info:
        rl.infer_type(rl.parse(text, filename="m.rly"))
    return str(info.value)


def test_an_unknown_op_suggests_the_near_names():
    message = check("def @main(%x: float32) { tahn(%x) }")
    assert "unknown operator or constructor 'tahn'" in message and "tanh" in message
    assert "did you mean" in message
    assert "did you mean" not in check("def @main(%x: float32) { zzqqxx(%x) }")


def test_get_op_suggests_the_near_names():
    from relayish.ir.op import get_op
    with pytest.raises(rl.RelayishError,
                       match=r"unknown operator 'sigmod' \(did you mean.*sigmoid"):
        get_op("sigmod")


def test_an_unbound_variable_suggests_the_near_ones():
    message = check("def @main(%x: float32) { let %yy = %x; %y }")
    assert "unbound variable %y (did you mean %yy?)" in message
    assert "m.rly:1:40" in message


def test_a_bare_literal_in_a_float64_program_suggests_its_float64_spelling():
    message = check("def @main(%x: float64) -> float64 { %x * 2.0 }")
    assert "write the literal 2f as 2f64" in message and "cast" not in message
    message = check("def @main(%x: float64) -> float64 { 2 + %x }")
    assert "write the literal 2 as 2f64" in message
    # a literal that does not convert exactly keeps the advice to cast
    assert "use cast" in check("def @main(%x: int32) -> int32 { %x * 2.5 }")


def test_indexing_a_tensor_expression_suggests_take():
    x = rl.var("x", shape=(3,), dtype="float64")
    with pytest.raises(rl.TypeCheckError, match=r"use rl\.take\(x, 0\)"):
        rl.infer_type(rl.Function([x], (x * x)[0]))
