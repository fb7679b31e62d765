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
