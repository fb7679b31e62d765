"""The text parser: Relay-style text (v0.0.5) back into relayish IR.

    parse(text, filename=None) -> Module        type definitions and `def @f(...) { ... }`
    parse_expr(text, filename=None, mod=None, free_vars=None) -> Expr

A hand-written recursive-descent parser with precedence climbing for infix operators. Blocks
(`let` chains and `e;` statements), left-leaning infix chains (`a + b + c ...`) and else-if
chains are parsed with loops, so 10^5-long ones are fine; other nesting recurses (under
`run_deep`) and is a ParseError beyond MAX_DEPTH levels, or beyond MAX_BRACKETS open brackets,
which the lazy tokenizer rejects as it reads them. Names resolve through one dict with an undo
log per scope, so a lookup costs the same at any nesting depth: parsing is linear in the text. Every malformed input is a ParseError with
a 1-based line and column and a caret under the problem. notes/text-format.md has the grammar.
"""
from __future__ import annotations

import json
import re

from relayish.errors import ParseError, RelayishError
from relayish.ir.expr import (Call, Constructor, GlobalVar, Let, RefRead, RefWrite, Tuple,
                              TupleGetItem, Var)
from relayish.ir.types import GlobalTypeVar
from relayish.ir.op import Op
from relayish.ir.text.lexer import Source, Tokens
from relayish.ir.text.parse_core import POSITIONS
from relayish.ir.text.parse_forms import KEYWORD_PARSERS, FormSyntax
from relayish.ir.text.literals import SPECIAL_FLOAT
# infix operators: symbol -> precedence and op; the printer parenthesizes by the same table
from relayish.ir.text.operators import BY_SYMBOL as BINARY
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


class _Parser(FormSyntax):
    # ---- modules -----------------------------------------------------------------------------
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
        defs, items = [], []        # items: ("type", name, end offset) / ("def", start) in order
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
                defs.append(start)
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

    # ---- blocks ------------------------------------------------------------------------------
    def braced_body(self):
        self.expect("{", "'{'")
        body = self.block()
        self.expect("}", "'}' or ';'")
        return body

    def block(self):
        """`let %x = e; e2; ...; tail` with a loop: 10^5 bindings parse without recursion."""
        scopes = self.scopes
        scopes.open()
        bindings = []
        while True:
            tok = self.tok
            if tok[0] == "ident" and tok[1] == "let":
                comments = self.take_comments(tok[2])
                self.advance()
                if self.tok[0] != "local":
                    raise self.error(f"expected a variable (%name) after 'let', found {self.describe()}")
                name = self.advance()[1][1:]
                var = Var(name, self.annotation())
                self.keep_comments(var, comments)
                self.expect("=", "'='")
                if self.at("fn"):
                    scopes.bind(name, var)     # `let %f = fn ...` may call itself
                value = self.expr()
                self.expect(";", "';' after the let binding")
                scopes.bind(name, var)
                bindings.append((var, value))
            elif tok[0] == "ident" and tok[1] == "free_var":
                self.free_var()
            elif tok[0] == "local" and self.peek()[0] == "punct" and self.peek()[1] == "=":
                self.advance()
                self.advance()
                value = self.expr()
                self.expect(";", "';' after the binding")
                scopes.bind(tok[1][1:], value)    # a graph binding names a shared expression
            else:
                comments = self.take_comments(tok[2])
                value = self.expr()
                if self.at(";"):
                    self.advance()
                    var = Var("_")
                    self.keep_comments(var, comments)
                    bindings.append((var, value))
                    continue
                body = value
                break
        scopes.close()
        for var, value in reversed(bindings):
            body = Let(var, value, body)
        if self.toks.comments is not None:
            # comments before the tail, and those after it up to the closing brace
            self.keep_comments(("tail", body), comments)
            self.keep_comments(("end", body), self.take_comments(self.tok[2]))
        return body

    def free_var(self):
        """`free_var %x: T;` declares the free variable %x (Relay's form; the printer writes one
        for each free variable). A name that parse_expr's free_vars holds means that Var."""
        self.advance()
        if self.tok[0] != "local":
            raise self.error(f"expected a variable (%name) after 'free_var', found {self.describe()}")
        tok = self.advance()
        name = tok[1][1:]
        annotation = self.annotation()
        self.expect(";", "';' after the free_var declaration")
        if name in self.declared:
            raise self.error(f"free variable {tok[1]} is declared twice", tok)
        self.declared.add(name)
        var = self.given_free.get(name)
        if var is None:
            var = Var(name, annotation)
        elif not _same_annotation(var.type_annotation, annotation):
            def text(t):
                return "no annotation" if t is None else str(t)
            raise self.error(f"free variable {tok[1]} is declared with {text(annotation)}, but the "
                             f"one given in free_vars has {text(var.type_annotation)}", tok)
        self.free[name] = var

    # ---- expressions -------------------------------------------------------------------------
    def single_expr(self):
        self.header()
        e = self.block()
        if self.tok[0] != "eof":
            raise self.error(f"unexpected {self.describe()} after the expression")
        return e

    def expr(self, min_prec=1):
        self.enter()
        start = self.tok
        lhs = self.unary()
        self.mark(lhs, start)
        while True:
            tok = self.tok
            info = BINARY.get(tok[1]) if tok[0] == "punct" else None
            if info is None or info.prec < min_prec:
                break
            self.advance()
            rhs = self.expr(info.prec + 1)      # so each level reads left to right
            lhs = (RefWrite(lhs, rhs) if info.op is None
                   else self.op_call(info.op, [lhs, rhs], {}, tok))
            self.mark(lhs, start)
        self.depth -= 1
        return lhs

    def unary(self):
        tok = self.tok
        if tok[0] == "punct" and tok[1] == "-":
            # `-1f`, and as Relay reads it, `--10` (10) and `---10` (-10): minus signs written
            # together, touching a number, make one literal
            run, nxt, prev = 1, self.peek(), tok
            while nxt[2] == prev[3] and nxt[0] == "punct" and nxt[1] == "-":
                run += 1
                prev, nxt = nxt, self.peek(run)
            if nxt[2] == prev[3] and (nxt[0] == "number" or
                                      (nxt[0] == "ident" and SPECIAL_FLOAT.fullmatch(nxt[1]))):
                for _ in range(run):
                    self.advance()
                return self.postfix(self.literal(negative=run % 2 == 1))
            self.advance()
            self.enter()
            operand = self.unary()
            self.depth -= 1
            return self.op_call("negative", [operand], {}, tok)
        if tok[0] == "punct" and tok[1] == "!":
            self.advance()
            self.enter()
            operand = self.unary()
            self.depth -= 1
            return RefRead(operand)
        return self.postfix(self.primary())

    def postfix(self, e):
        e = self._postfix(e)
        if type(e) is Constructor and not e.inputs:
            # a nullary constructor not called is its value: `Cons(%x, Nil)` is Nil() as in Relay
            # (structural equality takes a bare nullary constructor for that call)
            return Call(e, [])
        return e

    def _postfix(self, e):
        while True:
            tok = self.tok
            if tok[0] != "punct":
                return e
            if tok[1] == "(":
                args, attrs = self.call_args()
                if isinstance(e, Op):
                    e = self.op_call(e, args, attrs, tok)
                else:
                    e = Call(e, args, attrs)
            elif tok[1] == ".":
                self.advance()
                index = self.tok
                if index[0] != "number" or not re.fullmatch(r"[0-9]+(\.[0-9]+)?", index[1]):
                    raise self.error(f"expected a tuple index after '.', found {self.describe()}")
                self.advance()
                for part in index[1].split("."):      # `%t.0.1` lexes as %t . 0.1
                    e = TupleGetItem(e, self.small_int(part, index))
            else:
                return e

    def op_call(self, op, args, attrs, tok):
        from relayish.ir.op import get_op, make_call
        try:
            if isinstance(op, str):
                op = get_op(op)
            if not attrs and op.normalize_attrs is None and op.num_inputs == len(args):
                return Call(op, args, dict(op.attr_defaults))     # what make_call would build
            return make_call(op, args, attrs)
        except Exception as exc:  # noqa: BLE001 - an op's attribute normalizer may raise anything
            raise self.error(str(exc), tok) from None

    def call_args(self):
        self.expect("(")
        args, attrs = [], {}
        while not self.at(")"):
            nxt = self.peek()
            if self.tok[0] == "ident" and nxt[0] == "punct" and nxt[1] == "=":
                key = self.advance()[1]
                self.advance()
                if key in attrs:
                    raise self.error(f"attribute {key} is given twice")
                attrs[key] = self.attr_value()
            else:
                if attrs:
                    raise self.error("positional arguments must come before keyword attributes")
                args.append(self.expr())
            if not self.at(")"):
                self.expect(",", "',' or ')'")
        self.advance()
        return args, attrs

    def primary(self):
        tok = self.tok
        kind, text = tok[0], tok[1]
        if kind == "local":
            self.advance()
            return self.lookup(text[1:], tok)
        if kind == "global":
            self.advance()
            return self.global_var(self.global_name(tok), tok)
        if kind == "number":
            return self.literal()
        if kind == "punct":
            if text == "(":
                return self.paren()
            if text == "{":
                self.advance()
                body = self.block()
                self.expect("}", "'}' or ';'")
                return body
            raise self.error(f"expected an expression, found {self.describe()}")
        if kind == "ident":
            method = KEYWORD_PARSERS.get(text)
            if method is not None:
                return method(self)
            if SPECIAL_FLOAT.fullmatch(text):
                return self.literal()
            self.advance()
            ctor = self.mod._constructors.get(text) if hasattr(self.mod, "_constructors") else None
            if ctor is not None:
                return ctor
            from relayish.ir.op import _REGISTRY
            op = _REGISTRY.get(text)
            if op is not None:
                return op
            raise self.error(f"unknown operator or constructor {text!r}", tok)
        if kind == "string":
            raise self.error("a string is not an expression (strings are attribute values)")
        raise self.error(f"expected an expression, found {self.describe()}")

    def lookup(self, name, tok):
        e = self.scopes.get(name)
        if e is not None:
            return e
        var = self.free.get(name)
        if var is not None:
            return var
        # never a silent free variable: `%x` used outside the let that binds it is a mistake
        hint = "" if self.module_mode else " (declare a free variable with `free_var %" + \
            name + ": type;`, or pass it in parse_expr's free_vars)"
        raise self.error(f"unbound variable %{name}{hint}", tok)

    def global_name(self, tok):
        text = tok[1][1:]
        if not text.startswith('"'):
            return text
        try:
            return json.loads(text)
        except ValueError:
            raise self.error(f"bad global name {tok[1]}", tok) from None

    def global_var(self, name, tok):
        gv = self.globals.get(name)
        if gv is None:
            if self.module_mode:
                self.global_uses.setdefault(name, tok[2])
            elif name in self.mod:
                gv = self.mod.get_global_var(name)
            if gv is None:
                gv = GlobalVar(name)
            self.globals[name] = gv
        return gv

    def paren(self):
        self.advance()
        if self.at(")"):
            self.advance()
            return Tuple([])
        first = self.expr()
        if self.at(")"):
            self.advance()
            return first
        fields = [first]
        while self.at(","):
            self.advance()
            if self.at(")"):
                break
            fields.append(self.expr())
        self.expect(")", "',' or ')'")
        return Tuple(fields)

def _same_annotation(a, b):
    from relayish.ir.structural import types_equal
    return types_equal(a, b)


