"""Properties of random well-typed programs (tests/strategies.py) and of random program text.

- printing then parsing gives a structurally equal module;
- the interpreter's result has the type that inference gives;
- random strings and random edits of valid text raise ParseError, never another exception,
  and whatever still parses type-checks or raises a RelayishError.
"""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import relayish as rl
from relayish.ir.visitor import ExprMutator
from strategies import assert_value_has_type, programs


@given(programs(max_depth=4))
def test_print_parse_round_trip(prog):
    mod = prog.mod
    text = rl.astext(mod)
    rl.assert_structural_equal(rl.parse(text), mod)


@given(programs())
def test_printing_is_stable(prog):
    text = rl.astext(prog.mod)
    assert rl.astext(rl.parse(text)) == text


@given(programs(max_depth=4))
def test_evaluation_agrees_with_inferred_type(prog):
    mod = rl.infer_type(prog.mod)
    main = mod["main"]
    ret = main.checked_type.ret_type
    assert ret == prog.result_type
    out = rl.evaluate(mod, *prog.args)
    assert_value_has_type(out, ret, mod)


@given(programs(differentiable=True))
def test_differentiable_programs_are_scalar_float64_and_finite(prog):
    mod = rl.infer_type(prog.mod)
    assert mod["main"].checked_type == rl.FuncType(prog.param_types, rl.TensorType((), "float64"))
    assert all(a.dtype == np.float64 for a in prog.args)
    out = rl.evaluate(mod, *prog.args)
    assert_value_has_type(out, rl.TensorType((), "float64"), mod)
    assert np.isfinite(out)


@given(programs(refs=False, adts=False, closures=False, globals=False, max_depth=4))
def test_first_order_tensor_programs(prog):
    mod = rl.infer_type(prog.mod)
    out = rl.evaluate(mod, *prog.args)
    assert_value_has_type(out, mod["main"].checked_type.ret_type, mod)
    rl.assert_structural_equal(rl.parse(rl.astext(mod)), mod)


def _parses_or_parse_error(text):
    try:
        mod = rl.parse(text)
    except rl.ParseError as err:
        assert isinstance(err.line, int) and isinstance(err.column, int)
        assert err.line >= 0 and err.column >= 0
        return None
    return mod


def _checks_or_relayish_error(mod):
    try:
        rl.infer_type(mod)
    except rl.RelayishError:
        pass


@given(st.text(max_size=80))
def test_random_strings_raise_only_parse_errors(text):
    _parses_or_parse_error(text)


TOKENS = ["def", "@main", "@f", "(", ")", "{", "}", "[", "]", ",", ";", ":", "->", "=>", "=", "%x",
          "%y", "let", "fn", "if", "else", "match", "type", "ref", "!", ":=", "+", "*", "-", "/",
          "<", "1f", "2.5f64", "3", "True", "Tensor", "float32", "int32", "_", "Cons", "Nil",
          ".0", "//", "/*", "*/", "\n", "#[version = \"0.0.5\"]", "List", "a", "sum", "axis=1"]


@given(st.lists(st.sampled_from(TOKENS), max_size=30))
def test_random_token_soup_raises_only_parse_errors(tokens):
    mod = _parses_or_parse_error(" ".join(tokens))
    if mod is not None:
        _checks_or_relayish_error(mod)


@st.composite
def mutated_texts(draw):
    prog = draw(programs(max_depth=2))
    text = rl.astext(prog.mod)
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(0, len(text)))
        kind = draw(st.sampled_from(["delete", "insert", "replace", "duplicate"]))
        if kind == "delete":
            text = text[:i] + text[i + draw(st.integers(1, 8)):]
        elif kind == "insert":
            text = text[:i] + draw(st.sampled_from(TOKENS)) + text[i:]
        elif kind == "replace":
            text = text[:i] + draw(st.characters(codec="ascii")) + text[i + 1:]
        else:
            j = draw(st.integers(i, min(len(text), i + 20)))
            text = text[:j] + text[i:j] + text[j:]
    return text


@settings(max_examples=25)
@given(mutated_texts())
def test_mutated_program_text_raises_only_relayish_errors(text):
    mod = _parses_or_parse_error(text)
    if mod is not None:
        _checks_or_relayish_error(mod)


VEC3 = rl.TensorType((3,), "float64")


@given(programs(differentiable=True, param_types=[VEC3, VEC3], ifs=False, globals=False))
def test_fixed_signature_options(prog):
    assert prog.param_types == [VEC3, VEC3]
    assert [a.shape for a in prog.args] == [(3,), (3,)]
    mod = rl.infer_type(prog.mod)
    assert mod["main"].checked_type == rl.FuncType([VEC3, VEC3], rl.TensorType((), "float64"))


@st.composite
def mistyped_programs(draw):
    """A generated program with one parameter's annotation replaced by a different type, and a
    binding `let %check: <old type> = %param;` in front of the body that must then fail."""
    prog = draw(programs(max_depth=2))
    func = prog.func
    i = draw(st.integers(0, len(func.params) - 1))
    old = func.params[i]
    new_type = draw(st.sampled_from([rl.TensorType((7,), "float32"), rl.TensorType((), "int64"),
                                     rl.TupleType([])]).filter(lambda t: t != old.type_annotation))
    new = rl.Var(old.name_hint, new_type)

    class Replace(ExprMutator):
        def visit_Var(self, e):
            return new if e is old else e

    body = rl.Let(rl.Var("check", old.type_annotation), new, Replace().visit(func.body))
    params = [new if p is old else p for p in func.params]
    prog.mod["main"] = rl.Function(params, body, func.ret_type)
    return prog.mod


@given(mistyped_programs())
def test_mistyped_programs_raise_type_check_errors(mod):
    with pytest.raises(rl.TypeCheckError, match="check"):
        rl.infer_type(mod)
