"""Tokens of the text format. A token is a tuple (kind, text, start, end) of offsets into the text.

Kinds: "local" (%x), "global" (@f, or @"any name"), "number" (digits with an optional suffix: 1f, 2.5f64, 3i64),
"ident", "string", "punct", and "eof". Whitespace and comments (`//`, `/* */`) are dropped.
Block comments nest, as in Relay: `/* a /* b */ c */` is one comment. KEYWORDS are the reserved
words (types.printable_name refuses them as constructor and ADT names).
"""
from __future__ import annotations

import bisect
import itertools
import re

from relayish.errors import ParseError
from relayish.ir.text.literals import SPECIAL_FLOAT

_TOKEN = re.compile(r"""
    \s*(?:
    (?P<local>%[A-Za-z0-9_]+)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)   # nn.conv2d: one name
  | (?P<number>[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?(?:[A-Za-z_][A-Za-z0-9_]*)?)
  | (?P<comment>//[^\n]*)
  | (?P<bcomment>/\*)                # to its matching */ (nested ones counted): _comment_end
  | (?P<punct>:=|=>|->|==|!=|<=|>=|[-+*/<>=!(){}\[\],;:.\#?])
  | (?P<global>@(?:[A-Za-z0-9_]+|"(?:[^"\\\n]|\\.)*"))
  | (?P<string>"(?:[^"\\\n]|\\.)*")
  | (?P<badstring>")
  | (?P<bad>.)
  | (?P<end>$)
  )""", re.VERBOSE | re.DOTALL)

_COMMENT_MARK = re.compile(r"/\*|\*/")


class _Reserved(frozenset):
    """The keywords, and (`in` also answers for them) the words the text reads as something
    else wherever a constructor name could stand: the float literals `inf`, `nanf64`,
    `nanxFFC00000f` ... and the wildcard `_`. types.printable_name refuses these names for
    constructors and ADTs, so every constructor prints as a name that parses back to it."""

    def __contains__(self, name):
        return (frozenset.__contains__(self, name) or
                (isinstance(name, str) and (name == "_" or SPECIAL_FLOAT.fullmatch(name) is not None)))


KEYWORDS = _Reserved({"fn", "if", "else", "match", "let", "ref", "ref_read", "ref_write", "const",
                      "def", "type", "extern", "free_var", "True", "False"})

MAX_BRACKETS = 30000      # brackets open at once (or prefix - and ! in a row) that are too deep
_OPEN = frozenset("([{")
_CLOSE = frozenset(")]}")
_CHUNK = 4096             # tokens made per refill of the lazy token list


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
        # ParseError shows a window of a long line around the column
        return ParseError(message, line + 1, offset - start + 1, source_line, self.filename)


class Tokens:
    """The tokens of a text, made lazily in chunks as the parser reaches them.

    `toks[j]` is token j (the "eof" token past the end). Reading lazily means an error near
    the start of a huge text is reported without scanning the rest, and brackets nested more
    than MAX_BRACKETS deep are rejected where they reach that depth (5 MB of '(' is rejected
    after 3 * 10^4 tokens, not after tokenizing 5 million), and so are more than MAX_BRACKETS
    prefix operators `-` `!` in a row (each nests one level: `- - - x`), the other nesting made
    of one-character tokens. With `comments=True` the comments are
    kept in `.comments` as (text, start, end) in text order (for the formatter).
    """

    def __init__(self, source: Source, comments=False):
        self.items: list = []
        self.comments: list | None = [] if comments else None
        self._more = _scan(source, self.comments)
        self.done = False

    def __getitem__(self, j):
        items = self.items
        while j >= len(items) and not self.done:
            chunk = list(itertools.islice(self._more, _CHUNK))
            items.extend(chunk)
            self.done = len(chunk) < _CHUNK or chunk[-1][0] == "eof"
        return items[j] if j < len(items) else items[-1]

    def all(self) -> list:
        """Every token (scans the rest of the text)."""
        while not self.done:
            self[len(self.items)]
        return self.items


def _comment_end(source, start):
    """The offset just after the `*/` that closes the block comment opened at `start`."""
    depth = 0
    for m in _COMMENT_MARK.finditer(source.text, start):
        depth += 1 if m.group() == "/*" else -1
        if depth == 0:
            return m.end()
    raise source.error("unterminated comment: '/*' without its '*/'", start)


def _scan(source: Source, comments):
    text = source.text
    depth = 0
    prefix_run = 0              # `-` and `!` tokens in a row
    match = _TOKEN.match
    pos = 0
    while True:
        m = match(text, pos)
        kind = m.lastgroup
        start, end = m.span(kind)
        pos = end
        if kind == "bcomment":
            end = pos = _comment_end(source, start)
        if kind == "comment" or kind == "bcomment":
            if comments is not None:
                comments.append((text[start:end], start, end))
            continue
        if kind == "end":
            break
        if kind == "punct":
            tok = m.group(kind)
            if tok == "-" or tok == "!":
                prefix_run += 1
                if prefix_run > MAX_BRACKETS + 1:      # one `-` may be a binary minus
                    raise source.error(f"the program is nested too deeply (more than "
                                       f"{MAX_BRACKETS} prefix operators in a row)", start)
                yield ("punct", tok, start, end)
                continue
            prefix_run = 0
            if tok in _OPEN:
                depth += 1
                if depth > MAX_BRACKETS:
                    raise source.error(f"the program is nested too deeply (more than "
                                       f"{MAX_BRACKETS} brackets open at once)", start)
            elif tok in _CLOSE:
                depth -= 1
            yield ("punct", tok, start, end)
            continue
        prefix_run = 0
        if kind == "bad":
            raise source.error(f"unexpected character {m.group(kind)!r}", start)
        if kind == "badstring":
            raise source.error("unterminated string", start)
        yield (kind, m.group(kind), start, end)
    n = len(text)
    yield ("eof", "", n, n)


def tokenize(source: Source) -> list:
    """Every token of the text, the "eof" token last."""
    return Tokens(source).all()
