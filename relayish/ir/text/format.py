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

An operator called by an alias keeps the name the text wrote (`nn.relu(%x)` stays, where
rl.astext prints the op's own name `relu`). A line longer than WIDTH columns is wrapped
after a comma inside brackets, the outermost first, each continuation aligned after the
bracket it is in (a def's parameters, a call's arguments, a constant's elements).
"""
from __future__ import annotations

from relayish.ir.expr import Call
from relayish.ir.fields import ONE_CHILD, child_fields
from relayish.ir.op import Op, aliases_of
from relayish.ir.text.parse_core import POSITIONS
from relayish.ir.text.parser import parse_with_comments
from relayish.ir.text.printer import print_module

WIDTH = 100                  # columns a formatted line is wrapped to (where it has a comma)


def format_text(source: str, filename=None) -> str:
    """The canonical text of a program (a module), its comments kept.

        >>> print(rl.format_text("// the square\\ndef @main(%x: float32) { %x*%x }"), end="")
        #[version = "0.0.5"]
        // the square
        def @main(%x: float32) { %x * %x }

    Raises ParseError for malformed text. format_text(format_text(s)) == format_text(s).
    """
    mod, comments = parse_with_comments(source, filename)
    text = print_module(mod, True, comments, _alias_spellings(mod, source))
    return "\n".join(line for long in text.split("\n") for line in wrap_line(long))


def _alias_spellings(mod, source):
    """id(Call) -> the alias its op was written as, for the calls of an op that has aliases
    whose text (at the parser's recorded offset) starts with one of them. One walk with an
    explicit stack."""
    found = {}
    stack = [func for _, func in mod.functions.items()]
    seen = set()
    while stack:
        e = stack.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, Call) and isinstance(e.op, Op):
            names = aliases_of(e.op)
            where = POSITIONS.get(e) if names else None
            if where is not None:
                spelled = next((n for n in names if source.startswith(n + "(", where[1])), None)
                if spelled is not None:
                    found[id(e)] = spelled
        for name, kind in child_fields(type(e)):
            value = getattr(e, name)
            stack.extend((value,) if kind in ONE_CHILD else value)
    return found


def wrap_line(line, width=WIDTH):
    """`line` as lines of at most `width` columns where it can be broken: after a comma
    inside () or [], preferring the outermost bracket; each continuation starts under the
    character after the bracket its first comma is in (or 4 columns in, when that is past
    half the width). Strings are skipped; a comment line stays whole."""
    if len(line) <= width or line.lstrip().startswith("//"):
        return [line]
    commas = _commas(line)
    pieces = []                     # (start index in line, printed column of that index)
    start, column = 0, 0
    base = len(line) - len(line.lstrip())
    out = []

    def printed(i):                 # the printed column of line[i], i in a piece so far
        for s0, c0 in reversed(pieces + [(start, column)]):
            if i >= s0:
                return c0 + i - s0
        return i

    while printed(len(line)) > width:
        later = [c for c in commas if c[0] > start and line[c[0]:].strip()]
        fitting = [c for c in later if printed(c[0]) <= width]
        if fitting:
            depth = min(c[1] for c in fitting)
            at, _, opened = [c for c in fitting if c[1] == depth][-1]
        elif later:                 # nothing fits: the first comma past the width
            at, _, opened = later[0]
        else:
            break
        out.append((" " * column if start else "") + line[start:at].rstrip())
        indent = printed(opened + 1)
        if indent > width // 2:
            indent = base + 4
        pieces.append((start, column))
        start = at + len(line[at:]) - len(line[at:].lstrip())
        column = indent
    out.append((" " * column if start else "") + line[start:])
    return out


def _commas(line):
    """[(index after the comma, bracket depth, index of its innermost open bracket)] of the
    commas of `line` inside () or [], strings skipped."""
    found, opened = [], []
    k, n = 0, len(line)
    while k < n:
        ch = line[k]
        if ch == '"':               # a string: skip to its closing quote
            k += 1
            while k < n and line[k] != '"':
                k += 2 if line[k] == "\\" else 1
        elif ch in "([":
            opened.append(k)
        elif ch in ")]" and opened:
            opened.pop()
        elif ch == "," and opened:
            found.append((k + 1, len(opened), opened[-1]))
        k += 1
    return found
