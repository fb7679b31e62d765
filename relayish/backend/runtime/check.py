"""Type checking for the backends: once per program, one rule, errors propagate.

    mod, main = checked(target, mod=None)

`target` is a Module (main is its @main), a Function (main is the Function itself; its globals
resolve in `mod`, which may be None) or any other expression (main is a new parameterless
Function returning it). The returned `main` and every node under it carry `_checked_type`.

The rule: a program is type-checked unless it already is *for the globals it will call*.

- A Function with no module: unless it carries a checked type (`rl.infer_type` marks what it
  checked, so a program built by AD or checked by the user is not checked again).
- A Function with `mod=`: unless `checked` itself checked it under this very module, with the
  same functions. A GlobalVar it calls may have another type in another module (or after
  `mod[g] = ...`): evaluating under m2 a Function checked under m1 ran an ill-typed program.
  The first evaluation under a module checks; the next ones find the record.
- A Module: unless every function carries a checked type and none was checked by `checked`
  under another module, or under this one before a function changed (a module with a function
  added or replaced since is checked again). A module checked by `rl.infer_type` or built by AD
  is not checked again: the common path is one dict lookup per function.

A TypeCheckError is the user's error; any other exception out of the type checker is a bug of
relayish and surfaces as it is (no fallback to the parameters' annotations).
"""
from __future__ import annotations

import weakref

from relayish.errors import EvaluationError, RelayishError
from relayish.ir.expr import Expr, Function
from relayish.ir.identity import WeakIdentityMap
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
        funcs = target.functions.values()
        if not all(_is_checked(f) for f in funcs) or (
                any(f in _CHECKED_UNDER for f in funcs) and not _checked_under(funcs, target)):
            infer_type(target)
            _record(funcs, target)
        return target, target["main"]
    if isinstance(target, Function):
        if mod is None:
            # checked under a module, it calls globals: checking says none is there
            if not _is_checked(target) or target in _CHECKED_UNDER:
                infer_type(target, mod)
                _CHECKED_UNDER.pop(target, None)
        elif not (_is_checked(target) and _checked_under((target,), mod)):
            infer_type(target, mod)
            _record((target,), mod)
        return mod, target
    if isinstance(target, Expr):
        main = Function([], target)
        infer_type(main, mod)
        return mod, main
    raise RelayishError(f"{who} takes a Function, Module or expression, "
                        f"got {type(target).__name__}")


def _is_checked(func):
    return getattr(func, "_checked_type", None) is not None


# Function -> (weakref to the module `checked` checked it under, that module's functions then).
# Weak both ways: the record neither keeps a program nor its module alive.
_CHECKED_UNDER = WeakIdentityMap()      # by identity: `==` on expressions builds an op


def _snapshot(mod):
    return tuple((gv.name_hint, weakref.ref(f)) for gv, f in mod.functions.items())


def _same_snapshot(a, b) -> bool:
    """The same functions under the same names (compared by identity: weak references compare
    their referents with `==`, which on expressions builds an op)."""
    return len(a) == len(b) and all(na == nb and ra() is rb() and ra() is not None
                                    for (na, ra), (nb, rb) in zip(a, b))


def _checked_under(funcs, mod) -> bool:
    """Whether `checked` checked each of funcs under `mod` as its functions are now."""
    snapshot = None
    for f in funcs:
        record = _CHECKED_UNDER.get(f)
        if record is None or record[0]() is not mod:
            return False
        if snapshot is None:
            snapshot = _snapshot(mod)
        if not _same_snapshot(record[1], snapshot):
            return False
    return True


def _record(funcs, mod):
    ref, snapshot = weakref.ref(mod), _snapshot(mod)
    for f in funcs:
        _CHECKED_UNDER[f] = (ref, snapshot)


def param_type(p):
    """The type a backend checks arguments of parameter `p` against: its checked type (after
    `checked`, always there), else its annotation (None when it has neither)."""
    return getattr(p, "_checked_type", None) or p.type_annotation
