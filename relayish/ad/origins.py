"""Where the nodes AD generates come from: the source position of their primal expression.

    origin_of(e, kind) -> entry | None   the derived position of e's bindings (None: e has
                                         no position); kind: "primal" (the primal computation,
                                         replayed), "backward" (reverse mode's backward pass),
                                         "tangent" (forward mode)
    mark(value, entry)                   give the expression `value` that position

The parser records where each expression it reads starts (ir/text/parse_core.POSITIONS: node ->
(Source, offset)). The transforms (reverse.py with reverse_scopes.py, forward.py) note the
primal expression they are transforming (`self.origin`, the entry of the innermost one with a
position) and every binding they emit meanwhile, forward or backward, gets its position, under
a DerivedSource: the primal's Source, marked `derived_from` it and with the `kind` of step. So
`source_position` of a generated node is the line of the primal expression it came from, and a
reader can still tell a derived position from a parsed one (`getattr(source, "derived_from",
None)`): the debugger says "backward step of line 7", debug_nans names the primal's line.

The optimizing passes keep these entries on the nodes they rewrite (ir/passes/base.py
keep_position), so an optimized gradient's bindings say where they come from too.

Only programs parsed from text have positions; for others `origin_of` is None and nothing is
marked (one weak-dictionary lookup per primal node). On a parsed 20,000-binding program,
reverse mode takes about 10% longer with the marks (one weak-dictionary store per binding).
"""
from __future__ import annotations

from relayish.ir.expr import Constant, Constructor, Function, GlobalVar, RefWrite, Var
from relayish.ir.op import Op
from relayish.ir.text.parse_core import POSITIONS

__all__ = ["origin_of", "mark", "DerivedSource"]

# not marked: atoms, and functions (their bodies' bindings are marked themselves)
_ATOMS = frozenset((Var, GlobalVar, Constant, Constructor, Op, Function))


class DerivedSource:
    """The parser's Source of a primal program, seen through the nodes AD generated from it:
    every attribute is the Source's; `derived_from` is the Source itself, `kind` the kind of
    the steps ("primal", "backward", "tangent")."""

    __slots__ = ("derived_from", "kind", "__weakref__")

    def __init__(self, source, kind):
        self.derived_from = source
        self.kind = kind

    def __getattr__(self, name):
        return getattr(self.derived_from, name)


def origin_of(e, kind="primal"):
    """The position entry the bindings AD emits for the primal expression `e` get (a
    DerivedSource of `kind` and e's offset), or None when the parser recorded no position
    for e. Computed once per primal expression; `mark` then costs one store per binding."""
    try:
        where = POSITIONS.get(e)
    except TypeError:
        return None
    if where is None:
        return None
    source, offset = where
    if isinstance(source, DerivedSource):        # a primal that AD generated itself
        source = source.derived_from
    # one DerivedSource per Source and kind, kept on it (a cycle the collector frees with it)
    table = getattr(source, "derived", None)
    if table is None:
        table = source.derived = {}
    derived = table.get(kind)
    if derived is None:
        derived = table[kind] = DerivedSource(source, kind)
    return derived, offset


def mark(value, entry):
    """Give the expression `value` the position `entry` (from origin_of), unless it is an atom
    or has a position of its own. Only the bound expression itself: its sub-expressions run
    just before it, and a reader takes their origin from it (the debugger does); marking them
    too made reverse mode of a 20,000-binding parsed program 25% slower."""
    if value.__class__ not in _ATOMS and value not in POSITIONS:
        POSITIONS[value] = entry
        if value.__class__ is RefWrite and value.value.__class__ not in _ATOMS and \
                value.value not in POSITIONS:
            # the sum of an accumulation `r := !r + g`: the passes make it a binding of its
            # own once the reference is gone, and it keeps this position (ir/passes/base.py)
            POSITIONS[value.value] = entry
