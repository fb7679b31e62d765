"""The formatter (rl.format_text): comments kept before the item that follows them, idempotent,
and the formatted text parses to a program structurally equal to the original."""
import pytest

import relayish as rl

SOURCE = """\
// the list type
/* a block comment
   over two lines */
type List[a] { Cons(a, List[a]), Nil }

// squares its argument
def @main(%x: float32) -> float32 {
  // the square
  let %y = %x*%x;   // an end-of-line comment moves to the next item
  /* a statement follows */
  %y;
  let %z = if (%x < 0f) { // inside the then branch
    %y } else { %y + 1f };
  // before the tail
  %z + %y
  // at the end of the body
}
def @len[a](%l: List[a]) -> int32 {
  match (%l) {
    // the empty list
    Nil => 0,
    Cons(_, %t) => 1 + @len(%t),
  }
}
// at the end of the file
"""

FORMATTED = """\
#[version = "0.0.5"]
// the list type
/* a block comment
   over two lines */
type List[a] { Cons(a, List[a]), Nil }
// squares its argument
def @main(%x: float32) -> float32 {
  // the square
  let %y = %x * %x;
  // an end-of-line comment moves to the next item
  /* a statement follows */
  %y;
  let %z = if (%x < 0f) {
    // inside the then branch
    %y
  } else { %y + 1f };
  // before the tail
  %z + %y
  // at the end of the body
}
def @len[a](%l: List[a]) -> int32 {
  match (%l) {
    // the empty list
    Nil => 0,
    Cons(_, %t) => 1 + @len(%t),
  }
}
// at the end of the file
"""


def test_comments_print_before_the_item_that_follows_them():
    assert rl.format_text(SOURCE) == FORMATTED


def test_formatting_is_idempotent_and_keeps_the_program():
    once = rl.format_text(SOURCE)
    assert rl.format_text(once) == once
    rl.assert_structural_equal(rl.parse(once), rl.parse(SOURCE))
    # without comments the formatter prints what astext prints
    plain = rl.astext(rl.parse(SOURCE))
    assert rl.format_text(plain) == plain


@pytest.mark.parametrize("source", [
    "",
    "// only a comment",
    "/* only */ /* comments */",
    "def @f() { 1f } // after the last def",
    "def @f() {\n  let %a = 1f; /* mid */ let %b = %a /* inside an expression */ + 1f;\n  %b\n}",
    "def @f(%x: float32) { fn (%y: float32) {\n  // in a closure\n  %y * %x\n} }",
    "def @f(%p: (float32, float32)) {\n  let %q = (%p.0, // a field\n  %p.1);\n  %q\n}",
    "type T { A, // first\n B }\n def @g() { A }",
    "def @f(%x: float32) { let %y = { // a let as a value\n %x }; %y }",
])
def test_comments_in_odd_places_survive_and_formatting_is_stable(source):
    once = rl.format_text(source)
    assert rl.format_text(once) == once
    comments = [c for c in ("only a comment", "/* only */", "/* comments */", "after the last def",
                            "/* mid */", "inside an expression", "in a closure", "a field", "first",
                            "a let as a value") if c in source]
    for c in comments:
        assert once.count(c) == 1, (c, once)
    rl.assert_structural_equal(rl.parse(once), rl.parse(source))


def test_a_comment_inside_a_short_block_makes_it_multiline():
    text = rl.format_text("def @f(%x: float32) { if (%x < 0f) { /* neg */ 0f } else { %x } }")
    assert "{\n    /* neg */\n    0f\n  }" in text


def test_format_text_raises_parse_errors():
    with pytest.raises(rl.ParseError):
        rl.format_text("def @f() { 1f $ }")


def test_the_text_package_offers_it_to_the_command_line():
    from relayish.ir import text
    assert text.format_source is rl.format_text


# ---- issue 28: what a newcomer met in `relayish fmt` ------------------------------------------

def test_an_op_written_by_its_alias_keeps_that_name():
    source = "def @f(%x: Tensor[(2), float32]) { let %y = nn.relu(%x); relu(nn.softmax(%y)) }"
    out = rl.format_text(source)
    assert "nn.relu(%x)" in out and "relu(nn.softmax(%y))" in out
    assert rl.format_text(out) == out
    rl.assert_structural_equal(rl.parse(out), rl.parse(source))


def test_a_long_line_is_wrapped_after_commas_and_reads_back_the_same():
    params = ", ".join(f"%a{i}: Tensor[(3, 4), float32]" for i in range(7))
    call = "concatenate((" + ", ".join(f"%a{i % 7}" for i in range(14)) + "), axis=0)"
    source = f"def @f({params}) -> Tensor[(42, 4), float32] {{\n  {call}\n}}\n"
    assert max(len(line) for line in source.splitlines()) >= 220
    out = rl.format_text(source)
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 100, out
    assert lines[2].startswith(" " * len("def @f(") + "%a"), out     # under the first parameter
    assert rl.format_text(out) == out
    rl.assert_structural_equal(rl.parse(out), rl.parse(source))


def test_a_comma_in_a_string_attribute_is_no_place_to_wrap():
    from relayish.ir.text.format import wrap_line
    line = '  f(%x, name="a, b, c, d", ' + ", ".join(["%y"] * 40) + ")"
    pieces = wrap_line(line, width=60)
    assert '"a, b, c, d"' in pieces[0] and all(len(p) <= 60 for p in pieces[1:])
    assert "".join(p.strip() + " " for p in pieces).split() == line.split()
