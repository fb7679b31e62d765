"""Fuzzing the parser: random strings, mutated program texts, deep nesting, odd literals.

Property, for `rl.parse` and `rl.parse_expr` alike: the text either parses or raises a
ParseError whose line and column lie inside the text; never another exception, never a hang
(inputs are bounded, each run is guarded by `bounded`). What parses prints as text that parses
back structurally equal (and prints again the same), and type-checks or raises a RelayishError.

Seeds for mutation: examples/*.rly, tests/fuzz/seeds/*.rly (every syntactic form, by hand) and
the texts of random well-typed programs (tests/strategies.py). Mutations: delete, insert,
duplicate or swap tokens and characters, truncate, insert unicode or binary junk, swap a
literal for an extreme one, wrap a piece in many brackets.
"""
from __future__ import annotations

import pathlib
import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import relayish as rl
from fuzzing import DEEP_NESTING_DEPTHS, FLAT_CHAIN_LENGTH, TIME_LIMIT_S, bounded, fuzz_settings
from strategies import programs

ROOT = pathlib.Path(__file__).resolve().parents[2]
CORPUS = sorted([*ROOT.glob("examples/*.rly"), *ROOT.glob("tests/fuzz/seeds/*.rly")])
CORPUS_TEXTS = [p.read_text() for p in CORPUS]
MAX_TEXT = 20_000          # inputs are bounded: a hang is a bug, a long input is not a test

TOKEN = re.compile(r"""//[^\n]*|/\*.*?\*/|"(?:[^"\\]|\\.)*"|[%@][A-Za-z0-9_."]*|[A-Za-z_]\w*
                       |\d[\w.+-]*|:=|->|=>|==|!=|<=|>=|\s+|.""", re.S | re.X)
KEYWORDS = ["def", "type", "fn", "let", "if", "else", "match", "match?", "ref", "ref_read",
            "ref_write", "const", "Tensor", "True", "False", "None", "_", "#[version = \"0.0.5\"]",
            "%0", "%x", "@main", "@f", "List", "Cons", "Nil", "float32", "int32", "bool",
            "(", ")", "{", "}", "[", "]", ",", ";", ":", "=", "->", "=>", ":=", "!", ".0", ".7",
            "+", "-", "*", "/", "<", "==", "//", "/*", "*/", "\"", "\n", " "]
EXTREME_LITERALS = ["1e400f", "-1e400f64", "1e-50f32", "99999999999", "2147483648", "-2147483649",
                    "256u8", "-1u8", "9223372036854775808i64", "inff16", "nanx", "nanxzzf",
                    "nanx7fc00001f", "nanxffc00000f", "nanx7ff8000000000001f64", "0x10", "1f128",
                    "1.5i32", "1e5", "-0f", "0.1f16", "1_000", "1..2f", "Truef", "1f64f64"]
JUNK = ["\x00", "\x01", "\x7f", "\x80", "\xff", "\ufeff", "\u2028", "\r", "\r\n", "\t", "\x0b",
        "\x0c", "\ud800", "\udfff", "é", "∀", "λ", "％", "\U0001f600", "\u0301", "\\", "'", "`",
        "#", "$", "?", "~", "^", "&", "|"]


def tokens(text):
    return TOKEN.findall(text)


VOCABULARY = sorted({t for text in CORPUS_TEXTS for t in tokens(text) if not t.isspace()}
                    | set(KEYWORDS))


# ---- the property --------------------------------------------------------------------------

def check_error_position(err, text):
    lines = text.split("\n")
    assert isinstance(err.line, int) and isinstance(err.column, int), err
    assert 1 <= err.line <= len(lines), f"line {err.line} outside the text's {len(lines)}: {err}"
    assert 1 <= err.column <= len(lines[err.line - 1]) + 1, \
        f"column {err.column} outside line {err.line} ({len(lines[err.line - 1])} chars): {err}"


def check_module_text(text, seconds=TIME_LIMIT_S):
    """parse(text) is a module or a ParseError at a place in the text; a module round-trips."""
    with bounded(f"parsing {text[:200]!r}", seconds):
        try:
            mod = rl.parse(text)
        except rl.ParseError as err:
            check_error_position(err, text)
            return
        printed = rl.astext(mod)
        try:
            again = rl.parse(printed)
        except rl.ParseError as err:
            raise AssertionError(f"the printed text of a parsed module does not parse: {err}\n"
                                 f"printed:\n{printed}") from None
        rl.assert_structural_equal(again, mod)
        assert rl.astext(again) == printed, "printing a reparsed module changes the text"
        try:
            rl.infer_type(mod)
        except rl.RelayishError:
            pass


def check_expr_text(text, mod=None, seconds=TIME_LIMIT_S):
    """parse_expr(text, mod=mod): the same property for one expression."""
    with bounded(f"parsing the expression {text[:200]!r}", seconds):
        try:
            e = rl.parse_expr(text, mod=mod)
        except rl.ParseError as err:
            check_error_position(err, text)
            return
        printed = rl.astext(e)
        try:
            again = rl.parse_expr(printed, mod=mod)
        except rl.ParseError as err:
            raise AssertionError(f"the printed text of a parsed expression does not parse: "
                                 f"{err}\nprinted:\n{printed}") from None
        rl.assert_structural_equal(again, e, map_free_vars=True)
        try:
            rl.infer_type(e, mod=mod)
        except rl.RelayishError:
            pass


# ---- random strings ------------------------------------------------------------------------

random_texts = st.lists(st.one_of(st.sampled_from(VOCABULARY), st.sampled_from(JUNK),
                                  st.sampled_from(EXTREME_LITERALS), st.characters(),
                                  st.sampled_from([" ", "\n"])),
                        max_size=80).map("".join)


@fuzz_settings("random_text")
@given(random_texts)
def test_random_text_parses_or_raises_parse_error(text):
    check_module_text(text)
    check_expr_text(text)


# ---- mutations -----------------------------------------------------------------------------

def _index(draw, seq, end=False):
    return draw(st.integers(0, len(seq) if end else max(len(seq) - 1, 0)))


def delete_tokens(draw, text):
    toks = tokens(text)
    i = _index(draw, toks)
    return "".join(toks[:i] + toks[i + draw(st.integers(1, 3)):])


def insert_token(draw, text):
    toks = tokens(text)
    i = _index(draw, toks, end=True)
    new = draw(st.one_of(st.sampled_from(VOCABULARY), st.sampled_from(EXTREME_LITERALS)))
    return "".join(toks[:i] + [new] + toks[i:])


def duplicate_tokens(draw, text):
    toks = tokens(text)
    i = _index(draw, toks, end=True)
    j = draw(st.integers(i, min(len(toks), i + 30)))
    return "".join(toks[:j] + toks[i:j] + toks[j:])


def swap_tokens(draw, text):
    toks = tokens(text)
    if len(toks) < 2:
        return text
    i, j = sorted((_index(draw, toks), _index(draw, toks)))
    toks[i], toks[j] = toks[j], toks[i]
    return "".join(toks)


def replace_literal(draw, text):
    toks = tokens(text)
    numbers = [k for k, t in enumerate(toks) if t[0].isdigit() or t in ("True", "False")]
    if not numbers:
        return insert_token(draw, text)
    toks[draw(st.sampled_from(numbers))] = draw(st.sampled_from(EXTREME_LITERALS))
    return "".join(toks)


def edit_characters(draw, text):
    i = _index(draw, text, end=True)
    kind = draw(st.sampled_from(["delete", "insert", "duplicate", "swap"]))
    if kind == "delete":
        return text[:i] + text[i + draw(st.integers(1, 8)):]
    if kind == "insert":
        return text[:i] + draw(st.characters(codec="ascii")) + text[i:]
    if kind == "duplicate":
        j = draw(st.integers(i, min(len(text), i + 40)))
        return text[:j] + text[i:j] + text[j:]
    if i + 1 < len(text):
        return text[:i] + text[i + 1] + text[i] + text[i + 2:]
    return text


def truncate(draw, text):
    return text[:_index(draw, text, end=True)]


def insert_junk(draw, text):
    i = _index(draw, text, end=True)
    junk = draw(st.lists(st.one_of(st.sampled_from(JUNK), st.characters()), min_size=1,
                         max_size=4))
    return text[:i] + "".join(junk) + text[i:]


def wrap_in_brackets(draw, text):
    """Many brackets around a piece: deep nesting inside a real program."""
    toks = tokens(text)
    i = _index(draw, toks, end=True)
    j = draw(st.integers(i, min(len(toks), i + 10)))
    opening, closing = draw(st.sampled_from([("(", ")"), ("{", "}"), ("(", ",)"), ("[", "]"),
                                             ("ref(", ")"), ("-", ""), ("!", "")]))
    n = draw(st.sampled_from([1, 2, 50, 300]))
    return "".join(toks[:i]) + opening * n + "".join(toks[i:j]) + closing * n + "".join(toks[j:])


MUTATIONS = [delete_tokens, insert_token, duplicate_tokens, swap_tokens, replace_literal,
             edit_characters, truncate, insert_junk, wrap_in_brackets]


@st.composite
def mutated(draw, seed):
    text = draw(seed)
    for _ in range(draw(st.integers(1, 4))):
        text = draw(st.sampled_from(MUTATIONS))(draw, text)
    return text[:MAX_TEXT]


module_seeds = st.one_of(st.sampled_from(CORPUS_TEXTS),
                         programs(max_depth=3).map(lambda prog: rl.astext(prog.mod)))


@fuzz_settings("mutated_text")
@given(mutated(module_seeds))
def test_mutated_module_text_parses_or_raises_parse_error(text):
    check_module_text(text)


@st.composite
def mutated_expressions(draw):
    """(text, mod): the text of a random program's @main as a `fn` expression, mutated; mod
    holds the prelude its constructors and globals resolve through."""
    prog = draw(programs(max_depth=3))
    seed = st.just(rl.astext(prog.mod["main"]))
    return draw(mutated(seed)), prog.mod


@fuzz_settings("mutated_expr")
@given(mutated_expressions())
def test_mutated_expression_text_parses_or_raises_parse_error(case):
    text, mod = case
    check_expr_text(text, mod=mod)


# ---- deep nesting --------------------------------------------------------------------------

def nest(before, core, after, head="", tail=""):
    """head + before*n + core + after*n + tail, as a function of n."""
    return lambda n: head + before * n + core + after * n + tail


NESTINGS = {
    "parentheses": nest("(", "1f", ")"),
    "one-tuples": nest("(", "1f", ",)"),
    "blocks": nest("{ ", "1f", " }"),
    "closures": nest("fn () { ", "1f", " }"),
    "calls": nest("sum(", "1f", ")"),
    "negations": nest("-", "%x", ""),
    "ref reads": nest("!", "%x", ""),
    "refs": nest("ref(", "1f", ")"),
    "ifs": nest("if (True) { ", "1f", " } else { 2f }"),
    "let values": nest("let %a = { ", "1f", " }; %a"),
    "matches": nest("match (1f) { _ => ", "1f", " }"),
    "right-nested sums": nest("1f + (", "1f", ")"),
    "projections": nest("(", "(1f,)", ").0"),
    "tuple patterns": nest("(", "%a", ",)", head="match (%x) { ", tail=" => 1f }"),
    "tuple types": nest("(", "float32", ",)", head="fn (%t: ", tail=") { %t }"),
    "ref types": nest("ref(", "float32", ")", head="fn (%t: ", tail=") { %t }"),
}


@pytest.mark.parametrize("depth", DEEP_NESTING_DEPTHS)
@pytest.mark.parametrize("form", sorted(NESTINGS))
def test_deep_nesting_parses_or_raises_parse_error(form, depth):
    text = NESTINGS[form](depth)
    check_expr_text(text)
    check_module_text("def @main(%x: ref(float32)) {\n  " + text + "\n}\n")


def test_flat_chains_are_loops_not_nesting():
    """A long `1f + 1f + ...` is no nesting in the text: it parses, round-trips, type-checks."""
    check_expr_text(" + ".join(["1f"] * FLAT_CHAIN_LENGTH), seconds=15)


# ---- literals ------------------------------------------------------------------------------

DTYPES = ["float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16",
          "uint32", "uint64", "bool"]


FLOAT_LAYOUT = {2: (10, 5), 4: (23, 8), 8: (52, 11)}    # itemsize: (mantissa, exponent) bits


@st.composite
def element_bits(draw, dtype):
    """The bits of one element: arbitrary, or for floats now and then a special value (a NaN
    with any sign and payload, an infinity, -0, a subnormal), which random bits rarely are."""
    bits = 8 * dtype.itemsize
    anything = st.integers(0, 2**bits - 1)
    if dtype.kind != "f":
        return draw(anything)
    mantissa, exponent = FLOAT_LAYOUT[dtype.itemsize]
    sign = draw(st.integers(0, 1)) << (bits - 1)
    ones = (2**exponent - 1) << mantissa
    return draw(st.one_of(
        anything,
        st.integers(1, 2**mantissa - 1).map(lambda m: sign | ones | m),    # NaN
        st.sampled_from([sign | ones, sign, sign | 1, sign | (2**mantissa - 1)]),
    ))


@st.composite
def constants(draw):
    """A constant of any dtype and a small shape whose elements are arbitrary bit patterns:
    NaNs with sign bits and payloads, infinities, subnormals, -0, extreme integers."""
    dtype = np.dtype(draw(st.sampled_from(DTYPES)))
    shape = draw(st.sampled_from([(), (), (2,), (0,), (2, 0), (1, 2)]))
    n = int(np.prod(shape))
    if dtype == np.bool_:
        data = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool)
    else:
        words = draw(st.lists(element_bits(dtype), min_size=n, max_size=n))
        data = np.array(words, dtype=f"u{dtype.itemsize}").view(dtype)
    return rl.const(data.reshape(shape))


@fuzz_settings("literals")
@given(constants())
def test_constants_print_and_parse_back_bit_exactly(c):
    with bounded(f"printing {c.data!r}"):
        text = rl.astext(c)
        try:
            again = rl.parse_expr(text)
        except rl.ParseError as err:
            raise AssertionError(f"the printed constant {text!r} (of {c.data.dtype} data "
                                 f"{c.data.tobytes().hex()}) does not parse: {err}") from None
        assert isinstance(again, rl.Constant), text
        assert again.data.dtype == c.data.dtype and again.data.shape == c.data.shape, text
        assert again.data.tobytes() == c.data.tobytes(), \
            f"{text!r}: bits {c.data.tobytes().hex()} came back as {again.data.tobytes().hex()}"
