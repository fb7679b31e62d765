"""Structural (alpha) equality of expressions, modules, types and patterns.

    structural_equal(a, b, map_free_vars=False) -> bool
    assert_structural_equal(a, b, map_free_vars=False)   raises StructuralMismatch with a diff

Bound Vars are matched by binding position (a Let, a Function parameter or a pattern binds its
Var to the Var at the same place on the other side, and their type annotations must be equal);
free Vars are equal only when they are the same Var, unless map_free_vars, which pairs them up
one-to-one at first use. GlobalVars compare by name, Ops by name, Constructors by name and type.
Constants are equal when dtype, shape and bytes agree (so NaNs compare equal to the same NaN).
Call attributes compare by value (a list equals the tuple of the same items). Types are values
(`==`). Modules are equal with the same global names bound to equal functions and the same type
definitions. The walk uses an explicit stack: 10^5-long let-chains are fine.
"""
from __future__ import annotations

import numpy as np

from relayish.errors import RelayishError
from relayish.ir.expr import (Call, Clause, Constant, Constructor, Expr, Function, GlobalVar, If,
                              Let, Match, Pattern, PatternConstructor, PatternTuple, PatternVar,
                              PatternWildcard, RefCreate, RefRead, RefWrite, Tuple, TupleGetItem,
                              Var)
from relayish.ir.types import FuncType, RefType, TupleType, Type, TypeCall, TypeData


class StructuralMismatch(RelayishError, AssertionError):
    """Raised by assert_structural_equal: a RelayishError that pytest also reports as a failed assert.

    `.path` names where the two sides first differ; `.lhs`, `.rhs` are the differing pieces.
    """

    def __init__(self, message, path="", lhs=None, rhs=None):
        super().__init__(message)
        self.path, self.lhs, self.rhs = path, lhs, rhs


def structural_equal(a, b, map_free_vars=False) -> bool:
    """Whether `a` and `b` are the same program up to the names of bound variables.

        x, y = rl.var("x"), rl.var("y")
        rl.structural_equal(rl.Function([x], x + x), rl.Function([y], y + y))   # True
    """
    return _Comparer(map_free_vars).run(a, b) is None


def assert_structural_equal(a, b, map_free_vars=False):
    """Raise StructuralMismatch (a RelayishError and an AssertionError) showing the first
    difference: its path from the root and both sides as text."""
    mismatch = _Comparer(map_free_vars).run(a, b)
    if mismatch is None:
        return
    path, x, y, reason = mismatch
    message = (f"not structurally equal at {path or 'the root'}: {reason}\n"
               f"  lhs: {_text(x)}\n  rhs: {_text(y)}")
    raise StructuralMismatch(message, path, x, y)


def _text(node, limit=400):
    from relayish.ir.module import Module
    from relayish.ir.text.printer import astext
    if isinstance(node, (Expr, Pattern, Clause, Type, Module, TypeData)):
        try:
            text = astext(node)
        except RelayishError:
            text = repr(node)
    else:
        text = repr(node)
    text = text.strip()
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return text.replace("\n", "\n       ")


def _path_text(path):
    """Paths are linked lists (parent, step); consecutive let-body steps are counted, not listed."""
    steps = []
    while path is not None:
        path, step = path
        steps.append(step)
    out = []
    for step in reversed(steps):
        if step == ".body" and out and out[-1][0] == ".body":
            out[-1][1] += 1
        else:
            out.append([step, 1])
    return "".join(step * n if n <= 2 else f"{step}*{n}" for step, n in out)


class _Mismatch(Exception):
    def __init__(self, path, a, b, reason):
        super().__init__(reason)
        self.info = (path, a, b, reason)


class _Comparer:
    def __init__(self, map_free_vars):
        self.map_free_vars = map_free_vars
        self.lhs_to_rhs: dict[int, Var] = {}
        self.rhs_to_lhs: dict[int, Var] = {}
        self.seen: set = set()      # node pairs already compared (programs are DAGs)

    def run(self, a, b):
        from relayish.ir.module import Module
        try:
            if isinstance(a, Module) or isinstance(b, Module):
                self.modules(a, b)
            elif isinstance(a, TypeData) or isinstance(b, TypeData):
                self.type_data(a, b, None)
            elif isinstance(a, Type) or isinstance(b, Type):
                if not types_equal(a, b):
                    raise _Mismatch(None, a, b, "different types")
            else:
                self.walk([(a, b, None)])
        except _Mismatch as m:
            path, x, y, reason = m.info
            return _path_text(path), x, y, reason
        return None

    def modules(self, a, b):
        from relayish.ir.module import Module
        if not (isinstance(a, Module) and isinstance(b, Module)):
            raise _Mismatch(None, a, b, "a module compared with something else")
        types_a = {g.name: d for g, d in a.type_definitions.items()}
        types_b = {g.name: d for g, d in b.type_definitions.items()}
        if set(types_a) != set(types_b):
            raise _Mismatch(None, sorted(types_a), sorted(types_b), "different type definitions")
        for name, data in types_a.items():
            self.type_data(data, types_b[name], (None, f"type {name}"))
        funcs_a = {g.name_hint: f for g, f in a.functions.items()}
        funcs_b = {g.name_hint: f for g, f in b.functions.items()}
        if set(funcs_a) != set(funcs_b):
            only_a = sorted(set(funcs_a) - set(funcs_b))
            only_b = sorted(set(funcs_b) - set(funcs_a))
            raise _Mismatch(None, ["@" + n for n in only_a], ["@" + n for n in only_b],
                            "different global functions (listed: those only on one side)")
        self.walk([(funcs_a[n], funcs_b[n], (None, "@" + n)) for n in reversed(list(funcs_a))])

    def type_data(self, a, b, path):
        if not (isinstance(a, TypeData) and isinstance(b, TypeData)):
            raise _Mismatch(path, a, b, "a type definition compared with something else")
        if a.header.name != b.header.name or list(a.type_vars) != list(b.type_vars):
            raise _Mismatch(path, a, b, "different type name or type parameters")
        if len(a.constructors) != len(b.constructors):
            raise _Mismatch(path, a, b, "different numbers of constructors")
        for ca, cb in zip(a.constructors, b.constructors):
            if ca.name_hint != cb.name_hint or not _types_equal_lists(ca.inputs, cb.inputs):
                raise _Mismatch((path, "." + ca.name_hint), ca, cb, "different constructors")

    # ---- the walk ----------------------------------------------------------------------------
    def bind(self, va, vb, path):
        """Pair two binders (the most recent binding wins: scopes are walked depth-first)."""
        if not (isinstance(va, Var) and isinstance(vb, Var)):
            raise _Mismatch(path, va, vb, "a binder is not a Var")
        ta, tb = va.type_annotation, vb.type_annotation
        if ta is not tb and not types_equal(ta, tb):
            raise _Mismatch(path, va, vb, "different type annotations on the bound variable")
        self.lhs_to_rhs[id(va)] = vb
        self.rhs_to_lhs[id(vb)] = va

    def var(self, a, b, path):
        mapped = self.lhs_to_rhs.get(id(a))
        back = self.rhs_to_lhs.get(id(b))
        if mapped is not None or back is not None:
            if mapped is b and back is a:
                return
            raise _Mismatch(path, a, b, "different variables")
        if a is b:
            return
        if self.map_free_vars:
            if not types_equal(a.type_annotation, b.type_annotation):
                raise _Mismatch(path, a, b, "free variables with different type annotations")
            self.lhs_to_rhs[id(a)] = b
            self.rhs_to_lhs[id(b)] = a
            return
        raise _Mismatch(path, a, b, "different free variables (use map_free_vars=True to pair them)")

    def walk(self, stack):
        push = stack.append
        while stack:
            a, b, path = stack.pop()
            if a is b and isinstance(a, (Constant, GlobalVar, Constructor)):
                continue
            key = (id(a), id(b))
            if key in self.seen and not isinstance(a, Var):
                continue
            ta = type(a)
            if ta is not type(b):
                raise _Mismatch(path, a, b, f"{ta.__name__} vs {type(b).__name__}")
            if ta is Let:
                # a let-chain, with a loop: pair the binders, then compare the values in
                # program order (so the first difference reported is the first in the text)
                values = []
                while type(a) is Let:
                    if type(b) is not Let:
                        raise _Mismatch(path, a, b, f"Let vs {type(b).__name__}")
                    self.seen.add((id(a), id(b)))
                    self.bind(a.var, b.var, (path, ".var"))
                    values.append((a.value, b.value, (path, ".value")))
                    a, b, path = a.body, b.body, (path, ".body")
                push((a, b, path))
                values.reverse()
                stack.extend(values)
                continue
            self.seen.add(key)
            if ta is Var:
                self.var(a, b, path)
            elif ta is Call:
                if len(a.args) != len(b.args):
                    raise _Mismatch(path, a, b, "different numbers of arguments")
                if (a.attrs or b.attrs) and not _attrs_equal(a.attrs, b.attrs):
                    raise _Mismatch(path, a, b, f"different attributes {a.attrs} vs {b.attrs}")
                for k in range(len(a.args) - 1, -1, -1):
                    push((a.args[k], b.args[k], (path, f".args[{k}]")))
                push((a.op, b.op, (path, ".op")))
            elif ta is Constant:
                if not _constants_equal(a.data, b.data):
                    raise _Mismatch(path, a, b, "different constants")
            elif ta is GlobalVar:
                if a.name_hint != b.name_hint:
                    raise _Mismatch(path, a, b, "different global functions")
            elif ta.__name__ == "Op":
                if a.name != b.name:
                    raise _Mismatch(path, a, b, "different operators")
            elif ta is Constructor:
                if not _same_constructor(a, b):
                    raise _Mismatch(path, a, b, "different constructors")
            elif ta is Tuple:
                if len(a.fields) != len(b.fields):
                    raise _Mismatch(path, a, b, "tuples of different lengths")
                for k in range(len(a.fields) - 1, -1, -1):
                    push((a.fields[k], b.fields[k], (path, f".fields[{k}]")))
            elif ta is TupleGetItem:
                if a.index != b.index:
                    raise _Mismatch(path, a, b, "different tuple indices")
                push((a.tuple_value, b.tuple_value, (path, ".tuple_value")))
            elif ta is Function:
                if len(a.params) != len(b.params):
                    raise _Mismatch(path, a, b, "different numbers of parameters")
                if not types_equal(a.ret_type, b.ret_type):
                    raise _Mismatch(path, a, b, "different return types")
                if list(a.type_params) != list(b.type_params):
                    raise _Mismatch(path, a, b, "different type parameters")
                for k, (pa, pb) in enumerate(zip(a.params, b.params)):
                    self.bind(pa, pb, (path, f".params[{k}]"))
                push((a.body, b.body, (path, ".body")))
            elif ta is If:
                push((a.false_branch, b.false_branch, (path, ".false_branch")))
                push((a.true_branch, b.true_branch, (path, ".true_branch")))
                push((a.cond, b.cond, (path, ".cond")))
            elif ta is Match:
                if a.complete != b.complete:
                    raise _Mismatch(path, a, b, "match vs match?")
                if len(a.clauses) != len(b.clauses):
                    raise _Mismatch(path, a, b, "different numbers of clauses")
                for k in range(len(a.clauses) - 1, -1, -1):
                    push((a.clauses[k], b.clauses[k], (path, f".clauses[{k}]")))
                push((a.data, b.data, (path, ".data")))
            elif ta is Clause:
                self.pattern(a.lhs, b.lhs, (path, ".lhs"))
                push((a.rhs, b.rhs, (path, ".rhs")))
            elif ta is RefCreate:
                push((a.value, b.value, (path, ".value")))
            elif ta is RefRead:
                push((a.ref, b.ref, (path, ".ref")))
            elif ta is RefWrite:
                push((a.value, b.value, (path, ".value")))
                push((a.ref, b.ref, (path, ".ref")))
            elif isinstance(a, Pattern):
                self.pattern(a, b, path)
            elif isinstance(a, Type):
                if not types_equal(a, b):
                    raise _Mismatch(path, a, b, "different types")
            else:
                raise _Mismatch(path, a, b, f"cannot compare {ta.__name__} values")

    def pattern(self, a, b, path):
        stack = [(a, b, path)]
        while stack:
            a, b, path = stack.pop()
            if type(a) is not type(b):
                raise _Mismatch(path, a, b, f"{type(a).__name__} vs {type(b).__name__}")
            if isinstance(a, PatternVar):
                self.bind(a.var, b.var, (path, ".var"))
            elif isinstance(a, PatternConstructor):
                if not _same_constructor(a.constructor, b.constructor):
                    raise _Mismatch(path, a, b, "different constructors")
                if len(a.patterns) != len(b.patterns):
                    raise _Mismatch(path, a, b, "different numbers of sub-patterns")
                stack.extend((x, y, (path, f".patterns[{k}]"))
                             for k, (x, y) in enumerate(zip(a.patterns, b.patterns)))
            elif isinstance(a, PatternTuple):
                if len(a.patterns) != len(b.patterns):
                    raise _Mismatch(path, a, b, "tuple patterns of different lengths")
                stack.extend((x, y, (path, f".patterns[{k}]"))
                             for k, (x, y) in enumerate(zip(a.patterns, b.patterns)))
            elif not isinstance(a, PatternWildcard):
                raise _Mismatch(path, a, b, f"cannot compare {type(a).__name__} patterns")


def types_equal(a, b) -> bool:
    """Types are values, except that an ADT name without arguments (`Nat`) and its call with
    none (`Nat[]`) are the same type."""
    return a is b or a == b or _canonical_type(a) == _canonical_type(b)


def _canonical_type(t):
    if isinstance(t, TypeCall):
        if not t.args:
            return t.func
        return TypeCall(t.func, [_canonical_type(x) for x in t.args])
    if isinstance(t, TupleType):
        return TupleType([_canonical_type(x) for x in t.fields])
    if isinstance(t, FuncType):
        return FuncType([_canonical_type(x) for x in t.arg_types], _canonical_type(t.ret_type),
                        t.type_params)
    if isinstance(t, RefType):
        return RefType(_canonical_type(t.value))
    return t


def _types_equal_lists(a, b):
    a, b = list(a), list(b)
    return len(a) == len(b) and all(types_equal(x, y) for x, y in zip(a, b))


def _same_constructor(a, b):
    if a is b:
        return True
    name = lambda c: getattr(c.belong_to, "name", None)  # noqa: E731
    return a.name_hint == b.name_hint and name(a) == name(b) and _types_equal_lists(a.inputs, b.inputs)


def _constants_equal(x, y):
    x, y = np.asarray(x), np.asarray(y)
    return (x.dtype == y.dtype and x.shape == y.shape
            and np.ascontiguousarray(x).tobytes() == np.ascontiguousarray(y).tobytes())


def _attrs_equal(a, b):
    from relayish.ir.text.printer import attr_equal
    a, b = dict(a or {}), dict(b or {})
    return a.keys() == b.keys() and all(attr_equal(a[k], b[k]) for k in a)
