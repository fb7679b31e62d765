"""Compiled code: what the compiler (compiler.py) produces and the machine (run.py) runs.

    Code     one compiled Function: its frame layout and its basic blocks
    Block    straight-line steps, then one terminator (JUMP | BRANCH | MATCH | CALL |
             TAILCALL | RETURN)
    Step     what a debugger needs of one step: the IR node it came from and the slot it
             writes (`code.steps[i].node`, `code.steps[i].name`); the machine never reads it

A frame is a flat list of slots: [params..., captured values..., locals/constants...];
`code.rest` is the frame's template beyond params and captures (constants and globals are
written there at compile time); `code.slot_names[i]` is the name_hint of the Var first bound to
slot i (a parameter, a capture, a let or a pattern variable), None for a temporary.
"""
from __future__ import annotations

from relayish.backend.runtime.describe import node_text

__all__ = ["Code", "Block", "Step", "JUMP", "BRANCH", "MATCH", "CALL", "TAILCALL", "RETURN"]

# terminator kinds
JUMP, BRANCH, MATCH, CALL, TAILCALL, RETURN = range(6)
KIND_NAMES = ("jump", "branch", "match", "call", "tailcall", "return")


class Block:
    """Straight-line steps, then one terminator (its fields depend on `kind`).

    `steps` holds the step functions the machine calls (a tuple once sealed); `info` the
    parallel Step records (the debugger's view, kept apart so the machine loop pays nothing)."""

    __slots__ = ("steps", "info", "kind", "src", "args", "gather", "dst", "target", "other",
                 "clauses", "node", "code")

    def __init__(self, code):
        self.steps = []
        self.info = []
        self.kind = None
        self.src = None        # BRANCH: cond slot; MATCH: data slot; CALL: callee; RETURN: value
        self.args = ()         # CALL/TAILCALL: argument slots
        self.gather = None     # CALL/TAILCALL with 2+ arguments: itemgetter of their slots
        self.dst = None        # CALL: the slot receiving the result
        self.target = None     # JUMP/CALL: next block; BRANCH: then-block
        self.other = None      # BRANCH: else-block
        self.clauses = ()      # MATCH: ((matcher, block), ...)
        self.node = None       # the expression, for error messages
        self.code = code       # the Code it belongs to, for error messages
        code.blocks.append(self)

    def __repr__(self):
        kind = KIND_NAMES[self.kind] if self.kind is not None else "open"
        return f"<Block {self.code.blocks.index(self)} of {self.code.name}: " \
               f"{len(self.steps)} steps, {kind}>"


class Step:
    """One compiled step as a debugger sees it: `fn` (what the machine calls), `node` (the IR
    expression it computes), `slot` (the frame slot it writes), `block`, and `srcs` (the slots
    of its operands, for op calls, constructors, tuples and reference writes (the reference
    first); () for the others)."""

    __slots__ = ("fn", "node", "slot", "block", "srcs")

    def __init__(self, fn, node, slot, block, srcs=()):
        self.fn, self.node, self.slot, self.block, self.srcs = fn, node, slot, block, srcs

    @property
    def name(self):
        """The name_hint of the Var bound to the slot this step writes (None: a temporary)."""
        return self.block.code.slot_names[self.slot]

    def __repr__(self):
        return f"<Step slot {self.slot} ({self.name or 'temp'}): {node_text(self.node, 60)}>"


class Code:
    """A compiled function: its frame layout and blocks (`entry` first)."""

    __slots__ = ("name", "func", "nparams", "ncaptures", "rest", "entry", "params", "nslots",
                 "blocks", "slot_names", "__weakref__")

    def __init__(self, name, func):
        self.name = name
        self.func = func
        self.nparams = 0
        self.ncaptures = 0
        self.rest = []           # the frame beyond params and captures: constants, then Nones
        self.entry = None
        self.params = None       # runtime.args.Parameters: names, types, argument checking
        self.nslots = 0
        self.blocks = []         # every block, in the order the compiler opened them
        self.slot_names = []     # per slot: the name_hint of its Var, or None

    @property
    def steps(self):
        """Every step's Step record, block by block in compile order (a new list)."""
        return [info for block in self.blocks for info in block.info]

    def __repr__(self):
        return f"<Code {self.name}: {self.nparams} params, {self.nslots} slots>"
