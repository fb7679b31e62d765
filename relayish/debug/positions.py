"""Source positions for the debugger: where each node of the debugged program is in its text.

    table = SourceMap(target)          target: a Module or a Function (as given to Debugger)
    table.position(node) -> (line, column) | None
    table.line_text(line) -> str
    table.text                         the whole text the lines refer to
    table.name(var) -> str             the name the text gives a Var (the printer makes each
                                       unique: %g, %g_1, ...; a parsed program's own names)
    origin(node) -> (filename, line, column, kind) | None    for a node AD generated: where
                                       its primal expression was ("primal", "backward", "tangent")

Two cases. A program parsed from text (`rl.parse`) keeps the parser's positions (the
parser's weak POSITIONS table: node -> (Source, offset)), so lines are the file's. Any other
program (built in Python, the output of AD or of a pass) is printed with `rl.astext` and the
text parsed back; the two trees have the same shape, so one walk over both side by side maps
each node of the program to the position of its twin. The walk is iterative (10^5-long
let-chains) and stops descending where the shapes differ (a node then has no position of its
own, and the debugger shows its nearest positioned frame instead).

The origin of a node that AD generated: ad/ copies the primal expression's entry of
POSITIONS onto the nodes it generates for it, under a DerivedSource that says so and which
kind of step it is (ad/origins.py), so a binding of a gradient program tells the line of the
primal program it differentiates ("backward step of line 7"), when the primal was parsed from
text. Derived entries never count as the program's own positions.
"""
from __future__ import annotations

import bisect

from relayish.errors import RelayishError
from relayish.ir.expr import Call, Var
from relayish.ir.fields import children
from relayish.ir.module import Module
from relayish.ir.text.parse_core import POSITIONS
from relayish.ir.text.parser import parse, parse_expr
from relayish.ir.text.printer import astext

__all__ = ["SourceMap", "origin"]


def _where(node):
    """The parser's own (Source, offset) entry of `node`; None for none or a derived one."""
    try:
        where = POSITIONS.get(node)
    except TypeError:             # an unhashable node (none today) has no position
        return None
    if where is None or getattr(where[0], "derived_from", None) is not None:
        return None
    return where


def _first_where(root):
    """The parser's entry of the first marked node under `root` (the parser marks the
    expressions it reads, not Functions of defs, Lets or Vars), or None: a walk that stops at
    the first hit."""
    stack, seen = [root], set()
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        where = _where(node)
        if where is not None:
            return where
        stack.extend(reversed(children(node)))
    return None


def _parsed_source(main, sample=200):
    """The Source `main` was parsed from, or None when it was built otherwise. The parser
    marks every call it reads; a program built in Python or by a transform has calls without
    a position of their own (it may share a few parsed nodes with the program it came from),
    so the test is that the first `sample` calls of `main` all have a parser's position."""
    stack, seen, calls, source = [main], set(), 0, None
    while stack and calls < sample:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if node.__class__ is Call:
            calls += 1
            where = _where(node)
            if where is None or (source is not None and where[0] is not source):
                return None
            source = where[0]
        stack.extend(reversed(children(node)))
    return source


def _line_col(source, offset):
    starts = source.line_starts
    line = bisect.bisect_right(starts, offset) - 1
    return line + 1, offset - starts[line] + 1


def origin(node):
    """(filename, line, column, kind) of the primal expression a node AD generated comes from
    (kind: "primal", "backward" or "tangent"), or None for any other node."""
    try:
        where = POSITIONS.get(node)
    except TypeError:
        return None
    if where is None or getattr(where[0], "derived_from", None) is None:
        return None
    source, offset = where
    line, col = _line_col(source.derived_from, offset)
    return source.filename, line, col, source.kind


class SourceMap:
    """Positions of the nodes of one program (see the module docstring)."""

    def __init__(self, target, mod=None):
        self.offsets = {}          # id(node) -> offset into self.source (printed case)
        self.names = {}            # id(Var) -> its name in the printed text
        self.nodes = []            # keeps the mapped nodes alive while the ids are used
        self.source = None
        self.parsed = False
        main = target["main"] if isinstance(target, Module) else target
        source = _parsed_source(main)
        if source is not None:
            self.parsed = True
            self.source = source
            return
        try:
            if isinstance(target, Module):
                twin = parse(astext(target))
                pairs = [(target[name], twin[name]) for name in
                         (gv.name_hint for gv in target.functions)]
            else:
                twin = parse_expr(astext(target), mod=mod)
                pairs = [(target, twin)]
        except RelayishError:
            return                 # a text that does not parse back: no positions
        self.twin = twin           # POSITIONS is weak: the twin keeps its entries alive
        src = _first_where(pairs[0][1])
        if src is None:
            return
        self.source = src[0]
        self._map(pairs)

    def _map(self, pairs):
        offsets, seen = self.offsets, set()
        stack = list(pairs)
        while stack:
            a, b = stack.pop()
            if id(a) in seen:
                continue
            seen.add(id(a))
            self.nodes.append(a)
            if a.__class__ is Var:
                self.names[id(a)] = b.name_hint
            where = _where(b)
            if where is not None and where[0] is self.source:
                offsets[id(a)] = where[1]
            ca, cb = children(a), children(b)
            if len(ca) != len(cb):
                continue
            for x, y in zip(ca, cb):
                if x.__class__ is y.__class__:
                    stack.append((x, y))

    @property
    def text(self):
        return self.source.text if self.source is not None else ""

    @property
    def filename(self):
        return self.source.filename if self.source is not None else None

    def position(self, node):
        """(line, column) of `node` in the text, or None."""
        if self.source is None:
            return None
        if self.parsed:
            where = _where(node)
            if where is None or where[0] is not self.source:
                return None
            return _line_col(self.source, where[1])
        offset = self.offsets.get(id(node))
        return None if offset is None else _line_col(self.source, offset)

    def name(self, var):
        """The name of `var` in the text (without the %)."""
        return self.names.get(id(var), var.name_hint)

    def line_text(self, line):
        """The text of 1-based `line` (without its newline), '' outside the text."""
        if self.source is None or line is None:
            return ""
        starts = self.source.line_starts
        if not 1 <= line <= len(starts):
            return ""
        start = starts[line - 1]
        end = self.source.text.find("\n", start)
        return self.source.text[start:] if end < 0 else self.source.text[start:end]

    def line_count(self):
        return len(self.source.line_starts) if self.source is not None else 0

