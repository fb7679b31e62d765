"""The formatter: program text in, canonical program text out, comments kept.

    format_text(source, filename=None) -> str

The program is parsed (comments are kept by the lexer on request), printed by the ordinary
printer, and each comment is printed again on its own line before the item it was attached to.
The attachment rule (as black and rustfmt do it): a comment belongs to the line-level item that
follows it: a `let` binding or `e;` statement, the tail expression of a block, a match clause,
a `def` or a `type` definition. Comments after the last item of a block stay at the end of that
block, comments after the last definition at the end of the file. A comment in the middle of an
expression moves to its own line before the next item; a comment at the end of a line moves to
its own line before the next item too. Formatting is idempotent and the formatted text parses
to a program structurally equal to the original.
"""
from __future__ import annotations

from relayish.ir.text.parser import parse_with_comments
from relayish.ir.text.printer import print_module


def format_text(source: str, filename=None) -> str:
    """The canonical text of a program (a module), its comments kept.

        >>> print(rl.format_text("// the square\\ndef @main(%x: float32) { %x*%x }"), end="")
        #[version = "0.0.5"]
        // the square
        def @main(%x: float32) { %x * %x }

    Raises ParseError for malformed text. format_text(format_text(s)) == format_text(s).
    """
    mod, comments = parse_with_comments(source, filename)
    return print_module(mod, True, comments)
