"""The keyword forms of expressions: functions, conditionals, matches and references.

    fn [a, ...](%x: T, ...) -> T { body }       (also what follows `def @name`)
    if (c) { a } else if (d) { b } else { e }   an else-if chain is read with a loop
    match (e) { Ctor(%h, _) => e1, (p, q) => e2 }   match? (e) { ... } may be incomplete
    let %x = e; body         ref(e)  ref_read(e)  ref_write(r, v)

KEYWORD_PARSERS maps each keyword that starts an expression to the method that reads it
(`else`, `def` and `type` there are errors: they cannot start one). The forms read their
subexpressions through ExprSyntax's methods (`expr`, `block`, `braced_body`, `paren`), which the
assembled parser provides.
"""
from __future__ import annotations

from relayish.ir.expr import (Clause, Function, If, Match, PatternConstructor, PatternTuple,
                              PatternVar, PatternWildcard, RefCreate, RefRead, RefWrite, Var)
from relayish.ir.text.parse_constants import ConstantSyntax


class FormSyntax(ConstantSyntax):
    """The keyword forms; `kw_<keyword>` reads the form whose keyword is the current token."""

    def function_rest(self):
        """What follows `def @name` or `fn`: [type params] (params) [-> type] { body }."""
        type_params = self.type_params()
        self.type_scopes.open({p.name: p for p in type_params})
        params = self.params()
        ret_type = None
        if self.at("->"):
            self.advance()
            ret_type = self.whole_type()
        body = self.braced_body()
        self.scopes.close()
        self.type_scopes.close()
        return Function(params, body, ret_type, type_params)

    def params(self):
        """`(%x: T, %y)`; opens the scope of the parameters (the caller pops it)."""
        self.expect("(")
        scope, params = {}, []
        while not self.at(")"):
            if self.tok[0] != "local":
                raise self.error(f"expected a parameter (%name), found {self.describe()}")
            tok = self.advance()
            if tok[1][1:] in scope:
                raise self.error(f"parameter {tok[1]} appears twice", tok)
            var = Var(tok[1][1:], self.annotation())
            scope[tok[1][1:]] = var
            params.append(var)
            if not self.at(")"):
                self.expect(",", "',' or ')'")
        self.advance()
        self.scopes.open(scope)
        return params

    def kw_fn(self):
        self.advance()
        return self.function_rest()

    def kw_if(self):
        """`if (c) { a } else if (d) { b } else { c }`: an else-if chain is a loop."""
        arms = []
        while True:
            self.advance()
            self.expect("(", "'(' after 'if'")
            cond = self.expr()
            self.expect(")")
            arms.append((cond, self.braced_body()))
            self.expect("else", "'else'")
            if not self.at("if"):
                break
        other = self.braced_body()
        for cond, then in reversed(arms):
            other = If(cond, then, other)
        return other

    def kw_match(self):
        keyword = self.advance()
        complete = True
        if self.at("?") and self.tok[2] == keyword[3]:
            self.advance()
            complete = False
        if not self.at("("):
            raise self.error(f"expected '(' after 'match', found {self.describe()}")
        # `match (%a, %b) { (p, q) => ... }` matches a tuple, as Relay reads it (the scrutinee
        # is an atom: a parenthesized expression or a tuple); `match ((%a, %b))` is the same
        data = self.postfix(self.paren())
        self.expect("{")
        clauses = []
        while not self.at("}"):
            scope = {}
            comments = self.take_comments(self.tok[2])
            lhs = self.pattern(scope)
            self.expect("=>", "'=>'")
            self.scopes.open(scope)
            rhs = self.expr()
            self.scopes.close()
            clause = Clause(lhs, rhs)
            self.keep_comments(clause, comments)
            clauses.append(clause)
            if not self.at("}"):
                self.expect(",", "',' or '}'")
        self.advance()
        return Match(data, clauses, complete)

    def pattern(self, scope):
        self.enter()
        try:
            tok = self.tok
            if tok[0] == "ident" and tok[1] == "_":
                self.advance()
                return PatternWildcard()
            if tok[0] == "local":
                self.advance()
                name = tok[1][1:]
                if name in scope:
                    raise self.error(f"{tok[1]} appears twice in one pattern", tok)
                var = scope[name] = Var(name, self.annotation())
                return PatternVar(var)
            if tok[0] == "punct" and tok[1] == "(":
                self.advance()
                subs, trailing = [], False
                while not self.at(")"):
                    subs.append(self.pattern(scope))
                    trailing = False
                    if not self.at(")"):
                        self.expect(",", "',' or ')'")
                        trailing = True
                self.advance()
                if len(subs) == 1 and not trailing:
                    return subs[0]
                return PatternTuple(subs)
            if tok[0] == "ident":
                ctor = self.constructors.get(tok[1])
                if ctor is None:
                    raise self.error(f"unknown constructor {tok[1]!r} in a pattern")
                self.advance()
                subs = []
                if self.at("("):
                    self.advance()
                    while not self.at(")"):
                        subs.append(self.pattern(scope))
                        if not self.at(")"):
                            self.expect(",", "',' or ')'")
                    self.advance()
                return PatternConstructor(ctor, subs)
            raise self.error(f"expected a pattern, found {self.describe()}")
        finally:
            self.depth -= 1

    def kw_let(self):
        return self.block()

    def kw_ref(self):
        return RefCreate(*self.keyword_args(1))

    def kw_ref_read(self):
        return RefRead(*self.keyword_args(1))

    def kw_ref_write(self):
        return RefWrite(*self.keyword_args(2))

    def keyword_args(self, count):
        """`keyword(e1, ..., e_count)`: the keyword token is current; returns the expressions."""
        keyword = self.advance()[1]
        self.expect("(", f"'(' after '{keyword}'")
        args = [self.expr()]
        for _ in range(count - 1):
            self.expect(",", f"',' between the arguments of '{keyword}'")
            args.append(self.expr())
        self.expect(")")
        return args

    def kw_misplaced(self):
        raise self.error(f"{self.tok[1]!r} cannot start an expression")


KEYWORD_PARSERS = {
    "fn": FormSyntax.kw_fn, "if": FormSyntax.kw_if, "match": FormSyntax.kw_match,
    "let": FormSyntax.kw_let, "ref": FormSyntax.kw_ref, "ref_read": FormSyntax.kw_ref_read,
    "ref_write": FormSyntax.kw_ref_write, "const": ConstantSyntax.kw_const,
    "True": ConstantSyntax.kw_bool, "False": ConstantSyntax.kw_bool,
    "else": FormSyntax.kw_misplaced, "def": FormSyntax.kw_misplaced,
    "type": FormSyntax.kw_misplaced,
}
