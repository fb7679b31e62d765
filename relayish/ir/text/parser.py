"""The text parser: Relay-style text (v0.0.5) back into relayish IR.

    parse(text, filename=None) -> Module        type definitions and `def @f(...) { ... }`
    parse_expr(text, filename=None, mod=None, free_vars=None) -> Expr
    parse_with_comments(text, filename=None) -> (Module, comments)    for the formatter
    source_position(node) -> (filename, line, column) | None          where a parsed node starts

A hand-written recursive-descent parser with precedence climbing for infix operators, written
as one class per part of the grammar, each extending the last:
    parse_core.ParserCore        the token cursor, errors, nesting count, scopes, comments
    parse_types.TypeSyntax       types, shapes, type definitions
    parse_constants.ConstantSyntax   literals, const(...) arrays, attribute values
    parse_forms.FormSyntax       fn, if, match and patterns, let, ref (the keyword forms)
    parse_exprs.ExprSyntax       blocks, infix/prefix operators, calls, names
and this module's _Parser on top, which reads whole modules in three passes (type names; type
definitions and where each def starts; the bodies), so types and functions may be used before
their definition.

Blocks (`let` chains and `e;` statements), left-leaning infix chains (`a + b + c ...`) and
else-if chains are parsed with loops, so 10^5-long ones are fine; other nesting recurses (under
`run_deep`) and is a ParseError beyond MAX_DEPTH levels, or beyond MAX_BRACKETS open brackets,
which the lazy tokenizer rejects as it reads them. Names resolve through one dict with an undo
log per scope, so a lookup costs the same at any nesting depth: parsing is linear in the text.
Every malformed input is a ParseError with a 1-based line and column and a caret under the
problem. notes/text-format.md has the grammar.
"""
from __future__ import annotations

from relayish.errors import ParseError, RelayishError
from relayish.ir.expr import GlobalVar
from relayish.ir.text.lexer import Source, Tokens
from relayish.ir.text.parse_core import POSITIONS
from relayish.ir.text.parse_exprs import ExprSyntax
from relayish.ir.types import GlobalTypeVar
from relayish.ir.visitor import no_gc


def parse(text, filename=None):
    """Parse a whole module: `type` definitions and `def @name(...) { ... }` functions.

        mod = rl.parse('def @main(%x: float32) -> float32 { %x * %x }')

    Types and globals may be used before their definition. Raises ParseError.
    """
    from relayish.ir.visitor import run_deep
    return run_deep(_run, text, filename, lambda p: p.module())


def parse_expr(text, filename=None, mod=None, free_vars=None):
    """Parse one expression, e.g. `fn (%x: float32) { %x + 1f }`.

    Constructors, types and globals resolve through `mod` when given. Free variables come
    from `free_var %x: float32;` declarations in the text and from `free_vars` (a list or dict
    of Vars: the environment, used by name; a declaration of one of its names means that Var).
    Any other `%name` that nothing binds is a ParseError, as in Relay.

        x = rl.var("x")
        rl.parse_expr("%x * 2f", free_vars=[x])       # uses x itself
        rl.parse_expr("free_var %y: float32; %y")     # a new free Var y: float32
    """
    from relayish.ir.visitor import run_deep
    return run_deep(_run, text, filename, lambda p: p.single_expr(), mod, free_vars)


def parse_with_comments(text, filename=None):
    """parse(text), and the comments of the text attached to the items that follow them:
    a dict from key (see ParserCore.keep_comments) to comment texts, for the formatter."""
    from relayish.ir.visitor import run_deep
    return run_deep(_run, text, filename, lambda p: (p.module(), p.comments), comments=True)


def source_position(node):
    """(filename, line, column) where the parsed expression `node` starts, or None."""
    try:
        where = POSITIONS.get(node)
    except TypeError:
        return None
    if where is None:
        return None
    source, offset = where
    error = source.error("", offset)
    return source.filename, error.line, error.column


def _run(text, filename, what, mod=None, free_vars=None, comments=False):
    if not isinstance(text, str):
        raise RelayishError(f"parse takes a str, got {type(text).__name__}")
    source = Source(text, filename)
    # the parser allocates millions of small objects that all stay alive: pausing the cyclic
    # garbage collector meanwhile saves its repeated full scans of them
    with no_gc():
        parser = _Parser(source, Tokens(source, comments), mod, free_vars)
        try:
            return what(parser)
        except RecursionError:
            raise source.error("the program is nested too deeply", parser.tok[2]) from None
        except ParseError:
            raise
        except RelayishError as exc:      # a node's own check of what the text builds
            raise source.error(str(exc), parser.tok[2]) from None


class _Parser(ExprSyntax):
    """The whole parser: the grammar of the mixins, and whole modules read in three passes."""

    def header(self):
        if self.at("#"):
            self.advance()
            self.expect("[")
            if self.tok[1] != "version":
                raise self.error(f"expected 'version' in the header, found {self.describe()}")
            self.advance()
            self.expect("=")
            if self.tok[0] != "string":
                raise self.error("expected the version as a string, e.g. \"0.0.5\"")
            self.advance()
            self.expect("]")

    def module(self):
        self.module_mode = True
        self.header()
        # pass 1: every type name, so types may be used before their definition
        depth, k, toks = 0, -1, self.toks
        while toks[k + 1][0] != "eof":
            k += 1
            tok = toks[k]
            if tok[1] in ("{", "(", "[") and tok[0] == "punct":
                depth += 1
            elif tok[1] in ("}", ")", "]") and tok[0] == "punct":
                depth -= 1
            elif depth == 0 and tok == ("ident", "type", tok[2], tok[3]):
                name_tok = toks[k + 1]
                if name_tok[0] == "ident" and name_tok[1] not in self.type_names:
                    self.type_names[name_tok[1]] = self.build(GlobalTypeVar, name_tok, name_tok[1])
                    if toks[k + 2][1] != "[":
                        self.nullary_types.add(name_tok[1])
        # pass 2: type definitions, and where each def starts
        items = []                  # items: ("type", name, end offset) / ("def", start) in order
        while self.tok[0] != "eof":
            if self.at("type", "ident") or self.at("extern", "ident"):
                name = self.type_definition()
                items.append(("type", name, self.toks[self.i - 1][3]))
            elif self.at("def", "ident"):
                start = self.i
                self.advance()
                if self.tok[0] != "global":
                    raise self.error(f"expected the function's name (@name), found {self.describe()}")
                name_tok = self.advance()
                name = self.global_name(name_tok)
                if name in self.globals:
                    raise self.error(f"@{name} is defined twice", name_tok)
                self.globals[name] = GlobalVar(name)
                items.append(("def", start))
                self.skip_definition()
            else:
                raise self.error(f"expected 'def', 'type' or 'extern type' at the top level, "
                                 f"found {self.describe()}")
        # pass 3: function bodies (every global and constructor is known now), in text order
        for item in items:
            if item[0] == "type":
                self.attach_comments(("type", item[1]), item[2])
                continue
            self.i = item[1] - 1
            self.advance()
            gv, func = self.definition()
            self.mod[gv] = func
        self.attach_comments(("end",), len(self.source.text))
        for name, offset in self.global_uses.items():
            if name not in self.mod:
                raise self.source.error(f"unknown global function @{name}", offset)
        return self.mod

    def skip_definition(self):
        while not (self.at("{") or self.tok[0] == "eof"):
            self.advance()
        if self.tok[0] == "eof":
            raise self.error("expected '{' and the function body, found the end of the text")
        open_tok, depth = self.tok, 0
        while True:
            if self.tok[0] == "punct" and self.tok[1] == "{":
                depth += 1
            elif self.tok[0] == "punct" and self.tok[1] == "}":
                depth -= 1
                if depth == 0:
                    self.advance()
                    return
            elif self.tok[0] == "eof":
                raise self.error("this '{' is never closed", open_tok)
            self.advance()

    def definition(self):
        if self.peek()[0] == "global":
            self.attach_comments(("def", self.global_name(self.peek())), self.tok[2])
        self.expect("def")
        name = self.global_name(self.advance())
        self.free, self.declared = {}, set()      # free_var declarations hold in one def
        return self.globals[name], self.function_rest()

