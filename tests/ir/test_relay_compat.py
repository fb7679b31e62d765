"""The text format behaves as TVM Relay's (0.0.5) where Relay has a form (issue 12).

Each test states the Relay behaviour it checks (read in TVM's src/parser/parser.cc, tokenizer.h,
op_table.h and tests/python/relay/test_ir_parser.py) in its own words; notes/text-format.md
lists where relayish differs on purpose.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import relayish as rl
from relayish.ir.text import operators
from strategies import f32, list_module

F32 = rl.TensorType((), "float32")


# ---- 1. precedence and associativity of the infix operators -----------------------------------

# Relay's operator table (op_table.h): precedence by op, every operator left-associative
RELAY_PRECEDENCE = {"*": 12, "/": 12, "+": 10, "-": 10, "<": 8, "<=": 8, ">": 8, ">=": 8,
                    "==": 7, "!=": 7}
OP_OF = {"*": "multiply", "/": "divide", "+": "add", "-": "subtract", "<": "less",
         "<=": "less_equal", ">": "greater", ">=": "greater_equal", "==": "equal",
         "!=": "not_equal"}


def call(symbol, a, b):
    return rl.Call(rl.get_op(OP_OF[symbol]), [a, b])


def relay_reading(a, s1, b, s2, c):
    """How Relay's parser groups `a s1 b s2 c`."""
    if RELAY_PRECEDENCE[s2] > RELAY_PRECEDENCE[s1]:
        return call(s1, a, call(s2, b, c))
    return call(s2, call(s1, a, b), c)       # a tighter or equal (left-associative) s1


def test_equality_binds_looser_than_the_ordering_comparisons():
    one = rl.parse_expr("1 == 1 < 2")
    assert one.op.name == "equal" and one.args[1].op.name == "less"
    rl.assert_structural_equal(one, rl.parse_expr("1 == (1 < 2)"))
    # Relay's own two examples (test_op_assoc)
    rl.assert_structural_equal(rl.parse_expr("1 * 1 + 1 < 1 == 1"),
                               rl.parse_expr("(((1 * 1) + 1) < 1) == 1"))
    rl.assert_structural_equal(rl.parse_expr("1 == 1 < 1 + 1 * 1"),
                               rl.parse_expr("1 == (1 < (1 + (1 * 1)))"))


@pytest.mark.parametrize("s1, s2", list(itertools.product(RELAY_PRECEDENCE, repeat=2)))
def test_every_pair_of_infix_operators_groups_as_in_relay(s1, s2):
    a, b, c = f32("a"), f32("b"), f32("c")
    parsed = rl.parse_expr(f"%a {s1} %b {s2} %c", free_vars=[a, b, c])
    rl.assert_structural_equal(parsed, relay_reading(a, s1, b, s2, c))
    # both groupings print with the parentheses they need, and read back as they were
    for e in (call(s1, call(s2, a, b), c), call(s1, a, call(s2, b, c))):
        text = rl.astext(e)
        rl.assert_structural_equal(rl.parse_expr(text, free_vars=[a, b, c]), e)


def test_parser_and_printer_read_one_table():
    from relayish.ir.text import parse_exprs, printer
    assert parse_exprs.BINARY is operators.BY_SYMBOL
    assert printer.tables is operators.tables          # read once per print
    assert printer._Printer().infix_by_op is operators.tables().by_op == dict(operators.BY_OP)
    # the table agrees with Relay's order wherever Relay has the operator
    for s1, s2 in itertools.product(RELAY_PRECEDENCE, repeat=2):
        ours = operators.BY_SYMBOL[s1].prec, operators.BY_SYMBOL[s2].prec
        relay = RELAY_PRECEDENCE[s1], RELAY_PRECEDENCE[s2]
        assert (ours[0] < ours[1]) == (relay[0] < relay[1]), (s1, s2)
        assert (ours[0] == ours[1]) == (relay[0] == relay[1]), (s1, s2)


@pytest.mark.parametrize("text", [
    "%a == (%b < %c)",            # a comparison inside a comparison keeps its parentheses
    "(%a < %b) == %c",
    "(%a < %b) < %c",
    "%a - %b - %c",               # a left-leaning run of one level needs none
    "%a - (%b - %c)",
    "(%a + %b) * %c",
    "%a * %b / %c",
    "%a / (%b * %c)",
    "%a + %b * %c < %c",
    "%a * -%b",
])
def test_golden_parenthesization(text):
    a, b, c = f32("a"), f32("b"), f32("c")
    e = rl.parse_expr(text, free_vars=[a, b, c])
    assert rl.astext(e) == text


def test_ref_write_is_the_loosest_operator():
    r = rl.var("r", type=rl.RefType(rl.TensorType((), "bool")))
    a, b = f32("a"), f32("b")
    e = rl.parse_expr("%r := %a == %b", free_vars=[r, a, b])
    assert isinstance(e, rl.RefWrite) and e.value.op.name == "equal"
    assert rl.astext(e) == "%r := %a == %b"


# ---- 2. free variables --------------------------------------------------------------------------

def test_a_module_with_a_free_variable_prints_free_var_and_reads_back_its_annotation():
    mod = rl.Module()
    x = f32("x", (2,))
    mod["main"] = rl.Function([], x * x)
    text = rl.astext(mod)
    assert "  free_var %x: Tensor[(2), float32];\n" in text
    again = rl.parse(text)
    back = again["main"].body.args[0]
    assert back.type_annotation == rl.TensorType((2,), "float32")
    rl.assert_structural_equal(again, mod, map_free_vars=True)
    assert rl.astext(again) == text


def test_a_global_function_with_a_free_variable_is_a_type_error_as_in_relay():
    # the fuzzer's case: `mod["main"] = rl.Function([], rl.var("x"))` type-checked before
    mod = rl.Module()
    mod["main"] = rl.Function([], rl.var("x"))
    with pytest.raises(rl.TypeCheckError, match="free variable %x in a global function"):
        rl.infer_type(mod)
    with pytest.raises(rl.TypeCheckError, match="free variable"):
        rl.infer_type(rl.parse(rl.astext(mod)))      # the same from its text
    # an expression may have free variables (annotated ones have their declared type)
    assert rl.typeof(rl.var("y", shape=(3,)) + 1.0) == rl.TensorType((3,), "float32")


def test_an_expression_declares_its_free_variables_on_request():
    x, y = f32("x"), rl.var("y", shape=(2,), dtype="int64")
    e = rl.Let(rl.var("x"), x * 2.0, rl.Tuple([x, y]))      # a bound %x beside the free one
    assert rl.astext(e) == str(e) and "free_var" not in str(e)   # a piece of a program
    text = rl.astext(e, declare_free_vars=True)
    assert text.splitlines()[:2] == ["free_var %x: float32;", "free_var %y: Tensor[(2), int64];"]
    back = rl.parse_expr(text)
    rl.assert_structural_equal(back, e, map_free_vars=True)
    assert back.body.fields[1].type_annotation == y.type_annotation
    # with the environment given, the declarations mean those very Vars
    rl.assert_structural_equal(rl.parse_expr(text, free_vars=[x, y]), e)


def test_free_var_is_a_statement_of_any_block_and_holds_to_the_end_of_the_def():
    mod = rl.parse("""
    def @f() { free_var %a: float32; let %b = %a; %b }
    def @g() { free_var %a: int32; %a }
    """)
    assert mod["f"].body.value.type_annotation == F32
    assert mod["g"].body.type_annotation == rl.TensorType((), "int32")
    e = rl.parse_expr("let %k = { free_var %z: float32; %z }; %k + %z")
    assert e.value is e.body.args[1]
    with pytest.raises(rl.ParseError, match="expected a variable") as info:
        rl.parse_expr("free_var x; 1")
    assert info.value.column == 10


# ---- 3. literals ---------------------------------------------------------------------------------

@pytest.mark.parametrize("text, value, dtype", [
    ("--10", 10, "int32"),
    ("---10", -10, "int32"),
    ("--1.5f", 1.5, "float32"),
    ("2147483647", 2147483647, "int32"),
    ("2147483648", 2147483648, "int64"),        # unsuffixed, beyond int32: int64
    ("-2147483649", -2147483649, "int64"),
    ("9223372036854775807", 9223372036854775807, "int64"),
    ("-42i", -42, "int32"),
    ("-42i16", -42, "int16"),
    ("-05", -5, "int32"),
    ("3.4028235e38f", np.finfo(np.float32).max, "float32"),   # how the printer writes it
])
def test_literals_read_as_relay_reads_them(text, value, dtype):
    c = rl.parse_expr(text)
    assert isinstance(c, rl.Constant) and c.data.dtype == np.dtype(dtype)
    assert c.data[()] == value
    assert rl.parse_expr(rl.astext(c)).data.tobytes() == c.data.tobytes()


@pytest.mark.parametrize("text, column", [
    ("65505f16", 1),          # rounds to 65504 in float16, but is beyond it
    ("1 + 1e39f", 5),
    ("3.40283e+38f32", 1),    # Relay's own example
    ("1e309f64", 1),
    ("2147483648i32", 1),
    ("32768i16", 1),
    ("9223372036854775808", 1),
])
def test_out_of_range_literals_are_parse_errors_with_their_position(text, column):
    with pytest.raises(rl.ParseError, match="out of range") as info:
        rl.parse_expr(text)
    assert (info.value.line, info.value.column) == (1, column)


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_the_largest_and_smallest_floats_print_and_read_back(dtype):
    for v in (np.finfo(dtype).max, np.finfo(dtype).min, np.finfo(dtype).tiny):
        c = rl.const(np.asarray(v, dtype=dtype))
        assert rl.parse_expr(rl.astext(c)).data.tobytes() == c.data.tobytes(), rl.astext(c)


def test_minus_signs_fold_only_when_written_together_against_a_number():
    x = f32("x")
    assert rl.astext(rl.parse_expr("- -10")) == "-(-10)"          # negative of a literal
    e = rl.parse_expr("--%x", free_vars=[x])
    assert e.op.name == "negative" and e.args[0].op.name == "negative"
    e = rl.parse_expr("1--10")                                    # 1 - (-10)
    assert e.op.name == "subtract" and e.args[1].data == -10


# ---- 4. nested block comments --------------------------------------------------------------------

def test_block_comments_nest():
    assert rl.structural_equal(rl.parse_expr("/* a /* b */ c */ ()"), rl.Tuple([]))
    assert rl.parse_expr("/* /* /* */ */ */ 1 /**/").data == 1
    with pytest.raises(rl.ParseError, match="unterminated comment") as info:
        rl.parse_expr("1 /* a /* b */ c")
    assert info.value.column == 3          # at the comment left open
    kept = rl.format_text("/* outer /* inner */ still outer */\ndef @main() { 1f }")
    assert "/* outer /* inner */ still outer */\ndef @main()" in kept


# ---- 5. extern types -----------------------------------------------------------------------------

def test_extern_type_parses_prints_and_type_checks():
    mod = rl.parse("""
    extern type T[A]
    def @keep(%t: T[float32]) -> T[float32] { %t }
    def @pair(%t: T[int32]) { (%t, %t) }
    """)
    data = mod.type_definitions[mod.get_global_type_var("T")]
    assert [v.name for v in data.type_vars] == ["A"] and data.constructors == []
    text = rl.astext(mod)
    assert "extern type T[A]\n" in text
    rl.assert_structural_equal(rl.parse(text), mod)
    rl.infer_type(mod)
    assert str(mod["pair"].checked_type) == "fn (T[int32]) -> (T[int32], T[int32])"
    # `type T[A] {}` is the same definition
    rl.assert_structural_equal(rl.parse("type T[A] {}\n" + text.split("\n", 2)[2]), mod)


def test_extern_type_errors():
    with pytest.raises(rl.ParseError, match="an extern type has no constructors") as info:
        rl.parse("extern type T { C }")
    assert info.value.column == 15
    with pytest.raises(rl.ParseError, match="'type' after 'extern'"):
        rl.parse("extern T")
    with pytest.raises(rl.TypeCheckError, match="takes 1 type argument"):
        rl.infer_type(rl.parse("extern type T[A]\ndef @f(%t: T[float32, int32]) { %t }"))


# ---- 6. nullary constructors and the incomplete type ---------------------------------------------

def test_a_bare_nullary_constructor_is_its_call():
    mod, lst, cons, nil = list_module()
    x = f32("x")
    e = rl.parse_expr("Cons(%x, Nil)", mod=mod, free_vars=[x])
    assert isinstance(e.args[1], rl.Call) and e.args[1].op is nil and not e.args[1].args
    rl.assert_structural_equal(e, cons(x, nil()))
    rl.assert_structural_equal(e, cons(x, nil))        # and the bare one built in Python
    assert rl.structural_equal(nil, nil())
    assert not rl.structural_equal(nil, cons)
    assert rl.parse_expr("Nil()", mod=mod).op is nil   # a call stays one call


def test_an_incomplete_type_annotation_is_no_annotation():
    rl.assert_structural_equal(rl.parse_expr("let %x: _ = 1f; %x"),
                               rl.parse_expr("let %x = 1f; %x"))
    f = rl.parse_expr("fn (%a: _) -> _ { %a + 1f }")
    assert f.params[0].type_annotation is None and f.ret_type is None
    with pytest.raises(rl.ParseError, match="whole annotation") as info:
        rl.parse_expr("let %x: (_, int32) = (1f, 1); %x")
    assert info.value.column == 10
    # a type parameter named _ is still that parameter
    g = rl.parse_expr("fn [_](%a: _) { %a }")
    assert g.params[0].type_annotation == rl.TypeVar("_")


# ---- 7. alpha-equivalence of type parameters -----------------------------------------------------

def test_bound_type_parameters_compare_up_to_renaming():
    assert rl.structural_equal(rl.parse_expr("fn [b](%x: b) -> b { %x }"),
                               rl.parse_expr("fn [c](%x: c) -> c { %x }"))
    b, c = rl.TypeVar("b"), rl.TypeVar("c")
    assert rl.structural_equal(rl.FuncType([b], b, [b]), rl.FuncType([c], c, [c]))
    assert rl.structural_equal(rl.parse_expr("fn [a](%f: fn [b](b) -> a) { %f }"),
                               rl.parse_expr("fn [x](%f: fn [y](y) -> x) { %f }"))
    # positions matter, and a free type variable is compared by name
    assert not rl.structural_equal(rl.parse_expr("fn [b, c](%x: b) -> c { %x }"),
                                   rl.parse_expr("fn [c, b](%x: b) -> c { %x }"))
    assert not rl.structural_equal(rl.FuncType([b], c, [b]), rl.FuncType([c], b, [c]))
    assert not rl.structural_equal(rl.FuncType([b], b), rl.FuncType([c], c))
    assert not rl.structural_equal(rl.FuncType([b, c], b, [b, c]), rl.FuncType([c, c], c, [b, c]))
    with pytest.raises(rl.RelayishError, match="different type annotations"):
        rl.assert_structural_equal(rl.parse_expr("fn [b](%x: b) { %x }"),
                                   rl.parse_expr("fn [c](%x: b) { %x }"))


def test_type_definitions_compare_up_to_renaming_their_parameters():
    m1 = rl.parse("type L[a] { C(a, L[a]), N }\ndef @main() { C(1f, N) }")
    m2 = rl.parse("type L[b] { C(b, L[b]), N }\ndef @main() { C(1f, N()) }")
    rl.assert_structural_equal(m1, m2)
    m3 = rl.parse("type L[a, b] { C(a, b) }")
    assert not rl.structural_equal(m3, rl.parse("type L[a, b] { C(b, a) }"))


def test_deep_types_compare_without_recursion():
    t1 = t2 = F32
    for _ in range(20_000):
        t1, t2 = rl.RefType(t1), rl.RefType(t2)
    assert rl.structural_equal(t1, t2)


# ---- 8. evaluating a polymorphic global ------------------------------------------------------------

def test_evaluate_returns_a_polymorphic_global_as_a_closure_for_any_argument_type():
    mod = rl.parse("def @id[A](%x: A) -> A { %x }\ndef @main() { @id }")
    rl.infer_type(mod)
    assert str(mod["main"].checked_type) == "fn () -> fn [A](A) -> A"
    f = rl.evaluate(mod)
    assert f(np.float32(1.5)) == np.float32(1.5)
    assert f(np.arange(3)).tolist() == [0, 1, 2]
    pair = f((np.float64(2.0), np.int32(3)))
    assert float(pair[0]) == 2.0 and int(pair[1]) == 3
    g = rl.evaluate(rl.GlobalVar("id"), mod=mod)       # `fn () { @id }` around it
    assert g(np.float64(4.0)) == 4.0 and g(True)
    only = rl.parse("def @main[A](%x: A) -> A { %x }")
    assert rl.evaluate(only, np.float32(2.0)) == 2.0


# ---- 9. a tuple scrutinee without extra parentheses ------------------------------------------------

def test_match_on_a_tuple_needs_no_extra_parentheses():
    mod, lst, cons, nil = list_module()
    src = """
    def @zipped(%xs: List[float32], %ys: List[float32]) -> float32 {
      match (%xs, %ys) {
        (Cons(%x, _), Cons(%y, _)) => %x * %y,
        _ => 0f,
      }
    }"""
    parsed = rl.parse(rl.astext(mod) + src)
    old_style = rl.parse(rl.astext(mod) + src.replace("match (%xs, %ys)", "match ((%xs, %ys))"))
    rl.assert_structural_equal(parsed, old_style)
    m = parsed["zipped"].body
    assert isinstance(m, rl.Match) and isinstance(m.data, rl.Tuple)
    assert "match (%xs, %ys) {" in rl.astext(parsed)
    rl.assert_structural_equal(rl.parse(rl.astext(parsed)), parsed)
    rl.infer_type(parsed)
    one = rl.parse_expr("match (1f,) { (%a,) => %a }")
    assert isinstance(one.data, rl.Tuple) and len(one.data.fields) == 1


# ---- 10. what the fuzzers found ------------------------------------------------------------------

def test_type_variable_names_are_identifiers():
    with pytest.raises(rl.RelayishError, match="not an identifier"):
        rl.TypeVar("a b%")
    with pytest.raises(rl.RelayishError, match="not an identifier"):
        rl.TypeVar("")
    assert rl.TypeVar("float32").name == "float32"     # a dtype name is fine (notes)


def test_an_unknown_adt_name_in_an_annotation_is_a_type_error():
    mod = rl.Module()
    p = rl.Var("p", rl.GlobalTypeVar("H"))
    mod["main"] = rl.Function([p], p)
    with pytest.raises(rl.TypeCheckError, match="unknown type H"):
        rl.infer_type(mod)


def test_absurd_dimensions_are_refused_and_int64_ones_read_back():
    with pytest.raises(rl.RelayishError, match="at most 2\\*\\*63 - 1"):
        rl.var("x", shape=(2**70,))
    x = rl.var("x", shape=(2**63 - 1, 0))
    mod = rl.Module()
    mod["main"] = rl.Function([x], x)
    rl.assert_structural_equal(rl.parse(rl.astext(mod)), mod)
    with pytest.raises(rl.ParseError, match="too large") as info:
        rl.parse("def @main(%x: Tensor[(9223372036854775808), float32]) { %x }")
    assert info.value.column == 23


# ---- attribute values with Relay's literal suffixes ------------------------------------------

def test_attribute_values_take_relays_literal_suffixes():
    text = """def @main(%x: Tensor[(2, 3), float32]) -> Tensor[(2, 3), float32] {
      let %y = clip(%x, a_min=0f, a_max=6.5f32);
      %y
    }"""
    mod = rl.parse(text)
    x = np.array([[-1.0, 2.0, 7.0], [0.5, -3.0, 6.6]], "float32")
    np.testing.assert_array_equal(rl.evaluate(mod, x), np.clip(x, 0.0, 6.5))
    assert rl.structural_equal(rl.parse(rl.astext(mod)), mod)


def test_an_attribute_value_with_an_unknown_suffix_is_a_parse_error():
    with pytest.raises(rl.ParseError, match="attribute value"):
        rl.parse("def @main(%x: Tensor[(2), float32]) -> float32 { sum(%x, axis=0q) }")


# ---- 11. Relay's short dtype names, infinite attributes (issue 28) -------------------------------

@pytest.mark.parametrize("name, dtype", [("int", "int32"), ("uint", "uint32"),
                                         ("float", "float32"), ("bool", "bool")])
def test_a_short_dtype_name_is_that_dtype_as_in_relay(name, dtype):
    # Relay's DataType parser reads a type code alone with 32 bits (bool: 1 bit)
    mod = rl.parse(f"def @main(%x: {name}, %v: Tensor[(2), {name}]) -> {name} {{ %x }}")
    rl.infer_type(mod)
    t = mod["main"].checked_type
    assert list(t.arg_types) == [rl.TensorType((), dtype), rl.TensorType((2,), dtype)]
    assert t.ret_type == rl.TensorType((), dtype)
    # the printer writes the full name, which reads back to the same program
    assert f"%x: {dtype}" in rl.astext(mod)
    rl.assert_structural_equal(rl.parse(rl.astext(mod)), mod)


def test_a_type_parameter_named_like_a_short_dtype_is_still_the_parameter():
    f = rl.parse_expr("fn [float](%x: float) -> float { %x }")
    assert f.params[0].type_annotation == rl.TypeVar("float")
    rl.assert_structural_equal(rl.parse_expr(rl.astext(f)), f)


def test_infinite_float_attributes_parse_as_relay_prints_them():
    text = "def @main(%x: Tensor[(3), float32]) { clip(%x, a_min=-inff, a_max=inff32) }"
    mod = rl.parse(text)
    call = mod["main"].body
    assert call.attrs["a_min"] == -np.inf and call.attrs["a_max"] == np.inf
    x = np.array([-1e30, 0.0, 1e30], "float32")
    np.testing.assert_array_equal(rl.evaluate(mod, x), x)
    bounded = rl.parse("def @main(%x: Tensor[(3), float32]) { clip(%x, a_min=-inff64, a_max=2f) }")
    np.testing.assert_array_equal(rl.evaluate(bounded, x), np.array([-1e30, 0.0, 2.0], "float32"))
    rl.assert_structural_equal(rl.parse(rl.astext(bounded)), bounded)
    with pytest.raises(rl.ParseError, match="expected a number after '-'"):
        rl.parse("def @main(%x: Tensor[(3), float32]) { clip(%x, a_min=-nanx7FC00001f) }")
