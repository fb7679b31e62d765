"""How names get values: pattern matching and let-bindings, the same for every backend.

    same_constructor(c, ctor)          whether a value built by constructor c matches a
                                       pattern naming ctor (the same object, or the same name
                                       and tag: a module re-parsed or copied has new objects)
    compile_pattern(p, bind)           a matcher `m(value, slots) -> bool` that stores the
                                       pattern's variables into slots (`bind(var) -> slot`
                                       chooses them); None for a pattern that always matches
                                       and binds nothing (`_`)
    bind_pattern(p, value, out, resolve=None)
                                       match one value now, binding Vars into the dict `out`;
                                       iterative; `resolve(v)` may replace a value before its
                                       structure is inspected (a tracer's join, say)
    let_chain(e)                       ([(var, value), ...], body) of a chain of Lets, by a loop
    is_recursive(var, value, free_vars)
                                       whether `let var = value` is a recursive function
                                       binding: value is a Function that captures var, so
                                       its closure must exist before its environment is read

Patterns are type-checked before a backend sees them; a pattern whose structure disagrees
with the value (a tuple pattern against a non-tuple) or a constructor pattern with the wrong
number of sub-patterns is an EvaluationError naming the pattern.
"""
from __future__ import annotations

from relayish.errors import EvaluationError
from relayish.ir.expr import (Function, Let, PatternConstructor, PatternTuple, PatternVar,
                              PatternWildcard)
from relayish.backend.values import ConstructorValue
from relayish.backend.runtime.describe import node_text, value_type_text

__all__ = ["same_constructor", "compile_pattern", "bind_pattern", "let_chain", "is_recursive"]


def same_constructor(c, ctor):
    return c is ctor or (c.tag == ctor.tag and c.name_hint == ctor.name_hint)


def _check_arity(p):
    ctor = p.constructor
    if len(p.patterns) != len(ctor.inputs):
        raise EvaluationError(f"the pattern for {ctor.name_hint} has {len(p.patterns)} "
                              f"sub-pattern(s) but the constructor has {len(ctor.inputs)} "
                              f"field(s): {node_text(p)}")


def compile_pattern(p, bind):
    """A matcher `m(value, slots) -> bool` that stores the pattern's variables (None: always).

    Recursive in the pattern's nesting (patterns are written by hand and shallow; a deep one
    is run under run_deep by the compiler that calls this)."""
    if isinstance(p, PatternWildcard):
        return None
    if isinstance(p, PatternVar):
        slot = bind(p.var)

        def match_var(v, s):
            s[slot] = v
            return True
        return match_var
    if isinstance(p, PatternConstructor):
        ctor = p.constructor
        _check_arity(p)
        subs = [(i, compile_pattern(sub, bind)) for i, sub in enumerate(p.patterns)]
        subs = [(i, m) for i, m in subs if m is not None]
        tag = ctor.tag

        def match_ctor(v, s):
            c = v.constructor
            if c is not ctor and (c.tag != tag or not same_constructor(c, ctor)):
                return False
            fields = v.fields
            for i, m in subs:
                if not m(fields[i], s):
                    return False
            return True
        return match_ctor
    if isinstance(p, PatternTuple):
        subs = [(i, compile_pattern(sub, bind)) for i, sub in enumerate(p.patterns)]
        subs = [(i, m) for i, m in subs if m is not None]
        n = len(p.patterns)

        def match_tuple(v, s):
            if len(v) != n:
                return False
            for i, m in subs:
                if not m(v[i], s):
                    return False
            return True
        return match_tuple
    raise EvaluationError(f"unknown pattern {type(p).__name__}")


def bind_pattern(p, value, out, resolve=None):
    """Whether `value` matches `p`; binds the pattern's Vars into `out` (var -> value) as it
    goes (on a failed match `out` may hold some of them: use a fresh dict per clause)."""
    work = [(p, value)]
    while work:
        p, v = work.pop()
        if isinstance(p, PatternWildcard):
            continue
        if isinstance(p, PatternVar):
            out[p.var] = v
            continue
        if resolve is not None:
            v = resolve(v)
        if isinstance(p, PatternTuple):
            if not isinstance(v, tuple) or len(v) != len(p.patterns):
                raise EvaluationError(f"the tuple pattern {node_text(p)} cannot match "
                                      f"{value_type_text(v)}")
            work.extend(reversed(list(zip(p.patterns, v))))     # left to right
        elif isinstance(p, PatternConstructor):
            if not isinstance(v, ConstructorValue):
                raise EvaluationError(f"the constructor pattern {node_text(p)} cannot match "
                                      f"{value_type_text(v)}")
            _check_arity(p)
            if not same_constructor(v.constructor, p.constructor):
                return False
            work.extend(reversed(list(zip(p.patterns, v.fields))))
        else:
            raise EvaluationError(f"unknown pattern {type(p).__name__}")
    return True


def let_chain(e):
    """The bindings of a chain of Lets and the expression after them, without recursion."""
    bindings = []
    while isinstance(e, Let):
        bindings.append((e.var, e.value))
        e = e.body
    return bindings, e


def is_recursive(var, value, free_vars):
    """Whether `let var = value` binds a function that refers to itself. `free_vars` is an
    `relayish.ir.analysis.FreeVars` table (one per program: a walk per function literal would
    be quadratic in the nesting depth of closures)."""
    return isinstance(value, Function) and any(v is var for v in free_vars(value))
