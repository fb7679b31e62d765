"""ScopeBuilder: write let-chains and if/else in Python statement style.

    sb = rl.ScopeBuilder()
    y = sb.let("y", x * x)
    with sb.if_scope(y > 1.0):
        sb.ret(y)
    with sb.else_scope():
        sb.ret(-y)
    body = sb.get()
"""
from __future__ import annotations

from contextlib import contextmanager

from relayish.errors import RelayishError
from relayish.ir.expr import Expr, If, Let, Var, _shown, as_expr, describe
from relayish.ir.types import Type


class _Scope:
    def __init__(self):
        self.bindings = []      # (Var, Expr)
        self.ret = None


class ScopeBuilder:
    def __init__(self):
        self._scopes = [_Scope()]
        self._pending_if = None   # (cond, then_scope) between if_scope and else_scope

    def __repr__(self):
        return (f"<ScopeBuilder: {len(self._scope.bindings)} binding(s) in the innermost of "
                f"{len(self._scopes)} open scope(s)>")

    @property
    def _scope(self):
        return self._scopes[-1]

    def let(self, var, value) -> Var:
        """Bind `value` to a new Var (named `var`, or `(name, type)`, or a Var) and return it."""
        self._check_open("let")
        if isinstance(var, tuple):
            if len(var) != 2:
                raise RelayishError(f"sb.let((name, type), value) takes a pair, got a tuple of "
                                    f"{len(var)} item(s)")
            name, ty = var
            if not isinstance(ty, Type):
                raise RelayishError(f"sb.let(({_shown(name)}, type), value): {describe(ty)} "
                                    "is not a Type")
            var = Var(name, ty)
        elif isinstance(var, str):
            var = Var(var)
        elif not isinstance(var, Var):
            raise RelayishError(f"sb.let takes a name, (name, type) or Var, got {describe(var)}")
        value = _value(value, f"sb.let({_name(var)}, value)")
        if var.type_annotation is None and var._value_hint is None:
            var._value_hint = value      # so `var > 1.0` gets value's dtype
        self._scope.bindings.append((var, value))
        return var

    def ret(self, value):
        """The result of the current scope; nothing may follow it in that scope."""
        self._check_open("ret")
        self._scope.ret = _value(value, "sb.ret(value)")

    @contextmanager
    def if_scope(self, cond):
        self._check_open("if_scope")
        if self._pending_if is not None:
            raise RelayishError("if_scope needs its else_scope before another if_scope")
        self._scopes.append(_Scope())
        yield
        then = self._scopes.pop()
        if then.ret is None:
            raise RelayishError("the if_scope ended without sb.ret(...)")
        self._pending_if = (_value(cond, "sb.if_scope(cond)"), then)

    @contextmanager
    def else_scope(self):
        if self._pending_if is None:
            raise RelayishError("else_scope must directly follow an if_scope")
        cond, then = self._pending_if
        self._pending_if = None
        self._scopes.append(_Scope())
        yield
        other = self._scopes.pop()
        if other.ret is None:
            raise RelayishError("the else_scope ended without sb.ret(...)")
        self._scope.ret = If(cond, _close(then), _close(other))

    def get(self) -> Expr:
        """The built expression: the let-chain around the returned value."""
        if self._pending_if is not None:
            raise RelayishError("an if_scope has no else_scope")
        if len(self._scopes) != 1:
            raise RelayishError("sb.get() called inside an open if/else scope")
        if self._scope.ret is None:
            raise RelayishError("sb.get() before sb.ret(...): the scope has no result")
        return _close(self._scope)

    def _check_open(self, what):
        if self._pending_if is not None:
            raise RelayishError(f"sb.{what} after an if_scope: write its else_scope first")
        if self._scope.ret is not None:
            raise RelayishError(f"sb.{what} after sb.ret(...): the scope already has its result")


def _close(scope) -> Expr:
    body = scope.ret
    for var, value in reversed(scope.bindings):
        body = Let(var, value, body)
    return body


def _value(value, where) -> Expr:
    """An expression for `value` (Python numbers become constants); a RelayishError saying where."""
    try:
        return as_expr(value)
    except RelayishError as err:
        raise RelayishError(f"{where}: {err}") from None


def _name(var) -> str:
    return repr(var.name_hint) if isinstance(var.name_hint, str) else "var"
