"""Field declarations: what each field of an IR class holds, declared once (CPython's ASDL is
the model), and the generic walks that read them.

    node_field(kind, **attrs_kwargs)   an attrs field declared to hold `kind`
    fields_of(cls) -> ((name, kind), ...)
    iter_fields(node) -> (name, kind, value), ...
    child_fields(cls) -> ((name, kind), ...)      only the fields that hold child nodes
    children(node) -> [child nodes]               expressions, bound Vars, patterns, clauses
    map_children(node, fn, type_fn=None) -> node  rebuilt only when a child changed

The kinds: EXPR / EXPRS (child expressions), VAR / VARS (Vars the node binds; child
expressions too), PATTERN / PATTERNS, CLAUSES, TYPE / TYPES (types: a node's annotations, a
type's components), DATA (anything else: names, numbers, arrays, dicts, type binders).
Expression nodes (expr.py) and types (types.py) both declare their fields this way, so
`children`, `map_children`, ExprVisitor and ExprMutator, the printer, structural equality,
the analyses and types.map_type need no edit for a new class; only the passes that give it a
meaning learn about it. This module sits below expr.py and types.py and imports neither.
"""
from __future__ import annotations

import attrs

from relayish.errors import RelayishError

EXPR = "expr"           # a child expression
EXPRS = "exprs"         # a list of child expressions
VAR = "var"             # a Var the node binds (a child expression too: visitors walk it)
VARS = "vars"           # a list of Vars the node binds
PATTERN = "pattern"     # a child pattern
PATTERNS = "patterns"   # a list of child patterns
CLAUSES = "clauses"     # a list of match Clauses
TYPE = "type"           # a Type (or None where the field is optional)
TYPES = "types"         # a list of Types
DATA = "data"           # anything else: names, numbers, arrays, dicts, type binders

KINDS = frozenset((EXPR, EXPRS, VAR, VARS, PATTERN, PATTERNS, CLAUSES, TYPE, TYPES, DATA))
ONE_CHILD = frozenset((EXPR, VAR, PATTERN))
CHILD_LISTS = frozenset((EXPRS, VARS, PATTERNS, CLAUSES))


def node_field(kind, **kwargs):
    """An attrs field declared to hold `kind` (EXPR, EXPRS, ..., DATA); kwargs go to attrs."""
    return attrs.field(metadata={"kind": kind}, **kwargs)


_DECLARED: dict = {}    # class -> its declaration, read from its attrs fields once


def fields_of(cls) -> tuple:
    """`((name, kind), ...)`: the constructor fields of a node or type class, in order. A field
    that declares no kind is DATA (so an attrs node class written elsewhere, like op.py's Op, is
    a leaf unless it says otherwise); fields with init=False (the checked type, memos) are not
    part of the node."""
    declared = _DECLARED.get(cls)
    if declared is None:
        if not attrs.has(cls):
            raise RelayishError(f"{cls.__name__} is not an attrs class: its fields are not "
                                "declared, so it cannot be walked")
        declared = tuple((a.name, a.metadata.get("kind", DATA)) for a in attrs.fields(cls)
                         if a.init)
        for name, kind in declared:
            if kind not in KINDS:
                raise RelayishError(f"{cls.__name__}.{name} declares the unknown field kind "
                                    f"{kind!r}; the kinds are {', '.join(sorted(KINDS))}")
        _DECLARED[cls] = declared
    return declared


def iter_fields(node):
    """`(name, kind, value)` for each declared field of `node`, in order."""
    for name, kind in fields_of(type(node)):
        yield name, kind, getattr(node, name)


def child_fields(cls) -> tuple:
    """`((name, kind), ...)`: the fields of a node class that hold child nodes (kinds
    ONE_CHILD and CHILD_LISTS), in order."""
    found = _CHILD_FIELDS.get(cls)
    if found is None:
        found = _CHILD_FIELDS[cls] = tuple(
            (name, kind) for name, kind in fields_of(cls)
            if kind in ONE_CHILD or kind in CHILD_LISTS)
    return found


_CHILD_FIELDS: dict = {}


def children(node) -> list:
    """The nodes directly inside `node`, in field order: child expressions, bound Vars,
    patterns and clauses (types and plain data are not children)."""
    out = []
    for name, kind in child_fields(type(node)):
        if kind in ONE_CHILD:
            out.append(getattr(node, name))
        else:
            out.extend(getattr(node, name))
    return out


def map_children(node, fn, type_fn=None):
    """`node` with `fn` applied to each child node (and `type_fn`, if given, to each type in a
    TYPE or TYPES field); the same node when nothing changed (compared by identity), else a new
    node of the same class built from the new fields (so its field checks run again)."""
    values, changed = [], False
    for name, kind in fields_of(type(node)):
        old = getattr(node, name)
        new = old
        if kind in ONE_CHILD:
            new = fn(old)
        elif kind in CHILD_LISTS:
            new = _mapped(old, fn)
        elif type_fn is not None and kind == TYPE and old is not None:
            new = type_fn(old)
        elif type_fn is not None and kind == TYPES:
            new = _mapped(old, type_fn)
        changed = changed or new is not old
        values.append(new)
    return type(node)(*values) if changed else node


def _mapped(items, fn):
    """[fn(x) for x in items], or `items` itself when fn returned every item unchanged."""
    new = [fn(x) for x in items]
    return items if all(a is b for a, b in zip(new, items)) else new
