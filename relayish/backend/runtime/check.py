"""Type checking for the backends: once per program, one rule, errors propagate.

    mod, main = checked(target, mod=None)

`target` is a Module (main is its @main), a Function (main is the Function itself; its globals
resolve in `mod`, which may be None) or any other expression (main is a new parameterless
Function returning it). The returned `main` and every node under it carry `_checked_type`.

The rule: a program is type-checked unless it already is, i.e. unless the Function (or every
function of the Module) carries a checked type: `rl.infer_type` marks what it checked, so a
program built by AD or checked by the user is not checked again, while a module with a
function added or replaced since is. A TypeCheckError is the user's error; any other exception
out of the type checker is a bug of relayish and surfaces as it is (no fallback to the
parameters' annotations).
"""
from __future__ import annotations

from relayish.errors import EvaluationError, RelayishError
from relayish.ir.expr import Expr, Function
from relayish.ir.module import Module

__all__ = ["checked", "param_type"]


def checked(target, mod=None, who="evaluate", error=EvaluationError):
    """(mod, main) for `target`, type-checked (see the module docstring).

    `who` names the caller in the message for a target that is not a program; `error` is the
    class raised for a Module without @main (each backend reports it as its own kind of fault).

    >>> x = rl.var("x", shape=(2,))
    >>> mod, main = checked(rl.Function([x], x + x))
    >>> main.checked_type    # fn (Tensor[(2), float32]) -> Tensor[(2), float32]
    """
    from relayish.ir.typecheck import infer_type
    if mod is not None and not isinstance(mod, Module):
        raise RelayishError(f"{who}: mod= must be a Module, got {type(mod).__name__}")
    if isinstance(target, Module):
        if "main" not in target:
            raise error("the module has no @main to run")
        if not all(_is_checked(f) for f in target.functions.values()):
            infer_type(target)
        return target, target["main"]
    if isinstance(target, Function):
        if not _is_checked(target):
            infer_type(target, mod)
        return mod, target
    if isinstance(target, Expr):
        main = Function([], target)
        infer_type(main, mod)
        return mod, main
    raise RelayishError(f"{who} takes a Function, Module or expression, "
                        f"got {type(target).__name__}")


def _is_checked(func):
    return getattr(func, "_checked_type", None) is not None


def param_type(p):
    """The type a backend checks arguments of parameter `p` against: its checked type (after
    `checked`, always there), else its annotation (None when it has neither)."""
    return getattr(p, "_checked_type", None) or p.type_annotation
