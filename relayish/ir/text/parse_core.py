"""The parser's state and the helpers every part of the grammar uses.

ParserCore holds the token cursor (`tok`, `advance`, `at`, `expect`, `peek`), the errors (a
ParseError at a token, with its line, column and caret), the nesting count (`enter`: beyond
MAX_DEPTH levels the program is "nested too deeply"), the scopes of names (Scopes: one dict with
an undo log per scope, so a lookup costs the same at any depth), the free variables, the
comments kept for the formatter, and the table of where each parsed expression starts
(`mark`, read by parser.source_position). The grammar is written in the mixins that extend it:
parse_types (types and type definitions), parse_constants (literals, `const(...)`, attribute
values), parse_forms (keyword forms: fn, if, match and patterns, ref), parse_exprs (blocks,
infix operators, calls, names); parser.py puts them together and parses whole modules.
"""
from __future__ import annotations

from relayish.errors import RelayishError
from relayish.ir.expr import Constructor, GlobalVar, Var
from relayish.ir.identity import WeakIdentityMap
from relayish.ir.module import Module
from relayish.ir.op import Op
from relayish.ir.types import GlobalTypeVar

MAX_DEPTH = 30000      # nesting levels counted by ParserCore.enter (about one per printed level)

# where each parsed expression starts: node -> (Source, offset). Weak, so it never keeps a
# program alive; parser.source_position reads it for error messages that point into the text.
POSITIONS = WeakIdentityMap()     # by identity: `==` on expressions builds an op
_SHARED_NODES = (Var, GlobalVar, Constructor, Op)


class ParserCore:
    """The cursor over the tokens and the parser's tables; the grammar lives in the mixins."""

    def __init__(self, source, tokens, mod=None, free_vars=None):
        self.source = source
        self.toks = tokens
        self.i = 0
        self.tok = tokens[0]
        self.depth = 0
        self.scopes = Scopes()              # name -> Expr (a Var, or a graph binding's value)
        self.type_scopes = Scopes()         # name -> TypeVar
        # comments (formatter only): key -> the comment texts printed before that item
        self.comments: dict = {}
        self.comment_next = 0
        if mod is None:
            mod = Module()
        elif not isinstance(mod, Module):
            raise RelayishError(f"parse_expr: mod is a Module, got {type(mod).__name__}")
        self.mod = mod
        self.module_mode = False
        self.globals: dict[str, GlobalVar] = {}
        self.global_uses: dict[str, int] = {}   # name -> offset of first use
        # the module's names, kept up to date as the text's type definitions are added
        self.type_names: dict[str, GlobalTypeVar] = {g.name: g for g in mod.type_definitions}
        self.constructors: dict[str, Constructor] = mod.constructors
        # ADTs without type parameters: a bare `Nat` means the type `Nat[]`
        self.nullary_types = {g.name for g, d in mod.type_definitions.items() if not d.type_vars}
        # free variables: the environment parse_expr was given, and `free_var` declarations
        # (visible to the end of the expression, or of the def in a module, as in Relay)
        if isinstance(free_vars, dict):
            given = list(free_vars.items())
        elif free_vars is None or isinstance(free_vars, (list, tuple)):
            given = [(getattr(v, "name_hint", None), v) for v in (free_vars or [])]
        else:
            raise RelayishError(f"parse_expr: free_vars is a list or dict of Vars, got "
                                f"{type(free_vars).__name__}")
        for name, var in given:
            if not isinstance(var, Var):
                raise RelayishError(f"parse_expr: free_vars holds Vars, got "
                                    f"{type(var).__name__}")
        self.given_free = dict(given)
        self.free = dict(self.given_free)
        self.declared: set = set()

    # ---- token helpers -----------------------------------------------------------------------
    def error(self, message, tok=None):
        tok = tok or self.tok
        return self.source.error(message, tok[2])

    def advance(self):
        tok = self.tok
        self.i += 1
        self.tok = self.toks[self.i]
        return tok

    def at(self, text, kind=None):
        tok = self.tok
        return tok[1] == text and (kind is None or tok[0] == kind) and tok[0] in ("punct", "ident")

    def peek(self, k=1):
        return self.toks[self.i + k]

    def expect(self, text, what=None):
        if not (self.tok[1] == text and self.tok[0] in ("punct", "ident")):
            raise self.error(f"expected {what or repr(text)}, found {self.describe()}")
        return self.advance()

    def describe(self, tok=None):
        tok = tok or self.tok
        return "the end of the text" if tok[0] == "eof" else repr(tok[1])

    def small_int(self, text, tok):
        if len(text) > 18:
            raise self.error(f"the number {text[:30]} is too large here", tok)
        return int(text)

    # ---- comments (kept only for the formatter) -----------------------------------------------
    def take_comments(self, offset) -> list:
        """The comments not yet attached that start before `offset` (a line-level item starts
        there: a binding, statement, block tail, clause or definition takes them)."""
        found = self.toks.comments
        if not found:
            return []
        self.toks[self.i]            # the tokens (and comments) up to here have been read
        k = self.comment_next
        taken = []
        while k < len(found) and found[k][1] < offset:
            taken.append(found[k][0])
            k += 1
        self.comment_next = k
        return taken

    def keep_comments(self, key, comments):
        """Attach comments to `key`: a binder Var, a Clause, ("tail"/"end", block) or
        ("def"/"type", name), ("end",) for the end of the file. Nodes hash by identity."""
        if comments:
            self.comments.setdefault(key, []).extend(comments)

    def attach_comments(self, key, offset):
        self.keep_comments(key, self.take_comments(offset))

    def build(self, node_class, tok, *args):
        """node_class(*args), a construction-time name check failing as a ParseError at tok."""
        try:
            return node_class(*args)
        except RelayishError as exc:
            raise self.error(str(exc), tok) from None

    def enter(self):
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise self.error(f"the program is nested too deeply (more than {MAX_DEPTH} levels)")

    def mark(self, node, tok):
        """Remember where `node` starts (the first mark wins: it is the innermost).

        Binders, globals, constructors and ops are shared by many places: they get none."""
        if not isinstance(node, _SHARED_NODES) and node not in POSITIONS:
            POSITIONS[node] = (self.source, tok[2])


class Scopes:
    """Nested scopes as one dict plus an undo log per open scope: a lookup is one dict read
    at any nesting depth (a list of dicts searched innermost first is quadratic in depth)."""
    __slots__ = ("env", "undo")

    def __init__(self):
        self.env: dict = {}
        self.undo: list[list] = []

    def open(self, names=None):
        self.undo.append([])
        for name, value in (names or {}).items():
            self.bind(name, value)

    def bind(self, name, value):
        self.undo[-1].append((name, self.env.get(name, _ABSENT)))
        self.env[name] = value

    def close(self):
        env = self.env
        for name, old in reversed(self.undo.pop()):
            if old is _ABSENT:
                del env[name]
            else:
                env[name] = old

    def get(self, name):
        return self.env.get(name)


_ABSENT = object()
