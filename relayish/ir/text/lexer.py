"""Tokens of the text format. A token is a tuple (kind, text, start, end) of offsets into the text.

Kinds: "local" (%x), "global" (@f, or @"any name"), "number" (digits with an optional suffix: 1f, 2.5f64, 3i64),
"ident", "string", "punct", and "eof". Whitespace and comments (`//`, `/* */`) are dropped.
"""
from __future__ import annotations

import bisect
import re

from relayish.errors import ParseError

_TOKEN = re.compile(r"""
    \s*(?:
    (?P<local>%[A-Za-z0-9_]+)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<number>[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?(?:[A-Za-z_][A-Za-z0-9_]*)?)
  | (?P<comment>//[^\n]*)
  | (?P<bcomment>/\*.*?\*/)
  | (?P<badcomment>/\*)
  | (?P<punct>:=|=>|->|==|!=|<=|>=|[-+*/<>=!(){}\[\],;:.\#?])
  | (?P<global>@(?:[A-Za-z0-9_]+|"(?:[^"\\\n]|\\.)*"))
  | (?P<string>"(?:[^"\\\n]|\\.)*")
  | (?P<badstring>")
  | (?P<bad>.)
  | (?P<end>$)
  )""", re.VERBOSE | re.DOTALL)

_SKIP = {"comment", "bcomment"}


class Source:
    """The text being parsed, for turning offsets into line:column and a caret."""

    def __init__(self, text, filename=None):
        self.text = text
        self.filename = filename
        self.line_starts = [0] + [m.end() for m in re.finditer("\n", text)]

    def error(self, message, offset) -> ParseError:
        offset = max(0, min(offset, len(self.text)))
        line = bisect.bisect_right(self.line_starts, offset) - 1
        start = self.line_starts[line]
        end = self.text.find("\n", start)
        source_line = self.text[start:] if end < 0 else self.text[start:end]
        column = offset - start + 1
        if len(source_line) <= 200:
            return ParseError(message, line + 1, column, source_line, self.filename)
        # a huge line: show 200 characters around the problem, caret included
        lo = max(0, column - 100)
        error = ParseError(message, line + 1, column, None, self.filename)
        error.source_line = source_line[lo:lo + 200]
        error.args = (f"{error.args[0]}\n  {error.source_line}\n  {' ' * (column - 1 - lo)}^",)
        return error


def tokenize(source: Source) -> list:
    tokens = []
    append = tokens.append
    for m in _TOKEN.finditer(source.text):
        kind = m.lastgroup
        if kind in _SKIP:
            continue
        if kind == "end":
            break
        start, end = m.span(kind)
        if kind == "bad":
            raise source.error(f"unexpected character {m.group(kind)!r}", start)
        if kind == "badcomment":
            raise source.error("unterminated comment: '/*' without '*/'", start)
        if kind == "badstring":
            raise source.error("unterminated string", start)
        append((kind, m.group(kind), start, end))
    n = len(source.text)
    append(("eof", "", n, n))
    return tokens
