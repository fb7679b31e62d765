"""Structural (alpha) equality of expressions, modules, types and patterns.

    structural_equal(a, b, map_free_vars=False) -> bool
    assert_structural_equal(a, b, map_free_vars=False)   raises StructuralMismatch with a diff

Bound Vars are matched by binding position (a Let, a Function parameter or a pattern binds its
Var to the Var at the same place on the other side, and their type annotations must be equal);
free Vars are equal only when they are the same Var, unless map_free_vars, which pairs them up
one-to-one at first use. Bound type variables are matched the same way (alpha-equivalence): the
type parameters of a Function, a FuncType (`fn [b](b) -> b` equals `fn [c](c) -> c`) or a
TypeData pair up by position; free type variables compare by name. GlobalVars compare by name,
Ops by name, Constructors by name and type; a bare nullary constructor `Nil` equals its call
`Nil()` (Relay's parser reads the one as the other). Constants are equal when dtype, shape and
bytes agree (so NaNs compare equal to the same NaN). Call attributes compare by value (a list
equals the tuple of the same items). Types are otherwise values. Modules are equal with the same
global names bound to equal functions and the same type definitions. The walk uses an explicit
stack: 10^5-long let-chains are fine. It compares nodes field by field as their classes declare
them (fields.py: children pushed, binders paired, types and data compared), so a new node class
needs no edit here; the few nodes with a rule of their own (Var, Constant, Op, Constructor,
Function's type binders, a pattern's constructor) are in `_RULES`.
"""
from __future__ import annotations

import attrs
import numpy as np

from relayish.errors import RelayishError
from relayish.ir.expr import (Call, Clause, Constant, Constructor, Expr, Function, GlobalVar, Let,
                              Pattern, PatternConstructor, TypeData, Var, program_text)
from relayish.ir.fields import CHILD_LISTS, ONE_CHILD, TYPE, TYPES, VAR, VARS, fields_of
from relayish.ir.module import Module
from relayish.ir.op import Op
from relayish.ir.types import FuncType, Type, TypeCall, TypeVar


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
    if isinstance(node, (Expr, Pattern, Clause, Type, Module, TypeData)):
        try:
            text = str(node) if isinstance(node, Type) else program_text(node)
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
    """The walk. Each work item carries `env`, the pairing of the type variables bound around
    it (a _TypeEnv, or None where there is none: most programs have no type parameters)."""

    def __init__(self, map_free_vars):
        self.map_free_vars = map_free_vars
        self.lhs_to_rhs: dict[int, Var] = {}
        self.rhs_to_lhs: dict[int, Var] = {}
        self.seen: set = set()      # node pairs already compared (programs are DAGs)
        self.envs: list = []        # keeps each env alive while its id is part of a seen key

    def run(self, a, b):
        try:
            if isinstance(a, Module) or isinstance(b, Module):
                self.modules(a, b)
            elif isinstance(a, TypeData) or isinstance(b, TypeData):
                self.type_data(a, b, None)
            elif isinstance(a, Type) or isinstance(b, Type):
                if not types_equal(a, b):
                    raise _Mismatch(None, a, b, "different types")
            else:
                self.walk([(a, b, None, None)])
        except _Mismatch as m:
            path, x, y, reason = m.info
            return _path_text(path), x, y, reason
        return None

    def modules(self, a, b):
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
        self.walk([(funcs_a[n], funcs_b[n], (None, "@" + n), None)
                   for n in reversed(list(funcs_a))])

    def type_data(self, a, b, path):
        if not (isinstance(a, TypeData) and isinstance(b, TypeData)):
            raise _Mismatch(path, a, b, "a type definition compared with something else")
        if a.header.name != b.header.name or len(a.type_vars) != len(b.type_vars):
            raise _Mismatch(path, a, b, "different type name or numbers of type parameters")
        if len(a.constructors) != len(b.constructors):
            raise _Mismatch(path, a, b, "different numbers of constructors")
        env = _TypeEnv.extend(None, a.type_vars, b.type_vars)    # `type L[a]` == `type L[b]`
        for ca, cb in zip(a.constructors, b.constructors):
            if ca.name_hint != cb.name_hint or not _types_equal_lists(ca.inputs, cb.inputs, env):
                raise _Mismatch((path, "." + ca.name_hint), ca, cb, "different constructors")

    # ---- the walk ----------------------------------------------------------------------------
    def bind(self, va, vb, path, env):
        """Pair two binders (the most recent binding wins: scopes are walked depth-first)."""
        if not (isinstance(va, Var) and isinstance(vb, Var)):
            raise _Mismatch(path, va, vb, "a binder is not a Var")
        ta, tb = va.type_annotation, vb.type_annotation
        if (ta is not tb or env is not None) and not types_equal(ta, tb, env):
            raise _Mismatch(path, va, vb, "different type annotations on the bound variable")
        self.lhs_to_rhs[id(va)] = vb
        self.rhs_to_lhs[id(vb)] = va

    def var(self, a, b, path, env):
        mapped = self.lhs_to_rhs.get(id(a))
        back = self.rhs_to_lhs.get(id(b))
        if mapped is not None or back is not None:
            if mapped is b and back is a:
                return
            raise _Mismatch(path, a, b, "different variables")
        if a is b:
            return
        if self.map_free_vars:
            if not types_equal(a.type_annotation, b.type_annotation, env):
                raise _Mismatch(path, a, b, "free variables with different type annotations")
            self.lhs_to_rhs[id(a)] = b
            self.rhs_to_lhs[id(b)] = a
            return
        raise _Mismatch(path, a, b, "different free variables (use map_free_vars=True to pair them)")

    def walk(self, stack):
        push = stack.append
        while stack:
            a, b, path, env = stack.pop()
            if a is b and isinstance(a, (Constant, GlobalVar, Constructor)):
                continue
            key = (id(a), id(b)) if env is None else (id(a), id(b), id(env))
            if key in self.seen and not isinstance(a, Var):
                continue
            ta = type(a)
            if ta is not type(b):
                ca, cb = _nullary_constructor(a), _nullary_constructor(b)
                if ca is not None and cb is not None:     # `Nil` and `Nil()`
                    if not _same_constructor(ca, cb):
                        raise _Mismatch(path, a, b, "different constructors")
                    continue
                raise _Mismatch(path, a, b, f"{ta.__name__} vs {type(b).__name__}")
            if ta is Let:
                # a let-chain, with a loop: pair the binders, then compare the values in
                # program order (so the first difference reported is the first in the text)
                values = []
                while type(a) is Let:
                    if type(b) is not Let:
                        raise _Mismatch(path, a, b, f"Let vs {type(b).__name__}")
                    self.seen.add((id(a), id(b)) if env is None else (id(a), id(b), id(env)))
                    self.bind(a.var, b.var, (path, ".var"), env)
                    values.append((a.value, b.value, (path, ".value"), env))
                    a, b, path = a.body, b.body, (path, ".body")
                push((a, b, path, env))
                values.reverse()
                stack.extend(values)
                continue
            self.seen.add(key)
            rule = _RULES.get(ta)
            skip = ()
            if rule is not None:
                # a node with its own rule (identity, names, constants, type binders): the rule
                # decides, or returns the fields it took care of and the env for the rest
                done = rule(self, a, b, path, env)
                if done is None:
                    continue
                env, skip = done
            self.fields(a, b, path, env, skip, stack)

    def fields(self, a, b, path, env, skip, stack):
        """Compare `a` and `b` field by field, as their class declares its fields: plain data
        and types now, binders paired now, children pushed (to pop in field order)."""
        plan = _PLANS.get(type(a))
        if plan is None:
            plan = _plan(type(a))
            if plan is None:
                raise _Mismatch(path, a, b, f"cannot compare {type(a).__name__} values")
        later = []
        for name, kind, step, reason in plan:
            if name in skip:
                continue
            x, y = getattr(a, name), getattr(b, name)
            if kind in ONE_CHILD:
                if kind == VAR:
                    self.bind(x, y, (path, step), env)
                else:
                    later.append((x, y, (path, step), env))
            elif kind in CHILD_LISTS:
                if len(x) != len(y):
                    raise _Mismatch(path, a, b, reason)
                for k, (xk, yk) in enumerate(zip(x, y)):
                    if kind == VARS:
                        self.bind(xk, yk, (path, f"{step}[{k}]"), env)
                    else:
                        later.append((xk, yk, (path, f"{step}[{k}]"), env))
            elif kind == TYPE or kind == TYPES:
                if x is y and env is None:
                    continue
                same = (types_equal(x, y, env) if kind == TYPE
                        else _types_equal_lists(x, y, env))
                if not same:
                    raise _Mismatch(path, a, b, reason)
            elif x is not y and not _data_equal(x, y):
                raise _Mismatch(path, a, b, reason.format(x=x, y=y))
        if later:
            later.reverse()
            stack.extend(later)


_PLANS: dict = {}       # node class -> ((field, kind, path step, mismatch reason), ...)


def _plan(cls):
    """The comparison plan of a node class, from its declared fields (None: not a node)."""
    try:
        declared = fields_of(cls)
    except RelayishError:
        return None
    plan = []
    for name, kind in declared:
        default = f"different numbers of {name}" if kind in CHILD_LISTS else f"different {name}"
        plan.append((name, kind, "." + name, _REASONS.get((cls.__name__, name), default)))
    _PLANS[cls] = plan = tuple(plan)
    return plan


# What a mismatch in a field is called, where the generic "different <field>" says less.
_REASONS = {
    ("GlobalVar", "name_hint"): "different global functions",
    ("TupleGetItem", "index"): "different tuple indices",
    ("Tuple", "fields"): "tuples of different lengths",
    ("Call", "args"): "different numbers of arguments",
    ("Call", "attrs"): "different attributes {x} vs {y}",
    ("Function", "params"): "different numbers of parameters",
    ("Function", "ret_type"): "different return types",
    ("Match", "complete"): "match vs match?",
    ("Match", "clauses"): "different numbers of clauses",
    ("PatternConstructor", "patterns"): "different numbers of sub-patterns",
    ("PatternTuple", "patterns"): "tuple patterns of different lengths",
}


# ---- the nodes with a rule of their own ------------------------------------------------------
# Each returns None when it decided alone, or (env, fields it compared) for the generic rest.

def _var_rule(comparer, a, b, path, env):
    comparer.var(a, b, path, env)


def _constant_rule(comparer, a, b, path, env):
    if not _constants_equal(a.data, b.data):
        raise _Mismatch(path, a, b, "different constants")


def _op_rule(comparer, a, b, path, env):
    if a.name != b.name:            # an op is its name; its rules are not compared
        raise _Mismatch(path, a, b, "different operators")


def _constructor_rule(comparer, a, b, path, env):
    if not _same_constructor(a, b):
        raise _Mismatch(path, a, b, "different constructors")


def _function_rule(comparer, a, b, path, env):
    if len(a.type_params) != len(b.type_params):
        raise _Mismatch(path, a, b, "different numbers of type parameters")
    if a.type_params:
        # `fn [b](%x: b) -> b` equals `fn [c](%x: c) -> c`: bound type variables pair up by
        # position, as bound Vars do
        env = _TypeEnv.extend(env, a.type_params, b.type_params)
        comparer.envs.append(env)
    return env, ("type_params",)


def _pattern_constructor_rule(comparer, a, b, path, env):
    if not _same_constructor(a.constructor, b.constructor):
        raise _Mismatch(path, a, b, "different constructors")
    return env, ("constructor",)


_RULES = {Var: _var_rule, Constant: _constant_rule, Op: _op_rule,
          Constructor: _constructor_rule, Function: _function_rule,
          PatternConstructor: _pattern_constructor_rule}


def _data_equal(x, y) -> bool:
    """Plain data fields compare by value: a dict (a call's attributes) item by item."""
    if isinstance(x, dict) or isinstance(y, dict):
        return (isinstance(x, dict) and isinstance(y, dict) and x.keys() == y.keys()
                and all(attr_equal(x[k], y[k]) for k in x))
    return attr_equal(x, y)


def _nullary_constructor(e):
    """The constructor when `e` is a nullary constructor or its call without arguments."""
    if type(e) is Constructor:
        return e if not e.inputs else None
    if type(e) is Call and type(e.op) is Constructor and not e.op.inputs and not e.args \
            and not e.attrs:
        return e.op
    return None


class _TypeEnv:
    """The type variables bound around a point, paired left to right and back (both ways, so
    that the pairing is one-to-one). Immutable: entering a binder makes a new one."""
    __slots__ = ("fwd", "bwd")

    def __init__(self, fwd, bwd):
        self.fwd, self.bwd = fwd, bwd

    @staticmethod
    def extend(env, lhs, rhs):
        fwd = dict(env.fwd) if env is not None else {}
        bwd = dict(env.bwd) if env is not None else {}
        for x, y in zip(lhs, rhs):
            fwd[x] = y
            bwd[y] = x
        return _TypeEnv(fwd, bwd)


def types_equal(a, b, env=None) -> bool:
    """Whether two types are the same up to the names of bound type variables (the parameters
    of a FuncType, and those `env` pairs), and with an ADT name without arguments (`Nat`) the
    same type as its call with none (`Nat[]`). Never recurses: types may be deep."""
    if a is b and env is None:
        return True
    stack = [(a, b, env)]      # not `a == b` first: attrs' __eq__ recurses down deep types
    while stack:
        a, b, env = stack.pop()
        if isinstance(a, TypeCall) and not a.args:
            a = a.func
        if isinstance(b, TypeCall) and not b.args:
            b = b.func
        ta = type(a)
        if ta is not type(b):
            return False
        if ta is TypeVar:
            if env is not None and (a in env.fwd or b in env.bwd):
                if env.fwd.get(a) != b:
                    return False
            elif a != b:
                return False
            continue
        if ta is FuncType:
            if len(a.type_params) != len(b.type_params):
                return False
            if a.type_params:
                env = _TypeEnv.extend(env, a.type_params, b.type_params)
        elif not attrs.has(ta):
            if not (a is b or a == b):      # None, and whatever else compares as a value
                return False
            continue
        # through the declared fields: components pushed, data (shapes, dtypes, names) equal;
        # a FuncType's type_params are binders, paired above
        for name, kind in fields_of(ta):
            x, y = getattr(a, name), getattr(b, name)
            if kind == TYPE:
                stack.append((x, y, env))
            elif kind == TYPES:
                if len(x) != len(y):
                    return False
                stack.extend((p, q, env) for p, q in zip(x, y))
            elif not (ta is FuncType and name == "type_params") and x != y:
                return False
    return True


def _types_equal_lists(a, b, env=None):
    a, b = list(a), list(b)
    return len(a) == len(b) and all(types_equal(x, y, env) for x, y in zip(a, b))


def _same_constructor(a, b):
    if a is b:
        return True
    name = lambda c: getattr(c.belong_to, "name", None)  # noqa: E731
    if a.name_hint != b.name_hint or name(a) != name(b):
        return False
    da, db = getattr(a, "type_data", None), getattr(b, "type_data", None)
    env = None
    if da is not None and db is not None and len(da.type_vars) == len(db.type_vars):
        env = _TypeEnv.extend(None, da.type_vars, db.type_vars)   # their types' own parameters
    return _types_equal_lists(a.inputs, b.inputs, env)


def _constants_equal(x, y):
    x, y = np.asarray(x), np.asarray(y)
    return (x.dtype == y.dtype and x.shape == y.shape
            and np.ascontiguousarray(x).tobytes() == np.ascontiguousarray(y).tobytes())


def attr_equal(a, b) -> bool:
    """Attribute values compare by value; lists and tuples alike; never raises."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a).tolist(), np.asarray(b).tolist()
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(attr_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
        return False
    if isinstance(a, (bool, np.bool_)) != isinstance(b, (bool, np.bool_)):
        return False
    if isinstance(a, (float, np.floating)) and isinstance(b, (float, np.floating)):
        return bool(a == b or (np.isnan(a) and np.isnan(b)))
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - exotic attribute values: unequal rather than a crash
        return False
