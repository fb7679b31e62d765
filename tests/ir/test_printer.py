"""The text printer: exact golden texts, literals, names made unique, precedence, deep programs."""
import numpy as np
import pytest

import relayish as rl
from relayish.ir.visitor import build_let_chain
from strategies import CHAIN_LENGTHS, f32, list_module


def test_golden_function_with_lets_closure_if_and_refs():
    x = rl.var("x", shape=(2,), dtype="float64")
    n = rl.var("n", dtype="int32")
    a, f, y, r = rl.var("a", dtype="float64"), rl.var("f", type=None), rl.var("y", dtype="float64"), rl.Var("r")
    a.type_annotation = None
    f.type_annotation = None
    body = rl.Let(a, rl.take(x, rl.const(0)),
           rl.Let(f, rl.Function([y], y * a),
           rl.Let(r, rl.RefCreate(a),
           rl.Let(rl.Var("_"), rl.RefWrite(r, rl.RefRead(r) + rl.const(1.0, "float64")),
                  rl.If(a > rl.const(0.0, "float64"), f(a), rl.const(2.5, "float64"))))))
    func = rl.Function([x, n], body, ret_type=rl.TensorType((), "float64"))
    assert rl.astext(func) == (
        "fn (%x: Tensor[(2), float64], %n: int32) -> float64 {\n"
        "  let %a = take(%x, 0);\n"
        "  let %f = fn (%y: float64) { %y * %a };\n"
        "  let %r = ref(%a);\n"
        "  %r := !%r + 1f64;\n"
        "  if (%a > 0f64) { %f(%a) } else { 2.5f64 }\n"
        "}")
    assert str(func) == rl.astext(func)


def test_golden_module_with_adt_match_and_version_header():
    mod, lst, cons, nil = list_module()
    l, h, t = rl.var("l", type=rl.TypeCall(lst, [rl.TensorType()])), rl.Var("h"), rl.Var("t")
    length = rl.GlobalVar("length")
    mod[length] = rl.Function([l], rl.Match(l, [
        rl.Clause(rl.PatternConstructor(cons, [rl.PatternWildcard(), rl.PatternVar(t)]),
                  rl.const(1) + length(t)),
        rl.Clause(rl.PatternConstructor(nil, []), rl.const(0))]), ret_type=rl.TensorType((), "int32"))
    x = rl.Var("x")
    mod["main"] = rl.Function([x], rl.Match(x, [
        rl.Clause(rl.PatternConstructor(cons, [rl.PatternVar(h), rl.PatternWildcard()]), h)],
        complete=False))
    assert rl.astext(mod) == (
        '#[version = "0.0.5"]\n'
        "type List[a] { Cons(a, List[a]), Nil }\n"
        "def @length(%l: List[float32]) -> int32 {\n"
        "  match (%l) {\n"
        "    Cons(_, %t) => 1 + @length(%t),\n"
        "    Nil => 0,\n"
        "  }\n"
        "}\n"
        "def @main(%x) {\n"
        "  match? (%x) {\n"
        "    Cons(%h, _) => %h,\n"
        "  }\n"
        "}\n")
    assert rl.astext(mod, show_version=False).startswith("type List[a]")


def test_golden_types():
    a = rl.TypeVar("a")
    lst = rl.GlobalTypeVar("List")
    cases = [
        (rl.TensorType((), "float32"), "float32"),
        (rl.TensorType((2, 3), "float64"), "Tensor[(2, 3), float64]"),
        (rl.TensorType((4,), "int32"), "Tensor[(4), int32]"),
        (rl.TupleType([]), "()"),
        (rl.TupleType([rl.TensorType()]), "(float32,)"),
        (rl.TupleType([rl.TensorType(), rl.TensorType((), "bool")]), "(float32, bool)"),
        (rl.FuncType([rl.TensorType(), a], a), "fn (float32, a) -> a"),
        (rl.FuncType([a], a, [a]), "fn [a](a) -> a"),
        (rl.RefType(rl.TensorType((3,))), "ref(Tensor[(3), float32])"),
        (rl.TypeCall(lst, [rl.TensorType()]), "List[float32]"),
        (rl.TypeCall(lst, []), "List"),
        (lst, "List"),
        (rl.FuncType([], rl.FuncType([a], a)), "fn () -> fn (a) -> a"),
    ]
    for t, text in cases:
        assert rl.astext(t) == text
        assert str(t) == text


@pytest.mark.parametrize("value, dtype, text", [
    (1.0, "float32", "1f"), (2.5, "float32", "2.5f"), (0.1, "float32", "0.1f"),
    (1.0, "float64", "1f64"), (0.1, "float64", "0.1f64"), (1e20, "float32", "1e+20f"),
    (-1.5, "float32", "-1.5f"), (-0.0, "float64", "-0f64"), (1.0, "float16", "1f16"),
    (3, "int32", "3"), (3, "int64", "3i64"), (-2, "int8", "-2i8"), (7, "uint8", "7u8"),
    (65535, "uint16", "65535u16"), (True, "bool", "True"), (False, "bool", "False"),
    (np.inf, "float32", "inff"), (-np.inf, "float64", "-inff64"), (np.nan, "float64", "nanf64"),
])
def test_scalar_literals(value, dtype, text):
    assert rl.astext(rl.const(value, dtype)) == text


def test_nan_with_sign_or_payload_prints_its_bits():
    neg_nan = np.asarray(-np.asarray(np.nan, "float32"))
    assert rl.astext(rl.Constant(neg_nan)) == "nanxFFC00000f"
    payload = np.asarray(0x7FF0000000000123, "uint64").view("float64")
    assert rl.astext(rl.Constant(payload)) == "nanx7FF0000000000123f64"


_UINT = {"float16": "uint16", "float32": "uint32", "float64": "uint64"}
_NAN_BITS = {   # canonical, sign bit, payload, sign and payload, signalling
    "float16": [0x7E00, 0xFE00, 0x7E01, 0xFC01, 0x7C01],
    "float32": [0x7FC00000, 0xFFC00000, 0x7FC00001, 0xFF800123, 0x7F800001],
    "float64": [0x7FF8000000000000, 0xFFF8000000000000, 0x7FF8000000000001,
                0xFFF0000000000123, 0x7FF0000000000001],
}


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_every_nan_and_infinity_parses_back_to_the_same_bits(dtype):
    with np.errstate(invalid="ignore"):
        x86_nan = np.asarray(np.asarray(np.inf, dtype) * 0, dtype)   # the usual x86 NaN
    values = [np.asarray(b, _UINT[dtype]).view(dtype) for b in _NAN_BITS[dtype]]
    values += [x86_nan, np.asarray(np.inf, dtype), np.asarray(-np.inf, dtype)]
    for value in values:
        assert np.isnan(value) or np.isinf(value)
        const = rl.Constant(np.asarray(value))
        text = rl.astext(const)
        back = rl.parse_expr(text)
        assert back.data.tobytes() == value.tobytes(), (text, value)
        # inside an array constant, and as an operand of an infix operator
        arr = rl.Constant(np.stack([value, value]))
        assert rl.parse_expr(rl.astext(arr)).data.tobytes() == arr.data.tobytes()
        x = rl.var("x", dtype=dtype)
        e = rl.Function([x], x - const)
        rl.assert_structural_equal(rl.parse_expr(rl.astext(e)), e)


def test_lowercase_nan_bits_are_a_parse_error_not_a_different_number():
    with pytest.raises(rl.ParseError):
        rl.parse_expr("nanxffc00000f")


def test_array_constants():
    assert rl.astext(rl.const(np.array([[1, 2], [3, 4]], "float32"))) == "const([[1, 2], [3, 4]], float32)"
    assert rl.astext(rl.const(np.array([0.5, -np.inf, np.nan]))) == "const([0.5, -inf, nan], float64)"
    assert rl.astext(rl.const(np.array([True, False]))) == "const([True, False], bool)"
    assert rl.astext(rl.const(np.zeros((0, 3), "int64"))) == "const([], int64, shape=(0, 3))"
    assert rl.astext(rl.const(np.zeros((0,), "float32"))) == "const([], float32, shape=(0,))"


def test_infix_precedence_and_parentheses():
    x, y, z = f32("x"), f32("y"), f32("z")
    assert rl.astext(x + y * z) == "%x + %y * %z"
    assert rl.astext((x + y) * z) == "(%x + %y) * %z"
    assert rl.astext(x - (y - z)) == "%x - (%y - %z)"
    assert rl.astext((x - y) - z) == "%x - %y - %z"
    assert rl.astext(x / (y * z)) == "%x / (%y * %z)"
    assert rl.astext(rl.equal(x + y, z)) == "%x + %y == %z"
    assert rl.astext(rl.less(rl.less(x, y), z)) == "(%x < %y) < %z"
    assert rl.astext(-(x + y)) == "-(%x + %y)"
    assert rl.astext(-x * y) == "-%x * %y"
    assert rl.astext(rl.negative(rl.const(1.0))) == "-(1f)"
    assert rl.astext(x * rl.const(-1.0)) == "%x * -1f"
    assert rl.astext(rl.negative(rl.negative(x))) == "--%x"
    assert rl.astext(rl.not_equal(x, y)) == "%x != %y"
    assert rl.astext(rl.power(x, y)) == "power(%x, %y)"


def test_refs_and_tuples():
    r = rl.var("r", type=rl.RefType(rl.TensorType()))
    t = rl.var("t", type=rl.TupleType([rl.TensorType(), rl.TensorType()]))
    assert rl.astext(rl.RefRead(r) + rl.const(1.0)) == "!%r + 1f"
    assert rl.astext(rl.RefWrite(r, rl.RefRead(r))) == "%r := !%r"
    assert rl.astext(rl.RefRead(rl.TupleGetItem(t, 0))) == "!%t.0"
    assert rl.astext(rl.TupleGetItem(rl.RefRead(t), 1)) == "(!%t).1"
    assert rl.astext(rl.Tuple([])) == "()"
    assert rl.astext(rl.Tuple([t])) == "(%t,)"
    assert rl.astext(rl.TupleGetItem(rl.TupleGetItem(t, 0), 1)) == "%t.0.1"
    assert rl.astext(rl.TupleGetItem(rl.const(1.0), 0)) == "(1f).0"


def test_op_attributes_print_only_when_not_default():
    y = f32("y", (2, 3))
    assert rl.astext(rl.sum(y)) == "sum(%y)"
    assert rl.astext(rl.sum(y, axis=1)) == "sum(%y, axis=1)"
    assert rl.astext(rl.sum(y, axis=(0, 1), keepdims=True)) == "sum(%y, axis=[0, 1], keepdims=True)"
    assert rl.astext(rl.cast(y, "int32")) == 'cast(%y, dtype="int32")'


def test_names_are_made_unique():
    x1, x2, x3 = f32("x"), f32("x"), f32("x_1")
    text = rl.astext(rl.Function([x1, x2, x3], x1 + x2 + x3))
    assert text == "fn (%x: float32, %x_1: float32, %x_1_1: float32) { %x + %x_1 + %x_1_1 }"
    odd = rl.Var("my var!", rl.TensorType())
    empty = rl.Var("", rl.TensorType())
    assert rl.astext(rl.Function([odd, empty], odd)) == "fn (%my_var_: float32, %v: float32) { %my_var_ }"


def test_free_and_bound_vars_print_consistently():
    x = f32("x")
    inner = f32("x")
    e = rl.Let(inner, x + x, inner * x)
    assert rl.astext(e) == "let %x_1: float32 = %x + %x;\n%x_1 * %x"


def test_unused_underscore_binding_prints_as_statement_used_one_as_let():
    r = rl.var("r", type=rl.RefType(rl.TensorType()))
    u = rl.Var("_")
    assert rl.astext(rl.Let(u, rl.RefWrite(r, rl.const(1.0)), r)) == "%r := 1f;\n%r"
    u2 = rl.Var("_")
    assert rl.astext(rl.Let(u2, rl.RefWrite(r, rl.const(1.0)), u2)) == "let %_ = %r := 1f;\n%_"


def test_nested_let_in_expression_position_is_braced():
    x, y = f32("x"), f32("y")
    inner = rl.Let(y, x * x, y + y)
    text = rl.astext(rl.Function([x], rl.Tuple([inner, x])))
    assert text == ("fn (%x: float32) {\n"
                    "  ({\n"
                    "    let %y: float32 = %x * %x;\n"
                    "    %y + %y\n"
                    "  }, %x)\n"
                    "}")


def test_polymorphic_function_and_call_of_a_function_literal():
    a = rl.TypeVar("a")
    x = rl.var("x", type=a)
    ident = rl.Function([x], x, ret_type=a, type_params=[a])
    assert rl.astext(ident) == "fn [a](%x: a) -> a { %x }"
    assert rl.astext(rl.Call(ident, [rl.const(1.0)])) == "(fn [a](%x: a) -> a { %x })(1f)"


def test_patterns_print():
    t = rl.Var("t")
    p = rl.PatternTuple([rl.PatternVar(t), rl.PatternWildcard(), rl.PatternTuple([])])
    assert rl.astext(p) == "(%t, _, ())"
    assert rl.astext(rl.PatternTuple([rl.PatternWildcard()])) == "(_,)"


def test_astext_of_something_else_is_a_relayish_error():
    with pytest.raises(rl.RelayishError):
        rl.astext(42)


@pytest.mark.parametrize("n", CHAIN_LENGTHS)
def test_long_let_chain_prints_one_binding_per_line(n):
    x = f32("x")
    add, one = rl.get_op("add"), rl.const(1.0)
    bindings, prev = [], x
    for _ in range(n):
        v = rl.Var("x")
        bindings.append((v, rl.Call(add, [prev, one])))
        prev = v
    text = rl.astext(rl.Function([x], build_let_chain(bindings, prev)))
    lines = text.split("\n")
    assert len(lines) == n + 3
    assert lines[1] == "  let %x_1 = %x + 1f;"
    assert lines[-2] == f"  %x_{n}"


def test_deeply_nested_non_let_expression_prints():
    x = f32("x")
    e = x
    for _ in range(3000):
        e = rl.negative(e)
    assert rl.astext(e) == "-" * 3000 + "%x"


def test_shared_subexpressions_print_once_as_graph_bindings():
    x = f32("x")
    e = x
    for _ in range(3):
        e = e * e
    assert rl.astext(rl.Function([x], e)) == (
        "fn (%x: float32) {\n"
        "  %0 = %x * %x;\n"
        "  %1 = %0 * %0;\n"
        "  %1 * %1\n"
        "}")
    for _ in range(200):             # 2^200 leaves as a tree: the DAG prints in linear size
        e = e * e
    assert len(rl.astext(e)) < 10_000


def test_a_shared_node_is_named_only_inside_the_block_that_binds_it():
    x, c = f32("x"), rl.var("c", dtype="bool")
    shared = x + x
    f = rl.Function([x, c], rl.If(c, shared * shared, shared - shared))
    assert rl.astext(f) == (
        "fn (%x: float32, %c: bool) {\n"
        "  if (%c) {\n"
        "    %0 = %x + %x;\n"
        "    %0 * %0\n"
        "  } else {\n"
        "    %1 = %x + %x;\n"
        "    %1 - %1\n"
        "  }\n"
        "}")
