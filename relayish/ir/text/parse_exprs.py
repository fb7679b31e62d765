"""Expressions: blocks, infix and prefix operators, calls, projections and names.

    block ::= (let %x[: T] = e; | e; | %N = e; | free_var %x: T;)* e
    e     ::= e op e (precedence climbing: ExprSyntax.expr) | -e | !e | e(args, attr=v) | e.0
            | %x | @f | Ctor | op(...) | op (a value: its eta-expansion) | (e) | (e, ...)
            | { block } | literal | keyword form

Blocks, left-leaning infix chains (`a + b + c ...`) and a run of minus signs written against a
number (`---10`) are loops, so 10^5-long ones cost no recursion; other nesting recurses (under
run_deep) and counts toward MAX_DEPTH. The operator tables of the Op records are read in two
places: operators.BY_SYMBOL (infix) in `expr`, operators.PREFIX_BY_SYMBOL in `unary`.
`%N = e;` (a graph binding) names a shared subexpression: later uses are that same node.
"""
from __future__ import annotations

import json
import re

from relayish.errors import RelayishError, did_you_mean
from relayish.ir.expr import (Call, Constructor, Function, GlobalVar, Let, RefRead, RefWrite,
                              Tuple, TupleGetItem, Var)
from relayish.ir.op import Op, get_op, list_ops, make_call
from relayish.ir.text.literals import SPECIAL_FLOAT
# infix operators: symbol -> precedence and op; the printer parenthesizes by the same table
from relayish.ir.text.operators import BY_SYMBOL as BINARY
from relayish.ir.text.operators import PREFIX_BY_SYMBOL as PREFIX
from relayish.ir.text.parse_forms import KEYWORD_PARSERS, FormSyntax


class ExprSyntax(FormSyntax):
    """Expressions and blocks; the keyword forms (FormSyntax) are read through KEYWORD_PARSERS."""

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
        if tok[0] == "punct" and tok[1] in PREFIX:     # `-e`: the op whose record says prefix="-"
            # `-1f`, and as Relay reads it, `--10` (10) and `---10` (-10): minus signs written
            # together, touching a number, make one literal
            run, nxt, prev = 1, self.peek(), tok
            while nxt[2] == prev[3] and nxt[0] == "punct" and nxt[1] == "-":
                run += 1
                prev, nxt = nxt, self.peek(run)
            if tok[1] == "-" and nxt[2] == prev[3] and (
                    nxt[0] == "number" or (nxt[0] == "ident" and SPECIAL_FLOAT.fullmatch(nxt[1]))):
                for _ in range(run):
                    self.advance()
                return self.postfix(self.literal(negative=run % 2 == 1))
            self.advance()
            self.enter()
            operand = self.unary()
            self.depth -= 1
            return self.op_call(PREFIX[tok[1]], [operand], {}, tok)
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
            ctor = self.constructors.get(text)
            if ctor is not None:
                return ctor
            try:
                op = get_op(text)
            except RelayishError:
                hint = did_you_mean(text, [*list_ops(), *self.constructors])
                raise self.error(f"unknown operator or constructor {text!r}{hint}", tok) \
                    from None
            if not self.at("("):
                return self.op_value(op, tok)
            return op
        if kind == "string":
            raise self.error("a string is not an expression (strings are attribute values)")
        raise self.error(f"expected an expression, found {self.describe()}")

    def op_value(self, op, tok):
        """A bare op name where a value is wanted (`@map(exp, %l)`, `let %f = add;`): its
        eta-expansion `fn (%a, %b) { add(%a, %b) }` (Relay passes ops as values; a closure of
        the op needs no type of its own for the op: the checker types the call inside). A
        variadic op has no such function."""
        if op.num_inputs < 0:
            raise self.error(f"operator '{op.name}' takes any number of arguments, so it is no "
                             f"function value: write the closure, fn (%a, ...) "
                             f"{{ {op.name}(%a, ...) }}", tok)
        params = [Var(_param_name(k)) for k in range(op.num_inputs)]
        return self.build(Function, tok, params, self.op_call(op, list(params), {}, tok))

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
        close = did_you_mean(name, [*self.scopes.env, *self.free], "%")
        raise self.error(f"unbound variable %{name}{close or hint}", tok)

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


def _param_name(k) -> str:
    return chr(ord("a") + k) if k < 26 else f"a{k}"


def _same_annotation(a, b):
    from relayish.ir.structural import types_equal
    return types_equal(a, b)

